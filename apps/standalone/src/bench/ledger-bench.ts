#!/usr/bin/env node
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { createClient, createLogger, NatsEventBus, type Logger } from '@gateway/platform';
import { createDatabase, sql, type Kysely } from '@gateway/platform/db';
import { LedgerServiceClient, LedgerServiceService, Pricing, Usage, UsageEvent, UsageEventBatch, UsageOutcome } from '@gateway/proto';
import { freePort } from '../embedded-postgres.js';

/**
 * Ledger bench (issue 5 "Performance"; docs/billing.md "Billing"): `npm run bench -- --ledger`, or
 * `node apps/standalone/dist/bench/ledger-bench.js [--quick] [--events N] [--callers N]` after a build.
 * Against the machine's Postgres and NATS, each phase on a fresh database and NATS namespace:
 * 1. settlement from a backlog: N usage events (each with an open reservation, as in production)
 *    already in JetStream, published by routing's own publishers; a ledger starts and drains them.
 * 2. live load: routing's group-commit publisher at a fixed rate while the ledger settles — how full
 *    the usage messages and the settlement transactions run.
 * Each side is a process of its own app, as deployed (no app imports another): routing's publishers run
 * in `node apps/routing/dist/bench/usage-load.js` (the events written here to a file it reads first),
 * the settling ledger in `node apps/ledger/dist/bench/settle-process.js`, which reports each settlement
 * transaction on stdout.
 * 3. Admit latency: 500 concurrent callers against a ledger running as its own process
 *    (`node apps/ledger/dist/main.js`), as the edge's Admission calls it: over 100 accounts, then all on one.
 */

const root = fileURLToPath(new URL('../../../../', import.meta.url));
const BENCH_INTERNAL_TOKEN = 'bench-internal-service-token-0123456789ab';
const BENCH_ADMIN_TOKEN = 'bench-internal-admin-token-0123456789abcd';
const ledgerMain = fileURLToPath(new URL('../../../../apps/ledger/dist/main.js', import.meta.url));
const settleProcessMain = fileURLToPath(new URL('../../../../apps/ledger/dist/bench/settle-process.js', import.meta.url));
const usageLoadMain = fileURLToPath(new URL('../../../../apps/routing/dist/bench/usage-load.js', import.meta.url));
const postgresAdminUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const natsUrl = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const PRICES = Pricing.create({ perInputToken: '0.0000005', perOutputToken: '0.0000015', perCachedInputToken: '0.0000001' });
const ACCOUNTS = 100;
const KEYS = 400;
const RESERVE_PICO = 50_000_000_000n;
const TOP_UP_PICO = 1_000_000n * 1_000_000_000_000n;

export interface LedgerBenchOptions {
  /** Events in the backlog phase (default 100,000; 20,000 quick). */
  backlogEvents: number;
  /** Live phase: events per second and seconds. */
  liveRate: number;
  liveSeconds: number;
  /** Admit phase: concurrent callers and measured seconds per variant. */
  admitCallers: number;
  admitSeconds: number;
  /** Phases to run (default all). */
  phases: ReadonlySet<'backlog' | 'live' | 'admit'>;
  log(line: string): void;
}

interface Distribution { count: number; mean: number; p50: number; p90: number; p99: number; max: number }

