import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GrpcStatus, subjects } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { ErrorReason, UsageEvent, type Generation } from '@gateway/proto';
import { eventually, uniqueName } from '@gateway/testing';
import { createLedgerHarness, fundedAccount, type LedgerClient, type LedgerHarness, rejection, usageEvent } from './harness.js';

// ListGenerations (keyset pages of one account's records), GetModelLatency (every account's records
// per model × provider) and GetBalances, on a real Postgres with records settled by the real consumer.

let harness: LedgerHarness;
beforeEach(async () => { harness = await createLedgerHarness(); });
afterEach(async () => { await harness?.close(); });

/** Publishes the events one by one and waits until every one of them has its generation record. */
async function settle(events: UsageEvent[]): Promise<void> {
  for (const event of events) {
    await harness.testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(event).finish(), event.requestId);
  }
  const ids = events.map((event) => event.requestId);
  await eventually(async () => {
    const rows = await harness.db.selectFrom('generations').select('request_id').where('request_id', 'in', ids).execute();
    expect(rows).toHaveLength(ids.length);
  });
}

/** Every page of the account's list at `limit` per page, in order, and how many pages it took. */
async function allPages(client: LedgerClient, accountId: string, limit: number, keyId = ''): Promise<{ records: Generation[]; pages: number }> {
  const records: Generation[] = [];
  let cursor = '';
  for (let pages = 1; pages <= 50; pages++) {
    const page = await client.listGenerations({ accountId, limit, cursor, keyId });
    expect(page.generations.length).toBeLessThanOrEqual(limit);
    records.push(...page.generations);
    if (!page.nextCursor) return { records, pages };
    cursor = page.nextCursor;
  }
  throw new Error('the list did not end within 50 pages');
}

