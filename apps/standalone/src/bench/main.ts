#!/usr/bin/env node
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { parseWires, wireModel, type WireName } from './bench-wires.js';
import { startBareChain } from './bare-chain.js';
import { BenchChild, killAllChildrenNow, stopAllChildren } from './child-processes.js';
import { DEFAULT_STREAM_LOAD, formatConcurrentStreams, levelFigures, pacedStreamBody, parseLevels, sampleMemoryPeaks, type StreamLevelFigures, type StreamLoadOptions } from './concurrent-streams.js';
import { summarizeProfile, type CpuProfile } from './cpu-profile.js';
import { BENCH_MODEL, SERVICES, startGatewayCluster, type GatewayCluster, type ServiceName } from './gateway-cluster.js';
import type { LoadJob, LoadResult } from './load-generator.js';
import { clockTicksPerSecond, cpuSecondsBetween, groupMemory, readMachineCpu, snapshotCpu, type ProcessGroup } from './proc-stat.js';
import { PEERS, startNpmStartTarget, startPeer, type ExtraTarget, type MeasuredTarget, type PeerName } from './peers.js';
import { formatCpuSplit, formatDialectTable, formatSideBySide, formatTable, verdicts, type BenchFigures, type DialectFigures, type SideBySideColumn, type TargetFigures } from './report.js';
import { formatWireTable, type WireRow, type WireSample } from './wire-report.js';

/**
 * `npm run bench`: the bare keep-alive proxy and the gateway (every service its own process, real
 * Postgres and NATS) side by side in front of one fake upstream, each phase driven by a load
 * generator in its own process. See docs/performance.md. `--profile` instead runs the gateway under
 * `node --cpu-prof` and prints where its processes spend CPU.
 */

const HELP = `usage: npm run bench -- [options]
  --quick              short smoke run (about 2 s per phase)
  --connections N      closed-loop connections (default 64, at most 512)
  --duration S         seconds per measured phase (default 10, at most 60)
  --warmup S           seconds of load before each measured phase, not measured (default 3, at most 60)
  --accounts N         accounts (one key each) the gateway load is spread over (default 1, at most 64)
  --rate R             fixed rate of the latency phase, req/s (default 500, at most 5000)
  --only a,b           run only these phases of max, rate, streams, ttfb, concurrent-streams (the table shows what ran)
  --stream-levels a,b  concurrent-streams: the numbers of streams held open at once (default 32,128,512)
  --stream-deltas D    concurrent-streams: content deltas per stream from the upstream (default 64)
  --stream-gap-ms G    concurrent-streams: ms between two deltas (default 20)
  --stream-duration S  concurrent-streams: seconds per level, each caller starting its next stream when one
                       ends (default 5, --quick 2); the warm-up is one stream per caller
  --stream-burst       concurrent-streams: start the measured streams all at once (default: callers start spread
                       over one stream's length, deltas x gap, as a front end's users arrive)
  --dialect a,b        the gateway's request dialects to measure, each over the same phases: chat (default),
                       messages, responses; the first is the one compared with the bare proxy, the others
                       are reported against it side by side
  --wire a,b           also serve the bench model over these provider wires and measure each over the same
                       phases: openai (always, the reference), gemini, bedrock (the fast upstream answers
                       generateContent and Converse; bedrock requests are signed with static test keys)
  --rounds N           with --wire: measure every wire N times per phase, alternating, and report the median
                       (default 1, at most 9)
  --json FILE          also write the raw results as JSON
  --profile            profile the gateway under load (node --cpu-prof) instead of the comparison, over the
                       first phase --only names (default max; concurrent-streams: its last level)
  --profile-services a,b  services to profile (default edge,routing,ledger,auth); with --wire, the last
                       wire named is profiled
  --admission MODE     the edge's admission: leased (default, leased budgets) or ledger (one Ledger.Admit per request)
  --router-transport T edge to routing: exchange (default, one multiplexed Router.Exchange call) or calls (a call per request)
  --npm-start          also measure the gateway as \`npm start\` runs it (one process, embedded Postgres)
  --bare-chain         also measure two bare proxies in series (client, proxy, proxy, upstream): the floor of
                       any design with two processes on the request path, as the gateway's edge and routing
  --peer NAME          also measure a peer gateway installed from npm: portkey (@portkey-ai/gateway ${PEERS.portkey.version})
  --ledger             the ledger bench instead (with --quick, --events N, --callers N, --rate R, --only backlog,live,admit)
  --batch              interactive latency idle and while a batch runs instead (with --quick, --lines N, --duration S, --connections C)
  --help`;

const root = fileURLToPath(new URL('../../../../', import.meta.url));
const here = fileURLToPath(new URL('./', import.meta.url));
const postgresAdminUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const natsUrl = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

// `npm run bench -- --ledger [--quick]`: the ledger's own bench instead (settlement from a backlog,
// batch sizes under live load, Admit latency under 500 callers; see ledger-bench.ts).
if (process.argv.includes('--ledger')) {
  const { ledgerBenchOptions, runLedgerBench } = await import('./ledger-bench.js');
  await runLedgerBench(ledgerBenchOptions(process.argv.slice(2)));
  process.exit(0);
}