function distribution(values: number[]): Distribution {
  const sorted = Float64Array.from(values).sort();
  const at = (p: number) => (sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!);
  return { count: sorted.length, mean: sorted.reduce((sum, value) => sum + value, 0) / (sorted.length || 1), p50: at(50), p90: at(90), p99: at(99), max: at(100) };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const suffix = () => randomBytes(4).toString('hex');

/** A database and NATS namespace of its own, removed afterwards whatever happens. */
async function scratch(logger: Logger) {
  const databaseName = `gw_ledger_bench_${suffix()}`;
  const admin = createDatabase({ url: postgresAdminUrl, schema: 'public', maxConnections: 1, applicationName: 'ledger-bench' });
  await sql.raw(`create database "${databaseName}"`).execute(admin);
  const url = new URL(postgresAdminUrl);
  url.pathname = `/${databaseName}`;
  const namespace = `ledger-bench-${suffix()}`;
  const bus = await NatsEventBus.connect(natsUrl, logger, { name: 'ledger-bench', namespace });
  return {
    databaseUrl: url.toString(),
    namespace,
    bus,
    async drop() {
      await bus.destroyStream().catch(() => undefined);
      await bus.close().catch(() => undefined);
      await sql.raw(`drop database if exists "${databaseName}" with (force)`).execute(admin).catch(() => undefined);
      await admin.destroy();
    },
  };
}

const requestId = (run: string, index: number) => `${run}-${index.toString(36).padStart(6, '0')}`;

function usageEvent(run: string, index: number): UsageEvent {
  const inputTokens = 200 + (index % 1_800);
  return UsageEvent.create({
    requestId: requestId(run, index), accountId: `acc_${index % ACCOUNTS}`, keyId: `key_${index % KEYS}`, modelId: 'acme/chat-small',
    providerId: 'acme-cloud', endpoint: 'chat.completions', outcome: index % 50 === 0 ? UsageOutcome.USAGE_OUTCOME_FAILED : UsageOutcome.USAGE_OUTCOME_SERVED,
    usage: Usage.create({ inputTokens, cachedInputTokens: index % 3 === 0 ? Math.floor(inputTokens / 2) : 0, outputTokens: 20 + (index % 700) }),
    prices: PRICES, occurredAtMs: BigInt(Date.now()), streamed: index % 2 === 0,
  });
}

/**
 * Funded accounts and one open 0.05 reservation per event, written straight into the ledger's
 * tables (admitting 100,000 requests first would measure Admit, not settlement); balances equal the
 * journal so the ledger's own verification holds afterwards.
 */
async function seedLedger(databaseUrl: string, run: string, events: number): Promise<Kysely<any>> {
  const db = createDatabase({ url: databaseUrl, schema: 'ledger', maxConnections: 1, applicationName: 'ledger-bench' });
  await sql`insert into journal (account_id, kind, amount_pico, idempotency_key, note)
            select 'acc_' || g, 'topup', ${TOP_UP_PICO}, ${run} || '-topup-' || g, 'bench' from generate_series(0, ${ACCOUNTS - 1}::int) g`.execute(db);
  await sql`insert into balances (account_id, balance_pico) select 'acc_' || g, ${TOP_UP_PICO} from generate_series(0, ${ACCOUNTS - 1}::int) g`.execute(db);
  if (events > 0) {
    const ids = Array.from({ length: events }, (_, index) => requestId(run, index));
    await sql`insert into reservations (request_id, account_id, key_id, amount_pico, expires_at)
              select id, 'acc_' || ((n - 1) % ${ACCOUNTS}), 'key_' || ((n - 1) % ${KEYS}), ${RESERVE_PICO}, now() + interval '1 hour'
              from unnest(${ids}::text[]) with ordinality as t(id, n)`.execute(db);
    await sql`update balances b set reserved_pico = s.total from (select account_id, sum(amount_pico) as total from reservations group by 1) s where s.account_id = b.account_id`.execute(db);
    await sql`insert into key_totals (key_id, account_id, reserved_pico) select key_id, min(account_id), sum(amount_pico) from reservations group by 1`.execute(db);
  }
  return db;
}

async function verifyLedger(db: Kysely<any>): Promise<string> {
  const result = await sql<{ accounts: number; mismatched: number; reserved: string; open: number }>`
    select count(*)::int as accounts,
           count(*) filter (where b.balance_pico <> coalesce((select sum(amount_pico) from journal_entries j where j.account_id = b.account_id), 0))::int as mismatched,
           sum(b.reserved_pico)::text as reserved,
           (select count(*)::int from reservations where closed_at is null) as open
    from balances b`.execute(db);
  const row = result.rows[0]!;
  return row.mismatched === 0 && row.reserved === '0' && row.open === 0
    ? `verified: ${row.accounts} accounts, balance == journal, no open reservation`
    : `MISMATCH: ${row.mismatched} balances differ from the journal, ${row.reserved} pico still reserved, ${row.open} reservations open`;
}

/** The bench's events as one UsageEventBatch message in a file, for routing's usage-load process to read. */
async function eventsFile(run: string, first: number, count: number): Promise<{ path: string; remove(): Promise<void> }> {
  const directory = await mkdtemp(join(tmpdir(), 'ledger-bench-'));
  const path = join(directory, 'events.bin');
  const events = Array.from({ length: count }, (_, offset) => usageEvent(run, first + offset));
  await writeFile(path, UsageEventBatch.encode({ batchId: run, events }).finish());
  return { path, remove: () => rm(directory, { recursive: true, force: true }) };
}

type Space = Awaited<ReturnType<typeof scratch>>;
const childEnv = (space: Space) => ({
  PATH: process.env.PATH ?? '', DATABASE_URL: space.databaseUrl, NATS_URL: natsUrl, NATS_NAMESPACE: space.namespace, LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
});

/** Routing's publishers in their own process (usage-load.ts): resolves with the JSON line it printed. */
function usageLoad<T>(space: Space, file: string, args: string[]): Promise<T> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [usageLoadMain, '--events', file, ...args], { cwd: root, env: childEnv(space), maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) return reject(new Error(`usage-load ${args.join(' ')} failed: ${error.message}\n${stderr}`));
      try {
        resolve(JSON.parse(stdout.trim().split('\n').at(-1)!) as T);
      } catch (parse) {
        reject(new Error(`usage-load printed no figures (${(parse as Error).message}): ${stdout}${stderr}`));
      }
    });
  });
}

