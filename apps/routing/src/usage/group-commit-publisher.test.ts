import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { subjects, type DurableMessage, type EventBus, type Subscription } from '@gateway/platform';
import { UsageEvent, UsageEventBatch, UsageOutcome } from '@gateway/proto';
import { createTestBus, eventually, testLogger, uniqueName, type TestBus } from '@gateway/testing';
import { encodeUsageEventBatch, GroupCommitUsagePublisher, UsagePublisherSaturatedError } from './group-commit-publisher.js';

const event = (requestId: string, outputTokens = 1): UsageEvent => UsageEvent.create({
  requestId, accountId: 'acc_1', keyId: 'key_1', modelId: 'acme/chat', providerId: 'p', endpoint: 'chat.completions',
  outcome: UsageOutcome.USAGE_OUTCOME_SERVED, usage: { inputTokens: 10, outputTokens } as UsageEvent['usage'],
  prices: { perInputToken: '0.0000005' }, occurredAtMs: 1_700_000_000_000n, streamed: false,
});

/** Every message on a subject of the test namespace, decoded by the caller. */
async function collect(bus: EventBus, subject: string) {
  const messages: DurableMessage[] = [];
  const subscription: Subscription = await bus.consumeDurable(
    { subject, durable: uniqueName('probe'), maxBatch: 500, lingerMs: 1 },
    async (batch) => { messages.push(...batch); },
  );
  return { messages, stop: () => subscription.stop() };
}

describe('encodeUsageEventBatch', () => {
  it('writes what UsageEventBatch.decode reads back, for empty, small and multi-byte-length events', () => {
    const events = [event('r1'), event('r2'.repeat(100), 123_456), UsageEvent.create({ requestId: 'r3' })];
    const bytes = encodeUsageEventBatch('batch_é1', events.map((item) => UsageEvent.encode(item).finish()));
    expect(UsageEventBatch.decode(bytes)).toEqual(UsageEventBatch.create({ batchId: 'batch_é1', events }));
    expect(Buffer.from(bytes)).toEqual(Buffer.from(UsageEventBatch.encode({ batchId: 'batch_é1', events }).finish()));
    expect(UsageEventBatch.decode(encodeUsageEventBatch('b', []))).toEqual(UsageEventBatch.create({ batchId: 'b' }));
  });
});