// `npm run bench -- --batch [--quick]`: interactive latency idle and while a large batch runs (issue 41; see batch-bench.ts).
if (process.argv.includes('--batch')) {
  const { batchBenchOptions, runBatchBench } = await import('./batch-bench.js');
  await runBatchBench(batchBenchOptions(process.argv.slice(2)));
  process.exit(0);
}

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    connections: { type: 'string' },
    duration: { type: 'string' },
    warmup: { type: 'string' },
    rate: { type: 'string' },
    only: { type: 'string' },
    accounts: { type: 'string' },
    json: { type: 'string' },
    profile: { type: 'boolean', default: false },
    'profile-services': { type: 'string' },
    admission: { type: 'string' },
    'router-transport': { type: 'string' },
    dialect: { type: 'string' },
    wire: { type: 'string' },
    rounds: { type: 'string' },
    'npm-start': { type: 'boolean', default: false },
    'bare-chain': { type: 'boolean', default: false },
    peer: { type: 'string' },
    'stream-levels': { type: 'string' },
    'stream-deltas': { type: 'string' },
    'stream-gap-ms': { type: 'string' },
    'stream-duration': { type: 'string' },
    'stream-burst': { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  process.stdout.write(`${HELP}\n`);
  process.exit(0);
}

const bounded = (text: string | undefined, fallback: number, min: number, max: number, name: string) => {
  const value = text === undefined ? fallback : Number(text);
  if (!Number.isFinite(value) || value < min || value > max) throw new Error(`--${name} must be between ${min} and ${max}`);
  return value;
};
const quick = args.quick;
if (args.admission !== undefined && args.admission !== 'ledger' && args.admission !== 'leased') throw new Error('--admission must be ledger or leased');
const admission = (args.admission ?? 'leased') as 'ledger' | 'leased';
if (args['router-transport'] !== undefined && args['router-transport'] !== 'exchange' && args['router-transport'] !== 'calls') throw new Error('--router-transport must be exchange or calls');
const routerTransport = (args['router-transport'] ?? 'exchange') as 'exchange' | 'calls';
const connections = Math.round(bounded(args.connections, 64, 1, 512, 'connections'));
const durationMs = bounded(args.duration, quick ? 2 : 10, 1, 60, 'duration') * 1000;
const warmupMs = bounded(args.warmup, quick ? 1 : 3, 0, 60, 'warmup') * 1000;
const accounts = Math.round(bounded(args.accounts, 1, 1, 64, 'accounts'));
const rate = bounded(args.rate, 500, 1, 5_000, 'rate');
const ttfbRequests = quick ? 50 : 300;
const PHASES = ['max', 'rate', 'streams', 'ttfb'] as const;
type PhaseName = (typeof PHASES)[number];
const onlyPhases = (args.only ?? PHASES.join(',')).split(',').map((name) => name.trim()).filter(Boolean);
/** Issue 39's phase: N concurrent paced streams per level, its own table (concurrent-streams.ts). */
const STREAM_LOAD_PHASE = 'concurrent-streams';
for (const name of onlyPhases) if (!(PHASES as readonly string[]).includes(name) && name !== STREAM_LOAD_PHASE) throw new Error(`--only takes phases among ${PHASES.join(', ')}, ${STREAM_LOAD_PHASE}; got ${name}`);
const streamLoad: StreamLoadOptions = {
  levels: parseLevels(args['stream-levels']),
  deltas: Math.round(bounded(args['stream-deltas'], DEFAULT_STREAM_LOAD.deltas, 1, 4_096, 'stream-deltas')),
  gapMs: Math.round(bounded(args['stream-gap-ms'], DEFAULT_STREAM_LOAD.gapMs, 0, 1_000, 'stream-gap-ms')),
  stallMs: DEFAULT_STREAM_LOAD.stallMs,
};
const streamDurationMs = bounded(args['stream-duration'], quick ? 2 : 5, 1, 60, 'stream-duration') * 1000;
/** Callers of a level start spread over one stream's length (bounded by the measured part), unless --stream-burst. */
const streamStaggerMs = args['stream-burst'] ? 0 : Math.min(streamLoad.deltas * streamLoad.gapMs, streamDurationMs);
const runsStreamLoad = onlyPhases.includes(STREAM_LOAD_PHASE);
const DIALECTS = ['chat', 'messages', 'responses'] as const;
type DialectName = (typeof DIALECTS)[number];
const dialects = (args.dialect ?? 'chat').split(',').map((name) => name.trim()).filter(Boolean) as DialectName[];
for (const name of dialects) if (!(DIALECTS as readonly string[]).includes(name)) throw new Error(`--dialect takes dialects among ${DIALECTS.join(', ')}; got ${name}`);
if (dialects.length === 0 || new Set(dialects).size !== dialects.length) throw new Error('--dialect needs distinct dialects');
const wires = parseWires(args.wire);
const rounds = wires.length > 1 ? Math.round(bounded(args.rounds, 1, 1, 9, 'rounds')) : 1;
const peers = (args.peer ?? '').split(',').map((name) => name.trim()).filter(Boolean) as PeerName[];
for (const name of peers) if (!(name in PEERS)) throw new Error(`--peer takes ${Object.keys(PEERS).join(', ')}; got ${name}`);
/** Longest the ledger may take to settle the requests of a phase before its CPU is read. */
const SETTLE_TIMEOUT_MS = 60_000;

const log = (text: string) => process.stderr.write(`[bench] ${text}\n`);

const PROMPT = 'Say hello to the bench.';
interface DialectRequest { path: string; body: string; streamBody: string; content: string; done: string }

/**
 * The same exchange in each dialect, naming `model`: one user line, at most 16 tokens out. `content` marks
 * the first streamed content event of the dialect (the ttfb phase times it); `done` the end of a whole stream.
 */
