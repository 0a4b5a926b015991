import { describe, expect, it } from 'vitest';
import { validateCatalogText } from '@gateway/platform/catalog-document';
import { placeOf, summarizeProfile, type CpuProfile } from './cpu-profile.js';
import { benchConfigYaml } from './gateway-cluster.js';
import { parseInfoReply } from './nats-stream-info.js';
import { runLoad, validateJob, type LoadJob } from './load-generator.js';
import { cpuSecondsBetween, memoryBytes, parseMachineCpu, parseProcStat, processTree, type CpuSnapshot } from './proc-stat.js';
import { formatCpuSplit, formatDialectTable, formatSideBySide, formatTable, verdicts, type BenchFigures, type DialectFigures, type SideBySideColumn } from './report.js';
import { percentile, SampleRecorder, summarize } from './statistics.js';

// The bench's pure parts. The bench itself is not run here: it needs minutes of a quiet machine.

describe('/proc stat parsing', () => {
  // A real line's shape (proc(5)): the command name may hold spaces and parentheses.
  const line = '4242 (node (edge) x) S 17 4242 17 0 -1 4194560 25016 0 12 0 1834 377 0 0 20 0 11 0 5012 1234567 8765 18446744073709551615 1 1 0 0 0 0 0 16781312 1024 0 0 0 17 1 0 0 0 0 0';

  it('reads pid, name, parent and utime + stime after the last parenthesis', () => {
    expect(parseProcStat(line)).toEqual({ pid: 4242, comm: 'node (edge) x', state: 'S', ppid: 17, cpuTicks: 1834 + 377, systemTicks: 377 });
  });

  it('refuses a line that is not a stat line', () => {
    expect(() => parseProcStat('no parentheses here')).toThrow();
    expect(() => parseProcStat('1 (short) S 1 2')).toThrow(/field 14/);
  });

  it('sums CPU per group between snapshots, counting a new pid from zero and dropping a vanished one', () => {
    const ticks = (cpuTicks: number, systemTicks = 0) => ({ cpuTicks, systemTicks });
    const before: CpuSnapshot = new Map([['postgres', new Map([[1, ticks(100, 40)], [2, ticks(50)]])], ['edge', new Map([[9, ticks(1_000, 100)]])]]);
    const after: CpuSnapshot = new Map([['postgres', new Map([[1, ticks(130, 50)], [3, ticks(20, 5)]])], ['edge', new Map([[9, ticks(1_250, 200)]])]]);
    const seconds = cpuSecondsBetween(before, after, 100);
    expect(seconds.get('postgres')).toBeCloseTo((30 + 20) / 100);
    expect(seconds.get('edge')).toBeCloseTo(2.5);
    const kernel = cpuSecondsBetween(before, after, 100, 'systemTicks');
    expect(kernel.get('postgres')).toBeCloseTo((10 + 5) / 100);
    expect(kernel.get('edge')).toBeCloseTo(1);
  });
});

describe('/proc/stat machine totals', () => {
  it('counts user, nice, system, irq, softirq and steal as busy; idle and iowait as not', () => {
    const text = 'cpu  100 5 50 1000 20 3 2 1 7 0\ncpu0 50 2 25 500 10 1 1 0 0 0\nintr 1\n';
    expect(parseMachineCpu(text)).toEqual({ busyTicks: 100 + 5 + 50 + 3 + 2 + 1, totalTicks: 161 + 1000 + 20 });
  });
});