describe('ListGenerations', () => {
  it('pages newest first through equal timestamps without repeating or losing a record; key filter; other accounts never listed', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const other = await fundedAccount(client);
    const now = Date.now();
    const t1 = BigInt(now - 60_000), t2 = BigInt(now - 30_000), t3 = BigInt(now - 10_000);
    // Three records at t1 and two at t2 (equal to the millisecond), two at t3 moved below apart by
    // one microsecond (a cursor at millisecond precision would repeat or skip one of them).
    const ours = [
      { at: t1, key: 'key_a' }, { at: t1, key: 'key_b' }, { at: t1, key: 'key_a' },
      { at: t2, key: 'key_b' }, { at: t2, key: 'key_a' },
      { at: t3, key: 'key_a' }, { at: t3, key: 'key_b' },
    ].map((record) => ({ ...record, requestId: uniqueName('req') }));
    const theirs = [{ at: t1, key: 'key_a' }, { at: t3, key: 'key_a' }].map((record) => ({ ...record, requestId: uniqueName('req') }));
    await settle([
      ...ours.map((record) => usageEvent({ requestId: record.requestId, accountId, keyId: record.key, occurredAtMs: record.at })),
      ...theirs.map((record) => usageEvent({ requestId: record.requestId, accountId: other, keyId: record.key, occurredAtMs: record.at })),
    ]);
    const [micro1, micro2] = [ours[5]!.requestId, ours[6]!.requestId];
    // Charges are append-only (a trigger): the test lifts it for its own two rows, in one transaction.
    // (A charge without occurred_ms takes now(), so sub-millisecond times are real.)
    await harness.db.transaction().execute(async (trx) => {
      await sql`alter table charges disable trigger charges_no_update_or_delete`.execute(trx);
      await sql`update charges set occurred_at = occurred_at + interval '1 microsecond' where request_id = ${micro1}`.execute(trx);
      await sql`update charges set occurred_at = occurred_at + interval '2 microseconds' where request_id = ${micro2}`.execute(trx);
      await sql`alter table charges enable trigger charges_no_update_or_delete`.execute(trx);
    });

    // Newest first by occurred_at, ties by request id (both descending).
    const byRank = (record: { at: bigint; requestId: string }) =>
      record.requestId === micro2 ? 2 : record.requestId === micro1 ? 1 : 0;
    const expected = [...ours].sort((x, y) =>
      x.at !== y.at ? (x.at > y.at ? -1 : 1)
        : byRank(x) !== byRank(y) ? byRank(y) - byRank(x)
          : (x.requestId > y.requestId ? -1 : 1));
    expect(expected[0]!.requestId).toBe(micro2);
    expect(expected[1]!.requestId).toBe(micro1);

    for (const limit of [1, 2, 3, 7]) {
      const { records, pages } = await allPages(client, accountId, limit);
      expect(records.map((record) => record.requestId)).toEqual(expected.map((record) => record.requestId));
      // The last page says it is the last: no empty page after a full one.
      expect(pages).toBe(Math.ceil(7 / limit));
    }
    // Each listed record is the record GetGeneration answers for the same request.
    const first = (await client.listGenerations({ accountId, limit: 1, cursor: '', keyId: '' })).generations[0]!;
    expect(first).toEqual((await client.getGeneration({ accountId, requestId: first.requestId })).generation);
    expect(first.createdAtMs).toBe(t3);
    // limit 0 means 20: all seven on one page, and no next page.
    const whole = await client.listGenerations({ accountId, limit: 0, cursor: '', keyId: '' });
    expect(whole.generations).toHaveLength(7);
    expect(whole.nextCursor).toBe('');

    // One key's records only, still in order and through pages.
    const keyB = await allPages(client, accountId, 1, 'key_b');
    expect(keyB.records.map((record) => record.requestId)).toEqual(expected.filter((record) => record.key === 'key_b').map((record) => record.requestId));
    expect(keyB.records.every((record) => record.keyId === 'key_b')).toBe(true);
    expect((await client.listGenerations({ accountId, limit: 10, cursor: '', keyId: 'key_none' })).generations).toEqual([]);

    // The other account sees its own two records only; our cursor used with its id stays in its records.
    const theirsListed = await allPages(client, other, 1);
    expect(theirsListed.records.map((record) => record.requestId)).toEqual([theirs[1]!.requestId, theirs[0]!.requestId]);
    const ourCursor = (await client.listGenerations({ accountId, limit: 1, cursor: '', keyId: '' })).nextCursor;
    const crossed = await client.listGenerations({ accountId: other, limit: 10, cursor: ourCursor, keyId: '' });
    expect(crossed.generations.map((record) => record.requestId)).toEqual([theirs[1]!.requestId, theirs[0]!.requestId]);
    // An account without records: an empty page.
    expect(await client.listGenerations({ accountId: uniqueName('acc'), limit: 5, cursor: '', keyId: '' })).toEqual({ generations: [], nextCursor: '' });
  });

  it('leaves out records past retention (pruned) but keeps paging through the rest', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const ids = [uniqueName('req'), uniqueName('req'), uniqueName('req')];
    const now = Date.now();
    await settle(ids.map((requestId, index) => usageEvent({ requestId, accountId, occurredAtMs: BigInt(now - 1_000 * (index + 1)) })));
    await sql`delete from generations where request_id = ${ids[1]}`.execute(harness.db);
    const { records } = await allPages(client, accountId, 1);
    expect(records.map((record) => record.requestId)).toEqual([ids[0], ids[2]]);
  });

  it('refuses a limit above 100 and a cursor it did not make as INVALID_ARGUMENT/INVALID_REQUEST', async () => {
    const { client } = await harness.start();
    const tooMany = await rejection(client.listGenerations({ accountId: 'acc', limit: 101, cursor: '', keyId: '' }));
    expect(tooMany.status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(tooMany.param).toBe('limit');
    const forged = (text: string) => Buffer.from(text, 'utf8').toString('base64url');
    for (const cursor of ['not a cursor', '%%%', forged('v1:12'), forged('g1:abc:req_1'), forged('g1:123:'), forged('g1:1234567890123456789:req'), 'x'.repeat(401)]) {
      const refused = await rejection(client.listGenerations({ accountId: 'acc', limit: 5, cursor, keyId: '' }));
      expect(refused.status).toBe(GrpcStatus.INVALID_ARGUMENT);
      expect(refused.reason).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
      expect(refused.param).toBe('cursor');
    }
    const noAccount = await rejection(client.listGenerations({ accountId: '', limit: 5, cursor: '', keyId: '' }));
    expect(noAccount.param).toBe('account_id');
  });
});