function dialectRequests(model: string): Record<DialectName, DialectRequest> {
  const messages = [{ role: 'user', content: PROMPT }];
  return {
    chat: {
      path: '/v1/chat/completions',
      body: JSON.stringify({ model, messages, max_tokens: 16 }),
      streamBody: JSON.stringify({ model, messages, max_tokens: 16, stream: true, stream_options: { include_usage: true } }),
      content: '"content":"[^"]',
      done: '[DONE]',
    },
    messages: {
      path: '/v1/messages',
      body: JSON.stringify({ model, max_tokens: 16, messages }),
      streamBody: JSON.stringify({ model, max_tokens: 16, messages, stream: true }),
      content: '"text_delta","text":"[^"]',
      done: 'event: message_stop',
    },
    responses: {
      path: '/v1/responses',
      body: JSON.stringify({ model, max_output_tokens: 16, input: PROMPT }),
      streamBody: JSON.stringify({ model, max_output_tokens: 16, input: PROMPT, stream: true }),
      content: '"type":"response\\.output_text\\.delta"[^\\n]*"delta":"[^"]',
      done: 'event: response.completed',
    },
  };
}
/** Each wire's requests: the same bodies naming the bench model of that wire. */
const WIRE_REQUESTS = new Map(wires.map((wire) => [wire, dialectRequests(wireModel(BENCH_MODEL, wire))]));
const requestOf = (dialect: DialectName, wire: WireName = 'openai') => WIRE_REQUESTS.get(wire)![dialect];

interface Target extends MeasuredTarget {
  /** Waits until the target has finished the work of the requests already answered (ledger settlement). */
  settle(): Promise<void>;
  /** Running totals diffed around each phase (gateway: charges, settlement transactions, usage messages). */
  counters?(): Promise<Record<string, number>>;
}

interface PhaseOutcome {
  result: LoadResult;
  /** CPU seconds per process group of the target over the measured part. */
  cpuSeconds: Map<string, number>;
  /** The kernel's part of it (syscalls; loopback TCP is processed in the sender's and receiver's kernel time). */
  systemSeconds: Map<string, number>;
  /** The load generator's and upstream's CPU seconds, to judge whether they were the bottleneck. */
  observerCpuSeconds: Map<string, number>;
  /** Differences of the target's counters over the measured part. */
  counters?: Record<string, number>;
  /** CPU the rest of the machine used during the measured part, in cores (noise from other work). */
  othersCores: number;
  /** The measured part on the monotonic clock (µs), to cut profiles to it. */
  window: { startMicros: number; endMicros: number };
  /** Memory (PSS) of each process group right at the end of the load, bytes. */
  memoryBytes: Map<string, number>;
}

async function runPhase(target: Target, job: Omit<LoadJob, 'origin' | 'headerSets'>, observers: ProcessGroup[]): Promise<PhaseOutcome> {
  const headerSets = target.apiKeys.map((apiKey) => ({ ...target.headers, 'content-type': 'application/json', authorization: `Bearer ${apiKey}` }));
  const fullJob: LoadJob = { ...job, origin: target.origin, headerSets };
  const generator = new BenchChild(`load-${target.name}-${job.mode}`, { args: [join(here, 'load-generator-process.js'), JSON.stringify(fullJob)], cwd: root, env: { PATH: process.env.PATH ?? '' }, stdin: true });
  try {
    const failedOr = (name: string) => (event: Record<string, unknown>) => event.event === name || event.event === 'failed';
    const warm = await generator.waitFor(failedOr('warm'), job.warmupMs + 120_000);
    if (warm.event === 'failed') throw new Error(`load generator failed: ${String(warm.message)}`);
    await target.settle();
    const countersBefore = await target.counters?.();
    const observerGroups = [...observers, { name: 'load generator', pids: [generator.pid] }];
    const beforeGroups = await target.groups();
    const before = snapshotCpu([...beforeGroups, ...observerGroups]);
    const machineBefore = readMachineCpu();
    const startMicros = Number(process.hrtime.bigint() / 1000n);
    generator.send('go');
    const done = await generator.waitFor(failedOr('result'), job.durationMs + 120_000);
    if (done.event === 'failed') throw new Error(`load generator failed: ${String(done.message)}`);
    const endMicros = Number(process.hrtime.bigint() / 1000n);
    const observerAfter = snapshotCpu(observerGroups);
    const targetAtEnd = snapshotCpu(beforeGroups);
    const machineAfter = readMachineCpu();
    const memoryBytes = groupMemory(await target.groups());
    await target.settle();
    const afterGroups = await target.groups();
    const after = snapshotCpu(afterGroups);
    const countersAfter = await target.counters?.();
    const counters = countersBefore && countersAfter
      ? Object.fromEntries(Object.entries(countersAfter).map(([name, value]) => [name, value - (countersBefore[name] ?? 0)]))
      : undefined;
    const hz = clockTicksPerSecond();
    const cpuSeconds = cpuSecondsBetween(before, after, hz);
    const systemSeconds = cpuSecondsBetween(before, after, hz, 'systemTicks');
    const observerCpuSeconds = cpuSecondsBetween(before, observerAfter, hz);
    // What the rest of the machine (other users of these 2 cores) took meanwhile, in cores.
    const wallSeconds = (endMicros - startMicros) / 1e6;
    const ours = sum(cpuSecondsBetween(before, targetAtEnd, hz).values()) + sum(observerCpuSeconds.values());
    const othersCores = machineBefore && machineAfter
      ? Math.max(0, (machineAfter.busyTicks - machineBefore.busyTicks) / hz - ours) / wallSeconds
      : Number.NaN;
    return {
      result: done.result as LoadResult,
      cpuSeconds,
      systemSeconds,
      observerCpuSeconds,
      othersCores,
      ...(counters ? { counters } : {}),
      window: { startMicros, endMicros },
      memoryBytes,
    };
  } finally {
    generator.process.stdin?.end();
    await generator.stop(5_000);
  }
}

