import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { formatCredits, subjects } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { Usage, UsageEvent, UsageEventBatch, UsageOutcome } from '@gateway/proto';
import { eventually, uniqueName } from '@gateway/testing';
import { crashingBus, createLedgerHarness, fundedAccount, type LedgerClient, type LedgerHarness, usageEvent } from './harness.js';

// 600 uncached input × 500,000 + 400 cached × 100,000 + 200 output × 1,500,000 pico (CHAT_PRICES)
const CHAT_COST_PICO = 300_000_000n + 40_000_000n + 300_000_000n;

let harness: LedgerHarness;
beforeEach(async () => { harness = await createLedgerHarness(); });
afterEach(async () => { await harness?.close(); });

async function admitPaid(client: LedgerClient, accountId: string, requestId: string, keyId = 'key_a') {
  return client.admit({ context: { requestId, accountId, keyId }, modelId: 'acme/chat-small', paid: true, tier: '', limitGroup: '' });
}

const publish = (harnessBus: LedgerHarness, event: UsageEvent, msgId = event.requestId) =>
  harnessBus.testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(event).finish(), msgId);

async function chargeCount(requestIds: readonly string[]): Promise<number> {
  const row = await harness.db.selectFrom('charges').select((eb) => eb.fn.countAll<string>().as('count'))
    .where('request_id', 'in', [...requestIds]).executeTakeFirstOrThrow();
  return Number(row.count);
}

/** One consumer handles the stream in order: once a later event is charged, everything before it was handled. */
async function drain(client: LedgerClient, accountId: string): Promise<void> {
  const sentinel = uniqueName('sentinel');
  await publish(harness, usageEvent({ requestId: sentinel, accountId, usage: Usage.create(), keyId: 'key_sentinel' }));
  await eventually(async () => expect(await chargeCount([sentinel])).toBe(1), 8_000);
}

async function reservation(requestId: string) {
  return harness.db.selectFrom('reservations').selectAll().where('request_id', '=', requestId).executeTakeFirstOrThrow();
}

