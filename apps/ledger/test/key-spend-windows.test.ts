import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatCredits, GrpcStatus, parseCredits, subjects } from '@gateway/platform';
import { ErrorReason, Pricing, Usage, UsageEvent } from '@gateway/proto';
import { eventually, uniqueName } from '@gateway/testing';
import { createLedgerHarness, rejection, usageEvent, type LedgerClient, type LedgerHarness } from './harness.js';

// Keys that reset (limit_reset): a key's credit limit over its spend in the current UTC day, ISO week
// (from Monday) or month. Charges count in the window of their own time (occurred_at); the ledger's
// injected clock picks the current window. 2026-03-01 is a Sunday: the midnight before it ends a month
// but not a week, the midnight after it ends a week but not a month.

let harness: LedgerHarness;
let client: LedgerClient;
let clock = Date.parse('2026-03-01T12:00:00.000Z');

/** One input token at this price: the charge is exactly the price (picos included). */
const charge = (credits: string) => ({ prices: Pricing.create({ perInputToken: credits }), usage: Usage.create({ inputTokens: 1 }) });

async function settle(accountId: string, keyId: string, credits: string, at: string, requestId = uniqueName('req')): Promise<string> {
  const event = usageEvent({ requestId, accountId, keyId, occurredAtMs: BigInt(Date.parse(at)), ...charge(credits) });
  await harness.testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(event).finish(), requestId);
  return requestId;
}

async function usageOf(accountId: string, keyId: string) {
  const answer = await client.getKeyUsage({ accountId, keyIds: [keyId] });
  return answer.usage[0]!;
}

const sum = (...credits: string[]) => formatCredits(credits.reduce((total, value) => total + parseCredits(value), 0n));

beforeAll(async () => {
  harness = await createLedgerHarness();
  ({ client } = await harness.start({ now: () => clock }));
});
afterAll(async () => { await harness?.close(); });

