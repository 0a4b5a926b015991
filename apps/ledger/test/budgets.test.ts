import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatCredits, GrpcStatus, parseCredits } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { ErrorReason, Pricing, Usage } from '@gateway/proto';
import { uniqueName } from '@gateway/testing';
import { createLedgerHarness, drainUsage, publishUsage, rejection, usageEvent, type LedgerClient, type LedgerHarness } from './harness.js';

// Budgets (issue 42 item 3): thresholds fire once per period per scope, decided in the settlement
// transaction that crosses them, however many settlements race on however many ledger replicas; a new
// period fires them again; a hard stop refuses (BUDGET_EXCEEDED) what would pass the limit, for
// admissions and lease grants alike, and spend + holds never pass it.

let harness: LedgerHarness;
let ledgerA: LedgerClient;
let ledgerB: LedgerClient;
let clock = Date.parse('2026-03-10T12:00:00.000Z');

/** One input token at this price: the charge is exactly `credits`. */
const priced = (credits: string) => ({ prices: Pricing.create({ perInputToken: credits }), usage: Usage.create({ inputTokens: 1 }) });

async function fundedAccount(credits = '100'): Promise<string> {
  const accountId = uniqueName('acc');
  await ledgerA.topUp({ accountId, credits, idempotencyKey: uniqueName('topup'), note: '' });
  return accountId;
}

async function alertsOf(accountId: string) {
  return (await sql<{ key_id: string; period_start: string; threshold_percent: number; spent_pico: string; limit_pico: string }>`
    select key_id, period_start::text, threshold_percent, spent_pico::text, limit_pico::text from ledger.budget_alerts
    where account_id = ${accountId} order by key_id, period_start, threshold_percent`.execute(harness.db)).rows;
}

beforeAll(async () => {
  harness = await createLedgerHarness();
  // Two ledger replicas on one database, both consuming the usage stream, both serving SettleUsage.
  ({ client: ledgerA } = await harness.start({ now: () => clock }));
  ({ client: ledgerB } = await harness.start({ now: () => clock }));
}, 60_000);
afterAll(async () => { await harness?.close(); });

