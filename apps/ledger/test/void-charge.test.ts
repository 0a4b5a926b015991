import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { VoidOutcome, type UsageEvent } from '@gateway/proto';
import { uniqueName } from '@gateway/testing';
import { createLedgerHarness, drainUsage, publishUsage, usageEvent, type LedgerClient, type LedgerHarness } from './harness.js';

// Issue 36's chaos test: a routing replica killed after it stored a non-streamed answer's usage and before
// the answer reached the edge left the caller with a 503 — and a charge. The edge voids such a request
// (LedgerService.VoidCharge): before its charge settles the charge is never applied; after, it is refunded.

// 600 uncached input × 500,000 + 400 cached × 100,000 + 200 output × 1,500,000 pico (the harness's CHAT_PRICES)
const CHAT_COST = '0.00064';

let harness: LedgerHarness;
beforeEach(async () => { harness = await createLedgerHarness(); });
afterEach(async () => { await harness?.close(); });

async function fundedAccount(client: LedgerClient, credits = '1'): Promise<string> {
  const accountId = uniqueName('acc');
  await client.topUp({ accountId, credits, idempotencyKey: uniqueName('topup'), note: '' });
  return accountId;
}

const publish = (event: UsageEvent, msgId = event.requestId) => publishUsage(harness, event, msgId);
const drain = (accountId: string) => drainUsage(harness, accountId);

const voidCharge = (client: LedgerClient, requestId: string, accountId: string) =>
  client.voidCharge({ context: { requestId, accountId, keyId: 'key_a' } });

async function keySpent(keyId: string): Promise<bigint> {
  const row = await harness.db.selectFrom('key_totals').select('spent_pico').where('key_id', '=', keyId).executeTakeFirst();
  return BigInt(row?.spent_pico ?? 0n);
}

describe('VoidCharge: no charge stands for an answer that reached nobody', () => {
  it('before the charge settles: the charge arriving later is not applied, and a repeat changes nothing', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const requestId = uniqueName('req');
    expect(await voidCharge(client, requestId, accountId)).toEqual({ outcome: VoidOutcome.VOID_OUTCOME_VOIDED, refundedCredits: '0' });
    await publish(usageEvent({ requestId, accountId }));
    await drain(accountId);
    expect((await client.getBalance({ accountId })).balance).toBe('1');
    expect(await voidCharge(client, requestId, accountId)).toEqual({ outcome: VoidOutcome.VOID_OUTCOME_ALREADY_VOID, refundedCredits: '0' });
    expect((await client.verifyJournal({ accountId })).mismatches).toEqual([]);
    // The void is no request of the account's: activity and generations leave it out.
    expect((await client.getActivity({ accountId, days: 1, keyId: "key_a" })).rows).toEqual([]);
  });

  it('after the charge settled: refunded exactly once, the key spent total too, the journal still balances', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const requestId = uniqueName('req');
    await publish(usageEvent({ requestId, accountId }));
    await drain(accountId);
    expect((await client.getBalance({ accountId })).balance).toBe('0.99936');
    const spentBefore = await keySpent('key_a');
    expect(await voidCharge(client, requestId, accountId)).toEqual({ outcome: VoidOutcome.VOID_OUTCOME_REFUNDED, refundedCredits: CHAT_COST });
    expect((await client.getBalance({ accountId })).balance).toBe('1');
    expect(spentBefore - (await keySpent('key_a'))).toBe(640_000_000n);
    expect(await voidCharge(client, requestId, accountId)).toEqual({ outcome: VoidOutcome.VOID_OUTCOME_ALREADY_VOID, refundedCredits: '0' });
    expect((await client.getBalance({ accountId })).balance).toBe('1');
    // Redelivery of the same usage after the refund: still one charge, one refund.
    await publish(usageEvent({ requestId, accountId }), `${requestId}-replayed`);
    await drain(accountId);
    expect((await client.getBalance({ accountId })).balance).toBe('1');
    expect((await client.verifyJournal({ accountId })).mismatches).toEqual([]);
  });

  it("voids nothing of another account's request", async () => {
    const { client } = await harness.start();
    const owner = await fundedAccount(client);
    const other = await fundedAccount(client);
    const requestId = uniqueName('req');
    await publish(usageEvent({ requestId, accountId: owner }));
    await drain(owner);
    expect(await voidCharge(client, requestId, other)).toEqual({ outcome: VoidOutcome.VOID_OUTCOME_NOT_OWNED, refundedCredits: '0' });
    expect((await client.getBalance({ accountId: owner })).balance).toBe('0.99936');
    expect((await client.getBalance({ accountId: other })).balance).toBe('1');
  });

  it('a void racing the settlement of its charge ends with the account charged nothing, every time', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const requestIds = Array.from({ length: 40 }, () => uniqueName('req'));
    const outcomes = await Promise.all(requestIds.map(async (requestId, index) => {
      // Half the voids start first, half after the publish: settlement batches and voids interleave.
      if (index % 2 === 0) {
        const voided = voidCharge(client, requestId, accountId);
        await publish(usageEvent({ requestId, accountId }));
        return (await voided).outcome;
      }
      await publish(usageEvent({ requestId, accountId }));
      return (await voidCharge(client, requestId, accountId)).outcome;
    }));
    await drain(accountId);
    expect(outcomes.every((outcome) => outcome === VoidOutcome.VOID_OUTCOME_VOIDED || outcome === VoidOutcome.VOID_OUTCOME_REFUNDED)).toBe(true);
    expect((await client.getBalance({ accountId })).balance).toBe('1');
    expect((await client.verifyJournal({ accountId })).mismatches).toEqual([]);
  });

  it('refuses a void without a request or an account', async () => {
    const { client } = await harness.start();
    await expect(client.voidCharge({ context: { requestId: '', accountId: 'acc', keyId: '' } })).rejects.toThrow(/request_id/);
    await expect(client.voidCharge({ context: { requestId: 'req', accountId: '', keyId: '' } })).rejects.toThrow(/account_id/);
  });
});
