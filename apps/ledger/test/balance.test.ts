import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayError, GrpcStatus, subjects } from '@gateway/platform';
import { ErrorReason, Usage, UsageEvent } from '@gateway/proto';
import { eventually, uniqueName } from '@gateway/testing';
import { createLedgerHarness, usageEvent, type LedgerClient, type LedgerHarness, rejection } from './harness.js';

let harness: LedgerHarness;
let client: LedgerClient;

beforeAll(async () => {
  harness = await createLedgerHarness();
  ({ client } = await harness.start());
});
afterAll(async () => { await harness?.close(); });

describe('TopUp and GetBalance', () => {
  it('adds credits once per idempotency key and refuses the same key with another amount', async () => {
    const accountId = uniqueName('acc');
    const key = uniqueName('topup');
    expect(await client.topUp({ accountId, credits: '12.5', idempotencyKey: key, note: 'first' })).toEqual({ balance: '12.5' });
    expect(await client.topUp({ accountId, credits: '12.5', idempotencyKey: key, note: 'retry' })).toEqual({ balance: '12.5' });
    const conflict = await rejection(client.topUp({ accountId, credits: '13', idempotencyKey: key, note: '' }));
    expect(conflict.status).toBe(GrpcStatus.ALREADY_EXISTS);
    expect(conflict.reason).toBe(ErrorReason.ERROR_REASON_CONFLICT);
    const otherAccount = await rejection(client.topUp({ accountId: uniqueName('acc'), credits: '12.5', idempotencyKey: key, note: '' }));
    expect(otherAccount.status).toBe(GrpcStatus.ALREADY_EXISTS);
    // Concurrent repeats of one key still add once.
    const concurrentKey = uniqueName('topup');
    await Promise.all(Array.from({ length: 20 }, () => client.topUp({ accountId, credits: '1', idempotencyKey: concurrentKey, note: '' })));
    expect((await client.getBalance({ accountId })).balance).toBe('13.5');
    expect((await client.verifyJournal({ accountId })).mismatches).toEqual([]);
  });

  it('keeps every one of 12 decimals exact in balance, available and reserved', async () => {
    const accountId = uniqueName('acc');
    await client.topUp({ accountId, credits: '0.123456789012', idempotencyKey: uniqueName('topup'), note: '' });
    await client.topUp({ accountId, credits: '999999.999999999999', idempotencyKey: uniqueName('topup'), note: '' });
    await client.admit({ context: { requestId: uniqueName('req'), accountId, keyId: 'k' }, modelId: 'm', paid: true, tier: '', limitGroup: '' });
    expect(await client.getBalance({ accountId })).toEqual({
      balance: '1000000.123456789011',
      available: '1000000.073456789011',
      reserved: '0.05',
    });
    expect(await client.getBalance({ accountId: uniqueName('acc') })).toEqual({ balance: '0', available: '0', reserved: '0' });
  });

  it.each([
    ['0', 'credits'], ['-1', 'credits'], ['abc', 'credits'], ['1.0000000000001', 'credits'], ['1000000.000000000001', 'credits'], ['1e3', 'credits'],
  ])('refuses credits %s', async (credits, param) => {
    const refused = await rejection(client.topUp({ accountId: uniqueName('acc'), credits, idempotencyKey: uniqueName('topup'), note: '' }));
    expect(refused.status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(refused.param).toBe(param);
  });

  it('requires an idempotency key', async () => {
    const refused = await rejection(client.topUp({ accountId: uniqueName('acc'), credits: '1', idempotencyKey: '', note: '' }));
    expect(refused.param).toBe('idempotency_key');
  });
});

describe('GetActivity and GetKeyUsage', () => {
  it('groups charges per UTC day × model × key and sums usage and credits', async () => {
    const accountId = uniqueName('acc');
    await client.topUp({ accountId, credits: '10', idempotencyKey: uniqueName('topup'), note: '' });
    const now = Date.now();
    const events = [
      usageEvent({ requestId: uniqueName('r'), accountId, keyId: 'k1', modelId: 'm1', usage: Usage.create({ inputTokens: 10, outputTokens: 1 }), occurredAtMs: BigInt(now) }),
      usageEvent({ requestId: uniqueName('r'), accountId, keyId: 'k1', modelId: 'm1', usage: Usage.create({ inputTokens: 20, outputTokens: 2, estimated: true }), occurredAtMs: BigInt(now) }),
      usageEvent({ requestId: uniqueName('r'), accountId, keyId: 'k2', modelId: 'm1', usage: Usage.create({ inputTokens: 5 }), occurredAtMs: BigInt(now) }),
      usageEvent({ requestId: uniqueName('r'), accountId, keyId: 'k1', modelId: 'm2', usage: Usage.create({ outputTokens: 7 }), occurredAtMs: BigInt(now - 2 * 86_400_000) }),
      usageEvent({ requestId: uniqueName('r'), accountId, keyId: 'k1', modelId: 'm1', usage: Usage.create({ outputTokens: 9 }), occurredAtMs: BigInt(now - 40 * 86_400_000) }),
    ];
    for (const event of events) await harness.testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(event).finish(), event.requestId);
    // The week and month of two days ago depend on today's date; the day does not.
    await eventually(async () => expect((await client.getKeyUsage({ accountId, keyIds: [] })).usage).toMatchObject([
      // k1: 30 × 500,000 + 3 × 1,500,000 + 7 × 1,500,000 + 9 × 1,500,000 = 43,500,000 pico; k2: 5 × 500,000
      // Today's: k1 30 × 500,000 + 3 × 1,500,000 = 19,500,000 pico.
      { keyId: 'k1', credits: '0.0000435', creditsDaily: '0.0000195' },
      { keyId: 'k2', credits: '0.0000025', creditsDaily: '0.0000025', creditsWeekly: '0.0000025', creditsMonthly: '0.0000025' },
    ]));
    const today = new Date(now).toISOString().slice(0, 10);
    const twoDaysAgo = new Date(now - 2 * 86_400_000).toISOString().slice(0, 10);
    const { rows } = await client.getActivity({ accountId, days: 3, keyId: '' });
    expect(rows.map((row) => ({ date: row.date, modelId: row.modelId, keyId: row.keyId, requests: row.requests, credits: row.credits,
      input: row.usage?.inputTokens, output: row.usage?.outputTokens, estimated: row.usage?.estimated }))).toEqual([
      { date: today, modelId: 'm1', keyId: 'k1', requests: 2, credits: '0.0000195', input: 30, output: 3, estimated: true },
      { date: today, modelId: 'm1', keyId: 'k2', requests: 1, credits: '0.0000025', input: 5, output: 0, estimated: false },
      { date: twoDaysAgo, modelId: 'm2', keyId: 'k1', requests: 1, credits: '0.0000105', input: 0, output: 7, estimated: false },
    ]);
    expect((await client.getActivity({ accountId, days: 1, keyId: 'k2' })).rows.map((row) => row.keyId)).toEqual(['k2']);
    expect((await client.getActivity({ accountId, days: 30, keyId: '' })).rows).toHaveLength(3);
  });

  it.each([0, 31])('refuses days = %i', async (days) => {
    const refused = await rejection(client.getActivity({ accountId: 'acc', days, keyId: '' }));
    expect(refused.status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(refused.param).toBe('days');
  });
});
