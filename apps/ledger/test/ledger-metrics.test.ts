import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createMetricsRegistry, subjects, type Registry } from '@gateway/platform';
import { UsageEvent } from '@gateway/proto';
import { eventually, parsePrometheusText, sampleSum, uniqueName } from '@gateway/testing';
import { createLedgerHarness, crashingBus, rejection, usageEvent, type LedgerHarness } from './harness.js';

// The ledger's metrics against its real Postgres and NATS: holds open now, refusals by reason, and
// usage settled once although its message was redelivered (a settler crash between commit and ack).

let harness: LedgerHarness;
let registry: Registry;
beforeEach(async () => {
  harness = await createLedgerHarness();
  registry = createMetricsRegistry();
});
afterEach(async () => { await harness?.close(); });

const scrape = async () => parsePrometheusText(await registry.metrics());

describe('ledger metrics', () => {
  it('counts open reservations, refusals, a redelivery, and the one charge it led to', async () => {
    let crashOnce = true;
    const bus = crashingBus(harness.testBus.bus, () => { const crash = crashOnce; crashOnce = false; return crash; });
    const { client } = await harness.start({ bus, metrics: registry });
    const accountId = uniqueName('acc');
    await client.topUp({ accountId, credits: '0.06', idempotencyKey: uniqueName('topup'), note: '' });

    const requestId = uniqueName('req');
    await client.admit({ context: { requestId, accountId, keyId: 'key_a' }, modelId: 'acme/chat-small', paid: true, tier: '', limitGroup: '' });
    // The second paid request finds 0.01 available: refused for credit.
    const refused = await rejection(client.admit({
      context: { requestId: uniqueName('req'), accountId, keyId: 'key_a' }, modelId: 'acme/chat-small', paid: true, tier: '', limitGroup: '',
    }));
    expect(refused.code).toBe('insufficient_quota');
    let samples = await scrape();
    expect(sampleSum(samples, 'gateway_ledger_open_reservations')).toBe(1);
    expect(sampleSum(samples, 'gateway_ledger_refusals_total', { via: 'admit', reason: 'insufficient' })).toBe(1);
    expect(sampleSum(samples, 'gateway_db_pool_max_connections', { pool: 'ledger' })).toBe(10);

    await harness.testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(usageEvent({ requestId, accountId })).finish(), requestId);
    await eventually(() => expect(bus.redeliveredHandled).toBe(1), 8_000);
    samples = await scrape();
    expect(sampleSum(samples, 'gateway_usage_messages_redelivered_total', { subject: subjects.usageEvents })).toBe(1);
    // Charged by the first delivery; the redelivery found it charged.
    expect(sampleSum(samples, 'gateway_usage_events_settled_total', { outcome: 'served' })).toBe(1);
    expect(sampleSum(samples, 'gateway_usage_events_duplicate_total')).toBe(1);
    expect(sampleSum(samples, 'gateway_usage_settlement_duration_seconds_count')).toBe(2);
    // Tokens and credits of the one charge, not of the redelivery it found charged.
    const model = { model: 'acme/chat-small' };
    expect(sampleSum(samples, 'gateway_usage_tokens_total', { ...model, type: 'input' })).toBe(1000);
    expect(sampleSum(samples, 'gateway_usage_tokens_total', { ...model, type: 'cached_input' })).toBe(400);
    expect(sampleSum(samples, 'gateway_usage_tokens_total', { ...model, type: 'output' })).toBe(200);
    expect(sampleSum(samples, 'gateway_usage_tokens_total', { ...model, type: 'reasoning' })).toBe(0);
    const { balance } = await client.getBalance({ accountId });
    expect(sampleSum(samples, 'gateway_usage_spend_credits_total', model)).toBeCloseTo(0.06 - Number(balance), 12);
    expect(sampleSum(samples, 'gateway_usage_spend_credits_total', model)).toBeGreaterThan(0);
    // The open-holds count is reused for a few seconds; a fresh one shows the reservation closed.
    await eventually(async () => expect(sampleSum(await scrape(), 'gateway_ledger_open_reservations')).toBe(0), 10_000, 500);
  });

  it('reports the settlement backlog the bus holds behind the batch in hand, down to 0 once settled', async () => {
    // Three events wait in the stream before the ledger starts (one message per batch, one batch at a
    // time); the first batch is settled but not acknowledged until the test has scraped, so the gauge
    // shows the two messages behind it.
    const accountId = uniqueName('acc');
    for (let index = 0; index < 3; index++) {
      const requestId = uniqueName('req');
      await harness.testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(usageEvent({ requestId, accountId })).finish(), requestId);
    }
    let release!: () => void;
    const released = new Promise<void>((resolve) => { release = resolve; });
    let held = false;
    const inner = harness.testBus.bus;
    const bus: typeof inner = Object.assign(Object.create(inner) as typeof inner, {
      consumeDurable: (options: Parameters<typeof inner.consumeDurable>[0], handler: Parameters<typeof inner.consumeDurable>[1]) =>
        inner.consumeDurable(options, async (batch) => {
          await handler(batch);
          if (!held) { held = true; await released; }
        }),
    });
    await harness.start({ bus, metrics: registry, consumer: { maxBatch: 1, lingerMs: 0, concurrency: 1 } });
    await eventually(() => expect(held).toBe(true), 8_000);
    expect(sampleSum(await scrape(), 'gateway_usage_settlement_backlog_messages', { subject: subjects.usageEvents })).toBe(2);
    release();
    await eventually(async () => expect(sampleSum(await scrape(), 'gateway_usage_events_settled_total', { outcome: 'served' })).toBe(3), 8_000);
    expect(sampleSum(await scrape(), 'gateway_usage_settlement_backlog_messages', { subject: subjects.usageEvents })).toBe(0);
  });
});
