import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayError, GrpcStatus } from '@gateway/platform';
import type { StoredResponse } from '@gateway/proto';
import { eventually } from '@gateway/testing';
import { startBackgroundService, type BackgroundService } from './background-service.js';

// The ResponsesStore of the jobs service over its real gRPC server and real Postgres: per-account
// lookups, the first put kept, the size bound, pages of input items, retention (a moved clock) and
// the sweeper.

const RETENTION_SECONDS = 3_600;
const MAX_ENTRY_CHARS = 10_000;
const MAX_PER_ACCOUNT = 5;

describe('ResponsesStore (jobs service)', () => {
  let service: BackgroundService;
  let client: BackgroundService['client'];
  let clock = Date.now();

  beforeAll(async () => {
    service = await startBackgroundService({
      responses: { retentionSeconds: RETENTION_SECONDS, maxEntryChars: MAX_ENTRY_CHARS, sweepIntervalMs: 200, maxResponsesPerAccount: MAX_PER_ACCOUNT },
      now: () => clock,
    });
    client = service.client;
  });

  afterAll(async () => {
    await service?.stop();
  });

  const entry = (accountId: string, responseId: string, text: string, input: unknown[] = [{ role: 'user', content: 'Hi' }]): StoredResponse => ({
    accountId,
    responseId,
    keyId: 'key_1',
    responseJson: JSON.stringify({ id: responseId, object: 'response', output: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text }] }] }),
    inputItemsJson: JSON.stringify(input),
    createdAt: BigInt(Math.floor(clock / 1000)),
    conversationId: '',
    conversationItemsJson: '',
  });
  const notFound = (promise: Promise<unknown>) => expect(promise).rejects.toSatisfy((error) => error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND);
  const invalid = (promise: Promise<unknown>) => expect(promise).rejects.toSatisfy((error) => error instanceof GatewayError && error.status === GrpcStatus.INVALID_ARGUMENT);

  it('answers a response only to its account; a second put of the same id keeps the first', async () => {
    expect(await client.putResponses({ responses: [entry('acc_a', 'resp_a1', 'first'), entry('acc_b', 'resp_b1', 'other')] })).toEqual({ stored: 2, refused: 0 });
    expect(await client.putResponses({ responses: [entry('acc_a', 'resp_a1', 'second')] })).toEqual({ stored: 1, refused: 0 });
    const found = await client.getResponse({ accountId: 'acc_a', responseId: 'resp_a1' });
    expect(JSON.parse(found.responseJson).output[0].content[0].text).toBe('first');
    expect(Number(found.expiresAt)).toBe(Math.floor(clock / 1000) + RETENTION_SECONDS);
    await notFound(client.getResponse({ accountId: 'acc_b', responseId: 'resp_a1' }));
    await notFound(client.listInputItems({ accountId: 'acc_b', responseId: 'resp_a1', after: '', limit: 0, ascending: false }));
    await notFound(client.deleteResponse({ accountId: 'acc_b', responseId: 'resp_a1' }));
    // Still there for its owner after the other account's attempts.
    await client.getResponse({ accountId: 'acc_a', responseId: 'resp_a1' });
    await client.deleteResponse({ accountId: 'acc_a', responseId: 'resp_a1' });
    await notFound(client.getResponse({ accountId: 'acc_a', responseId: 'resp_a1' }));
    await notFound(client.deleteResponse({ accountId: 'acc_a', responseId: 'resp_a1' }));
  });

  it('refuses entries over the size bound or without a gateway id, one by one; and batches over 256 entries', async () => {
    const big = entry('acc_a', 'resp_big', 'x'.repeat(MAX_ENTRY_CHARS));
    const answer = await client.putResponses({ responses: [big, entry('acc_a', 'not-a-response', 'x'), entry('', 'resp_noacc', 'x'), entry('acc_a', 'resp_small', 'ok')] });
    expect(answer).toEqual({ stored: 1, refused: 3 });
    await notFound(client.getResponse({ accountId: 'acc_a', responseId: 'resp_big' }));
    await client.getResponse({ accountId: 'acc_a', responseId: 'resp_small' });
    await invalid(client.putResponses({ responses: Array.from({ length: 257 }, (_, index) => entry('acc_a', `resp_many${index}`, 'x')) }));
  });

  it('pages input items newest first by default, with stable ids, `after` and `has_more`; an unknown cursor and limit over 100 are INVALID_ARGUMENT', async () => {
    const input = [
      { role: 'user', content: 'one' },
      { type: 'message', role: 'assistant', content: 'two', id: 'msg_kept' },
      { type: 'function_call_output', call_id: 'call_1', output: 'three' },
    ];
    await client.putResponses({ responses: [entry('acc_a', 'resp_items', 'x', input)] });
    const page = (after: string, limit: number, ascending: boolean) => client.listInputItems({ accountId: 'acc_a', responseId: 'resp_items', after, limit, ascending });
    const all = await page('', 0, false);
    const items = all.itemsJson.map((item) => JSON.parse(item));
    expect(items.map((item) => item.id)).toEqual(['fco_items_in2', 'msg_kept', 'msg_items_in0']);
    expect(items[2]).toEqual({ id: 'msg_items_in0', type: 'message', role: 'user', content: [{ type: 'input_text', text: 'one' }], status: 'completed' });
    expect(all.hasMore).toBe(false);
    const first = await page('', 2, true);
    expect(first.itemsJson.map((item) => JSON.parse(item).id)).toEqual(['msg_items_in0', 'msg_kept']);
    expect(first.hasMore).toBe(true);
    const next = await page('msg_kept', 2, true);
    expect(next.itemsJson.map((item) => JSON.parse(item).id)).toEqual(['fco_items_in2']);
    expect(next.hasMore).toBe(false);
    await invalid(page('msg_unknown', 2, true));
    await invalid(page('', 101, true));
  });

  it('keeps at most MAX_PER_ACCOUNT responses per account, its oldest out first; another account untouched', async () => {
    await client.putResponses({ responses: [entry('acc_other', 'resp_other', 'kept')] });
    for (let index = 0; index < MAX_PER_ACCOUNT + 2; index++) {
      const put = entry('acc_full', `resp_full${index}`, `n${index}`);
      put.createdAt = BigInt(Math.floor(clock / 1000) + index);
      await client.putResponses({ responses: [put] });
    }
    await notFound(client.getResponse({ accountId: 'acc_full', responseId: 'resp_full0' }));
    await notFound(client.getResponse({ accountId: 'acc_full', responseId: 'resp_full1' }));
    for (let index = 2; index < MAX_PER_ACCOUNT + 2; index++) await client.getResponse({ accountId: 'acc_full', responseId: `resp_full${index}` });
    await client.getResponse({ accountId: 'acc_other', responseId: 'resp_other' });
  });

  it('retention: past it a response is not found, and the sweeper deletes it', async () => {
    await client.putResponses({ responses: [entry('acc_r', 'resp_old', 'old')] });
    clock += (RETENTION_SECONDS - 1) * 1000;
    await client.getResponse({ accountId: 'acc_r', responseId: 'resp_old' });
    clock += 2_000;
    await notFound(client.getResponse({ accountId: 'acc_r', responseId: 'resp_old' }));
    await notFound(client.deleteResponse({ accountId: 'acc_r', responseId: 'resp_old' }));
    // Put after the clock moved: a new response, retained from now.
    await client.putResponses({ responses: [entry('acc_r', 'resp_new', 'new')] });
    const { default: pg } = await import('pg');
    const db = new pg.Client({ connectionString: service.database.url });
    await db.connect();
    try {
      const count = async () => Number((await db.query(`select count(*) from jobs.stored_responses where account_id = 'acc_r'`)).rows[0].count);
      // The sweeper (every 200 ms here) deletes the expired one and keeps the new one.
      await eventually(async () => expect(await count()).toBe(1));
      await client.getResponse({ accountId: 'acc_r', responseId: 'resp_new' });
    } finally {
      await db.end();
    }
  });
});
