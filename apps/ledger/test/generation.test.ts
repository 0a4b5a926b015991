import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { formatCredits, subjects } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { Pricing, Usage, UsageEvent, UsageEventBatch, UsageOutcome } from '@gateway/proto';
import { eventually, uniqueName } from '@gateway/testing';
import { createLedgerHarness, fundedAccount, type LedgerHarness, usageEvent } from './harness.js';

// Generation records (GetGeneration) and zero-completion insurance, settled through the real consumer.

let harness: LedgerHarness;
beforeEach(async () => { harness = await createLedgerHarness(); });
afterEach(async () => { await harness?.close(); });

const PRICES = Pricing.create({
  perInputToken: '0.000003', perCachedInputToken: '0.0000003', perCacheWriteInputToken: '0.00000375', perOutputToken: '0.000015',
});

const publish = (event: UsageEvent) =>
  harness.testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(event).finish(), event.requestId);

async function closeReason(requestId: string) {
  return (await harness.db.selectFrom('reservations').select('close_reason').where('request_id', '=', requestId).executeTakeFirst())?.close_reason;
}

describe('generation records', () => {
  it('records every field with the charge, cost details adding up to the exact charge; other accounts and unsettled requests see none', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const requestId = uniqueName('req');
    await client.admit({ context: { requestId, accountId, keyId: 'key_a' }, modelId: 'acme/chat-small', paid: true, tier: '', limitGroup: '' });
    // Before the usage arrives: not found, still pending (the hold is open).
    expect(await client.getGeneration({ accountId, requestId })).toEqual({ found: false, pending: true, generation: undefined });

    const usage = Usage.create({ inputTokens: 1_000, cachedInputTokens: 300, cacheWriteTokens: 200, outputTokens: 150, reasoningTokens: 40 });
    // With the provider's own total (issue 35 item 6): kept on the record, never priced.
    const native = Usage.create({ inputTokens: 500, cachedInputTokens: 300, cacheWriteTokens: 200, outputTokens: 150, reasoningTokens: 40, providerTotalTokens: 1_150 });
    const occurredAtMs = BigInt(Date.now() - 5_000);
    await publish(usageEvent({
      requestId, accountId, usage, prices: PRICES, occurredAtMs, streamed: true, finishReason: 'length',
      latencyMs: 412, generationTimeMs: 1_873, cancelled: false, nativeUsage: native,
    }));
    await eventually(async () => expect(await closeReason(requestId)).toBe('settled'));

    // By hand, in pico: 500 plain × 3,000,000 + 300 cached × 300,000 + 200 written × 3,750,000
    //                   + 110 output × 15,000,000 + 40 reasoning × 15,000,000.
    const input = 1_500_000_000n, cacheRead = 90_000_000n, cacheWrite = 750_000_000n, output = 1_650_000_000n, reasoning = 600_000_000n;
    const total = input + cacheRead + cacheWrite + output + reasoning;
    const answer = await client.getGeneration({ accountId, requestId });
    expect(answer.found).toBe(true);
    expect(answer.generation).toEqual({
      requestId, keyId: 'key_a', modelId: 'acme/chat-small', providerId: 'acme-cloud', endpoint: 'chat.completions',
      streamed: true, cancelled: false, finishReason: 'length', latencyMs: 412, generationTimeMs: 1_873,
      usage: { ...usage, estimated: false },
      nativeUsage: native,
      cost: formatCredits(total),
      costDetails: {
        input: formatCredits(input), output: formatCredits(output), cacheRead: formatCredits(cacheRead),
        cacheWrite: formatCredits(cacheWrite), reasoning: formatCredits(reasoning),
      },
      insuredReason: '',
      createdAtMs: occurredAtMs,
    });
    expect(answer.generation!.cost).toBe('0.00459');
    // The record states what the ledger charged: the charge row and the balance moved by the same amount.
    const charge = await harness.db.selectFrom('charges').select('cost_pico').where('request_id', '=', requestId).executeTakeFirstOrThrow();
    expect(charge.cost_pico).toBe(total);
    expect((await client.getBalance({ accountId })).balance).toBe(formatCredits(10n * 10n ** 12n - total));

    // Another account asking for this id learns nothing: like an unknown id.
    const other = await fundedAccount(client);
    expect((await client.getGeneration({ accountId: other, requestId })).found).toBe(false);
    // A request whose reservation closed without a charge is final: not pending.
    const failed = uniqueName('req');
    await client.admit({ context: { requestId: failed, accountId, keyId: 'key_a' }, modelId: 'acme/chat-small', paid: true, tier: '', limitGroup: '' });
    await publish(usageEvent({ requestId: failed, accountId, outcome: UsageOutcome.USAGE_OUTCOME_FAILED, usage: Usage.create() }));
    await eventually(async () => expect(await closeReason(failed)).toBe('failed'));
    expect(await client.getGeneration({ accountId, requestId: failed })).toEqual({ found: false, pending: false, generation: undefined });
  });

  it('zero-completion insurance: no charge, the hold released, the record says why; a claim on delivered output is charged', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const insured = uniqueName('req');
    await client.admit({ context: { requestId: insured, accountId, keyId: 'key_a' }, modelId: 'acme/chat-small', paid: true, tier: '', limitGroup: '' });
    expect((await client.getBalance({ accountId })).available).toBe('9.95');
    await publish(usageEvent({
      requestId: insured, accountId, usage: Usage.create({ inputTokens: 1_000 }), prices: PRICES,
      insuredReason: 'no_output_no_finish_reason', finishReason: '',
    }));
    await eventually(async () => expect(await closeReason(insured)).toBe('settled'));
    expect(await client.getBalance({ accountId })).toEqual({ balance: '10', available: '10', reserved: '0' });
    const record = (await client.getGeneration({ accountId, requestId: insured })).generation!;
    expect(record.insuredReason).toBe('no_output_no_finish_reason');
    expect(record.cost).toBe('0');
    expect(record.costDetails).toEqual({ input: '0', output: '0', cacheRead: '0', cacheWrite: '0', reasoning: '0' });
    expect(record.usage!.inputTokens).toBe(1_000);

    // Money first: a producer claiming insurance for an answer with output tokens is charged as usual.
    const claimed = uniqueName('req');
    await publish(usageEvent({
      requestId: claimed, accountId, usage: Usage.create({ inputTokens: 1_000, outputTokens: 10 }), prices: PRICES,
      insuredReason: 'no_output_no_finish_reason',
    }));
    await eventually(async () => expect((await client.getGeneration({ accountId, requestId: claimed })).found).toBe(true));
    const charged = (await client.getGeneration({ accountId, requestId: claimed })).generation!;
    expect(charged.insuredReason).toBe('');
    expect(charged.cost).toBe(formatCredits(1_000n * 3_000_000n + 10n * 15_000_000n));
    expect((await client.getBalance({ accountId })).balance).toBe(formatCredits(10n * 10n ** 12n - 3_150_000_000n));
  });

  it('a caller who left before any content (cancelled, finish reason cancelled) pays its prompt even when the event claims insurance', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const requestId = uniqueName('req');
    await client.admit({ context: { requestId, accountId, keyId: 'key_a' }, modelId: 'acme/chat-small', paid: true, tier: '', limitGroup: '' });
    // The producer's claim is ignored: the insurance covers a provider that answered nothing, not a caller who left.
    await publish(usageEvent({
      requestId, accountId, usage: Usage.create({ inputTokens: 1_000, estimated: true }), prices: PRICES,
      insuredReason: 'no_output_no_finish_reason', finishReason: 'cancelled', cancelled: true,
    }));
    await eventually(async () => expect(await closeReason(requestId)).toBe('settled'));
    const record = (await client.getGeneration({ accountId, requestId })).generation!;
    expect(record).toMatchObject({ cancelled: true, finishReason: 'cancelled', insuredReason: '', cost: formatCredits(1_000n * 3_000_000n) });
    expect(await client.getBalance({ accountId })).toEqual({
      balance: formatCredits(10n * 10n ** 12n - 3_000_000_000n), available: formatCredits(10n * 10n ** 12n - 3_000_000_000n), reserved: '0',
    });
  });

  it('one batch mixing plain, cancelled, insured and unreported events keeps each record its own', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const [plain, cancelled, insured] = [uniqueName('req'), uniqueName('req'), uniqueName('req')];
    const events = [
      usageEvent({ requestId: plain, accountId, prices: PRICES, usage: Usage.create({ inputTokens: 10, outputTokens: 5 }), finishReason: 'stop', nativeUsage: Usage.create({ inputTokens: 10, outputTokens: 5 }) }),
      usageEvent({ requestId: cancelled, accountId, prices: PRICES, usage: Usage.create({ inputTokens: 10, outputTokens: 2, estimated: true }), cancelled: true, streamed: true }),
      usageEvent({ requestId: insured, accountId, prices: PRICES, usage: Usage.create({ inputTokens: 10 }), insuredReason: 'no_output_error_finish_reason', finishReason: 'error' }),
    ];
    // One group-commit message: the three settle in one transaction, one statement.
    await harness.testBus.bus.publishDurable(subjects.usageBatches, UsageEventBatch.encode({ batchId: uniqueName('batch'), events }).finish(), uniqueName('batch'));
    await eventually(async () => expect((await client.getGeneration({ accountId, requestId: insured })).found).toBe(true));
    const read = async (requestId: string) => (await client.getGeneration({ accountId, requestId })).generation!;
    expect(await read(plain)).toMatchObject({ cancelled: false, insuredReason: '', finishReason: 'stop', nativeUsage: { inputTokens: 10, outputTokens: 5 }, cost: formatCredits(30_000_000n + 75_000_000n) });
    // No total reported: none read back.
    expect((await read(plain)).nativeUsage?.providerTotalTokens).toBeUndefined();
    expect(await read(cancelled)).toMatchObject({ cancelled: true, streamed: true, insuredReason: '', finishReason: '', nativeUsage: undefined, cost: formatCredits(30_000_000n + 30_000_000n) });
    expect((await read(cancelled)).usage!.estimated).toBe(true);
    expect(await read(insured)).toMatchObject({ cancelled: false, insuredReason: 'no_output_error_finish_reason', finishReason: 'error', cost: '0' });
    expect((await client.getBalance({ accountId })).balance).toBe(formatCredits(10n * 10n ** 12n - 165_000_000n));
  });

  it('the sweeper deletes records past 30 days in bounded batches and leaves the charges', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client);
    const ids = [uniqueName('req'), uniqueName('req'), uniqueName('req')];
    for (const requestId of ids) await publish(usageEvent({ requestId, accountId, prices: PRICES }));
    await eventually(async () => {
      const rows = await harness.db.selectFrom('generations').select('request_id').where('request_id', 'in', ids).execute();
      expect(rows).toHaveLength(3);
    });
    await sql`update generations set created_at = now() - interval '31 days' where request_id in (${ids[0]}, ${ids[1]})`.execute(harness.db);
    const { pruneGenerations } = await import('../src/generations.js');
    // One row per statement, one statement per call: bounded work per pass.
    expect(await pruneGenerations(harness.db, undefined, 1, 1)).toBe(1);
    expect(await pruneGenerations(harness.db)).toBe(1);
    expect(await pruneGenerations(harness.db)).toBe(0);
    const left = await harness.db.selectFrom('generations').select('request_id').where('request_id', 'in', ids).execute();
    expect(left.map((row) => row.request_id)).toEqual([ids[2]]);
    const charges = await harness.db.selectFrom('charges').select('request_id').where('request_id', 'in', ids).execute();
    expect(charges).toHaveLength(3);
    // A pruned record whose charge exists is final, not pending.
    expect(await client.getGeneration({ accountId, requestId: ids[0]! })).toEqual({ found: false, pending: false, generation: undefined });
  });
});
