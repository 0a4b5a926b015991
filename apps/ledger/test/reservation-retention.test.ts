import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '@gateway/platform/db';
import { eventually, testLogger, uniqueName } from '@gateway/testing';
import { createLedgerDatabase } from '../src/database.js';
import { Ledger } from '../src/ledger.js';
import { LEDGER_SCHEMA } from '../src/migrations.js';
import { createLedgerHarness, type LedgerClient, type LedgerHarness } from './harness.js';

let harness: LedgerHarness;
let client: LedgerClient;

beforeAll(async () => {
  harness = await createLedgerHarness();
  // Default retention (7 days); a fast sweeper so a pass runs within the test.
  ({ client } = await harness.start({ consumer: { enabled: false }, sweepIntervalMs: 100 }));
});
afterAll(async () => { await harness?.close(); });

const reservationIds = async (accountId: string) =>
  (await harness.db.selectFrom('reservations').select('request_id').where('account_id', '=', accountId).orderBy('request_id').execute())
    .map((row) => row.request_id);

async function insertClosed(accountId: string, count: number, closedAgo: string, label = 'old'): Promise<void> {
  await sql`
    insert into reservations (request_id, account_id, key_id, amount_pico, created_at, expires_at, closed_at, close_reason)
    select ${accountId} || '-' || ${label} || '-' || lpad(n::text, 3, '0'), ${accountId}, '', 0, now() - ${closedAgo}::interval,
           now() - ${closedAgo}::interval, now() - ${closedAgo}::interval, 'settled'
    from generate_series(1, ${count}) n`.execute(harness.db);
}

describe('closed reservation retention', () => {
  // First: it prunes with a 1-day retention, which would also take rows the next test leaves behind.
  it('deletes in bounded batches: at most batchRows × maxBatches rows per call, the rest on the next', async () => {
    const accountId = uniqueName('acc');
    // Two days old: past the 1-day retention used here, inside the harness sweeper's 7 days.
    await insertClosed(accountId, 25, '2 days');
    const { db, pool } = createLedgerDatabase({ url: harness.database.url, schema: LEDGER_SCHEMA, maxConnections: 1, applicationName: 'ledger-test' }, testLogger('ledger'));
    try {
      const ledger = new Ledger(db, testLogger('ledger'), 60_000, pool);
      expect(await ledger.pruneClosedReservations(24 * 3_600_000, 10, 2)).toBe(20);
      expect(await reservationIds(accountId)).toHaveLength(5);
      expect(await ledger.pruneClosedReservations(24 * 3_600_000, 10, 2)).toBe(5);
      expect(await reservationIds(accountId)).toEqual([]);
    } finally {
      await db.destroy();
    }
  });

  it('the sweeper deletes reservations closed more than 7 days ago and keeps open and recent ones', async () => {
    const accountId = uniqueName('acc');
    await client.topUp({ accountId, credits: '1', idempotencyKey: uniqueName('topup'), note: '' });
    const admit = (requestId: string) => client.admit({ context: { requestId, accountId, keyId: 'k' }, modelId: 'm', paid: true, tier: '', limitGroup: '' });
    await admit(`${accountId}-open`);
    await admit(`${accountId}-released`);
    expect(await client.release({ context: { requestId: `${accountId}-released`, accountId, keyId: 'k' } })).toEqual({ released: true });
    await insertClosed(accountId, 3, '8 days');
    await insertClosed(accountId, 1, '6 days', 'recent');
    await eventually(async () => expect(await reservationIds(accountId)).toEqual([`${accountId}-open`, `${accountId}-recent-001`, `${accountId}-released`]), 10_000);
    expect(await client.getBalance({ accountId })).toEqual({ balance: '1', available: '0.95', reserved: '0.05' });
    expect((await client.verifyJournal({ accountId })).mismatches).toEqual([]);
  });

});

describe('spend day retention', () => {
  it('the sweeper deletes key and account spend days older than 62 days and keeps those a month window or budget reads', async () => {
    const accountId = uniqueName('acc');
    const keyId = uniqueName('key');
    for (const [table, column, id] of [['key_spend_days', 'key_id', keyId], ['account_spend_days', 'account_id', accountId]] as const) {
      await sql`
        insert into ${sql.table(table)} (${sql.ref(column)}, day, spent_pico)
        select ${id}, (now() at time zone 'UTC')::date - n, 1000 from unnest(array[0, 31, 62, 63, 400]) n`.execute(harness.db);
    }
    const daysAgo = async (table: string, column: string, id: string) =>
      (await sql<{ ago: number }>`
        select ((now() at time zone 'UTC')::date - day) as ago from ${sql.table(table)} where ${sql.ref(column)} = ${id} order by day desc`.execute(harness.db))
        .rows.map((row) => Number(row.ago));
    await eventually(async () => {
      expect(await daysAgo('key_spend_days', 'key_id', keyId)).toEqual([0, 31, 62]);
      expect(await daysAgo('account_spend_days', 'account_id', accountId)).toEqual([0, 31, 62]);
    }, 10_000);
  });
});