describe('budgets', () => {
  it('validates what it stores and lists each budget with its period\'s spend', async () => {
    const accountId = await fundedAccount();
    const set = await ledgerA.setBudget({ accountId, keyId: '', period: 'monthly', limit: '2.5', thresholds: [80, 50, 80, 100], hardStop: false });
    expect(set.budget).toMatchObject({ accountId, keyId: '', period: 'monthly', limit: '2.5', thresholds: [50, 80, 100], hardStop: false, spent: '0', periodStart: '2026-03-01', firedThresholds: [] });
    for (const bad of [
      { period: 'hourly', limit: '1', thresholds: [50] },
      { period: 'daily', limit: '0', thresholds: [50] },
      { period: 'daily', limit: '-1', thresholds: [50] },
      { period: 'daily', limit: 'ten', thresholds: [50] },
      { period: 'daily', limit: '1000000.000000000001', thresholds: [50] },
      { period: 'daily', limit: '1', thresholds: [0] },
      { period: 'daily', limit: '1', thresholds: [101] },
      { period: 'daily', limit: '1', thresholds: Array.from({ length: 11 }, (_, index) => index + 1) },
    ]) {
      const refused = await rejection(ledgerA.setBudget({ accountId, keyId: '', hardStop: false, ...bad }));
      expect(refused.status, JSON.stringify(bad)).toBe(GrpcStatus.INVALID_ARGUMENT);
    }
    expect((await ledgerA.listBudgets({ accountId })).budgets.map((budget) => budget.limit)).toEqual(['2.5']);
    expect((await rejection(ledgerA.deleteBudget({ accountId, keyId: 'key_none' }))).status).toBe(GrpcStatus.NOT_FOUND);
    expect(await ledgerA.deleteBudget({ accountId, keyId: '' })).toEqual({ deleted: true });
    expect((await ledgerA.listBudgets({ accountId })).budgets).toEqual([]);
  });

  it('fires 50, 80 and 100 % exactly once when 50 settlements on two replicas cross them at once', async () => {
    const accountId = await fundedAccount();
    const keyId = uniqueName('key');
    await ledgerA.setBudget({ accountId, keyId: '', period: 'monthly', limit: '1', thresholds: [50, 80, 100], hardStop: false });
    await ledgerB.setBudget({ accountId, keyId, period: 'daily', limit: '0.5', thresholds: [80], hardStop: false });
    // 50 charges of 0.02: the account reaches 1 credit (100 %), the key's day 0.5 × 2.
    const settles = Array.from({ length: 50 }, (_, index) => {
      const event = usageEvent({ requestId: uniqueName('req'), accountId, keyId, occurredAtMs: BigInt(clock), ...priced('0.02') });
      return (index % 2 === 0 ? ledgerA : ledgerB).settleUsage({ events: [event] });
    });
    expect((await Promise.all(settles)).reduce((total, answer) => total + answer.charged, 0)).toBe(50);
    const alerts = await alertsOf(accountId);
    expect(alerts.map((alert) => `${alert.key_id || 'account'}:${alert.threshold_percent}`)).toEqual(['account:50', 'account:80', 'account:100', `${keyId}:80`]);
    for (const alert of alerts) {
      // Recorded with the spend that crossed it: at or past the threshold.
      expect(BigInt(alert.spent_pico) * 100n >= BigInt(alert.limit_pico) * BigInt(alert.threshold_percent)).toBe(true);
      expect(alert.period_start).toBe(alert.key_id === '' ? '2026-03-01' : '2026-03-10');
    }
    const listed = await ledgerA.listBudgets({ accountId });
    expect(listed.budgets.find((budget) => budget.keyId === '')).toMatchObject({ spent: '1', firedThresholds: [50, 80, 100] });
    expect(listed.budgets.find((budget) => budget.keyId === keyId)).toMatchObject({ spent: '1', firedThresholds: [80] });
    expect(listed.alerts.map((alert) => alert.deliveryState)).toEqual(['pending', 'pending', 'pending', 'pending']);

    // More spend in the same period fires nothing more, through the bus as well.
    for (let index = 0; index < 5; index++) {
      await publishUsage(harness, usageEvent({ requestId: uniqueName('req'), accountId, keyId, occurredAtMs: BigInt(clock), ...priced('0.1') }));
    }
    await drainUsage(harness, accountId);
    expect(await alertsOf(accountId)).toHaveLength(4);
  });

  it('fires again in a new period: the next UTC day for a daily budget, the next month for a monthly one', async () => {
    const accountId = await fundedAccount();
    const keyId = uniqueName('key');
    await ledgerA.setBudget({ accountId, keyId, period: 'daily', limit: '1', thresholds: [50], hardStop: false });
    await ledgerA.setBudget({ accountId, keyId: '', period: 'monthly', limit: '1', thresholds: [50], hardStop: false });
    const spend = (at: string) => ledgerA.settleUsage({ events: [usageEvent({ requestId: uniqueName('req'), accountId, keyId, occurredAtMs: BigInt(Date.parse(at)), ...priced('0.6') })] });
    await spend('2026-03-31T23:59:59.999Z');
    await spend('2026-04-01T00:00:00.000Z');
    await spend('2026-04-01T10:00:00.000Z');
    expect((await alertsOf(accountId)).map((alert) => `${alert.key_id === '' ? 'account' : 'key'}:${alert.period_start}`))
      .toEqual(['account:2026-03-01', 'account:2026-04-01', 'key:2026-03-31', 'key:2026-04-01']);
  });

  it('one settlement of budget-less and budgeted accounts fires the budgeted one\'s thresholds; spend without a budget still counts toward a later one', async () => {
    // The alert query runs only when one of the batch's accounts has a budget (migration 0025): a batch
    // led by accounts without one must still fire for the one that has, and the spend days of an account
    // without a budget are kept, so a budget made later starts from the period's spend so far.
    const [plainA, budgeted, plainB] = [await fundedAccount(), await fundedAccount(), await fundedAccount()];
    const keyId = uniqueName('key');
    await ledgerA.setBudget({ accountId: budgeted, keyId, period: 'monthly', limit: '1', thresholds: [50, 90], hardStop: false });
    const event = (accountId: string, credits: string) =>
      usageEvent({ requestId: uniqueName('req'), accountId, keyId: accountId === budgeted ? keyId : uniqueName('key'), occurredAtMs: BigInt(clock), ...priced(credits) });
    const answer = await ledgerB.settleUsage({ events: [event(plainA, '0.7'), event(plainA, '0.1'), event(budgeted, '0.6'), event(plainB, '0.3')] });
    expect(answer.charged).toBe(4);
    expect((await alertsOf(budgeted)).map((alert) => `${alert.key_id === keyId ? 'key' : alert.key_id}:${alert.threshold_percent}`)).toEqual(['key:50']);
    expect(await alertsOf(plainA)).toEqual([]);
    const later = await ledgerA.setBudget({ accountId: plainA, keyId: '', period: 'monthly', limit: '1', thresholds: [90], hardStop: false });
    expect(later.budget).toMatchObject({ spent: '0.8', firedThresholds: [] });
    await ledgerA.settleUsage({ events: [event(plainA, '0.1')] });
    expect((await alertsOf(plainA)).map((alert) => `${alert.key_id || 'account'}:${alert.threshold_percent}:${formatCredits(BigInt(alert.spent_pico))}`)).toEqual(['account:90:0.9']);
  });

  it('hard stop: Admit refuses with BUDGET_EXCEEDED naming the budget once spend + holds would pass it, never above it', async () => {
    const accountId = await fundedAccount();
    const keyId = uniqueName('key');
    await ledgerA.setBudget({ accountId, keyId: '', period: 'weekly', limit: '0.2', thresholds: [100], hardStop: true });
    const admit = (client: LedgerClient) => client.admit({
      context: { requestId: uniqueName('req'), accountId, keyId }, modelId: 'm', paid: true, tier: '', limitGroup: '',
    });
    // 12 concurrent admissions of 0.05 on two replicas: exactly 4 fit in 0.2.
    const answers = await Promise.allSettled(Array.from({ length: 12 }, (_, index) => admit(index % 2 === 0 ? ledgerA : ledgerB)));
    expect(answers.filter((answer) => answer.status === 'fulfilled')).toHaveLength(4);
    const refusal = (answers.find((answer) => answer.status === 'rejected') as PromiseRejectedResult).reason;
    expect(refusal.reason).toBe(ErrorReason.ERROR_REASON_BUDGET_EXCEEDED);
    expect(refusal.message).toMatch(/account's weekly budget of 0.2 credits/);
    // Lease grants are bounded by the same room: none is left.
    const lease = await rejection(ledgerB.acquireLease({ accountId, keyId, holder: 'edge-b', requestedCredits: '1', limitGroup: '', requestedRequests: 0, recallIfHeld: false }));
    expect(lease.reason).toBe(ErrorReason.ERROR_REASON_BUDGET_EXCEEDED);
    const balance = await ledgerA.getBalance({ accountId });
    expect(parseCredits(balance.reserved)).toBe(parseCredits('0.2'));
  });

  it('hard stop on a key: a lease is granted at most the room left, and a spent budget refuses until its next period', async () => {
    const accountId = await fundedAccount();
    const keyId = uniqueName('key');
    await ledgerA.setBudget({ accountId, keyId, period: 'daily', limit: '0.3', thresholds: [], hardStop: true });
    await ledgerA.settleUsage({ events: [usageEvent({ requestId: uniqueName('req'), accountId, keyId, occurredAtMs: BigInt(clock), ...priced('0.12') })] });
    const acquire = (client: LedgerClient) => client.acquireLease({ accountId, keyId, holder: 'edge', requestedCredits: '1', limitGroup: '', requestedRequests: 0, recallIfHeld: false });
    const granted = await acquire(ledgerA);
    expect(granted.grantedCredits).toBe('0.18');
    expect((await rejection(acquire(ledgerB))).reason).toBe(ErrorReason.ERROR_REASON_BUDGET_EXCEEDED);
    // Another key of the account is not bound by this key's budget.
    const other = await ledgerB.acquireLease({ accountId, keyId: uniqueName('key'), holder: 'edge', requestedCredits: '1', limitGroup: '', requestedRequests: 0, recallIfHeld: false });
    expect(parseCredits(other.grantedCredits)).toBeGreaterThan(parseCredits('0.3'));
    // The lease settles its spend (0.18) and is returned: the day is spent to the pico, nothing more fits.
    await ledgerA.settleUsage({ events: [usageEvent({ requestId: uniqueName('req'), accountId, keyId, occurredAtMs: BigInt(clock), leaseId: granted.leaseId, ...priced('0.18') })] });
    await ledgerA.returnLease({ leaseId: granted.leaseId, unusedRequests: 0 });
    expect((await rejection(acquire(ledgerA))).reason).toBe(ErrorReason.ERROR_REASON_BUDGET_EXCEEDED);
    const budget = (await ledgerA.listBudgets({ accountId })).budgets[0]!;
    expect(budget.spent).toBe('0.3');
    // The next UTC day is a new period.
    const saved = clock;
    clock = Date.parse('2026-03-11T00:00:00.000Z');
    try {
      expect(parseCredits((await acquire(ledgerB)).grantedCredits)).toBe(parseCredits('0.3'));
    } finally {
      clock = saved;
    }
    expect(formatCredits(parseCredits(budget.limit))).toBe('0.3');
  });
});