describe('GetModelLatency', () => {
  it('counts and takes percentiles per model × provider over every account, most requests first, within the window', async () => {
    const { client } = await harness.start();
    const [first, second] = [await fundedAccount(client), await fundedAccount(client)];
    const events: UsageEvent[] = [];
    // m1 on p1: latencies 100..1000 and generation times 10..100, split over two accounts.
    for (let index = 1; index <= 10; index++) {
      events.push(usageEvent({
        requestId: uniqueName('req'), accountId: index % 2 ? first : second, modelId: 'm1', providerId: 'p1',
        latencyMs: 100 * index, generationTimeMs: 10 * index,
      }));
    }
    // m2 on p1: three records; m1 on p2: one.
    for (const [latencyMs, generationTimeMs] of [[7, 70], [9, 90], [8, 80]] as const) {
      events.push(usageEvent({ requestId: uniqueName('req'), accountId: first, modelId: 'm2', providerId: 'p1', latencyMs, generationTimeMs }));
    }
    events.push(usageEvent({ requestId: uniqueName('req'), accountId: second, modelId: 'm1', providerId: 'p2', latencyMs: 42, generationTimeMs: 4 }));
    // A record created five days ago: outside a 4-day window, inside a 6-day one.
    const old = uniqueName('req');
    events.push(usageEvent({ requestId: old, accountId: first, modelId: 'm3', providerId: 'p1', latencyMs: 5, generationTimeMs: 5 }));
    await settle(events);
    await sql`update generations set created_at = now() - interval '5 days' where request_id = ${old}`.execute(harness.db);

    const { models } = await client.getModelLatency({ days: 4 });
    // percentile_disc: the smallest latency with at least that share of requests at or below it.
    expect(models).toEqual([
      { modelId: 'm1', providerId: 'p1', requests: 10n, latencyP50Ms: 500, latencyP95Ms: 1000, generationTimeP50Ms: 50 },
      { modelId: 'm2', providerId: 'p1', requests: 3n, latencyP50Ms: 8, latencyP95Ms: 9, generationTimeP50Ms: 80 },
      { modelId: 'm1', providerId: 'p2', requests: 1n, latencyP50Ms: 42, latencyP95Ms: 42, generationTimeP50Ms: 4 },
    ]);
    const wider = await client.getModelLatency({ days: 6 });
    expect(wider.models.map((row) => `${row.modelId}@${row.providerId}`)).toEqual(['m1@p1', 'm2@p1', 'm1@p2', 'm3@p1']);
  });

  it.each([0, 31])('refuses days = %i', async (days) => {
    const { client } = await harness.start();
    const refused = await rejection(client.getModelLatency({ days }));
    expect(refused.status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
    expect(refused.param).toBe('days');
  });
});

describe('GetBalances', () => {
  it('answers in the order asked, each exactly as GetBalance does, 0 for an account it does not know', async () => {
    const { client } = await harness.start();
    const rich = await fundedAccount(client, '10');
    const holding = await fundedAccount(client, '3');
    await client.admit({ context: { requestId: uniqueName('req'), accountId: holding, keyId: 'key_a' }, modelId: 'm1', paid: true, tier: '', limitGroup: '' });
    const unknown = uniqueName('acc');
    const asked = [holding, unknown, rich, holding];
    const { balances } = await client.getBalances({ accountIds: asked });
    expect(balances).toEqual([
      { accountId: holding, balance: '3', available: '2.95', reserved: '0.05' },
      { accountId: unknown, balance: '0', available: '0', reserved: '0' },
      { accountId: rich, balance: '10', available: '10', reserved: '0' },
      { accountId: holding, balance: '3', available: '2.95', reserved: '0.05' },
    ]);
    for (const entry of balances) {
      const { accountId, ...single } = entry;
      expect(single).toEqual(await client.getBalance({ accountId }));
    }
    expect(await client.getBalances({ accountIds: [] })).toEqual({ balances: [] });
    const hundred = Array.from({ length: 100 }, (_, index) => (index === 0 ? rich : `acc_${index}`));
    const answered = (await client.getBalances({ accountIds: hundred })).balances;
    expect(answered).toHaveLength(100);
    expect(answered[0]!.balance).toBe('10');
  });

  it('refuses more than 100 ids and an empty id', async () => {
    const { client } = await harness.start();
    const tooMany = await rejection(client.getBalances({ accountIds: Array.from({ length: 101 }, (_, index) => `acc_${index}`) }));
    expect(tooMany.status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(tooMany.reason).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
    expect(tooMany.param).toBe('account_ids');
    const empty = await rejection(client.getBalances({ accountIds: ['acc_1', ''] }));
    expect(empty.status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(empty.param).toBe('account_ids');
  });
});
