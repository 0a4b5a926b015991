import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import type { FakeUpstream } from '@gateway/testing';
import { oneModelCatalog, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { openAiAccount } from './background-harness.js';
import { textTurns, UPSTREAM_KINDS, type UpstreamKind } from './messages-e2e-harness.js';

// OpenAI's Conversations API (issue 41 item 6) end to end: the edge's /v1/conversations routes, the jobs
// service's store over gRPC and real Postgres, a fake provider recording what it received, and the real
// `openai` client's conversations.create / retrieve / update / delete, items.list / create / retrieve /
// delete, and responses.create({ conversation }) turn after turn. A second account plays the hostile caller.

const MAIN = 'testco/main';
const PROVIDER_KEY_ENV = 'RESPONSES_CONVERSATIONS_E2E_KEY';

function catalog(kind: UpstreamKind, upstream: FakeUpstream): string {
  return oneModelCatalog({
    model: MAIN,
    provider: { kind: kind.kind, url: upstream.url, keyEnv: PROVIDER_KEY_ENV },
    upstreamModel: 'main-upstream',
    supportedParameters: ['temperature', 'max_completion_tokens', 'stream_options'],
    endpoints: ['chat.completions', 'responses'],
  });
}

const textOfItem = (item: OpenAI.Conversations.ConversationItem) =>
  item.type === 'message' ? item.content.map((part) => ('text' in part ? part.text : '')).join('') : '';

describe.each(UPSTREAM_KINDS)('conversations on an $kind upstream, end to end', (kind) => {
  let upstream: FakeUpstream;
  let harness: ChatHarness;
  let stranger: OpenAI;

  beforeAll(async () => {
    upstream = await kind.start();
    harness = await startChatHarness({
      configYaml: catalog(kind, upstream),
      providerSecrets: { [PROVIDER_KEY_ENV]: 'sk-conversations-e2e' },
      routing: { attemptTimeoutMs: 2_000, maxAttempts: 2 },
    });
    stranger = (await openAiAccount(harness.stack, 'stranger', '5')).client;
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [upstream]));

  beforeEach(() => upstream.reset());

  it('create, retrieve, update, items (list, create, retrieve, delete) and delete, in OpenAI\'s shapes', async () => {
    const { client } = harness;
    const created = await client.conversations.create({ metadata: { topic: 'demo' }, items: [{ type: 'message', role: 'user', content: 'Hello!' }] });
    expect(created).toEqual({ id: expect.stringMatching(/^conv_[0-9a-f]{48}$/), object: 'conversation', created_at: expect.any(Number), metadata: { topic: 'demo' } });
    expect(await client.conversations.retrieve(created.id)).toEqual(created);
    expect(await client.conversations.update(created.id, { metadata: { topic: 'changed' } })).toMatchObject({ id: created.id, metadata: { topic: 'changed' } });

    const added = await client.conversations.items.create(created.id, { items: [{ type: 'message', role: 'assistant', content: 'Hi there.' }, { role: 'user', content: 'How are you?' }] });
    expect(added).toMatchObject({ object: 'list', has_more: false });
    expect(added.data.map(textOfItem)).toEqual(['Hi there.', 'How are you?']);
    expect(added.first_id).toBe(added.data[0]!.id);
    expect(added.last_id).toBe(added.data[1]!.id);

    // Newest first by default; `after` walks on; the SDK's auto-pagination follows last_id.
    const newest = await client.conversations.items.list(created.id, { limit: 2 });
    expect(newest.data.map(textOfItem)).toEqual(['How are you?', 'Hi there.']);
    expect(newest.has_more).toBe(true);
    const walked: string[] = [];
    for await (const item of client.conversations.items.list(created.id, { order: 'asc', limit: 1 })) walked.push(textOfItem(item));
    expect(walked).toEqual(['Hello!', 'Hi there.', 'How are you?']);

    const middle = added.data[0]!;
    const retrieved = await client.conversations.items.retrieve(middle.id!, { conversation_id: created.id });
    expect(retrieved).toMatchObject({ id: middle.id, type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Hi there.' }] });
    const afterDelete = await client.conversations.items.delete(middle.id!, { conversation_id: created.id });
    expect(afterDelete).toMatchObject({ id: created.id, object: 'conversation' });
    await expect(client.conversations.items.retrieve(middle.id!, { conversation_id: created.id })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    expect((await client.conversations.items.list(created.id, { order: 'asc' })).data.map(textOfItem)).toEqual(['Hello!', 'How are you?']);

    expect(await client.conversations.delete(created.id)).toEqual({ id: created.id, object: 'conversation.deleted', deleted: true });
    await expect(client.conversations.retrieve(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(client.conversations.items.list(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('refuses more than 20 items at a time and metadata past OpenAI\'s bounds', async () => {
    const many = Array.from({ length: 21 }, (_, index) => ({ role: 'user' as const, content: `m${index}` }));
    await expect(harness.client.conversations.create({ items: many })).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    await expect(harness.client.conversations.create({ metadata: { key: 'x'.repeat(513) } })).rejects.toBeInstanceOf(OpenAI.BadRequestError);
  });

  it('responses.create({ conversation }): the second turn sees the first; both turns land in the conversation; each charged once', async () => {
    const { client } = harness;
    upstream.script({ text: 'Hello Ada.' }, { text: 'You are Ada.' });
    const before = await harness.charges(MAIN);
    const conversation = await client.conversations.create({ items: [{ role: 'developer', content: 'Answer briefly.' }] });

    const first = await client.responses.create({ model: MAIN, conversation: conversation.id, input: 'My name is Ada.' });
    expect(first.output_text).toBe('Hello Ada.');
    expect((first as unknown as { conversation: unknown }).conversation).toEqual({ id: conversation.id });
    // The object form, streamed this time; at once after the first answer (its items are in before this turn reads them).
    const stream = await client.responses.create({ model: MAIN, conversation: { id: conversation.id }, input: [{ role: 'user', content: 'What is my name?' }], stream: true });
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) if (event.type === 'response.completed') completed = event.response;
    expect(completed?.status).toBe('completed');

    const sent = upstream.requests.filter((request) => kind.conversation(request).length > 0);
    expect(sent).toHaveLength(2);
    expect(textTurns(kind, sent[1]!).filter((turn) => turn.role !== 'system' && turn.role !== 'developer')).toEqual([
      { role: 'user', text: 'My name is Ada.' },
      { role: 'assistant', text: 'Hello Ada.' },
      { role: 'user', text: 'What is my name?' },
    ]);
    expect(textTurns(kind, sent[0]!).some((turn) => turn.text === 'Answer briefly.')).toBe(true);

    // The conversation holds its first item, then each turn's input and output, in order: at once (the list
    // waits for this edge's answers of the conversation still queued to be stored).
    const items = await client.conversations.items.list(conversation.id, { order: 'asc' });
    expect(items.data.map(textOfItem)).toEqual(['Answer briefly.', 'My name is Ada.', 'Hello Ada.', 'What is my name?', 'You are Ada.']);
    expect(items.data[2]!.id).toBe(first.output[0]!.id);

    // Charged once per response, nothing for the conversation calls.
    const after = await harness.chargesSettleAt(MAIN, before.requests + 2);
    expect(after.requests).toBe(before.requests + 2);
  });

  it('conversation with previous_response_id is a 400; store: false in a conversation a 400; an unknown conversation a 404, before any provider', async () => {
    const { client } = harness;
    const conversation = await client.conversations.create({});
    await expect(client.responses.create({ model: MAIN, conversation: conversation.id, previous_response_id: 'resp_abc', input: 'x' })).rejects.toMatchObject({ status: 400, param: 'body.conversation' });
    await expect(client.responses.create({ model: MAIN, conversation: conversation.id, store: false, input: 'x' })).rejects.toMatchObject({ status: 400 });
    await expect(client.responses.create({ model: MAIN, conversation: 'conv_doesnotexist', input: 'x' })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    expect(upstream.requests).toHaveLength(0);
  });

  it('another account\'s conversation is a 404 on every route and in responses.create; nothing of it changes', async () => {
    const { client } = harness;
    const owned = await client.conversations.create({ metadata: { owner: 'me' }, items: [{ role: 'user', content: 'private' }] });
    const [item] = (await client.conversations.items.list(owned.id)).data;
    const notFound = OpenAI.NotFoundError;
    await expect(stranger.conversations.retrieve(owned.id)).rejects.toBeInstanceOf(notFound);
    await expect(stranger.conversations.update(owned.id, { metadata: { owner: 'them' } })).rejects.toBeInstanceOf(notFound);
    await expect(stranger.conversations.items.list(owned.id)).rejects.toBeInstanceOf(notFound);
    await expect(stranger.conversations.items.create(owned.id, { items: [{ role: 'user', content: 'intrusion' }] })).rejects.toBeInstanceOf(notFound);
    await expect(stranger.conversations.items.retrieve(item!.id!, { conversation_id: owned.id })).rejects.toBeInstanceOf(notFound);
    await expect(stranger.conversations.items.delete(item!.id!, { conversation_id: owned.id })).rejects.toBeInstanceOf(notFound);
    await expect(stranger.responses.create({ model: MAIN, conversation: owned.id, input: 'tell me' })).rejects.toBeInstanceOf(notFound);
    await expect(stranger.conversations.delete(owned.id)).rejects.toBeInstanceOf(notFound);
    expect(upstream.requests).toHaveLength(0);
    expect(await client.conversations.retrieve(owned.id)).toMatchObject({ metadata: { owner: 'me' } });
    expect((await client.conversations.items.list(owned.id)).data.map(textOfItem)).toEqual(['private']);
  });
});
