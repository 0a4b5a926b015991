import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { oneModelCatalog, pricedTokens, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { OPENAI_UPSTREAM, textTurns } from './messages-e2e-harness.js';
import { CODEX_HISTORY, CODEX_SHELL_TOOL } from './codex-session.js';

// Codex's in-band compaction (`x-codex-beta-features: remote_compaction_v2`): a normal POST
// /v1/responses whose last input item is `{type: 'compaction_trigger'}`, end to end with the real
// `openai` client against an OpenAI-wire fake upstream. The upstream receives the summary request
// /v1/responses/compact would send; the answer's output is one sealed compaction item (streamed:
// output_item.added/done, then response.completed with usage, which is what Codex reads); it is
// charged once, exactly the usage the fake reported; the item sent back expands into the summary.

const MODEL = 'testco/coder';
const PROVIDER_KEY_ENV = 'RESPONSES_TRIGGER_E2E_KEY';
const INPUT_PRICE = '0.000001';
const OUTPUT_PRICE = '0.000002';

function catalog(upstream: FakeUpstream): string {
  return oneModelCatalog({
    model: MODEL,
    provider: { kind: 'openai', url: upstream.url, keyEnv: PROVIDER_KEY_ENV },
    upstreamModel: 'coder-upstream',
    supportedParameters: ['tools', 'tool_choice', 'parallel_tool_calls', 'max_completion_tokens', 'stream_options'],
    endpoints: ['chat.completions', 'responses'],
    inputPrice: INPUT_PRICE,
    outputPrice: OUTPUT_PRICE,
  });
}

/** What Codex sends for remote compaction v2: its usual request (store false, tools, include), the history, then the trigger. */
const triggerBody = (stream: boolean) => ({
  model: MODEL,
  instructions: 'You are Codex.',
  input: [...CODEX_HISTORY, { type: 'compaction_trigger' }],
  tools: [CODEX_SHELL_TOOL],
  tool_choice: 'auto',
  parallel_tool_calls: true,
  store: false,
  stream,
  include: ['reasoning.encrypted_content'],
  prompt_cache_key: 'session-1',
});
const BETA = { headers: { 'x-codex-beta-features': 'remote_compaction_v2' } };

const SUMMARY = 'The user asked for the files; `ls` showed README.md and src. Nothing is open.';
const REPORTED = { prompt_tokens: 100, completion_tokens: 9 };

/** Role and text of each message the upstream received. */
const received = (upstream: FakeUpstream, index: number) => textTurns(OPENAI_UPSTREAM, upstream.requests[index]!);

describe('POST /v1/responses ending in compaction_trigger (Codex remote_compaction_v2) on an OpenAI-wire upstream, end to end', () => {
  let upstream: FakeUpstream;
  let harness: ChatHarness;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    harness = await startChatHarness({ configYaml: catalog(upstream), providerSecrets: { [PROVIDER_KEY_ENV]: 'sk-trigger' } });
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [upstream]));

  beforeEach(() => upstream.reset());

  /** The summary request the upstream must have received: /compact's. */
  const expectSummaryRequest = (stream: boolean) => {
    expect(upstream.requests).toHaveLength(1);
    const asked = upstream.requests[0]!.body;
    expect(asked.stream ?? false).toBe(stream);
    const messages = OPENAI_UPSTREAM.conversation(upstream.requests[0]!);
    expect(messages.map((message) => message.role)).toEqual(['system', 'user', 'assistant', 'tool', 'assistant', 'user']);
    expect(messages[0]!.text).toBe('You are Codex.');
    expect(messages[1]!.text).toBe('List the files.');
    expect(messages[2]!.toolCalls.map((call) => call.name)).toEqual(['shell']);
    expect(messages[3]).toMatchObject({ toolResultFor: 'call_ls', text: 'README.md\nsrc' });
    expect(messages.at(-1)!.text).toMatch(/^Summarise the conversation above/);
    // The tools go with it (the history calls one), but none may be called.
    expect((asked.tools as { function: { name: string } }[]).map((tool) => tool.function.name)).toEqual(['shell']);
    expect(asked.tool_choice).toBe('none');
  };

  it('not streamed: the output is one sealed compaction item, usage as reported, charged once; sent back it reaches the provider as the summary', async () => {
    upstream.script({ text: SUMMARY, usage: REPORTED });
    const before = await harness.charges(MODEL);
    const response = (await harness.client.post('/responses', { body: triggerBody(false), ...BETA })) as OpenAI.Responses.Response;

    expectSummaryRequest(false);
    expect(response).toMatchObject({ object: 'response', status: 'completed', model: MODEL });
    expect(response.output).toEqual([{ id: expect.stringMatching(/^cmp_/), type: 'compaction', encrypted_content: expect.stringMatching(/^gw1\./) }]);
    const item = response.output[0] as unknown as OpenAI.Responses.ResponseCompactionItem;
    expect(item.encrypted_content).not.toContain('README');
    expect(response.usage).toMatchObject({ input_tokens: 100, output_tokens: 9, total_tokens: 109 });
    const after = await harness.chargesSettleAt(MODEL, before.requests + 1);
    expect(after.costPico - before.costPico).toBe(pricedTokens(100, 9, INPUT_PRICE, OUTPUT_PRICE));

    // Codex's next turn: the user messages it keeps, the compaction item, the new request.
    upstream.reset();
    upstream.script({ text: 'Continuing.', usage: { prompt_tokens: 40, completion_tokens: 2 } });
    const next = await harness.client.responses.create({
      model: MODEL,
      tools: [CODEX_SHELL_TOOL] as OpenAI.Responses.Tool[],
      input: [CODEX_HISTORY[0], item, { role: 'user', content: 'Now open the README.' }] as OpenAI.Responses.ResponseInputItem[],
    });
    expect(next.output_text).toBe('Continuing.');
    expect(received(upstream, 0)).toEqual([
      { role: 'user', text: 'List the files.' },
      { role: 'user', text: `Summary of the earlier conversation, which it replaces:\n\n${SUMMARY}` },
      { role: 'user', text: 'Now open the README.' },
    ]);
    const settled = await harness.chargesSettleAt(MODEL, before.requests + 2);
    expect(settled.costPico - after.costPico).toBe(pricedTokens(40, 2, INPUT_PRICE, OUTPUT_PRICE));
  });

  it('streamed, as Codex asks: created, in_progress, the compaction item added and done, completed with usage; charged once', async () => {
    upstream.script({ text: SUMMARY, chunkCount: 4, usage: REPORTED });
    const before = await harness.charges(MODEL);
    const stream = (await harness.client.post('/responses', { body: triggerBody(true), stream: true, ...BETA })) as unknown as AsyncIterable<OpenAI.Responses.ResponseStreamEvent>;
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);

    expectSummaryRequest(true);
    expect(events.map((event) => event.type)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.output_item.done', 'response.completed']);
    expect(events.map((event) => event.sequence_number)).toEqual([0, 1, 2, 3, 4]);
    const done = events[3] as OpenAI.Responses.ResponseOutputItemDoneEvent;
    const item = done.item as unknown as OpenAI.Responses.ResponseCompactionItem;
    expect(item).toEqual({ id: expect.stringMatching(/^cmp_/), type: 'compaction', encrypted_content: expect.stringMatching(/^gw1\./) });
    // Nothing of the summary text itself is streamed.
    expect(JSON.stringify(events)).not.toContain('README.md and src');
    const completed = (events[4] as OpenAI.Responses.ResponseCompletedEvent).response;
    expect(completed.output).toEqual([item]);
    expect(completed.usage).toMatchObject({ input_tokens: 100, output_tokens: 9 });
    const after = await harness.chargesSettleAt(MODEL, before.requests + 1);
    expect(after.costPico - before.costPico).toBe(pricedTokens(100, 9, INPUT_PRICE, OUTPUT_PRICE));

    // The streamed item is as good as the whole one: sent back, the provider reads the summary.
    upstream.reset();
    upstream.script({ text: 'ok' });
    await harness.client.responses.create({ model: MODEL, input: [item, { role: 'user', content: 'Go on.' }] as OpenAI.Responses.ResponseInputItem[] });
    expect(received(upstream, 0)[0]).toEqual({ role: 'user', text: `Summary of the earlier conversation, which it replaces:\n\n${SUMMARY}` });
    await harness.chargesSettleAt(MODEL, before.requests + 2);
  });

  it('a trigger that is not the last input item is a 400 naming it; nothing reaches the upstream or is charged', async () => {
    const before = await harness.charges(MODEL);
    const error = await harness.client
      .post('/responses', { body: { model: MODEL, input: [{ type: 'compaction_trigger' }, ...CODEX_HISTORY] } })
      .then(() => undefined, (caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect(error).toMatchObject({ code: 'invalid_compaction_trigger', param: 'body.input.0' });
    expect(upstream.requests).toHaveLength(0);
    expect(await harness.charges(MODEL)).toEqual(before);
  });
});