describe('percentiles', () => {
  const oneToHundred = Array.from({ length: 100 }, (_, index) => index + 1);

  it('uses the nearest rank', () => {
    expect(percentile(oneToHundred, 50)).toBe(50);
    expect(percentile(oneToHundred, 99)).toBe(99);
    expect(percentile(oneToHundred, 99.5)).toBe(100);
    expect(percentile(oneToHundred, 100)).toBe(100);
    expect(percentile(oneToHundred, 0)).toBe(1);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([1, 2, 3, 4], 50)).toBe(2);
    expect(percentile([], 50)).toBeNaN();
    expect(() => percentile(oneToHundred, 101)).toThrow(RangeError);
  });

  it('summarizes unsorted samples', () => {
    const summary = summarize([5, 1, 4, 2, 3, 10, 9, 8, 7, 6]);
    expect(summary).toEqual({ count: 10, meanMs: 5.5, p50Ms: 5, p90Ms: 9, p99Ms: 10, maxMs: 10 });
    expect(summarize([]).p99Ms).toBeNaN();
  });

  it('keeps at most its capacity while counting every sample', () => {
    let seed = 1;
    const recorder = new SampleRecorder(100, () => ((seed = (seed * 48_271) % 2_147_483_647) / 2_147_483_647));
    for (let value = 0; value < 10_000; value += 1) recorder.record(value);
    expect(recorder.count).toBe(10_000);
    expect(recorder.samples()).toHaveLength(100);
    // A uniform subset of 0..9999: its median is nowhere near the first 100 values.
    expect(percentile([...recorder.samples()].sort((a, b) => a - b), 50)).toBeGreaterThan(2_000);
  });
});

describe('cpu profile summary', () => {
  const frame = (functionName: string, url = '', lineNumber = 0) => ({ functionName, url, lineNumber, columnNumber: 0 });
  const profile: CpuProfile = {
    startTime: 1_000,
    endTime: 2_000,
    nodes: [
      { id: 1, callFrame: frame('(root)'), children: [2, 3, 4, 5] },
      { id: 2, callFrame: frame('(idle)') },
      { id: 3, callFrame: frame('makeUnaryRequest', 'file:///work/main/node_modules/@grpc/grpc-js/build/src/client.js', 123) },
      { id: 4, callFrame: frame('handle', 'file:///work/main/apps/edge/dist/routes/chat-completions.js', 9) },
      { id: 5, callFrame: frame('(garbage collector)') },
    ],
    // Sample times: 1100 (idle), 1300 (grpc), 1400 (edge), 1700 (grpc), 1800 (gc).
    samples: [2, 3, 4, 3, 5],
    timeDeltas: [100, 200, 100, 300, 100],
  };

  it('attributes each delta to its sample, ranks self time and leaves idle out', () => {
    const summary = summarizeProfile(profile);
    expect(summary.totalMs).toBeCloseTo(0.8);
    expect(summary.idleMs).toBeCloseTo(0.1);
    expect(summary.functions[0]).toMatchObject({ name: 'makeUnaryRequest (@grpc/grpc-js/build/src/client.js:124)', selfMs: 0.5 });
    expect(summary.functions.map((entry) => entry.name)).toEqual([
      'makeUnaryRequest (@grpc/grpc-js/build/src/client.js:124)',
      'handle (apps/edge/dist/routes/chat-completions.js:10)',
      '(garbage collector)',
    ]);
    expect(summary.places.map((entry) => [entry.name, entry.selfMs])).toEqual([['@grpc/grpc-js', 0.5], ['apps/edge', 0.1], ['(garbage collector)', 0.1]]);
  });

  it('keeps only the samples inside a window', () => {
    const summary = summarizeProfile(profile, 10, { startMicros: 1_350, endMicros: 1_750 });
    expect(summary.functions.map((entry) => [entry.name.split(' ')[0], entry.selfMs])).toEqual([['makeUnaryRequest', 0.3], ['handle', 0.1]]);
  });

  it('names the place code lives', () => {
    expect(placeOf('node:internal/http2/core', 'request')).toBe('node:internal');
    expect(placeOf('file:///x/node_modules/pg/lib/client.js', 'query')).toBe('pg');
    expect(placeOf('file:///work/main/libs/platform/dist/grpc/client.js', 'unaryCall')).toBe('libs/platform');
    expect(placeOf('', 'writev')).toBe('(native)');
  });
});