/** A settling ledger in its own process (settle-process.ts), its transactions as they are reported. */
interface Settler {
  /** Wall-clock ms just before the service started. */
  startingAt: Promise<number>;
  ready: Promise<void>;
  /** Events of each settlement transaction and when it committed (wall-clock ms), in order. */
  transactions: Array<{ events: number; at: number }>;
  settled(): number;
  stop(): Promise<void>;
}

function deferred<T>() {
  let resolve: (value: T) => void = () => undefined;
  let reject: (error: Error) => void = () => undefined;
  const promise = new Promise<T>((yes, no) => { resolve = yes; reject = no; });
  return { promise, resolve, reject };
}

function startSettler(space: Space, migrateOnly = false): Settler {
  const child = spawn(process.execPath, [settleProcessMain, ...(migrateOnly ? ['--migrate-only'] : [])], { cwd: root, env: childEnv(space), stdio: ['ignore', 'pipe', 'inherit'] });
  const transactions: Settler['transactions'] = [];
  let settled = 0;
  const startingAt = deferred<number>();
  const ready = deferred<void>();
  // Rejections nobody awaits (a stop before ready) must not end the bench.
  startingAt.promise.catch(() => undefined);
  ready.promise.catch(() => undefined);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => {
    const error = new Error(`ledger settle process exited (${code}) before it was ready`);
    startingAt.reject(error);
    ready.reject(error);
    resolve(code);
  }));
  createInterface({ input: child.stdout! }).on('line', (text) => {
    const message = JSON.parse(text) as { starting?: number; ready?: number; settled?: number; at?: number };
    if (message.starting !== undefined) startingAt.resolve(message.starting);
    else if (message.ready !== undefined) ready.resolve();
    else if (message.settled !== undefined) {
      transactions.push({ events: message.settled, at: message.at! });
      settled += message.settled;
    }
  });
  return {
    startingAt: startingAt.promise,
    ready: ready.promise,
    transactions,
    settled: () => settled,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await Promise.race([exited, sleep(10_000)]);
    },
  };
}

/** Creates the ledger's schema in the scratch database (a settler that migrates and exits). */
async function migrate(space: Space): Promise<void> {
  const settler = startSettler(space, true);
  await settler.ready;
  await settler.stop();
}

