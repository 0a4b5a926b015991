import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { eventually, type FakeUpstream } from '@gateway/testing';
import { catalogYaml, tokenPricing } from './catalog-yaml.js';
import { startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { openAiAccount } from './background-harness.js';
import { reasoningSent, textTurns, UPSTREAM_KINDS, type UpstreamKind } from './messages-e2e-harness.js';

// Stored responses (issue 41 item 6) end to end: the edge, the jobs service's ResponsesStore over
// gRPC, real Postgres, a fake provider of each upstream kind, and the real `openai` client's
// responses.create / retrieve / delete / inputItems.list and previous_response_id chains. A second
// account plays the hostile caller.

const MAIN = 'testco/main';
const PROVIDER_KEY_ENV = 'RESPONSES_STORED_E2E_KEY';
/** Lowered for the size test: an input over it is refused before any provider (store: true). */
const MAX_STORED_CHARS = 64 * 1024;

function catalog(kind: UpstreamKind, upstream: FakeUpstream): string {
  return catalogYaml({
    providers: [{ id: 'upstream-one', kind: kind.kind, url: upstream.url, keyEnv: PROVIDER_KEY_ENV }],
    models: [{
      id: MAIN,
      supportedParameters: ['tools', 'tool_choice', 'temperature', 'max_completion_tokens', 'reasoning', 'stream_options'],
      reasoningEfforts: ['low', 'high'],
      pricing: tokenPricing('0.000001', '0.000002'),
      offers: [{ provider: 'upstream-one', upstreamModel: 'main-upstream', endpoints: ['chat.completions', 'responses'] }],
    }],
  });
}

/** The text of a response's message items (a streamed event's response has no SDK-computed output_text). */
const textOf = (response: OpenAI.Responses.Response) =>
  response.output.flatMap((item) => (item.type === 'message' ? item.content.flatMap((part) => (part.type === 'output_text' ? [part.text] : [])) : [])).join('');

describe.each(UPSTREAM_KINDS)('stored responses on an $kind upstream, end to end', (kind) => {
  let upstream: FakeUpstream;
  let harness: ChatHarness;
  /** A second account: every id of the first is unknown to it. */
  let stranger: OpenAI;

  beforeAll(async () => {
    upstream = await kind.start();
    harness = await startChatHarness({
      configYaml: catalog(kind, upstream),
      providerSecrets: { [PROVIDER_KEY_ENV]: 'sk-stored-e2e' },
      routing: { attemptTimeoutMs: 2_000, maxAttempts: 2 },
      edge: { storedResponses: { maxStoredChars: MAX_STORED_CHARS } },
    });
    stranger = (await openAiAccount(harness.stack, 'stranger', '5')).client;
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [upstream]));

  beforeEach(() => upstream.reset());

  it('store (default true): retrieve answers the response as it was answered; input_items pages as OpenAI; delete removes it', async () => {
    upstream.script({ text: 'Gateways route requests.' });
    const before = await harness.charges(MAIN);
    const created = await harness.client.responses.create({ model: MAIN, instructions: 'Be brief.', input: [{ role: 'user', content: 'What does a gateway do?' }, { role: 'user', content: 'In one line.' }] });
    expect(created).toMatchObject({ store: true, previous_response_id: null, status: 'completed' });

    const retrieved = await harness.client.responses.retrieve(created.id);
    expect(retrieved.id).toBe(created.id);
    expect(retrieved.output_text).toBe('Gateways route requests.');
    expect(retrieved.output).toEqual(created.output);
    expect(retrieved.usage).toEqual(created.usage);

    // OpenAI's default order is newest first; ids are stable across pages.
    const all = await harness.client.responses.inputItems.list(created.id);
    expect(all.data.map((item) => item.type)).toEqual(['message', 'message']);
    const texts = all.data.map((item) => ((item as OpenAI.Responses.ResponseInputMessageItem).content[0] as { text: string }).text);
    expect(texts).toEqual(['In one line.', 'What does a gateway do?']);
    expect(new Set(all.data.map((item) => item.id)).size).toBe(2);
    const firstPage = await harness.client.responses.inputItems.list(created.id, { order: 'asc', limit: 1 });
    expect(firstPage.data).toHaveLength(1);
    expect(firstPage.has_more).toBe(true);
    const secondPage = await harness.client.responses.inputItems.list(created.id, { order: 'asc', limit: 1, after: firstPage.data[0]!.id });
    expect(secondPage.data.map((item) => item.id)).toEqual([all.data[0]!.id]);
    expect(secondPage.has_more).toBe(false);
    // The SDK's auto-pagination walks the same pages.
    const walked: string[] = [];
    for await (const item of harness.client.responses.inputItems.list(created.id, { order: 'asc', limit: 1 })) walked.push(item.id);
    expect(walked).toEqual([firstPage.data[0]!.id, all.data[0]!.id]);

    await harness.client.responses.delete(created.id);
    await expect(harness.client.responses.retrieve(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(harness.client.responses.delete(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(harness.client.responses.inputItems.list(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    // Its one charge settled here, so the next test's count starts after it (the bus settles behind the answer).
    await harness.chargesSettleAt(MAIN, before.requests + 1);
  });

  it('previous_response_id: a three-turn chain sends the provider the whole conversation; each turn charged once', async () => {
    upstream.script({ text: 'Hello Ada.' }, { text: 'You are Ada.' }, { text: 'Ada, in Paris.' });
    const before = await harness.charges(MAIN);
    const first = await harness.client.responses.create({ model: MAIN, instructions: 'Only on the first turn.', input: 'My name is Ada.' });
    const second = await harness.client.responses.create({ model: MAIN, previous_response_id: first.id, input: 'What is my name?' });
    expect(second.previous_response_id).toBe(first.id);
    expect(second.output_text).toBe('You are Ada.');
    // Streamed, and continued again.
    const stream = await harness.client.responses.create({ model: MAIN, previous_response_id: second.id, input: [{ role: 'user', content: 'And where?' }], stream: true });
    let third: OpenAI.Responses.Response | undefined;
    for await (const event of stream) if (event.type === 'response.completed') third = event.response;
    expect(third!.previous_response_id).toBe(second.id);
    expect(textOf(third!)).toBe('Ada, in Paris.');

    expect(upstream.requests).toHaveLength(3);
    // Instructions apply to their own response only (OpenAI): the continuation does not repeat them.
    expect(textTurns(kind, upstream.requests[1]!)).toEqual([
      { role: 'user', text: 'My name is Ada.' },
      { role: 'assistant', text: 'Hello Ada.' },
      { role: 'user', text: 'What is my name?' },
    ]);
    expect(textTurns(kind, upstream.requests[2]!).map((message) => message.text)).toEqual(['My name is Ada.', 'Hello Ada.', 'What is my name?', 'You are Ada.', 'And where?']);
    // The streamed turn is stored too (from its terminal event), with its whole input.
    const retrieved = await eventually(() => harness.client.responses.retrieve(third!.id));
    expect(retrieved.output_text).toBe('Ada, in Paris.');
    const items = await harness.client.responses.inputItems.list(third!.id, { order: 'asc' });
    expect(items.data.map((item) => item.type)).toEqual(['message', 'message', 'message', 'message', 'message']);

    const after = await harness.chargesSettleAt(MAIN, before.requests + 3);
    expect(after.requests).toBe(before.requests + 3);
  });

  it.runIf(kind.signsReasoning)('previous_response_id keeps reasoning provenance: the issuer gets its signed reasoning back, unchanged', async () => {
    const thought = 'Paris is the capital; say so.';
    upstream.script(kind.withReasoning(thought, 'Paris.', false), { text: 'It has 2 million people.' });
    const first = await harness.client.responses.create({ model: MAIN, input: 'Capital of France?', reasoning: { effort: 'high' } });
    expect(first.output.map((item) => item.type)).toEqual(['reasoning', 'message']);
    const second = await harness.client.responses.create({ model: MAIN, previous_response_id: first.id, input: 'How many people?', reasoning: { effort: 'high' } });
    // The fake checks the signature: a 200 means the reasoning came back as it was issued.
    expect(second.output_text).toBe('It has 2 million people.');
    expect(reasoningSent(kind, upstream.requests[1]!)).toEqual([thought]);
  });

  it('hostile: another account cannot retrieve, list, delete or continue a response; store: false keeps nothing; an input over the bound is a 400 before any provider', async () => {
    upstream.script({ text: 'Private answer.' }, { text: 'Not stored.' }, { text: 'Fine unstored.' });
    const mine = await harness.client.responses.create({ model: MAIN, input: 'A secret.' });
    await expect(stranger.responses.retrieve(mine.id)).rejects.toMatchObject({ status: 404, error: { type: 'invalid_request_error', message: `Response with id '${mine.id}' not found.` } });
    await expect(stranger.responses.inputItems.list(mine.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(stranger.responses.delete(mine.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const continued = await stranger.responses.create({ model: MAIN, previous_response_id: mine.id, input: 'Tell me.' }).then(
      () => undefined,
      (error: unknown) => error as InstanceType<typeof OpenAI.BadRequestError>,
    );
    expect(continued?.status).toBe(400);
    expect(continued?.error).toMatchObject({ code: 'previous_response_not_found', param: 'body.previous_response_id' });
    expect(upstream.requests).toHaveLength(1);
    // Still there for its owner.
    expect((await harness.client.responses.retrieve(mine.id)).output_text).toBe('Private answer.');

    const unstored = await harness.client.responses.create({ model: MAIN, input: 'Forget this.', store: false });
    expect((unstored as { store?: boolean }).store).toBe(false);
    await expect(harness.client.responses.retrieve(unstored.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(harness.client.responses.create({ model: MAIN, previous_response_id: unstored.id, input: 'x' })).rejects.toMatchObject({ status: 400, error: { code: 'previous_response_not_found' } });

    const huge = 'x'.repeat(MAX_STORED_CHARS);
    const requestsBefore = upstream.requests.length;
    await expect(harness.client.responses.create({ model: MAIN, input: huge })).rejects.toMatchObject({ status: 400, error: { code: 'stored_response_too_large', param: 'body.input' } });
    expect(upstream.requests).toHaveLength(requestsBefore);
    expect((await harness.client.responses.create({ model: MAIN, input: huge, store: false })).output_text).toBe('Fine unstored.');

    // Ids that are no gateway id, and bad pages, are 4xx in the envelope, never 5xx.
    await expect(harness.client.responses.retrieve('resp_' + 'f'.repeat(300))).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(harness.client.responses.retrieve('not-an-id')).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(harness.client.responses.inputItems.list(mine.id, { limit: 101 })).rejects.toMatchObject({ status: 400 });
    await expect(harness.client.responses.inputItems.list(mine.id, { after: 'msg_nothing' })).rejects.toMatchObject({ status: 400 });
  });
});