describe('report', () => {
  const target = { requestsPerSecond: 10_000, cpuMicrosPerRequest: 60, cpuMicrosPerRequestAtRate: 80, p50AtRateMs: 0.5, p99AtRateMs: 2, firstChunkP50Ms: 1, firstChunkP99Ms: 3, errors: 0 };
  const figures = (gateway: Partial<typeof target>): BenchFigures => ({
    machine: 'test',
    connections: 64,
    accounts: 1,
    durationSeconds: 10,
    rate: 500,
    bare: target,
    gateway: { ...target, ...gateway },
    othersCoresMax: 0.25,
    gatewayCpuByProcess: { edge: 200, postgres: 100 },
    gatewayKernelShare: 0.3,
  });

  it('judges CPU as a ratio to the bare proxy of the same run', () => {
    const slowMachine = figures({ cpuMicrosPerRequest: 1_100 });
    slowMachine.bare = { ...target, cpuMicrosPerRequest: 240 };
    expect(verdicts(slowMachine).cpu).toBe(true);
    slowMachine.bare = { ...target, cpuMicrosPerRequest: 100 };
    expect(verdicts(slowMachine).cpu).toBe(false);
  });

  it('judges each target against the bare proxy', () => {
    expect(verdicts(figures({ requestsPerSecond: 1_500, cpuMicrosPerRequest: 600, p99AtRateMs: 12, firstChunkP50Ms: 3 }))).toEqual({ throughput: true, cpu: true, p99: true, firstChunk: true });
    expect(verdicts(figures({ requestsPerSecond: 1_499, cpuMicrosPerRequest: 601, p99AtRateMs: 12.5, firstChunkP50Ms: 3.5 }))).toEqual({ throughput: false, cpu: false, p99: false, firstChunk: false });
  });

  it('prints ratios and added milliseconds', () => {
    const table = formatTable(figures({ requestsPerSecond: 2_000, cpuMicrosPerRequest: 450, p99AtRateMs: 5.25 }));
    expect(table).toMatch(/\| 10,000 +\| 2,000 +\| 0\.200× +\| ≥ 0\.15× +\| yes/);
    expect(table).toMatch(/\| 60 +\| 450 +\| 7\.5× +\| ≤ 10× bare +\| yes/);
    expect(table).toMatch(/p99 at 500 req\/s, ms +\| 2\.00 +\| 5\.25 +\| \+3\.25/);
    expect(table).toContain('by process: edge 200, postgres 100 (30% of it in the kernel)');
    expect(table).toContain('up to 0.25 of the cores');
  });

  it('splits the CPU per stream into the request path and the settlement, as multiples of the bare proxy', () => {
    const line = formatCpuSplit('streams', 400, { edge: 600, routing: 800, ledger: 200, nats: 150, postgres: 240, 'postgres-shared': 10, auth: 20, catalog: 20 });
    expect(line).toContain("bare proxy's 400 µs: 5.10× in all");
    expect(line).toContain('request path (edge + routing) 3.50× (edge 1.50×, routing 2.00×)');
    expect(line).toContain('settlement (ledger + NATS + Postgres) 1.50× (ledger 0.50×, nats 0.38×, postgres 0.60×)');
    expect(line).toContain('the rest 0.10×');
    expect(formatCpuSplit('streams', Number.NaN, { edge: 600 })).toBe('');
    expect(formatCpuSplit('streams', 400, {})).toBe('');
  });

  it('marks the targets of phases that did not run (--only)', () => {
    const onlyRate = { ...figures({ p99AtRateMs: 9 }), breakdownPhase: 'rate' };
    for (const side of [onlyRate.bare, onlyRate.gateway]) Object.assign(side, { requestsPerSecond: Number.NaN, cpuMicrosPerRequest: Number.NaN, firstChunkP50Ms: Number.NaN, firstChunkP99Ms: Number.NaN });
    expect(verdicts(onlyRate)).toEqual({ throughput: undefined, cpu: undefined, p99: true, firstChunk: undefined });
    const table = formatTable(onlyRate);
    expect(table).toMatch(/p99 at 500 req\/s, ms +\| 2\.00 +\| 9\.00 +\| \+7\.00 +\| ≤ \+10 +\| yes/);
    expect(table).toMatch(/max throughput.*\| n\/a +\| n\/a +\| n\/a× +\| ≥ 0\.15× +\| not run/);
    expect(table).toContain('CPU µs per request in the rate phase, by process');
  });
});

