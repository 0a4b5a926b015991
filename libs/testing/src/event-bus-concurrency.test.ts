import { afterEach, describe, expect, it } from 'vitest';
import { createTestBus, eventually, type TestBus } from './infra.js';

// DurableConsumerOptions.concurrency (NATS): several handler calls in flight, each batch acked on its own.
describe('EventBus durable consumer concurrency (nats)', () => {
  let testBus: TestBus;
  afterEach(async () => { await testBus?.destroy(); });
  const encode = (text: string) => new TextEncoder().encode(text);

  it('runs two handler calls at once and acks every batch, so a later consumer sees only new messages', async () => {
    testBus = await createTestBus('nats');
    for (let index = 0; index < 6; index++) await testBus.bus.publishDurable('usage.events', encode(`m${index}`), `c-${index}`);
    let active = 0;
    let mostActive = 0;
    let bothStarted: () => void = () => undefined;
    const overlap = new Promise<void>((resolve) => { bothStarted = resolve; });
    const handled: string[] = [];
    const subscription = await testBus.bus.consumeDurable(
      { subject: 'usage.events', durable: 'concurrent', maxBatch: 1, lingerMs: 0, ackWaitMs: 1_000, concurrency: 2 },
      async (batch) => {
        active++;
        mostActive = Math.max(mostActive, active);
        if (active === 2) bothStarted();
        // The first batches wait for each other: only two calls in flight at once can both get past this.
        await Promise.race([overlap, new Promise((resolve) => setTimeout(resolve, 5_000))]);
        handled.push(...batch.map((message) => message.msgId));
        active--;
      },
    );
    await eventually(() => expect(handled).toHaveLength(6), 10_000);
    expect(mostActive).toBe(2);
    expect([...handled].sort()).toEqual(Array.from({ length: 6 }, (_, index) => `c-${index}`));
    await subscription.stop();

    // Acked means gone: a new consumer on the same durable gets the next message only, even after the ack wait.
    await testBus.bus.publishDurable('usage.events', encode('later'), 'c-later');
    const other = await testBus.connectAnother();
    const seen: string[] = [];
    const second = await other.consumeDurable(
      { subject: 'usage.events', durable: 'concurrent', maxBatch: 10, lingerMs: 0, ackWaitMs: 1_000 },
      async (batch) => { seen.push(...batch.map((message) => message.msgId)); },
    );
    await eventually(() => expect(seen).toEqual(['c-later']), 8_000);
    await testBus.bus.publishDurable('usage.events', encode('sentinel'), 'c-sentinel');
    // Redeliveries would have come back after the 1 s ack wait; by the sentinel's arrival past it, none did.
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    await eventually(() => expect(seen).toEqual(['c-later', 'c-sentinel']), 8_000);
    await second.stop();
  });
});