describe('key spend windows', () => {
  it('counts each charge in the UTC day, week and month of its time, to the pico, on both sides of midnight', async () => {
    const accountId = uniqueName('acc');
    const keyId = uniqueName('key');
    const F = '0.000000000001'; // Sunday 2026-02-22, the week before
    const E = '0.100000000003'; // Monday 2026-02-23, first instant of the week
    const A = '0.200000000005'; // the last millisecond of February
    const B = '0.300000000007'; // the first millisecond of March
    const C = '0.400000000011'; // the last millisecond of Sunday 2026-03-01
    const D = '0.500000000013'; // Monday 2026-03-02, first instant of the next week
    await settle(accountId, keyId, F, '2026-02-22T23:59:59.999Z');
    await settle(accountId, keyId, E, '2026-02-23T00:00:00.000Z');
    const late = await settle(accountId, keyId, A, '2026-02-28T23:59:59.999Z');
    await settle(accountId, keyId, B, '2026-03-01T00:00:00.000Z');
    await settle(accountId, keyId, C, '2026-03-01T23:59:59.999Z');
    await settle(accountId, keyId, D, '2026-03-02T00:00:00.000Z');
    // A redelivered event (another msg-id, same request) is charged once, so counted once.
    await settle(accountId, keyId, A, '2026-02-28T23:59:59.999Z', late);
    await eventually(async () => expect((await usageOf(accountId, keyId)).credits).toBe(sum(A, B, C, D, E, F)), 10_000);

    clock = Date.parse('2026-02-28T23:59:59.999Z');
    expect(await usageOf(accountId, keyId)).toMatchObject({ creditsDaily: A, creditsWeekly: sum(E, A), creditsMonthly: sum(F, E, A) });
    clock = Date.parse('2026-03-01T00:00:00.000Z');
    expect(await usageOf(accountId, keyId)).toMatchObject({ creditsDaily: sum(B, C), creditsWeekly: sum(E, A, B, C), creditsMonthly: sum(B, C) });
    clock = Date.parse('2026-03-01T23:59:59.999Z');
    expect(await usageOf(accountId, keyId)).toMatchObject({ creditsDaily: sum(B, C), creditsWeekly: sum(E, A, B, C), creditsMonthly: sum(B, C) });
    clock = Date.parse('2026-03-02T00:00:00.000Z');
    expect(await usageOf(accountId, keyId)).toMatchObject({ creditsDaily: D, creditsWeekly: D, creditsMonthly: sum(B, C, D) });
    // Another account asking for this key id sees nothing of it.
    expect(await usageOf(uniqueName('acc'), keyId)).toMatchObject({ credits: '0', creditsDaily: '0', creditsWeekly: '0', creditsMonthly: '0' });
  });

  it('Admit: a daily limit refuses once the day\'s spend leaves no room for the hold, and admits again from midnight; a monthly one does not reset then', async () => {
    const accountId = uniqueName('acc');
    await client.topUp({ accountId, credits: '10', idempotencyKey: uniqueName('topup'), note: '' });
    const daily = uniqueName('key');
    const monthly = uniqueName('key');
    clock = Date.parse('2026-03-01T23:59:59.000Z');
    await settle(accountId, daily, '0.950000000001', '2026-03-01T23:59:58.000Z');
    await settle(accountId, monthly, '0.950000000001', '2026-03-01T23:59:58.000Z');
    await eventually(async () => expect((await usageOf(accountId, monthly)).credits).toBe('0.950000000001'), 10_000);
    const admit = (keyId: string, keyLimitReset: string) => client.admit({
      context: { requestId: uniqueName('req'), accountId, keyId }, modelId: 'm', paid: true, tier: '', limitGroup: '',
      keyCreditLimit: '1', keyLimitReset,
    });

    for (const [keyId, reset] of [[daily, 'daily'], [monthly, 'monthly']] as const) {
      const refused = await rejection(admit(keyId, reset));
      expect({ status: refused.status, reason: refused.reason })
        .toEqual({ status: GrpcStatus.FAILED_PRECONDITION, reason: ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED });
    }
    clock = Date.parse('2026-03-02T00:00:00.000Z');
    expect((await admit(daily, 'daily')).reservedCredits).toBe('0.05');
    expect((await rejection(admit(monthly, 'monthly'))).reason).toBe(ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED);
    // The same key with a lifetime limit (no reset) stays refused: its lifetime spend is what counts.
    expect((await rejection(admit(daily, ''))).reason).toBe(ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED);
  });

  it('AcquireLease: grants within the window\'s room (limit − window spend − open holds), refuses before midnight, grants after', async () => {
    const accountId = uniqueName('acc');
    await client.topUp({ accountId, credits: '10', idempotencyKey: uniqueName('topup'), note: '' });
    const keyId = uniqueName('key');
    clock = Date.parse('2026-03-01T23:59:59.000Z');
    await settle(accountId, keyId, '0.97', '2026-03-01T10:00:00.000Z');
    await eventually(async () => expect((await usageOf(accountId, keyId)).creditsDaily).toBe('0.97'), 10_000);
    const acquire = () => client.acquireLease({
      accountId, keyId, holder: 'test', requestedCredits: '5', keyCreditLimit: '1', keyLimitReset: 'daily',
      limitGroup: '', requestedRequests: 0, recallIfHeld: false,
    });
    expect((await rejection(acquire())).reason).toBe(ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED);
    clock = Date.parse('2026-03-02T00:00:00.000Z');
    const first = await acquire();
    // The balance would allow more (10 − 0.97 available, halved for a small balance: 4.5); the day's room is 1.
    expect(first.grantedCredits).toBe('1');
    // The first lease holds the whole day's room: a second is refused until it is returned.
    expect((await rejection(acquire())).reason).toBe(ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED);
    await client.returnLease({ leaseId: first.leaseId, unusedRequests: 0 });
    expect((await acquire()).grantedCredits).toBe('1');
  });

  it('refuses an unknown key_limit_reset', async () => {
    const refused = await rejection(client.admit({
      context: { requestId: uniqueName('req'), accountId: uniqueName('acc'), keyId: 'k' }, modelId: 'm', paid: true, tier: '', limitGroup: '',
      keyCreditLimit: '1', keyLimitReset: 'hourly',
    }));
    expect({ status: refused.status, param: refused.param }).toEqual({ status: GrpcStatus.INVALID_ARGUMENT, param: 'key_limit_reset' });
  });
});
