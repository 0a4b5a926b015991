import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { eventually, type FakeUpstream } from '@gateway/testing';
import { oneTextModelCatalog, settledResponse, startBackgroundStack, type BackgroundStack } from './background-harness.js';

// A background response made in a conversation (docs/stored-responses.md "Conversations"): its turn (its
// own input, then its output) goes into the conversation once its run completed — rendered by the edge,
// appended once by the jobs service — so a synchronous turn after it sees it, and the conversation's items
// hold both turns once, however often they are read. The real `openai` client; a fake provider recording
// what it received.

const MODEL = 'testco/bg-conv';
const PRICE_IN = '0.000001';
const PRICE_OUT = '0.000002';

const textOf = (item: OpenAI.Conversations.ConversationItem) =>
  item.type === 'message' ? item.content.map((part) => ('text' in part ? part.text : '')).join('') : '';

describe('background responses in a conversation, end to end', () => {
  let running: BackgroundStack;
  let upstream: FakeUpstream;
  let accountId: string;
  let client: OpenAI;
  let stranger: OpenAI;

  const charges = () => running.charges(accountId, MODEL);
  const settled = (response: OpenAI.Responses.Response) => settledResponse(client, response.id);

  beforeAll(async () => {
    running = await startBackgroundStack('background_conversations', 'bgc', (fake) => oneTextModelCatalog({
      model: MODEL, upstreamModel: 'conv-upstream', upstreamUrl: fake.url, keyEnv: 'BGC_E2E_KEY', priceIn: PRICE_IN, priceOut: PRICE_OUT,
    }), {
      keyHashSecret: 'bgc-e2e-secret-bgc-e2e-secret-012345678',
      providerSecrets: { BGC_E2E_KEY: 'sk-bgc-e2e' },
      jobs: { batches: { runner: { pollIntervalMs: 100, leaseMs: 3_000, concurrency: 1 } } },
    });
    ({ upstream, accountId, client, stranger } = running);
  }, 120_000);

  afterAll(async () => {
    await running?.stop();
  });

  beforeEach(() => upstream.reset());

  it('a background turn, then a synchronous turn that sees it; the items hold both turns once; each charged once', async () => {
    const conversation = await client.conversations.create({ items: [{ type: 'message', role: 'user', content: 'My name is Ada.' }] });
    const chargesBefore = await charges();
    upstream.setFallback({ latencyMs: 200, text: 'Noted in the background.', usage: { prompt_tokens: 10, completion_tokens: 4 } });
    const queued = await client.responses.create({ model: MODEL, conversation: conversation.id, input: 'Remember the colour teal.', background: true });
    expect(queued).toMatchObject({ status: 'queued', background: true, conversation: { id: conversation.id } });
    // The background run was given the conversation before its own input.
    const done = await settled(queued);
    expect(done).toMatchObject({ status: 'completed', output_text: 'Noted in the background.', conversation: { id: conversation.id } });
    const first = JSON.stringify(upstream.requests[0]!.body.messages);
    expect(first).toContain('My name is Ada.');
    expect(first).toContain('Remember the colour teal.');

    upstream.setFallback({ text: 'Ada likes teal.', usage: { prompt_tokens: 20, completion_tokens: 4 } });
    const next = await client.responses.create({ model: MODEL, conversation: conversation.id, input: 'What do you know?' });
    expect(next.output_text).toBe('Ada likes teal.');
    const sent = (upstream.requests.at(-1)!.body.messages as { role: string; content: unknown }[]).map((message) => [message.role, JSON.stringify(message.content)]);
    expect(sent.map(([role]) => role)).toEqual(['user', 'user', 'assistant', 'user']);
    expect(sent[1]![1]).toContain('Remember the colour teal.');
    expect(sent[2]![1]).toContain('Noted in the background.');

    // Both turns, once each, however often the conversation is read (a list, a turn, a list again).
    const expected = ['My name is Ada.', 'Remember the colour teal.', 'Noted in the background.', 'What do you know?', 'Ada likes teal.'];
    await eventually(async () => {
      expect((await client.conversations.items.list(conversation.id, { order: 'asc' })).data.map(textOf)).toEqual(expected);
    }, 10_000, 100);
    const items = (await client.conversations.items.list(conversation.id, { order: 'asc' })).data;
    expect(items.map(textOf)).toEqual(expected);
    // The background turn's output item is the response's own, as a synchronous turn's is.
    expect(items[2]!.id).toBe(done.output[0]!.id);
    await eventually(async () => expect(await charges()).toBe(chargesBefore + 2), 15_000);
    // Another account's conversation stays a 404 for a background turn too.
    await expect(stranger.responses.create({ model: MODEL, conversation: conversation.id, input: 'Mine now.', background: true })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  }, 60_000);

  it('a failed background turn adds nothing to its conversation', async () => {
    const conversation = await client.conversations.create({});
    upstream.setFallback({ status: 400 });
    const queued = await client.responses.create({ model: MODEL, conversation: conversation.id, input: 'This one fails.', background: true });
    const done = await settled(queued);
    expect(done.status).toBe('failed');
    expect((await client.conversations.items.list(conversation.id)).data).toEqual([]);
  }, 60_000);
});