export interface BacklogFigures { kind: string; events: number; eventsPerSecond: number; steadyEventsPerSecond: number; transactions: number; eventsPerTransaction: number; publishedPerSecond: number; verification: string }

async function settlementFromBacklog(kind: 'group-commit' | 'single', events: number, logger: Logger): Promise<BacklogFigures> {
  const space = await scratch(logger);
  const run = `bl${suffix()}`;
  const file = await eventsFile(run, 0, events);
  try {
    await migrate(space);
    const db = await seedLedger(space.databaseUrl, run, events);
    const { publishedPerSecond } = await usageLoad<{ publishedPerSecond: number }>(space, file.path,
      ['--mode', 'backlog', '--publisher', kind, '--wave', kind === 'group-commit' ? '20000' : '2000']);

    const settler = startSettler(space);
    const deadline = Date.now() + 300_000;
    try {
      await settler.ready;
      while (settler.settled() < events && Date.now() < deadline) await sleep(20);
    } finally {
      await settler.stop();
    }
    const started = await settler.startingAt;
    const { transactions } = settler;
    const settled = settler.settled();
    const first = transactions[0];
    const last = transactions.at(-1);
    const verification = settled >= events ? await verifyLedger(db) : `INCOMPLETE: ${settled} of ${events} settled within 300 s`;
    await db.destroy();
    return {
      kind, events, eventsPerSecond: last ? settled / ((last.at - started) / 1000) : 0,
      // From the end of the first transaction: without the service's start-up and first fetch.
      steadyEventsPerSecond: first && last && last !== first ? (settled - first.events) / ((last.at - first.at) / 1000) : Number.NaN,
      transactions: transactions.length, eventsPerTransaction: settled / (transactions.length || 1), publishedPerSecond, verification,
    };
  } finally {
    await file.remove();
    await space.drop();
  }
}

export interface LiveFigures { rate: number; seconds: number; events: number; perMessage: Distribution; perTransaction: Distribution; publishAckMs: Distribution; settleLagMs: number; verification: string }

async function liveLoad(rate: number, seconds: number, logger: Logger): Promise<LiveFigures> {
  const space = await scratch(logger);
  const run = `lv${suffix()}`;
  const events = Math.round(rate * seconds);
  const file = await eventsFile(run, 0, events);
  try {
    await migrate(space);
    const db = await seedLedger(space.databaseUrl, run, events);
    const settler = startSettler(space);
    let load: { perMessage: number[]; ackMs: number[]; publishedAtMs: number };
    let settleLagMs: number;
    try {
      await settler.ready;
      load = await usageLoad(space, file.path, ['--mode', 'live', '--rate', String(rate)]);
      const deadline = Date.now() + 60_000;
      while (settler.settled() < events && Date.now() < deadline) await sleep(5);
      const lastAt = settler.transactions.at(-1)?.at ?? load.publishedAtMs;
      settleLagMs = settler.settled() >= events ? Math.max(0, lastAt - load.publishedAtMs) : 60_000;
    } finally {
      await settler.stop();
    }
    const settled = settler.settled();
    const verification = settled >= events ? await verifyLedger(db) : `INCOMPLETE: ${settled} of ${events} settled`;
    await db.destroy();
    return {
      rate, seconds, events, perMessage: distribution(load.perMessage), perTransaction: distribution(settler.transactions.map((one) => one.events)),
      publishAckMs: distribution(load.ackMs), settleLagMs, verification,
    };
  } finally {
    await file.remove();
    await space.drop();
  }
}

export interface AdmitFigures { accounts: number; callers: number; admits: number; admitsPerSecond: number; latencyMs: Distribution; refused: number; errors: string[] }

