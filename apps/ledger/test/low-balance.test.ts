import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GrpcStatus } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { Pricing, Usage } from '@gateway/proto';
import { uniqueName } from '@gateway/testing';
import { createLedgerHarness, drainUsage, publishUsage, rejection, usageEvent, type LedgerClient, type LedgerHarness } from './harness.js';

// The balance.low webhook event (issue 42 item 4): an account's low-balance threshold fires once when a
// charge takes the balance from at or above it to below it, decided by the row trigger on the balance in
// the settling transaction, however many settlements race on however many ledger replicas; it fires again
// only after the balance is back at or above it; an account without a threshold gets nothing.

let harness: LedgerHarness;
let ledgerA: LedgerClient;
let ledgerB: LedgerClient;

/** One input token at this price: the charge is exactly `credits`. */
const priced = (credits: string) => ({ prices: Pricing.create({ perInputToken: credits }), usage: Usage.create({ inputTokens: 1 }) });
const charge = (client: LedgerClient, accountId: string, credits: string) =>
  client.settleUsage({ events: [usageEvent({ requestId: uniqueName('req'), accountId, ...priced(credits) })] });
const topUp = (accountId: string, credits: string) => ledgerA.topUp({ accountId, credits, idempotencyKey: uniqueName('topup'), note: '' });

/** A funded account with an endpoint (disabled: the events are written, nothing is sent). */
async function watchedAccount(credits: string, threshold: string | null): Promise<string> {
  const accountId = uniqueName('acc');
  await topUp(accountId, credits);
  await ledgerA.createWebhookEndpoint({ accountId, url: 'https://203.0.114.7/low', eventTypes: ['balance.low'], enabled: false });
  if (threshold !== null) await ledgerA.setLowBalanceThreshold({ accountId, threshold });
  return accountId;
}

async function lowEvents(accountId: string) {
  return (await sql<{ data: { account_id: string; threshold: string; balance: string } }>`
    select data from ledger.webhook_events where account_id = ${accountId} and type = 'balance.low' order by id`.execute(harness.db)).rows.map((row) => row.data);
}

beforeAll(async () => {
  harness = await createLedgerHarness();
  // Two ledger replicas on one database, both consuming the usage stream, both serving SettleUsage.
  ({ client: ledgerA } = await harness.start());
  ({ client: ledgerB } = await harness.start());
}, 60_000);
afterAll(async () => { await harness?.close(); });

