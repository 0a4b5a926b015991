import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { SampleRecorder, summarize, type LatencySummary } from './statistics.js';

/**
 * The load of one bench phase, against one target (bare proxy or gateway), over keep-alive undici
 * pools. Three shapes:
 * - closed: `connections` callers each send the next request when the previous answer is read (max req/s);
 * - open: requests leave on a fixed schedule (`rate` per second) whatever the answers do; latency is
 *   measured from the scheduled send time, so a stalled target cannot hide its queueing
 *   (no coordinated omission);
 * - ttfb: stream requests one at a time, timing the first content chunk at the client.
 * With `stream` set, an open loop sends stream requests and times their first content chunk too
 * (streams at a fixed rate: the first chunk under load, CPU per stream).
 * - concurrent: `connections` callers each hold one stream open at a time and start the next when it
 *   ends (N concurrent streams, issue 39); besides the first content chunk it times every gap between
 *   two reads of a stream (a stall is a gap over `stallMs`), counts SSE frames and the streams that
 *   reached `donePattern`.
 */
export interface LoadJob {
  mode: 'closed' | 'open' | 'ttfb' | 'concurrent';
  /** http://127.0.0.1:PORT — the bench never targets anything but loopback. */
  origin: string;
  path: string;
  /** One header set per caller identity (API key); requests take them in turn. */
  headerSets: Record<string, string>[];
  body: string;
  connections: number;
  warmupMs: number;
  durationMs: number;
  /** open: requests per second. */
  rate?: number;
  /** ttfb: most requests in the measured part. */
  requests?: number;
  /** open: most requests in flight; beyond it a scheduled request counts as an overload error. */
  maxInFlight?: number;
  /** open: the requests stream; time each one's first content chunk as ttfb does. */
  stream?: boolean;
  /** ttfb: what marks the first content event in the dialect's stream (a RegExp source). Default: chat's `"content":"x`. */
  contentPattern?: string;
  /** concurrent: what marks the end of a whole stream (a plain string); a stream without it is incomplete. */
  donePattern?: string;
  /** concurrent: a gap between two reads of one stream longer than this is a stall (default 200 ms). */
  stallMs?: number;
  /**
   * concurrent: the measured part's callers start spread over this many ms (caller i waits i/N of it before its
   * first stream), so streams arrive as a chat front end's do, not N in one millisecond. 0 (the default): all at once.
   */
  staggerMs?: number;
}

/** concurrent: what the client saw of the streams of the measured part. */
export interface StreamTally {
  /** Streams sent (each answered 200 or not). */
  started: number;
  /** Streams that ended with the done marker. */
  completed: number;
  /** SSE frames (`data:` lines) read over all streams. */
  frames: number;
  /** Gaps between two reads of one stream over `stallMs`. */
  stalls: number;
  /** Streams with at least one stall. */
  stalledStreams: number;
  /** Every gap between two reads of one stream. */
  gaps: LatencySummary;
}

export interface LoadResult {
  mode: LoadJob['mode'];
  /** Answers with status 200 in the measured part. */
  ok: number;
  /** Answers with status 200 during the warm-up (not measured; the bench cross-checks charges with them). */
  warmupOk: number;
  errors: number;
  /** First few distinct error descriptions. */
  errorSamples: string[];
  elapsedMs: number;
  requestsPerSecond: number;
  latency: LatencySummary;
  /** ttfb, and open with `stream`: time to the first content chunk. */
  firstChunk?: LatencySummary;
  /** concurrent: the streams as the client saw them. */
  streams?: StreamTally;
}

/** Hard bounds whatever the caller asks. */
export const LIMITS = { maxConnections: 1_024, maxDurationMs: 120_000, maxRate: 50_000, maxTtfbRequests: 100_000 } as const;

const CHAT_CONTENT_PATTERN = '"content":"[^"]';

export function validateJob(job: LoadJob): LoadJob {
  const origin = new URL(job.origin);
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(origin.hostname)) throw new Error(`bench load goes to loopback only, not ${origin.hostname}`);
  if (!(job.headerSets.length >= 1 && job.headerSets.length <= 10_000)) throw new Error('headerSets: 1 to 10000');
  if (!(job.connections >= 1 && job.connections <= LIMITS.maxConnections)) throw new Error(`connections out of range: ${job.connections}`);
  if (!(job.durationMs > 0 && job.durationMs <= LIMITS.maxDurationMs && job.warmupMs >= 0 && job.warmupMs <= LIMITS.maxDurationMs)) throw new Error('duration out of range');
  if (job.mode === 'open' && !(job.rate !== undefined && job.rate > 0 && job.rate <= LIMITS.maxRate)) throw new Error(`rate out of range: ${job.rate}`);
  if (job.mode === 'ttfb' && !(job.requests !== undefined && job.requests > 0 && job.requests <= LIMITS.maxTtfbRequests)) throw new Error('requests out of range');
  if (job.staggerMs !== undefined && !(job.staggerMs >= 0 && job.staggerMs <= job.durationMs)) throw new Error('staggerMs: 0 to the duration');
  return job;
}