async function admitLatency(callers: number, seconds: number, accounts: number, logger: Logger): Promise<AdmitFigures> {
  const space = await scratch(logger);
  let child: ChildProcess | undefined;
  try {
    const port = await freePort();
    child = spawn(process.execPath, [ledgerMain], {
      cwd: root,
      env: {
        PATH: process.env.PATH ?? '', GRPC_LISTEN: `127.0.0.1:${port}`, DATABASE_URL: space.databaseUrl, NATS_URL: natsUrl,
        NATS_NAMESPACE: space.namespace, LOG_LEVEL: 'warn', SWEEP_INTERVAL_MS: '600000',
        GATEWAY_INTERNAL_TOKEN: BENCH_INTERNAL_TOKEN, GATEWAY_ADMIN_TOKEN: BENCH_ADMIN_TOKEN,
        // Its main requires the webhook secrets' key (any 32 bytes: the bench makes no webhooks).
        WEBHOOK_SECRET_KEY: randomBytes(32).toString('base64'),
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    // The admin credential: the set-up tops accounts up (an admin RPC); admits cost the same with either.
    const client = createClient(LedgerServiceClient, LedgerServiceService, `127.0.0.1:${port}`, { credential: BENCH_ADMIN_TOKEN });
    for (let attempt = 0; ; attempt++) {
      try {
        await client.getBalance({ accountId: 'warm-up' }, { deadlineMs: 1_000 });
        break;
      } catch (error) {
        if (attempt > 100) throw error;
        await sleep(100);
      }
    }
    const run = `ad${suffix()}`;
    for (let account = 0; account < accounts; account++) {
      await client.topUp({ accountId: `acc_${account}`, credits: '100000', idempotencyKey: `${run}-topup-${account}`, note: 'bench' });
    }
    let sequence = 0;
    const latencies: number[] = [];
    const errors = new Map<string, number>();
    let refused = 0;
    let measuring = false;
    let stop = false;
    const caller = async (index: number) => {
      while (!stop) {
        const id = `${run}-${sequence++}`;
        const account = (index + sequence) % accounts;
        const started = performance.now();
        try {
          await client.admit({
            context: { requestId: id, accountId: `acc_${account}`, keyId: `key_${(index + sequence) % KEYS}` }, modelId: 'acme/chat-small',
            paid: true, tier: 'tier-1', limitGroup: 'default', requestsPerMinute: 10_000_000, requestsPerDay: 100_000_000,
          }, { requestId: id, deadlineMs: 10_000 });
          if (measuring) latencies.push(performance.now() - started);
        } catch (error) {
          if (!measuring) continue;
          const message = (error as Error).message.slice(0, 80);
          errors.set(message, (errors.get(message) ?? 0) + 1);
          refused++;
        }
      }
    };
    const workers = Array.from({ length: callers }, (_, index) => caller(index));
    await sleep(1_000); // warm-up: connections, plans, caches
    measuring = true;
    const started = performance.now();
    await sleep(seconds * 1_000);
    measuring = false;
    const elapsed = (performance.now() - started) / 1000;
    stop = true;
    await Promise.all(workers);
    client.close();
    return {
      accounts, callers, admits: latencies.length, admitsPerSecond: latencies.length / elapsed, latencyMs: distribution(latencies), refused,
      errors: [...errors].map(([message, count]) => `${count}× ${message}`),
    };
  } finally {
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child!.once('exit', resolve));
      child.kill('SIGTERM');
      await Promise.race([exited, sleep(5_000)]);
    }
    await space.drop();
  }
}

export interface LedgerBenchFigures { backlog: BacklogFigures[]; live?: LiveFigures; admit: AdmitFigures[] }

export async function runLedgerBench(options: LedgerBenchOptions): Promise<LedgerBenchFigures> {
  const logger = createLogger('ledger-bench', process.env.LOG_LEVEL ?? 'warn');
  const { log } = options;
  const round = (value: number) => Math.round(value).toLocaleString('en-US');
  const figures: LedgerBenchFigures = { backlog: [], admit: [] };

  for (const kind of options.phases.has('backlog') ? (['group-commit', 'single'] as const) : []) {
    const events = kind === 'single' ? Math.min(options.backlogEvents, 20_000) : options.backlogEvents;
    log(`settlement from a backlog of ${round(events)} ${kind} usage events ...`);
    const result = await settlementFromBacklog(kind, events, logger);
    figures.backlog.push(result);
    log(`  ${round(result.eventsPerSecond)} events/s settled (${round(result.steadyEventsPerSecond)} after the first transaction), ` +
      `${result.transactions} transactions of ${result.eventsPerTransaction.toFixed(0)} events; published at ${round(result.publishedPerSecond)} events/s; ${result.verification}`);
  }

  if (options.phases.has('live')) {
    log(`live load: ${round(options.liveRate)} events/s for ${options.liveSeconds} s through the group-commit publisher ...`);
    const live = await liveLoad(options.liveRate, options.liveSeconds, logger);
    figures.live = live;
    const show = (d: Distribution) => `mean ${d.mean.toFixed(1)}, p50 ${d.p50}, p90 ${d.p90}, max ${d.max} (${d.count})`;
    log(`  events per usage message: ${show(live.perMessage)}`);
    log(`  events per settlement transaction: ${show(live.perTransaction)}`);
    log(`  publish → ack: p50 ${live.publishAckMs.p50.toFixed(2)} ms, p99 ${live.publishAckMs.p99.toFixed(2)} ms; settled ${live.settleLagMs.toFixed(0)} ms after the last ack; ${live.verification}`);
  }

  for (const accounts of options.phases.has('admit') ? [ACCOUNTS, 1] : []) {
    log(`Admit: ${options.admitCallers} concurrent callers over ${accounts} account(s), ${options.admitSeconds} s, ledger in its own process ...`);
    const admit = await admitLatency(options.admitCallers, options.admitSeconds, accounts, logger);
    figures.admit.push(admit);
    log(`  ${round(admit.admitsPerSecond)} admits/s, p50 ${admit.latencyMs.p50.toFixed(2)} ms, p99 ${admit.latencyMs.p99.toFixed(2)} ms, max ${admit.latencyMs.max.toFixed(2)} ms` +
      `${admit.refused ? `; ${admit.refused} failed: ${admit.errors.join('; ')}` : ''}`);
  }
  return figures;
}

export function ledgerBenchOptions(argv: string[]): LedgerBenchOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: 'boolean', default: false },
      events: { type: 'string' },
      callers: { type: 'string' },
      rate: { type: 'string' },
      ledger: { type: 'boolean', default: false },
      only: { type: 'string' },
    },
    strict: false,
  });
  const bounded = (text: unknown, fallback: number, min: number, max: number, name: string) => {
    const value = text === undefined ? fallback : Number(text);
    if (!Number.isFinite(value) || value < min || value > max) throw new Error(`--${name} must be between ${min} and ${max}`);
    return value;
  };
  const quick = values.quick === true;
  const all = ['backlog', 'live', 'admit'] as const;
  const only = typeof values.only === 'string' ? values.only.split(',') : [...all];
  const unknown = only.filter((phase) => !(all as readonly string[]).includes(phase));
  if (unknown.length > 0) throw new Error(`--only takes ${all.join(', ')}; not ${unknown.join(', ')}`);
  return {
    phases: new Set(only as Array<(typeof all)[number]>),
    backlogEvents: bounded(values.events, quick ? 20_000 : 100_000, 1_000, 1_000_000, 'events'),
    liveRate: bounded(values.rate, 5_000, 100, 50_000, 'rate'),
    liveSeconds: quick ? 2 : 5,
    admitCallers: bounded(values.callers, 500, 1, 2_000, 'callers'),
    admitSeconds: quick ? 2 : 5,
    log: (line) => process.stdout.write(`[ledger-bench] ${line}\n`),
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    await runLedgerBench(ledgerBenchOptions(process.argv.slice(2)));
    process.exit(0);
  } catch (error) {
    process.stderr.write(`ledger bench failed: ${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  }
}
