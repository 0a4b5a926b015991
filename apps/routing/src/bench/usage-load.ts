#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { createLogger, NatsEventBus } from '@gateway/platform';
import { UsageEventBatch } from '@gateway/proto';
import { GroupCommitUsagePublisher } from '../usage/group-commit-publisher.js';
import { JetStreamUsagePublisher, type UsagePublisher } from '../usage/usage-publisher.js';

/*
 * Routing's usage publishers under a load of their own, for the ledger bench (apps/standalone/src/bench/
 * ledger-bench.ts), which runs this as a process: `node apps/routing/dist/bench/usage-load.js`.
 * The events come from `--events FILE`, one UsageEventBatch message holding them all (decoded before the
 * clock starts), and go to NATS_URL in the namespace NATS_NAMESPACE through the very publishers routing
 * serves with. One JSON line on stdout reports what was measured:
 *   --mode backlog --publisher group-commit|single --wave N: published in waves of N concurrent publishes;
 *     { publishedPerSecond }.
 *   --mode live --rate R: open loop at R events/s through the group-commit publisher;
 *     { perMessage: events of each message, ackMs: publish → acknowledgement of each event, publishedAtMs }
 *     (publishedAtMs: wall-clock time, performance.timeOrigin-based, when the last acknowledgement came).
 */

const { values } = parseArgs({
  options: {
    events: { type: 'string' },
    mode: { type: 'string', default: 'backlog' },
    publisher: { type: 'string', default: 'group-commit' },
    wave: { type: 'string', default: '20000' },
    rate: { type: 'string', default: '5000' },
  },
});
if (!values.events) throw new Error('--events FILE is required');
if (values.mode !== 'backlog' && values.mode !== 'live') throw new Error(`--mode must be backlog or live: ${values.mode}`);
if (values.publisher !== 'group-commit' && values.publisher !== 'single') throw new Error(`--publisher must be group-commit or single: ${values.publisher}`);

const events = UsageEventBatch.decode(readFileSync(values.events)).events;
const logger = createLogger('usage-load', process.env.LOG_LEVEL ?? 'warn');
const bus = await NatsEventBus.connect(process.env.NATS_URL ?? 'nats://127.0.0.1:4222', logger, { name: 'usage-load', namespace: process.env.NATS_NAMESPACE });
const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

try {
  if (values.mode === 'backlog') {
    const publisher: UsagePublisher = values.publisher === 'group-commit'
      ? new GroupCommitUsagePublisher({ bus, logger })
      : new JetStreamUsagePublisher({ bus, logger });
    const wave = Number(values.wave);
    const started = performance.now();
    for (let start = 0; start < events.length; start += wave) {
      await Promise.all(events.slice(start, start + wave).map((event) => publisher.publish(event)));
    }
    const publishedPerSecond = events.length / ((performance.now() - started) / 1000);
    await publisher.stop();
    process.stdout.write(`${JSON.stringify({ publishedPerSecond })}\n`);
  } else {
    const rate = Number(values.rate);
    const perMessage: number[] = [];
    const publisher = new GroupCommitUsagePublisher({ bus, logger, onBatch: ({ events: count }) => perMessage.push(count) });
    const ackMs: number[] = [];
    const pending: Array<Promise<void>> = [];
    const started = performance.now();
    let issued = 0;
    // Open loop: events arrive on the clock whether or not earlier ones were acknowledged.
    while (issued < events.length) {
      const due = Math.min(events.length, Math.floor(((performance.now() - started) / 1000) * rate));
      for (; issued < due; issued++) {
        const at = performance.now();
        pending.push(publisher.publish(events[issued]!).then(() => { ackMs.push(performance.now() - at); }));
      }
      await sleep(1);
    }
    await Promise.all(pending);
    const publishedAtMs = now();
    await publisher.stop();
    process.stdout.write(`${JSON.stringify({ perMessage, ackMs, publishedAtMs })}\n`);
  }
} finally {
  await bus.close();
}