describe('low-balance threshold (balance.low)', () => {
  it('is set, read and cleared as decimal credits, refuses bad input, and each change is audited', async () => {
    const accountId = uniqueName('acc');
    // No balance row yet: the account reads as balance 0 without a threshold.
    expect((await ledgerA.getLowBalanceThreshold({ accountId })).lowBalance).toEqual({ accountId, threshold: '', balance: '0', below: false });
    expect((await ledgerA.setLowBalanceThreshold({ accountId, threshold: '5.50' })).lowBalance).toEqual({ accountId, threshold: '5.5', balance: '0', below: true });
    await topUp(accountId, '10');
    expect((await ledgerB.getLowBalanceThreshold({ accountId })).lowBalance).toEqual({ accountId, threshold: '5.5', balance: '10', below: false });
    for (const bad of ['-1', 'ten', '1.0000000000001', '1000000.000000000001', '123456789012345678901234567890', '1e3', '0x10']) {
      const refused = await rejection(ledgerA.setLowBalanceThreshold({ accountId, threshold: bad }));
      expect(refused.status, bad).toBe(GrpcStatus.INVALID_ARGUMENT);
      expect(refused.detail.param, bad).toBe('threshold');
    }
    expect((await rejection(ledgerA.setLowBalanceThreshold({ accountId: '', threshold: '1' }))).status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect((await ledgerA.getLowBalanceThreshold({ accountId })).lowBalance?.threshold).toBe('5.5');
    expect((await ledgerA.setLowBalanceThreshold({ accountId, threshold: '' })).lowBalance).toEqual({ accountId, threshold: '', balance: '10', below: false });
    // Clearing what is already clear changes nothing and records nothing.
    await ledgerA.setLowBalanceThreshold({ accountId, threshold: '' });
    const audit = (await ledgerA.listLedgerAuditEntries({ accountId, limit: 10, cursor: '' })).entries;
    expect(audit.map((entry) => entry.action)).toEqual(['low_balance.clear', 'credits.top_up', 'low_balance.set']);
    // Another account's threshold is its own.
    expect((await ledgerA.getLowBalanceThreshold({ accountId: uniqueName('acc') })).lowBalance?.threshold).toBe('');
  });

  it('fires once when a charge takes the balance below it, with the threshold, the balance and the account', async () => {
    const accountId = await watchedAccount('10', '5');
    await charge(ledgerA, accountId, '4');
    expect(await lowEvents(accountId)).toEqual([]);
    await charge(ledgerB, accountId, '2');
    await charge(ledgerA, accountId, '1');
    await charge(ledgerB, accountId, '5');
    expect(await lowEvents(accountId)).toEqual([{ account_id: accountId, threshold: '5', balance: '4' }]);
    expect((await ledgerA.getLowBalanceThreshold({ accountId })).lowBalance).toMatchObject({ balance: '-2', below: true });
  });

  it('fires one event when 50 settlements on two replicas cross it at once', async () => {
    const accountId = await watchedAccount('10', '5');
    const settles = Array.from({ length: 50 }, (_, index) => charge(index % 2 === 0 ? ledgerA : ledgerB, accountId, '0.2'));
    expect((await Promise.all(settles)).reduce((total, answer) => total + answer.charged, 0)).toBe(50);
    const events = await lowEvents(accountId);
    expect(events).toHaveLength(1);
    // Recorded with the balance the crossing charge left: below the threshold by less than one charge.
    expect(events[0]!.balance).toBe('4.8');
    expect((await ledgerA.getBalance({ accountId })).balance).toBe('0');
  });

  it('re-arms only at or above the threshold: above, below, a top-up still below, a top-up above, below again fires twice', async () => {
    const accountId = await watchedAccount('10', '5');
    await charge(ledgerA, accountId, '6');
    await topUp(accountId, '0.5');
    await charge(ledgerB, accountId, '0.1');
    expect(await lowEvents(accountId)).toHaveLength(1);
    // Back to exactly the threshold (not below it): re-armed; the next charge crosses again, this time
    // through the settlement stream (the consumer's batch) instead of SettleUsage.
    await topUp(accountId, '0.6');
    expect((await ledgerA.getBalance({ accountId })).balance).toBe('5');
    await publishUsage(harness, usageEvent({ requestId: uniqueName('req'), accountId, ...priced('0.25') }));
    await drainUsage(harness, accountId);
    expect(await lowEvents(accountId)).toEqual([
      { account_id: accountId, threshold: '5', balance: '4' },
      { account_id: accountId, threshold: '5', balance: '4.75' },
    ]);
  });

  it('writes nothing for an account without a threshold, one whose threshold was cleared, or one without an endpoint', async () => {
    const without = await watchedAccount('1', null);
    const cleared = await watchedAccount('1', '0.5');
    await ledgerA.setLowBalanceThreshold({ accountId: cleared, threshold: '' });
    const unwatched = uniqueName('acc');
    await topUp(unwatched, '1');
    await ledgerA.setLowBalanceThreshold({ accountId: unwatched, threshold: '0.5' });
    for (const accountId of [without, cleared, unwatched]) await charge(ledgerA, accountId, '2');
    for (const accountId of [without, cleared, unwatched]) expect(await lowEvents(accountId)).toEqual([]);
    // Setting a threshold above the balance is no crossing: nothing fires until the balance is back above it.
    const late = await watchedAccount('1', null);
    await ledgerA.setLowBalanceThreshold({ accountId: late, threshold: '5' });
    await charge(ledgerA, late, '0.5');
    expect(await lowEvents(late)).toEqual([]);
  });
});
