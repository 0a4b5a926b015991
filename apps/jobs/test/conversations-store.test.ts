import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayError, GrpcStatus } from '@gateway/platform';
import type { StoredResponse } from '@gateway/proto';
import { startBackgroundService, type BackgroundService } from './background-service.js';

// Conversations over the jobs service's real gRPC server and real Postgres: per-account isolation,
// metadata bounds, items in order with pages both ways, a stored response's items appended once
// (a retried put appends nothing), the per-conversation and per-account bounds, retention.

const RETENTION_SECONDS = 3_600;
const MAX_ITEMS = 6;
const MAX_CONVERSATIONS = 3;

describe('Conversations (jobs service)', () => {
  let service: BackgroundService;
  let client: BackgroundService['client'];
  let clock = Date.now();

  beforeAll(async () => {
    service = await startBackgroundService({
      // The sweeper runs often: the retention test waits for it; the clock moves only in that test.
      responses: { retentionSeconds: RETENTION_SECONDS, sweepIntervalMs: 200 },
      conversations: { maxItemsPerConversation: MAX_ITEMS, maxConversationsPerAccount: MAX_CONVERSATIONS },
      now: () => clock,
    });
    client = service.client;
  });

  afterAll(async () => {
    await service?.stop();
  });

  const failsWith = (status: GrpcStatus, promise: Promise<unknown>) => expect(promise).rejects.toSatisfy((error) => error instanceof GatewayError && error.status === status);
  const message = (text: string, role = 'user') => JSON.stringify({ type: 'message', role, content: text });
  const texts = (itemsJson: string[]) => itemsJson.map((json) => JSON.parse(json).content[0].text as string);
  const create = (accountId: string, conversationId: string, items: string[] = [], metadataJson = '') =>
    client.createConversation({ accountId, conversationId, metadataJson, itemsJson: items, createdAt: BigInt(Math.floor(clock / 1000)) });

  it('creates, reads, updates and deletes a conversation only for its account', async () => {
    const created = await create('acc_a', 'conv_a1', [message('hello')], JSON.stringify({ topic: 'greeting' }));
    expect(created.conversation).toMatchObject({ conversationId: 'conv_a1', metadataJson: '{"topic":"greeting"}', itemCount: 1 });
    // A retried create changes nothing.
    expect((await create('acc_a', 'conv_a1', [message('again')])).conversation).toMatchObject({ itemCount: 1 });
    await failsWith(GrpcStatus.NOT_FOUND, client.getConversation({ accountId: 'acc_b', conversationId: 'conv_a1' }));
    await failsWith(GrpcStatus.NOT_FOUND, client.updateConversation({ accountId: 'acc_b', conversationId: 'conv_a1', metadataJson: '{}' }));
    await failsWith(GrpcStatus.NOT_FOUND, client.listConversationItems({ accountId: 'acc_b', conversationId: 'conv_a1', after: '', limit: 0, ascending: false, allItems: true }));
    await failsWith(GrpcStatus.NOT_FOUND, client.addConversationItems({ accountId: 'acc_b', conversationId: 'conv_a1', itemsJson: [message('intruder')] }));
    await failsWith(GrpcStatus.NOT_FOUND, client.deleteConversation({ accountId: 'acc_b', conversationId: 'conv_a1' }));
    const [first] = (await client.listConversationItems({ accountId: 'acc_a', conversationId: 'conv_a1', after: '', limit: 0, ascending: true, allItems: false })).itemsJson;
    const itemId = JSON.parse(first!).id as string;
    await failsWith(GrpcStatus.NOT_FOUND, client.getConversationItem({ accountId: 'acc_b', conversationId: 'conv_a1', itemId }));
    await failsWith(GrpcStatus.NOT_FOUND, client.deleteConversationItem({ accountId: 'acc_b', conversationId: 'conv_a1', itemId }));
    expect(JSON.parse((await client.getConversationItem({ accountId: 'acc_a', conversationId: 'conv_a1', itemId })).itemJson)).toMatchObject({
      id: itemId, type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_text', text: 'hello' }],
    });

    expect((await client.updateConversation({ accountId: 'acc_a', conversationId: 'conv_a1', metadataJson: JSON.stringify({ topic: 'changed' }) })).conversation).toMatchObject({ metadataJson: '{"topic":"changed"}' });
    await client.deleteConversation({ accountId: 'acc_a', conversationId: 'conv_a1' });
    await failsWith(GrpcStatus.NOT_FOUND, client.getConversation({ accountId: 'acc_a', conversationId: 'conv_a1' }));
    await failsWith(GrpcStatus.NOT_FOUND, client.deleteConversation({ accountId: 'acc_a', conversationId: 'conv_a1' }));
  });

  it('refuses metadata past OpenAI\'s bounds and more than 20 items a call', async () => {
    const tooMany = Object.fromEntries(Array.from({ length: 17 }, (_, index) => [`k${index}`, 'v']));
    await failsWith(GrpcStatus.INVALID_ARGUMENT, create('acc_m', 'conv_m1', [], JSON.stringify(tooMany)));
    await failsWith(GrpcStatus.INVALID_ARGUMENT, create('acc_m', 'conv_m1', [], JSON.stringify({ key: 'x'.repeat(513) })));
    await failsWith(GrpcStatus.INVALID_ARGUMENT, create('acc_m', 'conv_m1', [], JSON.stringify({ ['k'.repeat(65)]: 'v' })));
    await failsWith(GrpcStatus.INVALID_ARGUMENT, create('acc_m', 'conv_m1', Array.from({ length: 21 }, (_, index) => message(`m${index}`))));
    await failsWith(GrpcStatus.NOT_FOUND, client.getConversation({ accountId: 'acc_m', conversationId: 'conv_m1' }));
  });

  it('pages items both ways with an item id as the cursor', async () => {
    await create('acc_p', 'conv_p1', ['a', 'b', 'c', 'd', 'e'].map((text) => message(text)));
    const page = (after: string, ascending: boolean) => client.listConversationItems({ accountId: 'acc_p', conversationId: 'conv_p1', after, limit: 2, ascending, allItems: false });
    const newest = await page('', false);
    expect(texts(newest.itemsJson)).toEqual(['e', 'd']);
    expect(newest.hasMore).toBe(true);
    const next = await page(JSON.parse(newest.itemsJson[1]!).id, false);
    expect(texts(next.itemsJson)).toEqual(['c', 'b']);
    const oldest = await page('', true);
    expect(texts(oldest.itemsJson)).toEqual(['a', 'b']);
    const last = await page(JSON.parse(next.itemsJson[1]!).id, true);
    expect(texts(last.itemsJson)).toEqual(['c', 'd']);
    await failsWith(GrpcStatus.INVALID_ARGUMENT, page('msg_nope', true));
  });

  it('appends a stored response\'s items once, a retried put appending nothing', async () => {
    await create('acc_r', 'conv_r1', [message('before')]);
    const entry = (responseId: string): StoredResponse => ({
      accountId: 'acc_r',
      responseId,
      keyId: 'key_1',
      responseJson: JSON.stringify({ id: responseId, object: 'response' }),
      inputItemsJson: '[]',
      createdAt: BigInt(Math.floor(clock / 1000)),
      conversationId: 'conv_r1',
      conversationItemsJson: JSON.stringify([{ role: 'user', content: 'question' }, { id: 'msg_out1', type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'answer', annotations: [] }] }]),
    });
    await client.putResponses({ responses: [entry('resp_r1')] });
    await client.putResponses({ responses: [entry('resp_r1')] });
    const all = await client.listConversationItems({ accountId: 'acc_r', conversationId: 'conv_r1', after: '', limit: 0, ascending: true, allItems: true });
    expect(texts(all.itemsJson)).toEqual(['before', 'question', 'answer']);
    expect(JSON.parse(all.itemsJson[1]!).id).toBe('msg_r1_in0');
    expect(JSON.parse(all.itemsJson[2]!).id).toBe('msg_out1');
    // Another account's response naming this conversation adds nothing to it.
    await client.putResponses({ responses: [{ ...entry('resp_x1'), accountId: 'acc_other' }] });
    expect((await client.getConversation({ accountId: 'acc_r', conversationId: 'conv_r1' })).conversation?.itemCount).toBe(3);
  });

  it('bounds items per conversation and conversations per account; an item deleted leaves the rest', async () => {
    await create('acc_b', 'conv_b1', Array.from({ length: 5 }, (_, index) => message(`m${index}`)));
    await failsWith(GrpcStatus.INVALID_ARGUMENT, client.addConversationItems({ accountId: 'acc_b', conversationId: 'conv_b1', itemsJson: [message('x'), message('y')] }));
    const added = await client.addConversationItems({ accountId: 'acc_b', conversationId: 'conv_b1', itemsJson: [message('m5')] });
    const addedId = JSON.parse(added.itemsJson[0]!).id as string;
    expect(addedId).toMatch(/^msg_/);
    expect((await client.deleteConversationItem({ accountId: 'acc_b', conversationId: 'conv_b1', itemId: addedId })).conversation?.itemCount).toBe(5);
    await failsWith(GrpcStatus.NOT_FOUND, client.getConversationItem({ accountId: 'acc_b', conversationId: 'conv_b1', itemId: addedId }));
    // A response's items past the bound push the oldest out.
    await client.putResponses({ responses: [{
      accountId: 'acc_b', responseId: 'resp_b1', keyId: 'k', responseJson: '{}', inputItemsJson: '[]', createdAt: 0n,
      conversationId: 'conv_b1', conversationItemsJson: JSON.stringify([{ role: 'user', content: 'n1' }, { role: 'user', content: 'n2' }]),
    }] });
    const all = await client.listConversationItems({ accountId: 'acc_b', conversationId: 'conv_b1', after: '', limit: 0, ascending: true, allItems: true });
    expect(texts(all.itemsJson)).toEqual(['m1', 'm2', 'm3', 'm4', 'n1', 'n2']);

    await create('acc_b', 'conv_b2');
    await create('acc_b', 'conv_b3');
    await expect(create('acc_b', 'conv_b4')).rejects.toSatisfy((error) => error instanceof GatewayError && error.code === 'conversations_limit');
  });

  it('forgets a conversation past its retention from its last change', async () => {
    await create('acc_t', 'conv_t1', [message('old')]);
    clock += (RETENTION_SECONDS - 10) * 1000;
    await client.addConversationItems({ accountId: 'acc_t', conversationId: 'conv_t1', itemsJson: [message('refresh')] });
    clock += 20 * 1000;
    expect((await client.getConversation({ accountId: 'acc_t', conversationId: 'conv_t1' })).conversation?.itemCount).toBe(2);
    clock += RETENTION_SECONDS * 1000;
    await failsWith(GrpcStatus.NOT_FOUND, client.getConversation({ accountId: 'acc_t', conversationId: 'conv_t1' }));
    // The sweeper deletes its row, and its items with it.
    const rows = async (table: string) => Number((await service.db.query(`select count(*) from jobs.${table} where account_id = 'acc_t'`)).rows[0].count);
    await expect.poll(async () => [await rows('conversations'), await rows('conversation_items')], { timeout: 5_000 }).toEqual([0, 0]);
  });
});
