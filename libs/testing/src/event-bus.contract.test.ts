import { afterEach, describe, expect, it } from 'vitest';
import type { DurableMessage } from '@gateway/platform';
import { createTestBus, eventually, type TestBus } from './infra.js';

// One contract, two implementations: what the ledger relies on must hold for JetStream and in-process alike.
describe.each(['nats', 'memory', 'memory-journal'] as const)('EventBus contract (%s)', (kind) => {
  let testBus: TestBus;
  afterEach(async () => { await testBus?.destroy(); });

  const encode = (text: string) => new TextEncoder().encode(text);
  const decode = (data: Uint8Array) => new TextDecoder().decode(data);

  it('delivers durable messages in batches and stores a repeated msg-id once', async () => {
    testBus = await createTestBus(kind);
    for (let index = 0; index < 20; index++) await testBus.bus.publishDurable('usage.events', encode(`e${index}`), `id-${index}`);
    await testBus.bus.publishDurable('usage.events', encode('e3-again'), 'id-3');
    const received: DurableMessage[] = [];
    const batchSizes: number[] = [];
    const subscription = await testBus.bus.consumeDurable(
      { subject: 'usage.events', durable: 'contract', maxBatch: 8, lingerMs: 5 },
      async (batch) => { batchSizes.push(batch.length); received.push(...batch); },
    );
    await eventually(() => expect(received).toHaveLength(20));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(received).toHaveLength(20);
    expect(received.map((message) => message.msgId).sort()).toEqual(Array.from({ length: 20 }, (_, index) => `id-${index}`).sort());
    expect(received.find((message) => message.msgId === 'id-3') && decode(received.find((message) => message.msgId === 'id-3')!.data)).toBe('e3');
    expect(Math.max(...batchSizes)).toBeLessThanOrEqual(8);
    await subscription.stop();
  });

  it('redelivers a batch whose handler failed, marked as redelivered', async () => {
    testBus = await createTestBus(kind);
    await testBus.bus.publishDurable('usage.events', encode('only'), 'only-1');
    let calls = 0;
    const seen: DurableMessage[] = [];
    const subscription = await testBus.bus.consumeDurable(
      { subject: 'usage.events', durable: 'retry', maxBatch: 10, lingerMs: 0 },
      async (batch) => {
        calls++;
        if (calls === 1) throw new Error('simulated settlement failure');
        seen.push(...batch);
      },
    );
    await eventually(() => expect(seen).toHaveLength(1), 8_000);
    expect(seen[0]!.redelivered).toBe(true);
    expect(decode(seen[0]!.data)).toBe('only');
    await subscription.stop();
  });

  it('hands unacked messages to the next consumer with the same durable name', async () => {
    testBus = await createTestBus(kind);
    const first = await testBus.bus.consumeDurable(
      { subject: 'usage.events', durable: 'handover', maxBatch: 10, lingerMs: 0, ackWaitMs: 1_000 },
      async () => { await new Promise(() => {}); },
    );
    await testBus.bus.publishDurable('usage.events', encode('x'), 'handover-1');
    await new Promise((resolve) => setTimeout(resolve, 200));
    if (kind !== 'nats') {
      // In-process there is no second process: the contract is only that nothing is lost while it waits.
      void first.stop();
      return;
    }
    const other = await testBus.connectAnother();
    const seen: string[] = [];
    const second = await other.consumeDurable(
      { subject: 'usage.events', durable: 'handover', maxBatch: 10, lingerMs: 0, ackWaitMs: 1_000 },
      async (batch) => { seen.push(...batch.map((message) => message.msgId)); },
    );
    void first.stop();
    await eventually(() => expect(seen).toContain('handover-1'), 8_000);
    await second.stop();
  });

  it('broadcasts to every subscriber', async () => {
    testBus = await createTestBus(kind);
    const other = await testBus.connectAnother();
    const got: string[] = [];
    const a = testBus.bus.subscribe('keys.changed', (data) => got.push(`a:${decode(data)}`));
    const b = other.subscribe('keys.changed', (data) => got.push(`b:${decode(data)}`));
    await new Promise((resolve) => setTimeout(resolve, 100));
    testBus.bus.broadcast('keys.changed', encode('k1'));
    await eventually(() => expect(got.sort()).toEqual(kind === 'nats' ? ['a:k1', 'b:k1'] : ['a:k1', 'b:k1']));
    await a.stop();
    await b.stop();
  });
});