class Tally {
  ok = 0;
  errors = 0;
  readonly errorSamples: string[] = [];
  readonly latency = new SampleRecorder();
  readonly firstChunk = new SampleRecorder();
  readonly gaps = new SampleRecorder();
  started = 0;
  completed = 0;
  frames = 0;
  stalls = 0;
  stalledStreams = 0;

  error(description: string): void {
    this.errors += 1;
    if (this.errorSamples.length < 5 && !this.errorSamples.includes(description)) this.errorSamples.push(description);
  }
}

async function readError(statusCode: number, body: AsyncIterable<Buffer>): Promise<string> {
  let text = '';
  for await (const part of body) if (text.length < 300) text += part.toString('utf8');
  return `HTTP ${statusCode}: ${text.slice(0, 300)}`;
}

let sent = 0;

const DATA_FIELD = Buffer.from('data:');

/**
 * Reads one stream of the concurrent mode: the time of its first content chunk (undefined if none),
 * each gap between two reads, the frames, and whether it reached the done marker (kept in `tally`).
 */
async function readStream(body: AsyncIterable<Buffer>, job: LoadJob, tally: Tally): Promise<number | undefined> {
  const contentPattern = new RegExp(job.contentPattern ?? CHAT_CONTENT_PATTERN);
  const done = job.donePattern ?? '[DONE]';
  const stallMs = job.stallMs ?? 200;
  let firstChunkAt: number | undefined;
  let seen = '';
  let lastReadAt: number | undefined;
  let stalled = false;
  // The last bytes read, so a marker split across two reads is still found.
  let carry = Buffer.alloc(0);
  let ended = false;
  for await (const part of body) {
    const now = performance.now();
    if (lastReadAt !== undefined) {
      const gap = now - lastReadAt;
      tally.gaps.record(gap);
      if (gap > stallMs) {
        tally.stalls += 1;
        stalled = true;
      }
    }
    lastReadAt = now;
    if (firstChunkAt === undefined) {
      seen += part.toString('utf8');
      if (contentPattern.test(seen)) firstChunkAt = now;
    }
    const window = carry.length > 0 ? Buffer.concat([carry, part]) : part;
    // Frames: `data:` fields that start in this read (those in the carried bytes were counted before).
    for (let at = window.indexOf(DATA_FIELD, 0); at >= 0; at = window.indexOf(DATA_FIELD, at + 1)) if (at + DATA_FIELD.length > carry.length) tally.frames += 1;
    if (!ended && window.includes(done)) ended = true;
    carry = Buffer.from(window.subarray(Math.max(0, window.length - 16)));
  }
  if (stalled) tally.stalledStreams += 1;
  if (ended) tally.completed += 1;
  return firstChunkAt;
}

/** One request; resolves when the whole answer is read. */
async function send(pool: Pool, job: LoadJob, tally: Tally, startedAt: number): Promise<void> {
  tally.started += 1;
  try {
    const headers = job.headerSets[sent++ % job.headerSets.length];
    const response = await pool.request({ method: 'POST', path: job.path, headers, body: job.body });
    if (response.statusCode !== 200) {
      const description = await readError(response.statusCode, response.body);
      tally.error(description);
      return;
    }
    let firstChunkAt: number | undefined;
    const timesFirstChunk = job.mode === 'ttfb' || job.stream === true || job.mode === 'concurrent';
    if (job.mode === 'concurrent') {
      firstChunkAt = await readStream(response.body as AsyncIterable<Buffer>, job, tally);
    } else if (timesFirstChunk) {
      const contentPattern = new RegExp(job.contentPattern ?? CHAT_CONTENT_PATTERN);
      let seen = '';
      for await (const part of response.body) {
        if (firstChunkAt === undefined) {
          seen += (part as Buffer).toString('utf8');
          if (contentPattern.test(seen)) firstChunkAt = performance.now();
        }
      }
    } else {
      await response.body.dump({ limit: 1024 * 1024 });
    }
    const endedAt = performance.now();
    if (timesFirstChunk) {
      if (firstChunkAt === undefined) return tally.error('stream ended without a content chunk');
      tally.firstChunk.record(firstChunkAt - startedAt);
    }
    tally.ok += 1;
    tally.latency.record(endedAt - startedAt);
  } catch (error) {
    tally.error(error instanceof Error ? `${error.name}: ${error.message}` : String(error));
  }
}

