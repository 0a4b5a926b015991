import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createClient, createLogger, NatsEventBus } from '@gateway/platform';
import { createDatabase, sql } from '@gateway/platform/db';
import { AuthServiceClient, AuthServiceService, LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { startStack } from '../stack.js';
import { createFastUpstream } from './fast-upstream.js';
import { summarize, type LatencySummary } from './statistics.js';

/**
 * `npm run bench -- --batch [--quick] [--lines N] [--duration S] [--connections C] [--no-yield]`: issue 41's target
 * "interactive p50 latency during a running batch within 10 % of idle". One `npm start` composition (every
 * service in this process, as npm start runs them) on a scratch database and NATS namespace, the bench's
 * fast upstream (constant answers, no think time) behind one model with batch prices. Interactive chat
 * completions from C closed-loop callers are timed for S seconds with nothing else running (idle), then for
 * S seconds while a batch of N lines of another account runs through the same services and upstream; the
 * batch is cancelled afterwards. The figures depend on the machine and on what else runs on it.
 */

const postgresAdminUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const natsUrl = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const MODEL = 'bench/batchable';

export interface BatchBenchOptions {
  lines: number;
  durationSeconds: number;
  connections: number;
  /** false: the jobs service does not give way to interactive traffic (the A/B of its priority gate). */
  yieldToInteractive: boolean;
  log(line: string): void;
}

export function batchBenchOptions(argv: string[]): BatchBenchOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      batch: { type: 'boolean' }, quick: { type: 'boolean', default: false }, lines: { type: 'string' }, duration: { type: 'string' }, connections: { type: 'string' },
      'no-yield': { type: 'boolean', default: false },
    },
    strict: true,
  });
  const bounded = (text: string | undefined, fallback: number, min: number, max: number, name: string) => {
    const value = text === undefined ? fallback : Number(text);
    if (!Number.isInteger(value) || value < min || value > max) throw new Error(`--${name} must be an integer between ${min} and ${max}`);
    return value;
  };
  return {
    lines: bounded(values.lines, values.quick ? 2_000 : 20_000, 10, 50_000, 'lines'),
    durationSeconds: bounded(values.duration, values.quick ? 5 : 15, 1, 120, 'duration'),
    connections: bounded(values.connections, 4, 1, 64, 'connections'),
    yieldToInteractive: !values['no-yield'],
    log: (line) => console.log(line),
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function catalogYaml(upstreamUrl: string): string {
  return `
startups:
  - { id: bench, display_name: Bench }
providers:
  - { id: fast, kind: openai, base_url: ${upstreamUrl}, api_key_env: BENCH_UPSTREAM_KEY }
limit_groups:
  - id: main
    tiers: { tier-1: { minute: 1000000 } }
models:
  - id: ${MODEL}
    owned_by: bench
    created: 1767225600
    input_modalities: [text]
    output_modalities: [text]
    context_window: 8000
    max_output_tokens: 64
    supported_parameters: [max_completion_tokens]
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002" }
    batch_pricing: { per_input_token: "0.0000005", per_output_token: "0.000001" }
    limit_group: main
    offers:
      - { provider: fast, upstream_model: bench-upstream-model, endpoints: [chat.completions] }
`;
}

/** Interactive chat completions from `connections` closed-loop callers for `seconds`: their latencies, ms. */
async function interactive(url: string, apiKey: string, connections: number, seconds: number): Promise<{ summary: LatencySummary; failures: number }> {
  const samples: number[] = [];
  let failures = 0;
  const until = Date.now() + seconds * 1000;
  const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello.' }], max_completion_tokens: 16 });
  await Promise.all(Array.from({ length: connections }, async () => {
    while (Date.now() < until) {
      const started = performance.now();
      const response = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' }, body });
      await response.arrayBuffer();
      if (response.status === 200) samples.push(performance.now() - started);
      else failures++;
    }
  }));
  return { summary: summarize(samples), failures };
}

export async function runBatchBench(options: BatchBenchOptions): Promise<void> {
  const logger = createLogger('batch-bench', process.env.LOG_LEVEL === 'debug' ? 'debug' : 'warn');
  const suffix = randomBytes(4).toString('hex');
  const databaseName = `gw_batch_bench_${suffix}`;
  const admin = createDatabase({ url: postgresAdminUrl, schema: 'public', maxConnections: 1, applicationName: 'batch-bench' });
  await sql.raw(`create database "${databaseName}"`).execute(admin);
  const databaseUrl = new URL(postgresAdminUrl);
  databaseUrl.pathname = `/${databaseName}`;
  const bus = await NatsEventBus.connect(natsUrl, logger, { name: 'batch-bench', namespace: `bb${suffix}` });
  const directory = await mkdtemp(join(tmpdir(), 'gateway-batch-bench-'));
  const upstream = createFastUpstream({ firstChunkGapMs: 0, geminiApiKey: 'unused', awsAccessKeyId: 'unused' });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`;
  let stack: Awaited<ReturnType<typeof startStack>> | undefined;
  try {
    const configPath = join(directory, 'gateway.yaml');
    await writeFile(configPath, catalogYaml(upstreamUrl));
    stack = await startStack({
      databaseUrl: databaseUrl.toString(), bus, logger, configPath, keyHashSecret: `batch-bench-${suffix}-0123456789abcdef`, port: 0,
      providerSecrets: { BENCH_UPSTREAM_KEY: 'sk-bench' },
      ...(options.yieldToInteractive ? {} : { jobs: { batches: { priority: false } } }),
    });
    const auth = createClient(AuthServiceClient, AuthServiceService, stack.addresses.auth);
    const ledger = createClient(LedgerServiceClient, LedgerServiceService, stack.addresses.ledger);
    const account = async (name: string) => {
      const created = await auth.createAccount({ name, tier: 'tier-1', idempotencyKey: `${name}-${suffix}` });
      const accountId = created.account!.id;
      await ledger.topUp({ accountId, credits: '100000', idempotencyKey: `${name}-${suffix}-topup`, note: 'batch bench' });
      const response = await fetch(`${stack!.url}/v1/account/keys`, {
        method: 'POST', headers: { authorization: `Bearer ${created.provisioningKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: `${name}-key`, credit_limit: null }),
      });
      if (response.status !== 201) throw new Error(`key create ${response.status}: ${await response.text()}`);
      return ((await response.json()) as { key: string }).key;
    };
    const interactiveKey = await account('interactive');
    const batchKey = await account('batcher');

    options.log(`batch bench: ${options.connections} interactive callers, ${options.durationSeconds} s per phase, a batch of ${options.lines} lines (one process, npm start composition; ${options.yieldToInteractive ? 'the batch gives way to interactive traffic' : 'priority gate off: --no-yield'})`);
    await interactive(stack.url, interactiveKey, options.connections, 2); // warm-up
    const idle = await interactive(stack.url, interactiveKey, options.connections, options.durationSeconds);

    const text = Array.from({ length: options.lines }, (_, index) =>
      JSON.stringify({ custom_id: `line-${index}`, method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, messages: [{ role: 'user', content: `Line ${index}: say hello.` }], max_completion_tokens: 16 } })).join('\n');
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', new Blob([text]), 'bench.jsonl');
    const uploaded = await fetch(`${stack.url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${batchKey}` }, body: form });
    if (uploaded.status !== 200) throw new Error(`upload ${uploaded.status}: ${await uploaded.text()}`);
    const fileId = ((await uploaded.json()) as { id: string }).id;
    const created = await fetch(`${stack.url}/v1/batches`, {
      method: 'POST', headers: { authorization: `Bearer ${batchKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input_file_id: fileId, endpoint: '/v1/chat/completions', completion_window: '24h' }),
    });
    if (created.status !== 200) throw new Error(`batch create ${created.status}: ${await created.text()}`);
    const batchId = ((await created.json()) as { id: string }).id;
    const batchState = async () => (await (await fetch(`${stack!.url}/v1/batches/${batchId}`, { headers: { authorization: `Bearer ${batchKey}` } })).json()) as { status: string; request_counts: { completed: number; failed: number } };
    for (let state = await batchState(); state.status === 'validating'; state = await batchState()) await sleep(100);
    // Lines are running: measure while they do.
    const before = await batchState();
    const during = await interactive(stack.url, interactiveKey, options.connections, options.durationSeconds);
    const after = await batchState();
    const linesDone = after.request_counts.completed + after.request_counts.failed - (before.request_counts.completed + before.request_counts.failed);
    // The batch alone again: the pace it takes back once interactive callers stop.
    await sleep(1_000);
    const aloneFrom = await batchState();
    await sleep(3_000);
    const aloneTo = await batchState();
    const aloneLines = aloneTo.request_counts.completed + aloneTo.request_counts.failed - (aloneFrom.request_counts.completed + aloneFrom.request_counts.failed);
    await fetch(`${stack.url}/v1/batches/${batchId}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${batchKey}` } });

    const row = (name: string, result: { summary: LatencySummary; failures: number }) =>
      `${name.padEnd(16)} ${String(result.summary.count).padStart(8)} ${result.summary.p50Ms.toFixed(2).padStart(9)} ${result.summary.p90Ms.toFixed(2).padStart(9)} ${result.summary.p99Ms.toFixed(2).padStart(9)} ${String(result.failures).padStart(9)}`;
    options.log(`${'phase'.padEnd(16)} ${'requests'.padStart(8)} ${'p50 ms'.padStart(9)} ${'p90 ms'.padStart(9)} ${'p99 ms'.padStart(9)} ${'non-200'.padStart(9)}`);
    options.log(row('idle', idle));
    options.log(row('batch running', during));
    const ratio = during.summary.p50Ms / idle.summary.p50Ms;
    options.log(`batch lines finished during the measured phase: ${linesDone} (${(linesDone / options.durationSeconds).toFixed(1)} lines/s; the batch ended ${after.status}); alone afterwards: ${(aloneLines / 3).toFixed(1)} lines/s`);
    options.log(`interactive p50 during the batch / idle: ${ratio.toFixed(3)} — target ≤ 1.10: ${ratio <= 1.1 ? 'met' : 'NOT met'}${after.status !== 'in_progress' ? ' (the batch did not run the whole phase: raise --lines)' : ''}`);
    auth.close();
    ledger.close();
  } finally {
    await stack?.stop().catch(() => undefined);
    await new Promise((resolve) => upstream.close(resolve));
    await bus.destroyStream().catch(() => undefined);
    await bus.close().catch(() => undefined);
    await rm(directory, { recursive: true, force: true });
    await sql.raw(`drop database if exists "${databaseName}" with (force)`).execute(admin).catch(() => undefined);
    await admin.destroy();
  }
}