describe('load jobs', () => {
  const job: LoadJob = { mode: 'closed', origin: 'http://127.0.0.1:8080', path: '/v1/chat/completions', headerSets: [{}], body: '{}', connections: 64, warmupMs: 1_000, durationMs: 10_000 };

  it('accepts loopback targets within bounds only', () => {
    expect(validateJob(job)).toBe(job);
    expect(() => validateJob({ ...job, origin: 'http://10.0.0.5:8080' })).toThrow(/loopback/);
    expect(() => validateJob({ ...job, connections: 5_000 })).toThrow(/connections/);
    expect(() => validateJob({ ...job, durationMs: 3_600_000 })).toThrow(/duration/);
    expect(() => validateJob({ ...job, mode: 'open' })).toThrow(/rate/);
  });

  it('streams at a fixed rate: times each first content chunk apart from the whole stream', async () => {
    const { createServer } = await import('node:http');
    // An SSE answer whose content chunk leaves 5 ms after the headers and whose end 150 ms after that: a gap
    // wide enough that a busy machine's event-loop stalls (tens of ms) cannot read both in one turn.
    const server = createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.write(': open\n\n');
      setTimeout(() => response.write('data: {"content":"hi"}\n\n'), 5);
      setTimeout(() => response.end('data: [DONE]\n\n'), 155);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const port = (server.address() as { port: number }).port;
      const result = await runLoad({ ...job, origin: `http://127.0.0.1:${port}`, mode: 'open', rate: 100, stream: true, connections: 32, warmupMs: 0, durationMs: 300 });
      expect(result.errors).toBe(0);
      expect(result.ok).toBe(30);
      expect(result.firstChunk!.p50Ms).toBeGreaterThanOrEqual(4);
      expect(result.latency.p50Ms).toBeGreaterThanOrEqual(result.firstChunk!.p50Ms + 75);
    } finally {
      server.close();
    }
  });
});

describe('bench config', () => {
  it('is a valid catalog document with a paid openai-kind model on the upstream', () => {
    const { document, problems } = validateCatalogText(benchConfigYaml('http://127.0.0.1:12345/v1'));
    expect(problems).toEqual([]);
    expect(document?.providers[0]).toMatchObject({ kind: 'openai', base_url: 'http://127.0.0.1:12345/v1' });
    expect(document?.models[0]?.pricing?.per_input_token).toBeTruthy();
    const tier = document?.limit_groups[0]?.tiers['tier-4'];
    // The ledger binds limits as Postgres integers.
    expect(tier?.minute).toBeLessThan(2 ** 31);
  });
});

describe('JetStream stream info reply', () => {
  const inbox = '_INBOX.bench1';
  const payload = JSON.stringify({ type: 'io.nats.jetstream.api.v1.stream_info_response', state: { messages: 42, bytes: 1000 } });

  it('waits for the whole message, then reads the message count', () => {
    const whole = `INFO {"server_id":"x"}\r\nMSG ${inbox} 1 ${payload.length}\r\n${payload}\r\n`;
    expect(parseInfoReply(whole.slice(0, whole.length - 20), inbox)).toBeUndefined();
    expect(parseInfoReply(whole, inbox)).toEqual({ messages: 42 });
  });

  it('reports an API error', () => {
    const error = JSON.stringify({ error: { code: 404, description: 'stream not found' } });
    expect(parseInfoReply(`MSG ${inbox} 1 ${error.length}\r\n${error}\r\n`, inbox)).toEqual({ error: 'stream not found' });
  });
});