async function closedLoop(pool: Pool, job: LoadJob, durationMs: number, tally: Tally, staggerMs = 0): Promise<number> {
  const started = performance.now();
  const deadline = started + durationMs;
  const worker = async (index: number) => {
    if (staggerMs > 0) await new Promise((resolve) => setTimeout(resolve, (index * staggerMs) / job.connections));
    while (performance.now() < deadline) await send(pool, job, tally, performance.now());
  };
  await Promise.all(Array.from({ length: job.connections }, (_, index) => worker(index)));
  return performance.now() - started;
}

async function openLoop(pool: Pool, job: LoadJob, durationMs: number, tally: Tally): Promise<number> {
  const intervalMs = 1000 / job.rate!;
  const total = Math.floor(durationMs / intervalMs);
  const maxInFlight = job.maxInFlight ?? 2_000;
  const started = performance.now();
  const inFlight = new Set<Promise<void>>();
  let next = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      while (next < total && started + next * intervalMs <= now) {
        const scheduledAt = started + next * intervalMs;
        next += 1;
        if (inFlight.size >= maxInFlight) {
          tally.error(`overload: more than ${maxInFlight} requests in flight`);
          continue;
        }
        const request = send(pool, job, tally, scheduledAt).finally(() => inFlight.delete(request));
        inFlight.add(request);
      }
      if (next >= total) resolve();
      else setTimeout(tick, Math.max(0, Math.min(1, started + next * intervalMs - performance.now())));
    };
    tick();
  });
  await Promise.all(inFlight);
  return performance.now() - started;
}

async function oneAtATime(pool: Pool, job: LoadJob, durationMs: number, requests: number, tally: Tally): Promise<number> {
  const started = performance.now();
  for (let index = 0; index < requests && performance.now() - started < durationMs; index += 1) await send(pool, job, tally, performance.now());
  return performance.now() - started;
}

async function oneStreamPerCaller(pool: Pool, job: LoadJob, tally: Tally): Promise<number> {
  const started = performance.now();
  await Promise.all(Array.from({ length: job.connections }, () => send(pool, job, tally, performance.now())));
  return performance.now() - started;
}

async function runPart(pool: Pool, job: LoadJob, durationMs: number, tally: Tally, measured: boolean): Promise<number> {
  // concurrent: the warm-up is one stream per caller, all at once (whatever warmupMs says, beyond 0).
  if (job.mode === 'concurrent' && !measured) return oneStreamPerCaller(pool, job, tally);
  if (job.mode === 'closed') return closedLoop(pool, job, durationMs, tally);
  if (job.mode === 'concurrent') return closedLoop(pool, job, durationMs, tally, job.staggerMs);
  if (job.mode === 'open') return openLoop(pool, job, durationMs, tally);
  return oneAtATime(pool, job, durationMs, measured ? job.requests! : Number.MAX_SAFE_INTEGER, tally);
}

/**
 * Warm-up (not recorded), then `beforeMeasuring` (the caller lets the target settle and takes its CPU
 * snapshot), then the measured part. Nothing is in flight at either boundary, so the caller's CPU
 * snapshots bracket exactly the measured requests.
 */
export async function runLoad(jobInput: LoadJob, beforeMeasuring: () => Promise<void> = async () => undefined): Promise<LoadResult> {
  const job = validateJob(jobInput);
  const pool = new Pool(job.origin, { connections: job.connections, pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 30_000, bodyTimeout: 30_000 });
  try {
    const warmup = new Tally();
    if (job.warmupMs > 0) await runPart(pool, job, job.warmupMs, warmup, false);
    await beforeMeasuring();
    const tally = new Tally();
    const elapsedMs = await runPart(pool, job, job.durationMs, tally, true);
    return {
      mode: job.mode,
      ok: tally.ok,
      warmupOk: warmup.ok,
      errors: tally.errors,
      errorSamples: tally.errorSamples,
      elapsedMs,
      requestsPerSecond: (tally.ok / elapsedMs) * 1000,
      latency: summarize(tally.latency.samples()),
      ...(job.mode === 'ttfb' || job.stream === true || job.mode === 'concurrent' ? { firstChunk: summarize(tally.firstChunk.samples()) } : {}),
      ...(job.mode === 'concurrent'
        ? { streams: { started: tally.started, completed: tally.completed, frames: tally.frames, stalls: tally.stalls, stalledStreams: tally.stalledStreams, gaps: summarize(tally.gaps.samples()) } }
        : {}),
    };
  } finally {
    await pool.close().catch(() => undefined);
  }
}