const sum = (values: Iterable<number>) => [...values].reduce((total, value) => total + value, 0);

/** Two requests (one whole, one streamed) a target must answer right before it is measured. */
async function checkTarget(target: Target, dialect: DialectName = 'chat', { stream = true, wire = 'openai' as WireName } = {}): Promise<void> {
  const request = requestOf(dialect, wire);
  const name = wire === 'openai' ? dialect : `${dialect}, ${wire} wire`;
  const headers = { ...target.headers, 'content-type': 'application/json', authorization: `Bearer ${target.apiKeys[0]}` };
  const plain = await fetch(`${target.origin}${request.path}`, { method: 'POST', headers, body: request.body });
  const plainText = await plain.text();
  if (plain.status !== 200 || !plainText.includes('Hello from the bench upstream.')) throw new Error(`${target.name} (${name}): answered ${plain.status}: ${plainText.slice(0, 300)}`);
  if (!stream) return;
  const streamed = await fetch(`${target.origin}${request.path}`, { method: 'POST', headers, body: request.streamBody });
  const streamText = await streamed.text();
  if (streamed.status !== 200 || !streamText.includes(request.done) || !new RegExp(request.content).test(streamText)) {
    throw new Error(`${target.name} (${name}): stream answered ${streamed.status}: ${streamText.slice(0, 300)}`);
  }
}

/** The jobs of the three phases for one dialect's requests. */
function phaseJobs(dialect: DialectName, wire: WireName = 'openai'): Record<PhaseName, Omit<LoadJob, 'origin' | 'headerSets'>> {
  const request = requestOf(dialect, wire);
  return {
    max: { mode: 'closed', path: request.path, body: request.body, connections, warmupMs, durationMs },
    rate: { mode: 'open', path: request.path, body: request.body, connections: 256, warmupMs, durationMs, rate, maxInFlight: 2_000 },
    streams: {
      mode: 'open', path: request.path, body: request.streamBody, connections: 256, warmupMs, durationMs, rate, maxInFlight: 2_000, stream: true, contentPattern: request.content,
    },
    ttfb: { mode: 'ttfb', path: request.path, body: request.streamBody, connections: 1, warmupMs: Math.min(warmupMs, 1_000), durationMs, requests: ttfbRequests, contentPattern: request.content },
  };
}

/** The concurrent-streams job at one level: `level` callers, each holding one paced stream at a time. */
function streamLevelJob(level: number): Omit<LoadJob, 'origin' | 'headerSets'> {
  const request = requestOf('chat');
  return {
    mode: 'concurrent', path: request.path, body: pacedStreamBody(BENCH_MODEL, streamLoad), connections: level,
    // The warm-up is one whole stream per caller (load-generator.ts), none with --warmup 0.
    warmupMs: warmupMs > 0 ? 1 : 0, durationMs: streamDurationMs, contentPattern: request.content, donePattern: request.done, stallMs: streamLoad.stallMs,
    staggerMs: streamStaggerMs,
  };
}

/** The concurrent-streams phase on one target, every level in turn; memory sampled under the load. */
async function runStreamLevels(target: Target, observers: ProcessGroup[]): Promise<{ rows: StreamLevelFigures[]; outcomes: PhaseOutcome[] }> {
  const rows: StreamLevelFigures[] = [];
  const outcomes: PhaseOutcome[] = [];
  for (const level of streamLoad.levels) {
    log(`phase ${STREAM_LOAD_PHASE} (${level} streams) on ${target.name}...`);
    const sampler = sampleMemoryPeaks(() => target.groups());
    const outcome = await runPhase(target, streamLevelJob(level), observers).finally(() => sampler.stop());
    const peaks = await sampler.stop();
    outcomes.push(outcome);
    const row = levelFigures(target.name, level, outcome.result, outcome.cpuSeconds, peaks, outcome.othersCores);
    rows.push(row);
    log(`${describePhase(`${STREAM_LOAD_PHASE} ${level} ${target.name}`, outcome)}; ${row.completed} of ${row.started} streams complete, ${row.stalls} stalls, ${row.frames} frames`);
  }
  return { rows, outcomes };
}

/** Events per published usage message and per settlement transaction over a phase. */
function batching(counters: Record<string, number>): string {
  const charges = counters.charges ?? 0;
  const per = (count: number | undefined) => (count && Number.isFinite(count) ? (charges / count).toFixed(1) : 'n/a');
  return `${charges} charges in ${counters.usageMessages} usage messages (${per(counters.usageMessages)} events each) and ${counters.settlementTransactions} settlement transactions (${per(counters.settlementTransactions)} each)`;
}

function describePhase(name: string, outcome: PhaseOutcome): string {
  const { result } = outcome;
  const cpu = [...outcome.cpuSeconds].map(([group, seconds]) => `${group} ${seconds.toFixed(2)}`).join(', ') +
    ` (kernel ${((sum(outcome.systemSeconds.values()) / sum(outcome.cpuSeconds.values())) * 100).toFixed(0)}%)`;
  const observers = [...outcome.observerCpuSeconds].map(([group, seconds]) => `${group} ${seconds.toFixed(2)}`).join(', ');
  return `${name}: ${result.ok} ok, ${result.errors} failed${result.errorSamples.length ? ` (${result.errorSamples.join(' | ')})` : ''}, ${result.requestsPerSecond.toFixed(0)} req/s, p50 ${result.latency.p50Ms.toFixed(2)} ms, p99 ${result.latency.p99Ms.toFixed(2)} ms${result.firstChunk ? `, first chunk p50 ${result.firstChunk.p50Ms.toFixed(2)} ms p99 ${result.firstChunk.p99Ms.toFixed(2)} ms` : ''}; CPU s: ${cpu}; not counted: ${observers}; other work on the machine: ${outcome.othersCores.toFixed(2)} cores${outcome.counters ? `; ${batching(outcome.counters)}` : ''}`;
}

