#!/usr/bin/env node
import { createLogger, NatsEventBus } from '@gateway/platform';
import { startLedgerService } from '../index.js';

/*
 * A ledger whose settlement the ledger bench (apps/standalone/src/bench/ledger-bench.ts) watches from
 * another process: `node apps/ledger/dist/bench/settle-process.js [--migrate-only]`, configured by
 * DATABASE_URL, NATS_URL and NATS_NAMESPACE. The service is the one `apps/ledger/dist/main.js` runs; this
 * entry only adds the settlement observer, and writes one JSON line on stdout per event:
 *   { "starting": ms } before the service starts, { "ready": ms } once it serves,
 *   { "settled": events, "at": ms } per settlement transaction
 * (ms: wall-clock time with sub-millisecond precision, performance.timeOrigin-based, comparable across
 * processes on one machine). `--migrate-only` applies the schema without consuming, then exits.
 * SIGTERM stops it.
 */

const logger = createLogger('ledger-settle-bench', process.env.LOG_LEVEL ?? 'warn');
const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) throw new Error('DATABASE_URL is required');
const migrateOnly = process.argv.includes('--migrate-only');
const now = () => performance.timeOrigin + performance.now();
const line = (value: object) => process.stdout.write(`${JSON.stringify(value)}\n`);

const bus = await NatsEventBus.connect(process.env.NATS_URL ?? 'nats://127.0.0.1:4222', logger, { name: 'ledger-settle-bench', namespace: process.env.NATS_NAMESPACE });
const options = { listenAddress: '127.0.0.1:0', databaseUrl, bus, logger, sweepIntervalMs: 600_000 };
line({ starting: now() });
const ledger = migrateOnly
  ? await startLedgerService({ ...options, consumer: { enabled: false } })
  : await startLedgerService({ ...options, consumer: { onSettled: ({ events }) => line({ settled: events, at: now() }) } });
line({ ready: now() });

const stop = async () => {
  await ledger.stop();
  await bus.close();
};
if (migrateOnly) {
  await stop();
  process.exit(0);
} else process.once('SIGTERM', () => { void stop().then(() => process.exit(0), () => process.exit(1)); });
