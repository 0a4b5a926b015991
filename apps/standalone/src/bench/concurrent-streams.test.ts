import { createServer, type Server } from 'node:http';
import { performance } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import { formatConcurrentStreams, levelFigures, pacedStreamBody, parseLevels, type StreamLevelFigures } from './concurrent-streams.js';
import { createFastUpstream } from './fast-upstream.js';
import { runLoad, type LoadJob, type LoadResult } from './load-generator.js';

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

const job = (origin: string, body: string): LoadJob => ({
  mode: 'concurrent', origin, path: '/v1/chat/completions', headerSets: [{ 'content-type': 'application/json' }], body,
  connections: 4, warmupMs: 0, durationMs: 200, donePattern: '[DONE]', stallMs: 200,
});

describe('concurrent-streams load', () => {
  it('counts the frames of paced upstream streams, every one complete, without a stall', async () => {
    const server = createFastUpstream({ firstChunkGapMs: 1, geminiApiKey: 'k', awsAccessKeyId: 'a' });
    const origin = await listen(server);
    try {
      const result = await runLoad(job(origin, pacedStreamBody('m', { deltas: 8, gapMs: 10 })));
      const streams = result.streams!;
      expect(result.errors).toBe(0);
      expect(streams.started).toBeGreaterThanOrEqual(4);
      expect(streams.completed).toBe(streams.started);
      // 8 content deltas, the finish chunk, the usage chunk and [DONE].
      expect(streams.frames).toBe(streams.completed * 11);
      expect(streams.stalls).toBe(0);
      // Seven 10 ms gaps per stream: the stream is paced, not sent at once.
      expect(streams.gaps.count).toBeGreaterThanOrEqual(streams.completed * 4);
      expect(result.latency.p50Ms).toBeGreaterThanOrEqual(60);
    } finally {
      server.close();
    }
  });

  it('warms up with one stream per caller, all at once, before the measured part', async () => {
    const server = createFastUpstream({ firstChunkGapMs: 1, geminiApiKey: 'k', awsAccessKeyId: 'a' });
    const origin = await listen(server);
    try {
      const result = await runLoad({ ...job(origin, pacedStreamBody('m', { deltas: 4, gapMs: 5 })), connections: 16, warmupMs: 1, durationMs: 50 });
      expect(result.warmupOk).toBe(16);
      expect(result.streams!.completed).toBe(result.streams!.started);
      expect(result.streams!.started).toBeGreaterThanOrEqual(16);
    } finally {
      server.close();
    }
  });

  it('spreads the callers\' first streams over staggerMs, and sends them together without it', async () => {
    const arrivals: number[] = [];
    const server = createServer((_request, response) => {
      arrivals.push(performance.now());
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      setTimeout(() => response.end('data: {"content":"a"}\n\ndata: [DONE]\n\n'), 300);
    });
    const origin = await listen(server);
    const spreadOf = async (staggerMs: number) => {
      arrivals.length = 0;
      const result = await runLoad({ ...job(origin, '{}'), connections: 4, durationMs: 200, staggerMs });
      expect(result.streams!.started).toBe(4);
      return Math.max(...arrivals) - Math.min(...arrivals);
    };
    try {
      // Caller i waits i/4 of 160 ms: the last one starts ~120 ms after the first.
      expect(await spreadOf(160)).toBeGreaterThanOrEqual(100);
      expect(await spreadOf(0)).toBeLessThan(50);
    } finally {
      server.close();
    }
  });

  it('counts a gap over the stall bound, a data field split across two reads once, and a stream without its end as incomplete', async () => {
    let answered = 0;
    const server = createServer((_request, response) => {
      answered += 1;
      const whole = answered % 2 === 1;
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.write('data: {"content":"a"}\n\nda');
      setTimeout(() => response.write('ta: {"content":"b"}\n\n'), 5);
      setTimeout(() => response.end(whole ? 'data: [DONE]\n\n' : 'data: {"content":"c"}\n\n'), 260);
    });
    const origin = await listen(server);
    try {
      const result = await runLoad({ ...job(origin, '{}'), connections: 2, durationMs: 100 });
      const streams = result.streams!;
      expect(streams.started).toBe(2);
      expect(streams.frames).toBe(6);
      expect(streams.completed).toBe(1);
      expect(streams.stalls).toBe(2);
      expect(streams.stalledStreams).toBe(2);
      expect(streams.gaps.maxMs).toBeGreaterThan(200);
    } finally {
      server.close();
    }
  });
});

describe('concurrent-streams table', () => {
  const result = (ttftP50: number, ttftP99: number, completed: number, started: number, stalls: number): LoadResult => ({
    mode: 'concurrent', ok: completed, warmupOk: 0, errors: 0, errorSamples: [], elapsedMs: 1_000, requestsPerSecond: completed,
    latency: { count: completed, meanMs: 1_300, p50Ms: 1_300, p90Ms: 1_300, p99Ms: 1_300, maxMs: 1_300 },
    firstChunk: { count: completed, meanMs: ttftP50, p50Ms: ttftP50, p90Ms: ttftP99, p99Ms: ttftP99, maxMs: ttftP99 },
    streams: { started, completed, frames: completed * 67, stalls, stalledStreams: stalls, gaps: { count: 1, meanMs: 20, p50Ms: 20, p90Ms: 20, p99Ms: 20, maxMs: stalls ? 450 : 25 } },
  });
  const memory = new Map([['edge', { pssBytes: 100 * 1024 * 1024, rssBytes: 120 * 1024 * 1024 }]]);
  const rows: StreamLevelFigures[] = [
    levelFigures('upstream', 32, result(0.5, 1, 32, 32, 0), new Map([['upstream', 0.1]]), new Map(), 0.3),
    levelFigures('upstream', 512, result(2, 6, 512, 512, 0), new Map([['upstream', 0.5]]), new Map(), 0.3),
    levelFigures('gateway', 32, result(4.5, 9, 32, 32, 0), new Map([['edge', 0.2144], ['routing', 0.1]]), memory, 0.3),
    levelFigures('gateway', 512, result(150, 700, 400, 512, 12), new Map([['edge', 2], ['routing', 1]]), memory, 0.3),
  ];

  it('adds TTFT over the upstream at the same level and flags stalls and incomplete streams', () => {
    const table = formatConcurrentStreams(rows, { deltas: 64, gapMs: 20, stallMs: 200 });
    const gatewayRow = table.split('\n').find((line) => line.startsWith('| gateway |'))!;
    expect(gatewayRow).toContain('0 stalls, added TTFT +4.0 ms (p99 +8.0 ms), 32 complete');
    expect(gatewayRow).toContain('**12 stalls** (12 streams), added TTFT +148 ms (p99 +694 ms), **400 of 512 complete**');
    // CPU per stream: 0.3144 s / 32 streams; per frame: 0.3144 s / (32 × 67) frames.
    expect(gatewayRow).toContain('| 9,825 / 7,500 | 147 / 112 |');
    expect(table).toContain('| gateway | 32 | edge 100.0, routing 46.6 | 2,144 | 25 | edge 100 / 120 | 0.30 |');
    expect(table.split('\n').find((line) => line.startsWith('| upstream |'))).toContain('0 stalls, TTFT 0.5 ms (p99 1.0), 32 complete');
  });

  it('reads --stream-levels', () => {
    expect(parseLevels(undefined)).toEqual([32, 128, 512]);
    expect(parseLevels('8, 64')).toEqual([8, 64]);
    expect(() => parseLevels('0')).toThrow(/between 1 and 1024/);
    expect(() => parseLevels('8,8')).toThrow(/distinct/);
  });
});