/** One dialect's gateway figures (the phases that ran). */
function dialectFigures(outcomes: Partial<Record<PhaseName, PhaseOutcome>>): Omit<DialectFigures, 'dialect'> {
  const cpuPerRequest = (outcome: PhaseOutcome | undefined) => (outcome ? (sum(outcome.cpuSeconds.values()) / outcome.result.ok) * 1e6 : Number.NaN);
  return {
    requestsPerSecond: outcomes.max?.result.requestsPerSecond ?? Number.NaN,
    cpuMicrosPerRequest: cpuPerRequest(outcomes.max),
    cpuMicrosPerRequestAtRate: cpuPerRequest(outcomes.rate),
    p50AtRateMs: outcomes.rate?.result.latency.p50Ms ?? Number.NaN,
    firstChunkP50Ms: outcomes.ttfb?.result.firstChunk?.p50Ms ?? Number.NaN,
    firstChunkP99Ms: outcomes.ttfb?.result.firstChunk?.p99Ms ?? Number.NaN,
    errors: sum(Object.values(outcomes).map((outcome) => outcome.result.errors)),
  };
}

async function startUpstreamAndProxy() {
  const upstream = new BenchChild('upstream', { args: [join(here, 'fake-upstream-process.js')], cwd: root, env: { PATH: process.env.PATH ?? '' } });
  const upstreamPort = Number((await upstream.waitFor((event) => event.ready === true, 30_000)).port);
  const upstreamOrigin = `http://127.0.0.1:${upstreamPort}`;
  const proxy = new BenchChild('bare-proxy', { args: [join(here, 'bare-proxy-process.js'), upstreamOrigin], cwd: root, env: { PATH: process.env.PATH ?? '' } });
  const proxyPort = Number((await proxy.waitFor((event) => event.ready === true, 30_000)).port);
  return { upstream, upstreamOrigin, proxy, proxyOrigin: `http://127.0.0.1:${proxyPort}` };
}

function gatewayTarget(cluster: GatewayCluster): Target {
  return {
    name: 'gateway',
    origin: cluster.url,
    apiKeys: cluster.apiKeys,
    groups: () => cluster.processGroups(),
    counters: () => cluster.counters(),
    settle: async () => {
      if (!(await cluster.waitSettled(SETTLE_TIMEOUT_MS))) log(`warning: ${await cluster.openReservations()} reservations still open after ${SETTLE_TIMEOUT_MS} ms`);
    },
  };
}

/** CPU µs per answered request of a measured part, per process group. */
function cpuMicrosByGroup(outcome: PhaseOutcome): Record<string, number> {
  return Object.fromEntries([...outcome.cpuSeconds].map(([group, seconds]) => [group, (seconds / outcome.result.ok) * 1e6]));
}

/** One target's figures for the side-by-side table (chat phases). */
function sideBySide(name: string, outcomes: Partial<Record<PhaseName, PhaseOutcome>>): SideBySideColumn {
  const cpuPerRequest = (outcome: PhaseOutcome | undefined) => (outcome ? (sum(outcome.cpuSeconds.values()) / outcome.result.ok) * 1e6 : Number.NaN);
  const memory = new Map<string, number>();
  const ran = Object.values(outcomes).filter((outcome): outcome is PhaseOutcome => outcome !== undefined);
  for (const outcome of ran) {
    for (const [group, bytes] of outcome.memoryBytes) memory.set(group, Math.max(memory.get(group) ?? 0, bytes));
  }
  return {
    name,
    requestsPerSecond: outcomes.max?.result.requestsPerSecond ?? Number.NaN,
    cpuMicrosPerRequest: cpuPerRequest(outcomes.max),
    cpuMicrosPerRequestAtRate: cpuPerRequest(outcomes.rate),
    cpuMicrosPerStream: cpuPerRequest(outcomes.ttfb),
    cpuMicrosPerStreamAtRate: cpuPerRequest(outcomes.streams),
    streamsFirstChunkP50Ms: outcomes.streams?.result.firstChunk?.p50Ms ?? Number.NaN,
    streamsFirstChunkP99Ms: outcomes.streams?.result.firstChunk?.p99Ms ?? Number.NaN,
    p50AtRateMs: outcomes.rate?.result.latency.p50Ms ?? Number.NaN,
    p99AtRateMs: outcomes.rate?.result.latency.p99Ms ?? Number.NaN,
    firstChunkP50Ms: outcomes.ttfb?.result.firstChunk?.p50Ms ?? Number.NaN,
    firstChunkP99Ms: outcomes.ttfb?.result.firstChunk?.p99Ms ?? Number.NaN,
    memoryMegabytes: Object.fromEntries([...memory].map(([group, bytes]) => [group, bytes / (1024 * 1024)])),
    errors: sum(ran.map((outcome) => outcome.result.errors)),
  };
}