describe('group-commit usage publisher (real JetStream)', () => {
  let testBus: TestBus;
  beforeEach(async () => { testBus = await createTestBus('nats'); });
  afterEach(async () => { await testBus?.destroy(); });

  it('sends 1,000 concurrent events as few batch messages of at most 256, msg-id = batch id, each caller resuming after the ack', async () => {
    const probe = await collect(testBus.bus, subjects.usageBatches);
    const acknowledged: Array<{ batchId: string; events: number }> = [];
    const publisher = new GroupCommitUsagePublisher({ bus: testBus.bus, logger: testLogger('usage'), onBatch: (batch) => acknowledged.push(batch) });
    const resumedAfterAck: boolean[] = [];
    const requestIds = Array.from({ length: 1_000 }, (_, index) => `req-${index}`);
    await Promise.all(requestIds.map(async (requestId) => {
      await publisher.publish(event(requestId));
      // By the time a caller resumes, its batch was acknowledged (onBatch runs before the callers resume).
      resumedAfterAck.push(acknowledged.length > 0);
    }));
    expect(resumedAfterAck.every(Boolean)).toBe(true);
    await publisher.stop();

    await eventually(() => expect(probe.messages.reduce((sum, message) => sum + UsageEventBatch.decode(message.data).events.length, 0)).toBe(1_000));
    const batches = probe.messages.map((message) => ({ msgId: message.msgId, batch: UsageEventBatch.decode(message.data) }));
    for (const { msgId, batch } of batches) {
      expect(msgId).toBe(batch.batchId);
      expect(batch.events.length).toBeGreaterThan(0);
      expect(batch.events.length).toBeLessThanOrEqual(256);
    }
    expect(batches.length).toBeGreaterThanOrEqual(4);
    expect(batches.length).toBeLessThan(100);
    expect(new Set(batches.flatMap(({ batch }) => batch.events.map((item) => item.requestId)))).toEqual(new Set(requestIds));
    expect(acknowledged.map((batch) => batch.events).reduce((sum, count) => sum + count, 0)).toBe(1_000);
    await probe.stop();
  });

  it('sends a lone event at once, in a batch of one, when no batch awaits its acknowledgement (no linger)', async () => {
    const probe = await collect(testBus.bus, subjects.usageBatches);
    const sent: string[] = [];
    const recording = { publishDurable: (subject: string, data: Uint8Array, msgId: string) => { sent.push(msgId); return testBus.bus.publishDurable(subject, data, msgId); } } as unknown as EventBus;
    // A linger of a second: had the event waited for it, nothing would be sent before the next macrotask.
    const publisher = new GroupCommitUsagePublisher({ bus: recording, logger: testLogger('usage'), lingerMs: 1_000 });
    const published = publisher.publish(event('lonely'));
    await new Promise((resolve) => setImmediate(resolve));
    expect(sent).toHaveLength(1);
    await published;
    await eventually(() => expect(probe.messages).toHaveLength(1));
    expect(UsageEventBatch.decode(probe.messages[0]!.data).events.map((item) => item.requestId)).toEqual(['lonely']);
    await publisher.stop();
    await probe.stop();
  });

  it('gathers events while the pipeline of batches awaits acknowledgements, and sends them as one batch when one completes', async () => {
    const batches: string[][] = [];
    const releases: Array<() => void> = [];
    const held = {
      publishDurable: async (_subject: string, data: Uint8Array) => {
        batches.push(UsageEventBatch.decode(data).events.map((item) => item.requestId));
        await new Promise<void>((resolve) => releases.push(resolve));
      },
    } as unknown as EventBus;
    const publisher = new GroupCommitUsagePublisher({ bus: held, logger: testLogger('usage'), lingerMs: 1_000, maxBatchesInFlight: 1 });
    const first = publisher.publish(event('a'));
    await new Promise((resolve) => setImmediate(resolve));
    expect(batches).toEqual([['a']]);
    const behind = [publisher.publish(event('b')), publisher.publish(event('c'))];
    await new Promise((resolve) => setImmediate(resolve));
    const later = publisher.publish(event('d'));
    await new Promise((resolve) => setImmediate(resolve));
    // One batch in flight (the limit): b, c and d wait together, nothing else is sent.
    expect(batches).toEqual([['a']]);
    releases.shift()!();
    await first;
    await new Promise((resolve) => setImmediate(resolve));
    expect(batches).toEqual([['a'], ['b', 'c', 'd']]);
    releases.shift()!();
    await Promise.all([...behind, later]);
    await publisher.stop();
  });

  it('rejects every caller of a batch the bus keeps refusing, retrying under the same batch id', async () => {
    const msgIds: string[] = [];
    // The publisher only ever calls publishDurable.
    const refusing = { publishDurable: async (_subject: string, _data: Uint8Array, msgId: string) => { msgIds.push(msgId); throw new Error('JetStream unavailable'); } } as unknown as EventBus;
    const publisher = new GroupCommitUsagePublisher({ bus: refusing, logger: testLogger('usage'), attempts: 3 });
    const results = await Promise.allSettled([publisher.publish(event('a')), publisher.publish(event('b'))]);
    expect(results.map((result) => result.status)).toEqual(['rejected', 'rejected']);
    expect(msgIds).toHaveLength(3);
    expect(new Set(msgIds).size).toBe(1);
    await publisher.stop();
  });

  it('refuses at once beyond its bound of waiting events instead of queueing without limit', async () => {
    let release: () => void = () => undefined;
    const stalled = new Promise<void>((resolve) => { release = resolve; });
    const slow = { publishDurable: async () => { await stalled; } } as unknown as EventBus;
    const publisher = new GroupCommitUsagePublisher({ bus: slow, logger: testLogger('usage'), maxWaitingEvents: 3, lingerMs: 0 });
    const waiting = [publisher.publish(event('1')), publisher.publish(event('2')), publisher.publish(event('3'))];
    await expect(publisher.publish(event('4'))).rejects.toBeInstanceOf(UsagePublisherSaturatedError);
    release();
    await Promise.all(waiting);
    await publisher.publish(event('5'));
    await publisher.stop();
  });
});