describe('dialect table', () => {
  const row = (dialect: string, cpu: number, firstP50: number, errors = 0): DialectFigures => ({
    dialect, requestsPerSecond: 1000, cpuMicrosPerRequest: cpu, cpuMicrosPerRequestAtRate: cpu, p50AtRateMs: 2, firstChunkP50Ms: firstP50, firstChunkP99Ms: firstP50 * 2, errors,
  });

  it('judges each dialect against the first: at most 10 % more CPU and the first event within 0.5 ms', () => {
    const table = formatDialectTable([row('chat', 500, 2), row('messages', 540, 2.3), row('responses', 560, 2.1)]);
    const lines = table.split('\n');
    const messages = lines.find((line) => line.startsWith('| messages'))!;
    const responses = lines.find((line) => line.startsWith('| responses'))!;
    expect(messages).toContain('1.080×');
    expect(messages).toMatch(/\| yes +\|$/);
    expect(responses).toContain('1.120×');
    expect(responses).toContain('**no**');
    expect(formatDialectTable([row('chat', 500, 2), row('messages', 500, 2.8)])).toContain('**no**');
    expect(formatDialectTable([row('chat', 500, 2), row('messages', 500, 2, 3)])).toContain('**no**');
  });
});

describe('side-by-side table (--npm-start, --peer)', () => {
  const column = (name: string, p50: number, rps: number, memory: Record<string, number>): SideBySideColumn => ({
    name, requestsPerSecond: rps, cpuMicrosPerRequest: 1_000_000 / rps, cpuMicrosPerRequestAtRate: 200, cpuMicrosPerStream: 400,
    cpuMicrosPerStreamAtRate: 150 * p50, streamsFirstChunkP50Ms: p50 * 2, streamsFirstChunkP99Ms: p50 * 4,
    p50AtRateMs: p50, p99AtRateMs: p50 * 3, firstChunkP50Ms: p50 / 2, firstChunkP99Ms: p50, errors: 0, memoryMegabytes: memory,
  });

  it('puts every target beside the bare proxy with added milliseconds, ratios and memory', () => {
    const table = formatSideBySide([
      column('bare proxy', 1, 4000, { 'bare-proxy': 60 }),
      column('npm start', 1.75, 2000, { 'npm start': 240 }),
      column('portkey', 2.5, 1000, { portkey: 180 }),
    ]);
    const rows = table.split('\n').filter((line) => line.startsWith('| '));
    expect(rows[0]).toMatch(/\| figure +\| bare proxy +\| npm start +\| portkey +\|/);
    expect(rows.find((row) => row.startsWith('| p50'))).toMatch(/1\.00 +\| 1\.75 \(\+0\.75\) +\| 2\.50 \(\+1\.50\)/);
    expect(rows.find((row) => row.startsWith('| max throughput'))).toMatch(/2,000 \(0\.5×\).*1,000 \(0\.3×\)/);
    expect(rows.find((row) => row.startsWith('| memory under load'))).toMatch(/\| 60 +\| 240 +\| 180 +\|/);
    expect(rows.find((row) => row.startsWith('| streams at the fixed rate: first chunk p50'))).toMatch(/2\.00 +\| 3\.50 \(\+1\.50\) +\| 5\.00 \(\+3\.00\)/);
    expect(rows.find((row) => row.startsWith('| CPU per stream at the fixed rate'))).toMatch(/150 +\| 263 \(1\.8×\) +\| 375 \(2\.5×\)/);
    expect(table).toContain('npm start: npm start 240');
  });
});

describe('process memory and trees', () => {
  it('finds this process and its children, and reads a non-zero memory figure for it', async () => {
    const { spawn } = await import('node:child_process');
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 5000)']);
    try {
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(processTree(process.pid)).toEqual(expect.arrayContaining([process.pid, child.pid]));
      expect(memoryBytes(process.pid)).toBeGreaterThan(10 * 1024 * 1024);
    } finally {
      child.kill();
    }
  });
});