describe('settlement consumer', () => {
  it('charges the hand-computed cost once, closes the reservation, and ignores duplicate publishes', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const requestId = uniqueName('req');
    await admitPaid(client, accountId, requestId);
    expect(await client.getBalance({ accountId })).toEqual({ balance: '10', available: '9.95', reserved: '0.05' });

    const event = usageEvent({ requestId, accountId });
    await publish(harness, event);
    await publish(harness, event); // same msg-id: JetStream stores it once
    await publish(harness, event, `${requestId}-outbox-retry`); // different msg-id: the ledger dedups
    await eventually(async () => expect((await reservation(requestId)).close_reason).toBe('settled'));
    await eventually(async () => {
      const rows = await harness.db.selectFrom('rejected_events').selectAll().execute();
      expect(rows).toEqual([]);
      const pending = await sql<{ count: string }>`select count(*)::text as count from journal_entries where request_id = ${requestId}`.execute(harness.db);
      expect(pending.rows[0]!.count).toBe('1');
    });
    await drain(client, accountId);
    await eventually(async () => {
      const info = await harness.db.selectFrom('charges').select(['cost_pico', 'input_tokens', 'cached_input_tokens', 'output_tokens', 'key_id'])
        .where('request_id', '=', requestId).execute();
      expect(info).toEqual([{ cost_pico: CHAT_COST_PICO, input_tokens: 1000n, cached_input_tokens: 400n, output_tokens: 200n, key_id: 'key_a' }]);
    });
    const expectedBalance = formatCredits(10n * 1_000_000_000_000n - CHAT_COST_PICO);
    expect(expectedBalance).toBe('9.99936');
    await eventually(async () => expect(await client.getBalance({ accountId })).toEqual({ balance: '9.99936', available: '9.99936', reserved: '0' }));
    expect((await client.getKeyUsage({ accountId, keyIds: ['key_a', 'key_unused'] })).usage)
      .toEqual([
        { keyId: 'key_a', credits: '0.00064', creditsDaily: '0.00064', creditsWeekly: '0.00064', creditsMonthly: '0.00064' },
        { keyId: 'key_unused', credits: '0', creditsDaily: '0', creditsWeekly: '0', creditsMonthly: '0' },
      ]);
    expect((await client.verifyJournal({ accountId: '' })).mismatches).toEqual([]);
  });

  it('keeps charges append-only and counts a charge once in the journal, also one settled before charges became journal entries', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const requestId = uniqueName('req');
    await admitPaid(client, accountId, requestId);
    await publish(harness, usageEvent({ requestId, accountId }));
    await eventually(async () => expect((await reservation(requestId)).close_reason).toBe('settled'));
    // Settlement writes no journal row of its own for a charge: the charge row is the entry.
    const journalRows = await sql<{ count: string }>`select count(*)::text as count from journal where request_id = ${requestId}`.execute(harness.db);
    expect(journalRows.rows[0]!.count).toBe('0');
    await expect(sql`update charges set cost_pico = 0 where request_id = ${requestId}`.execute(harness.db)).rejects.toThrow(/append-only/);
    await expect(sql`delete from charges where request_id = ${requestId}`.execute(harness.db)).rejects.toThrow(/append-only/);

    // A charge settled by an older ledger: a charges row AND a journal 'charge' row, balance debited once.
    const oldRequest = uniqueName('old');
    await sql`insert into charges (request_id, account_id, key_id, model_id, cost_pico, occurred_at)
              values (${oldRequest}, ${accountId}, 'key_a', 'acme/chat-small', 7000000, now())`.execute(harness.db);
    await sql`insert into journal (account_id, kind, amount_pico, request_id) values (${accountId}, 'charge', -7000000, ${oldRequest})`.execute(harness.db);
    await sql`update balances set balance_pico = balance_pico - 7000000 where account_id = ${accountId}`.execute(harness.db);
    const entries = await sql<{ count: string; total: string }>`
      select count(*)::text as count, sum(amount_pico)::text as total from journal_entries where request_id = ${oldRequest}`.execute(harness.db);
    expect(entries.rows[0]).toEqual({ count: '1', total: '-7000000' });
    expect((await client.verifyJournal({ accountId })).mismatches).toEqual([]);
    // And a balance that drifted from the journal is reported.
    await sql`update balances set balance_pico = balance_pico - 1 where account_id = ${accountId}`.execute(harness.db);
    expect((await client.verifyJournal({ accountId })).mismatches).toHaveLength(1);
  });

  it('charges exactly once when the consumer crashes after commit and the batch is redelivered', async () => {
    let crashOnce = true;
    const bus = crashingBus(harness.testBus.bus, () => { const crash = crashOnce; crashOnce = false; return crash; });
    const { client } = await harness.start({ bus });
    const accountId = await fundedAccount(client);
    const requestId = uniqueName('req');
    await admitPaid(client, accountId, requestId);
    await publish(harness, usageEvent({ requestId, accountId }));
    // The crashed batch was redelivered (nak) and handled a second time.
    await eventually(() => expect(bus.crashes).toBe(1));
    await eventually(() => expect(bus.redeliveredHandled).toBe(1), 8_000);
    const redelivered = await harness.db.selectFrom('charges').select('request_id').where('request_id', '=', requestId).execute();
    expect(redelivered).toHaveLength(1);
    await eventually(async () => {
      const settledAgain = await sql<{ count: string }>`select count(*)::text as count from journal_entries where kind = 'charge' and request_id = ${requestId}`.execute(harness.db);
      expect(settledAgain.rows[0]!.count).toBe('1');
      expect((await client.getBalance({ accountId })).balance).toBe('9.99936');
    }, 8_000);
  });

  it('charges every event exactly once across a consumer that dies before acking and a restarted service', async () => {
    // First process: commits some batches, then "crashes" on every later batch before its ack.
    let batches = 0;
    const crashing = crashingBus(harness.testBus.bus, () => ++batches > 2);
    const first = await harness.start({ bus: crashing, consumer: { maxBatch: 20, lingerMs: 2 } });
    const accounts = [await fundedAccount(first.client, '100'), await fundedAccount(first.client, '100'), await fundedAccount(first.client, '100')];
    const events: UsageEvent[] = [];
    for (let index = 0; index < 300; index++) {
      const accountId = accounts[index % accounts.length]!;
      const requestId = `${accountId}-r${index}`;
      await admitPaid(first.client, accountId, requestId, `key_${index % 5}`);
      events.push(usageEvent({ requestId, accountId, keyId: `key_${index % 5}`, usage: Usage.create({ inputTokens: 100 + index, outputTokens: index }) }));
    }
    await Promise.all(events.map((event) => publish(harness, event)));
    await eventually(() => expect(crashing.crashes).toBeGreaterThan(0), 8_000);
    await first.stop();

    const secondBus = await harness.testBus.connectAnother();
    const second = await harness.start({ bus: secondBus });
    const requestIds = events.map((event) => event.requestId);
    await eventually(async () => expect(await chargeCount(requestIds)).toBe(300), 20_000);
    await eventually(async () => {
      const open = await harness.db.selectFrom('reservations').select('request_id').where('closed_at', 'is', null).execute();
      expect(open).toEqual([]);
    }, 20_000);
    for (const accountId of accounts) {
      // (100 + i) × 500,000 + i × 1,500,000 pico for each of this account's events
      let expected = 100n * 1_000_000_000_000n;
      events.forEach((event, index) => {
        if (event.accountId === accountId) expected -= BigInt(100 + index) * 500_000n + BigInt(index) * 1_500_000n;
      });
      expect(await second.client.getBalance({ accountId })).toEqual({ balance: formatCredits(expected), available: formatCredits(expected), reserved: '0' });
    }
    const journalCharges = await sql<{ count: string }>`select count(*)::text as count from journal_entries where kind = 'charge'`.execute(harness.db);
    expect(journalCharges.rows[0]!.count).toBe('300');
    expect((await second.client.verifyJournal({ accountId: '' })).mismatches).toEqual([]);
  });

  it('settles group-commit batches on usage.batches, deduplicating against single events', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const requestIds = Array.from({ length: 5 }, (_, index) => `${accountId}-b${index}`);
    for (const requestId of requestIds) await admitPaid(client, accountId, requestId);
    const batch = UsageEventBatch.create({ batchId: uniqueName('batch'), events: requestIds.map((requestId) => usageEvent({ requestId, accountId })) });
    await harness.testBus.bus.publishDurable(subjects.usageBatches, UsageEventBatch.encode(batch).finish(), batch.batchId);
    await publish(harness, usageEvent({ requestId: requestIds[0]!, accountId }));
    await drain(client, accountId);
    await eventually(async () => expect(await client.getBalance({ accountId })).toEqual({
      balance: formatCredits(10n * 1_000_000_000_000n - 5n * CHAT_COST_PICO), available: formatCredits(10n * 1_000_000_000_000n - 5n * CHAT_COST_PICO), reserved: '0',
    }));
    expect(await chargeCount(requestIds)).toBe(5);
  });

  it('releases the reservation of a FAILED request without a charge', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const requestId = uniqueName('req');
    await admitPaid(client, accountId, requestId);
    await publish(harness, usageEvent({ requestId, accountId, outcome: UsageOutcome.USAGE_OUTCOME_FAILED }));
    await eventually(async () => expect((await reservation(requestId)).close_reason).toBe('failed'));
    expect(await client.getBalance({ accountId })).toEqual({ balance: '10', available: '10', reserved: '0' });
    expect(await chargeCount([requestId])).toBe(0);
  });

  it('sweeps an expired reservation, and a late event still charges exactly once', async () => {
    const { client } = await harness.start({ reservationLifetimeMs: 300, sweepIntervalMs: 100 });
    const accountId = await fundedAccount(client);
    const requestId = uniqueName('req');
    await admitPaid(client, accountId, requestId);
    await eventually(async () => expect((await reservation(requestId)).close_reason).toBe('expired'));
    expect(await client.getBalance({ accountId })).toEqual({ balance: '10', available: '10', reserved: '0' });

    const late = usageEvent({ requestId, accountId });
    await publish(harness, late);
    await publish(harness, late, `${requestId}-again`);
    await drain(client, accountId);
    await eventually(async () => expect((await client.getBalance({ accountId })).balance).toBe('9.99936'));
    await eventually(async () => {
      const consumed = await sql<{ count: string }>`select count(*)::text as count from journal_entries where request_id = ${requestId}`.execute(harness.db);
      expect(consumed.rows[0]!.count).toBe('1');
    });
    expect((await reservation(requestId)).close_reason).toBe('expired');
    expect(await client.getBalance({ accountId })).toEqual({ balance: '9.99936', available: '9.99936', reserved: '0' });
  });

  it('gives back an expired reservation the sweeper has not reached when that is what a refusal would hinge on', async () => {
    const { client } = await harness.start({ reservationLifetimeMs: 200, sweepIntervalMs: 600_000 });
    const accountId = await fundedAccount(client, '0.05');
    const first = uniqueName('req');
    await admitPaid(client, accountId, first);
    await eventually(async () => expect((await reservation(first)).expires_at.getTime()).toBeLessThan(Date.now() - 50));
    const second = uniqueName('req');
    expect((await admitPaid(client, accountId, second)).reservedCredits).toBe('0.05');
    expect((await reservation(first)).close_reason).toBe('expired');
    expect((await reservation(second)).closed_at).toBeNull();
    expect(await client.getBalance({ accountId })).toEqual({ balance: '0.05', available: '0', reserved: '0.05' });
    const keyRow = await harness.db.selectFrom('key_totals').select('reserved_pico').where('key_id', '=', 'key_a').executeTakeFirstOrThrow();
    expect(keyRow.reserved_pico).toBe(50_000_000_000n);
  });

  it('lets a charge take the balance below zero and keeps unreadable events aside', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client, '0.05');
    const requestId = uniqueName('req');
    await admitPaid(client, accountId, requestId);
    await publish(harness, usageEvent({ requestId, accountId, usage: Usage.create({ outputTokens: 100_000 }) })); // 0.15 credits
    await harness.testBus.bus.publishDurable(subjects.usageEvents, new Uint8Array([0xff, 0xff, 0xff]), 'garbage-1');
    await publish(harness, usageEvent({ requestId: uniqueName('req'), accountId, prices: { perOutputToken: 'abc' } }));
    await publish(harness, usageEvent({ requestId: uniqueName('req'), accountId, usage: Usage.create({ outputTokens: 4_000_000_000 }), prices: { perOutputToken: '1000' } }));
    await eventually(async () => expect(await client.getBalance({ accountId })).toEqual({ balance: '-0.1', available: '-0.1', reserved: '0' }));
    await eventually(async () => expect(await harness.db.selectFrom('rejected_events').select(['msg_id', 'reason']).orderBy('msg_id').execute()).toHaveLength(3));
    expect((await client.verifyJournal({ accountId })).mismatches).toEqual([]);
  });
});