async function compare(): Promise<void> {
  let cluster: GatewayCluster | undefined;
  const extras: ExtraTarget[] = [];
  try {
    log(`mode ${quick ? 'quick' : 'full'}: ${accounts} account(s), ${connections} connections, ${durationMs / 1000} s per phase after ${warmupMs / 1000} s warm-up, ${rate} req/s latency phase`);
    const { upstream, upstreamOrigin, proxy, proxyOrigin } = await startUpstreamAndProxy();
    log('starting the gateway: six service processes, fresh Postgres database and NATS namespace');
    cluster = await startGatewayCluster({ root, upstreamBaseUrl: `${upstreamOrigin}/v1`, postgresAdminUrl, natsUrl, accounts, admission, routerTransport, wires });
    log(`edge admission: ${admission}; edge to routing: ${routerTransport}`);
    log(`gateway at ${cluster.url} (database ${cluster.databaseName}, NATS namespace ${cluster.namespace})`);
    const bare: Target = { name: 'bare', origin: proxyOrigin, apiKeys: ['bench'], groups: async () => [{ name: 'bare-proxy', pids: [proxy.pid] }], settle: async () => undefined };
    const gateway = gatewayTarget(cluster);
    await checkTarget(bare);
    for (const dialect of dialects) for (const wire of wires) await checkTarget(gateway, dialect, { wire });
    const observers: ProcessGroup[] = [{ name: 'upstream', pids: [upstream.pid] }];
    const extraStarts: (() => Promise<ExtraTarget>)[] = [];
    if (args['bare-chain']) extraStarts.push(() => { log('starting two bare proxies in series'); return startBareChain(upstreamOrigin, here, root); });
    if (args['npm-start']) extraStarts.push(() => { log('starting npm start (one process, embedded Postgres)'); return startNpmStartTarget(root, `${upstreamOrigin}/v1`); });
    for (const peer of peers) extraStarts.push(() => { log(`starting the peer ${peer}`); return startPeer(peer, root, `${upstreamOrigin}/v1`, log); });
    const streamRows: StreamLevelFigures[] = [];
    const gatewayStreamOutcomes: PhaseOutcome[] = [];
    if (runsStreamLoad) {
      // The upstream alone first: its own TTFT at each level is what the others' is added over.
      const direct: Target = { name: 'upstream', origin: upstreamOrigin, apiKeys: ['bench'], groups: async () => [{ name: 'upstream', pids: [upstream.pid] }], settle: async () => undefined };
      streamRows.push(...(await runStreamLevels(direct, [])).rows);
      streamRows.push(...(await runStreamLevels(bare, observers)).rows);
      const ran = await runStreamLevels(gateway, observers);
      streamRows.push(...ran.rows.map((row) => ({ ...row, target: 'gateway, 6 processes' })));
      gatewayStreamOutcomes.push(...ran.outcomes);
    }

    // The bare proxy speaks chat completions only (it forwards bytes to an OpenAI-compatible upstream):
    // it is measured once, against the first dialect; every dialect is measured on the gateway.
    const phases: Record<string, Record<'bare' | 'gateway', PhaseOutcome>> = {};
    const byDialect = new Map<DialectName, Partial<Record<PhaseName, PhaseOutcome>>>(dialects.map((dialect) => [dialect, {}]));
    /** Every gateway outcome by `dialect/wire/phase`, one per round. */
    const byWire = new Map<string, PhaseOutcome[]>();
    for (const phase of PHASES.filter((name) => onlyPhases.includes(name))) {
      phases[phase] = {} as Record<'bare' | 'gateway', PhaseOutcome>;
      const bareJob = phaseJobs('chat')[phase];
      log(`phase ${phase} (${bareJob.mode}) on bare...`);
      phases[phase]!.bare = await runPhase(bare, bareJob, observers);
      log(describePhase(`${phase} bare`, phases[phase]!.bare));
      // With --wire, every wire of a dialect in turn, --rounds times over; the OpenAI wire's first round is
      // the dialect's figure everywhere else.
      for (let round = 0; round < rounds; round += 1) {
        for (const dialect of dialects) {
          for (const wire of wires) {
            const job = phaseJobs(dialect, wire)[phase];
            const label = `${dialect} dialect${wires.length > 1 ? `, ${wire} wire${rounds > 1 ? `, round ${round + 1}` : ''}` : ''}`;
            log(`phase ${phase} (${job.mode}) on gateway, ${label}...`);
            const outcome = await runPhase(gateway, job, observers);
            if (wire === 'openai' && round === 0) {
              byDialect.get(dialect)![phase] = outcome;
              if (dialect === dialects[0]) phases[phase]!.gateway = outcome;
            }
            byWire.set(`${dialect}/${wire}/${phase}`, [...(byWire.get(`${dialect}/${wire}/${phase}`) ?? []), outcome]);
            log(describePhase(`${phase} gateway ${label}`, outcome));
          }
        }
      }
    }

    // The extra targets (npm start, peers), one after another (each alone on the machine while measured),
    // over the chat phases that ran for the others.
    const extraOutcomes = new Map<string, Partial<Record<PhaseName, PhaseOutcome>>>();
    const notes: string[] = [];
    for (const start of extraStarts) {
      const extra = await start();
      extras.push(extra);
      const target: Target = { ...extra, settle: async () => undefined };
      // A target that cannot stream (Portkey 1.15.2 on Node 20 answers every stream 500) is measured
      // on the whole-answer phases only; the table says so.
      const streams = await checkTarget(target).then(() => true, async (error: unknown) => {
        await checkTarget(target, 'chat', { stream: false });
        log(`${extra.name} does not stream here, so no ttfb phase for it: ${error instanceof Error ? error.message : String(error)}`);
        notes.push(`${extra.name}: no streamed figures — ${error instanceof Error ? error.message.split('\n')[0] : String(error)}`);
        return false;
      });
      const outcomes: Partial<Record<PhaseName, PhaseOutcome>> = {};
      if (runsStreamLoad && streams) streamRows.push(...(await runStreamLevels(target, observers)).rows);
      for (const phase of PHASES.filter((name) => onlyPhases.includes(name) && (streams || (name !== 'ttfb' && name !== 'streams')))) {
        const job = phaseJobs('chat')[phase];
        log(`phase ${phase} (${job.mode}) on ${extra.name}...`);
        outcomes[phase] = await runPhase(target, job, observers);
        log(describePhase(`${phase} ${extra.name}`, outcomes[phase]!));
      }
      extraOutcomes.set(extra.name, outcomes);
      await extra.stop();
    }

    // Every answered gateway request (warm-ups and the checks included) must be charged exactly once.
    const answered =
      2 * dialects.length * wires.length + sum([...byWire.values(), gatewayStreamOutcomes].flat().map((outcome) => outcome.result.ok + outcome.result.warmupOk));
    // Leases hold no per-request reservation for waitSettled to watch: give the last events time to settle.
    let charges = await cluster.charges();
    for (const deadline = Date.now() + 10_000; charges < answered && Date.now() < deadline; charges = await cluster.charges()) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const streamTable = streamRows.length > 0 ? `\n${formatConcurrentStreams(streamRows, streamLoad)}\n${notes.map((note) => `Note: ${note}\n`).join('')}` : '';
    if (Object.keys(phases).length === 0) {
      // concurrent-streams alone.
      process.stdout.write(`${streamTable}\nLedger: ${charges} charges for ${answered} answered gateway requests; ${await cluster.openReservations()} reservations open.\n`);
      if (args.json) writeFileSync(args.json, JSON.stringify({ streams: streamRows, charges, answered }, null, 2));
      return;
    }
    const figuresOf = (name: 'bare' | 'gateway'): TargetFigures => {
      const max = phases.max?.[name];
      const atRate = phases.rate?.[name];
      const ttfb = phases.ttfb?.[name];
      const cpuPerRequest = (outcome: PhaseOutcome | undefined) => (outcome ? (sum(outcome.cpuSeconds.values()) / outcome.result.ok) * 1e6 : Number.NaN);
      return {
        requestsPerSecond: max?.result.requestsPerSecond ?? Number.NaN,
        cpuMicrosPerRequest: cpuPerRequest(max),
        cpuMicrosPerRequestAtRate: cpuPerRequest(atRate),
        p50AtRateMs: atRate?.result.latency.p50Ms ?? Number.NaN,
        p99AtRateMs: atRate?.result.latency.p99Ms ?? Number.NaN,
        firstChunkP50Ms: ttfb?.result.firstChunk?.p50Ms ?? Number.NaN,
        firstChunkP99Ms: ttfb?.result.firstChunk?.p99Ms ?? Number.NaN,
        errors: sum([max, atRate, phases.streams?.[name], ttfb].map((outcome) => outcome?.result.errors ?? 0)),
      };
    };
    // The per-process breakdown is of the max phase, or of whichever phase ran first.
    const breakdownName = phases.max ? 'max' : Object.keys(phases)[0]!;
    const maxGateway = phases[breakdownName]!.gateway;
    const figures: BenchFigures = {
      machine: `${cpus().length} cores (${cpus()[0]?.model ?? 'unknown CPU'}), shared; Node ${process.version}; ${quick ? 'quick run' : 'full run'}`,
      connections,
      accounts,
      durationSeconds: durationMs / 1000,
      rate,
      bare: figuresOf('bare'),
      gateway: figuresOf('gateway'),
      othersCoresMax: Math.max(...Object.values(phases).flatMap((phase) => [phase.bare.othersCores, phase.gateway.othersCores])),
      breakdownPhase: breakdownName,
      gatewayCpuByProcess: cpuMicrosByGroup(maxGateway),
      gatewayKernelShare: sum(maxGateway.systemSeconds.values()) / sum(maxGateway.cpuSeconds.values()),
    };

    const batchLines = ['max', 'rate'].filter((phase) => phases[phase]).map((phase) => `Batching, ${phase} phase: ${batching(phases[phase]!.gateway.counters ?? {})}.`).join('\n');
    const dialectTable = dialects.length > 1 ? `\n${formatDialectTable(dialects.map((dialect) => ({ dialect, ...dialectFigures(byDialect.get(dialect)!) })))}\n` : '';
    const streamedPhase = phases.ttfb && !phases.streams ? 'ttfb' : 'streams';
    const wireSamples = (key: string): WireSample[] =>
      (byWire.get(key) ?? []).map((outcome) => ({ cpuMicros: sum(Object.values(cpuMicrosByGroup(outcome))), byProcess: cpuMicrosByGroup(outcome), errors: outcome.result.errors }));
    const wireRows: WireRow[] = dialects.flatMap((dialect) =>
      wires.map((wire) => ({ dialect, wire, whole: wireSamples(`${dialect}/${wire}/max`), streamed: wireSamples(`${dialect}/${wire}/${streamedPhase}`) })));
    const wireTable = wires.length > 1 ? `\n${formatWireTable(wireRows, streamedPhase, rounds)}\n` : '';
    const columns: SideBySideColumn[] = [
      sideBySide('bare proxy', { max: phases.max?.bare, rate: phases.rate?.bare, streams: phases.streams?.bare, ttfb: phases.ttfb?.bare }),
      sideBySide('gateway, 6 processes', { max: phases.max?.gateway, rate: phases.rate?.gateway, streams: phases.streams?.gateway, ttfb: phases.ttfb?.gateway }),
      ...[...extraOutcomes].map(([name, outcomes]) => sideBySide(name, outcomes)),
    ];
    const streamsPhase = phases.streams;
    const cpuSplit = streamsPhase ? formatCpuSplit('streams', sum(Object.values(cpuMicrosByGroup(streamsPhase.bare))), cpuMicrosByGroup(streamsPhase.gateway)) : '';
    const sideTable = extraOutcomes.size > 0 ? `\n${formatSideBySide(columns)}\n${notes.map((note) => `Note: ${note}\n`).join('')}` : '';
    process.stdout.write(`\n${formatTable(figures)}\n${cpuSplit ? `${cpuSplit}\n` : ''}${dialectTable}${wireTable}${sideTable}${streamTable}${batchLines}\nLedger: ${charges} charges for ${answered} answered gateway requests; ${await cluster.openReservations()} reservations open.\n`);
    if (args.json) writeFileSync(args.json, JSON.stringify({ figures, verdicts: verdicts(figures), phases, byDialect: Object.fromEntries(byDialect), ...(streamRows.length > 0 ? { streams: streamRows } : {}), ...(wires.length > 1 ? { byWire: Object.fromEntries(byWire) } : {}), charges, answered }, (_key, value) => (value instanceof Map ? Object.fromEntries(value) : value), 2));
  } catch (error) {
    for (const child of cluster?.children.values() ?? []) log(`last output of ${child.name}:\n${child.logs().split('\n').slice(-20).join('\n')}`);
    throw error;
  } finally {
    log('cleaning up: processes, database, NATS stream');
    for (const extra of extras) await extra.stop().catch((error: unknown) => log(`cleanup of ${extra.name} failed: ${String(error)}`));
    await cluster?.stop().catch((error: unknown) => log(`cleanup of the gateway failed: ${String(error)}`));
    await stopAllChildren();
  }
}

