import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GrpcStatus } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import type { UsageEvent } from '@gateway/proto';
import { uniqueName } from '@gateway/testing';
import { createLedgerHarness, drainUsage, publishUsage, usageEvent, type LedgerClient, type LedgerHarness } from './harness.js';

// Issue 36's 10-minute chaos run: a whole answer streamed inside the first checkpoint delay, its usage
// publish not yet acknowledged when its routing replica was SIGKILLed, was never charged. The edge keeps
// the event routing handed it until the stream's end confirms it stored, and otherwise settles it here
// (LedgerService.SettleUsage): the bus's settlement, once per request id.

// The harness's CHAT_PRICES: 600 uncached input × 500,000 + 400 cached × 100,000 + 200 output × 1,500,000 pico.
const AFTER_ONE_CHARGE = '0.99936';

let harness: LedgerHarness;
beforeEach(async () => { harness = await createLedgerHarness(); });
afterEach(async () => { await harness?.close(); });

async function fundedAccount(client: LedgerClient): Promise<string> {
  const accountId = uniqueName('acc');
  await client.topUp({ accountId, credits: '1', idempotencyKey: uniqueName('topup'), note: '' });
  return accountId;
}

const publish = (event: UsageEvent, msgId = event.requestId) => publishUsage(harness, event, msgId);
const drain = (accountId: string) => drainUsage(harness, accountId);

async function chargeCount(requestId: string): Promise<number> {
  const result = await sql<{ count: string }>`select count(*)::text as count from journal_entries where kind = 'charge' and request_id = ${requestId}`.execute(harness.db);
  return Number(result.rows[0]!.count);
}

describe('SettleUsage: an edge settles the usage event a broken router stream handed it', () => {
  it('charges an event the bus never carried, once, with its generation record', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const requestId = uniqueName('req');
    expect(await client.settleUsage({ events: [usageEvent({ requestId, accountId })] })).toEqual({ charged: 1, duplicates: 0 });
    expect((await client.getBalance({ accountId })).balance).toBe(AFTER_ONE_CHARGE);
    // A repeat, and the same event arriving later from the bus (routing's outbox replayed after its restart): nothing more.
    expect(await client.settleUsage({ events: [usageEvent({ requestId, accountId })] })).toEqual({ charged: 0, duplicates: 1 });
    await publish(usageEvent({ requestId, accountId }), `${requestId}-replayed`);
    await drain(accountId);
    expect((await client.getBalance({ accountId })).balance).toBe(AFTER_ONE_CHARGE);
    expect(await chargeCount(requestId)).toBe(1);
    expect((await client.getGeneration({ accountId, requestId })).generation?.requestId).toBe(requestId);
    expect((await client.verifyJournal({ accountId })).mismatches).toEqual([]);
  });

  it('changes nothing for an event the bus settled first', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const requestId = uniqueName('req');
    await publish(usageEvent({ requestId, accountId }));
    await drain(accountId);
    expect(await client.settleUsage({ events: [usageEvent({ requestId, accountId })] })).toEqual({ charged: 0, duplicates: 1 });
    expect((await client.getBalance({ accountId })).balance).toBe(AFTER_ONE_CHARGE);
    expect(await chargeCount(requestId)).toBe(1);
  });

  it("does not apply a voided request's event", async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const requestId = uniqueName('req');
    await client.voidCharge({ context: { requestId, accountId, keyId: 'key_a' } });
    expect((await client.settleUsage({ events: [usageEvent({ requestId, accountId })] })).charged).toBe(0);
    expect((await client.getBalance({ accountId })).balance).toBe('1');
  });

  it('refuses what can never settle, and more than 1,000 events, charging nothing of the call', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const good = usageEvent({ requestId: uniqueName('req'), accountId });
    const refused = await client.settleUsage({ events: [good, usageEvent({ requestId: uniqueName('req'), accountId: '' })] }).then(() => undefined, (error: { status: number }) => error);
    expect(refused?.status).toBe(GrpcStatus.INVALID_ARGUMENT);
    const tooMany = await client.settleUsage({ events: Array.from({ length: 1_001 }, () => good) }).then(() => undefined, (error: { status: number }) => error);
    expect(tooMany?.status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect((await client.getBalance({ accountId })).balance).toBe('1');
  });
});
