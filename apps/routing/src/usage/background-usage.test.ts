import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { subjects, type DurableMessage, type EventBus } from '@gateway/platform';
import { UsageEvent, UsageOutcome } from '@gateway/proto';
import { crashCopy, createTestBus, eventually, testLogger, uniqueName, type TestBus } from '@gateway/testing';
import { createUsagePublisher } from './create-usage-publisher.js';
import { UsageOutbox } from './usage-outbox.js';

const event = (requestId: string, outputTokens = 7) => UsageEvent.create({
  requestId, accountId: 'acc_1', keyId: 'key_1', modelId: 'acme/chat', outcome: UsageOutcome.USAGE_OUTCOME_SERVED,
  usage: { inputTokens: 5, outputTokens } as UsageEvent['usage'], prices: { perInputToken: '0.0000005' }, streamed: true,
});

/** The real bus, with publishes refused while `down` is true (NATS unreachable, as the publisher sees it). */
function switchableBus(bus: EventBus) {
  const state = { down: true, refused: 0 };
  const wrapped = {
    publishDurable: async (subject: string, data: Uint8Array, msgId: string) => {
      if (state.down) { state.refused++; throw new Error('JetStream unavailable'); }
      await bus.publishDurable(subject, data, msgId);
    },
  } as unknown as EventBus;
  return { bus: wrapped, state };
}

let testBus: TestBus;
let root: string;
let directory: string;
beforeEach(async () => {
  testBus = await createTestBus('nats');
  root = await mkdtemp(join(tmpdir(), 'usage-outbox-'));
  directory = join(root, 'outbox');
});
afterEach(async () => {
  await testBus?.destroy();
  await rm(root, { recursive: true, force: true });
});

async function collectSingles() {
  const messages: DurableMessage[] = [];
  const subscription = await testBus.bus.consumeDurable(
    { subject: subjects.usageEvents, durable: uniqueName('probe'), maxBatch: 100, lingerMs: 1 },
    async (batch) => { messages.push(...batch); },
  );
  return { messages, stop: () => subscription.stop() };
}

describe('usage nobody waits for (streams already answered)', () => {
  for (const kind of ['group-commit', 'single'] as const) {
    it(`${kind}: a refused publish goes to the outbox and is republished (msg-id = request id) once the bus is back`, async () => {
      const probe = await collectSingles();
      const { bus, state } = switchableBus(testBus.bus);
      const publisher = await createUsagePublisher({ bus, logger: testLogger('usage'), publisher: kind, outboxDirectory: directory });
      const requestIds = Array.from({ length: 20 }, (_, index) => `stream-${kind}-${index}`);
      await Promise.all(requestIds.map(async (requestId) => {
        // The router's stream path: the awaited publish fails, then the event goes to the background.
        await expect(publisher.publish(event(requestId))).rejects.toThrow(/unavailable/);
        publisher.publishInBackground(event(requestId));
      }));
      await publisher.backgroundDurable();
      expect((await readdir(directory)).some((name) => name.endsWith('.log'))).toBe(true);
      state.down = false;
      await eventually(() => expect(new Set(probe.messages.map((message) => message.msgId))).toEqual(new Set(requestIds)), 15_000);
      for (const message of probe.messages) expect(UsageEvent.decode(message.data).requestId).toBe(message.msgId);
      // Acknowledged events leave the outbox.
      await eventually(async () => expect((await readdir(directory)).filter((name) => name.endsWith('.log'))).toEqual([]));
      await publisher.stop();
      await probe.stop();
    });
  }

  it('a publisher stopped while the bus is down leaves its events in the outbox; the next one replays them on start', async () => {
    const probe = await collectSingles();
    const { bus } = switchableBus(testBus.bus);
    const first = await createUsagePublisher({ bus, logger: testLogger('usage'), outboxDirectory: directory });
    const requestIds = ['left-1', 'left-2', 'left-3'];
    for (const requestId of requestIds) first.publishInBackground(event(requestId));
    await first.backgroundDurable();
    await first.stop();
    expect(probe.messages).toEqual([]);

    const second = await createUsagePublisher({ bus: testBus.bus, logger: testLogger('usage'), outboxDirectory: directory });
    await eventually(() => expect(probe.messages.map((message) => message.msgId).sort()).toEqual(requestIds), 10_000);
    expect(probe.messages.map((message) => UsageEvent.decode(message.data))).toEqual(expect.arrayContaining(requestIds.map((requestId) => event(requestId))));
    await eventually(async () => expect((await readdir(directory)).filter((name) => name.endsWith('.log'))).toEqual([]));
    await second.stop();
    await probe.stop();
  });

  it('a stream cut by a crash is charged from its checkpoint: the next start publishes it as the request\'s usage (msg-id = request id)', async () => {
    const probe = await collectSingles();
    const publisher = await createUsagePublisher({
      bus: testBus.bus, logger: testLogger('usage'), outboxDirectory: directory, checkpoints: { firstAfterMs: 0, intervalMs: 20 },
    });
    const progress = { changes: 1 };
    let outputTokens = 11;
    publisher.trackStream(progress, () => event('cut-stream-1', outputTokens));
    outputTokens = 19;
    progress.changes++;
    // What a kill would leave once the checkpoint of the newest progress is on disk.
    let crashed = '';
    await eventually(async () => {
      crashed = await crashCopy(directory, join(root, uniqueName('crashed')));
      const { outbox, recovered } = await UsageOutbox.open({ directory: crashed, logger: testLogger('outbox') });
      await outbox.close();
      expect(recovered.map((entry) => [entry.event.requestId, entry.event.usage!.outputTokens, entry.checkpoint])).toEqual([['cut-stream-1', 19, true]]);
    });
    // Nothing is published while the stream runs.
    expect(probe.messages).toEqual([]);

    const restarted = await createUsagePublisher({ bus: testBus.bus, logger: testLogger('usage'), outboxDirectory: crashed });
    await eventually(() => expect(probe.messages.map((message) => message.msgId)).toEqual(['cut-stream-1']), 10_000);
    expect(UsageEvent.decode(probe.messages[0]!.data).usage!.outputTokens).toBe(19);
    // Published, so acknowledged: the restarted outbox is empty.
    await eventually(async () => expect((await readdir(crashed)).filter((name) => name.endsWith('.log'))).toEqual([]));
    await restarted.stop();
    await publisher.stop();
    await probe.stop();
  });
});