async function profile(): Promise<void> {
  const services = (args['profile-services'] ?? 'edge,routing,ledger,auth').split(',').map((name) => name.trim()) as ServiceName[];
  for (const name of services) if (!SERVICES.includes(name)) throw new Error(`unknown service to profile: ${name}`);
  const dir = mkdtempSync(join(tmpdir(), 'gateway-bench-profile-'));
  let cluster: GatewayCluster | undefined;
  try {
    const { upstreamOrigin } = await startUpstreamAndProxy();
    log(`starting the gateway with --cpu-prof on ${services.join(', ')}`);
    cluster = await startGatewayCluster({ root, upstreamBaseUrl: `${upstreamOrigin}/v1`, postgresAdminUrl, natsUrl, accounts, admission, routerTransport, wires, profile: { services, dir } });
    const gateway = gatewayTarget(cluster);
    // With --wire, the last wire it names (`--profile --wire bedrock`: the Bedrock wire).
    const wire = wires.at(-1)!;
    await checkTarget(gateway, 'chat', { wire });
    // The first phase --only names (default max), on chat requests.
    const phase = (args.only ? onlyPhases[0] : 'max') as PhaseName | typeof STREAM_LOAD_PHASE;
    // concurrent-streams: its last level (`--stream-levels 128` to choose one).
    const job = phase === STREAM_LOAD_PHASE ? streamLevelJob(streamLoad.levels.at(-1)!) : phaseJobs('chat', wire)[phase];
    const outcome = await runPhase(gateway, job, []);
    log(describePhase(`profiled ${phase} gateway${wire === 'openai' ? '' : `, ${wire} wire`}`, outcome));
    // Profiles are written when a process exits normally (SIGTERM -> runMain -> exit).
    await cluster.stop();
    cluster = undefined;
    // The measured part's window beside the profiles, so they can be cut to it again (inclusive views, diffs).
    writeFileSync(join(dir, 'measured-window.json'), JSON.stringify({ ...outcome.window, requests: outcome.result.ok, frames: outcome.result.streams?.frames ?? 0 }));
    for (const file of readdirSync(dir).filter((name) => name.endsWith('.cpuprofile')).sort()) {
      const summary = summarizeProfile(JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile, 15, outcome.window);
      const busy = summary.totalMs - summary.idleMs;
      process.stdout.write(`\n## ${file}: ${busy.toFixed(0)} ms busy of ${summary.totalMs.toFixed(0)} ms sampled in the measured part (${outcome.result.ok} requests: ${((busy * 1000) / outcome.result.ok).toFixed(0)} µs/request on the main thread${outcome.result.streams ? `; ${outcome.result.streams.frames} frames: ${((busy * 1000) / outcome.result.streams.frames).toFixed(1)} µs/frame` : ''})\n`);
      process.stdout.write('top self time, functions:\n');
      for (const entry of summary.functions) process.stdout.write(`  ${((entry.selfMs / busy) * 100).toFixed(1).padStart(5)}%  ${entry.selfMs.toFixed(0).padStart(6)} ms  ${entry.name}\n`);
      process.stdout.write('self time by place:\n');
      for (const entry of summary.places) process.stdout.write(`  ${((entry.selfMs / busy) * 100).toFixed(1).padStart(5)}%  ${entry.selfMs.toFixed(0).padStart(6)} ms  ${entry.name}\n`);
    }
    process.stdout.write(`\nProfiles kept in ${dir} (open in Chrome DevTools > Performance).\n`);
  } finally {
    await cluster?.stop().catch((error: unknown) => log(`cleanup of the gateway failed: ${String(error)}`));
    await stopAllChildren();
  }
}

let interrupted = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (interrupted) {
      killAllChildrenNow();
      process.exit(130);
    }
    interrupted = true;
    log(`${signal}: stopping (again to kill at once)`);
    // The running phase fails once its processes are gone; the finally blocks clean up the rest.
    void stopAllChildren();
  });
}
process.on('exit', killAllChildrenNow);

try {
  await (args.profile ? profile() : compare());
} catch (error) {
  log(`failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`);
  process.exitCode = 1;
}
