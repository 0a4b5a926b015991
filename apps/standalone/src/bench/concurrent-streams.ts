import { readFileSync } from 'node:fs';
import type { LoadResult } from './load-generator.js';
import { memoryBytes, type ProcessGroup } from './proc-stat.js';

/**
 * The `concurrent-streams` phase of `npm run bench` (issue 39): N streamed chat completions held open at
 * once against each target, the fast upstream pacing every stream (`[deltas D gap G]` in the prompt), read
 * at the client: stalls (a gap over 200 ms between two reads of one stream), time to the first content
 * chunk added over the upstream's own (the same load sent straight to the upstream), streams completed,
 * CPU per stream and per relayed frame of each process group, and the largest memory reading under load.
 * The figures and their table are pure (unit-tested); main.ts runs the load.
 */

export interface StreamLoadOptions {
  levels: number[];
  deltas: number;
  gapMs: number;
  stallMs: number;
}

export const DEFAULT_STREAM_LOAD: StreamLoadOptions = { levels: [32, 128, 512], deltas: 64, gapMs: 20, stallMs: 200 };

/** The chat completions stream body the phase sends (the prompt carries the upstream's pacing marker). */
export function pacedStreamBody(model: string, options: Pick<StreamLoadOptions, 'deltas' | 'gapMs'>): string {
  const messages = [{ role: 'user', content: `Stream to the bench. [deltas ${options.deltas} gap ${options.gapMs}]` }];
  return JSON.stringify({ model, messages, max_tokens: options.deltas + 16, stream: true, stream_options: { include_usage: true } });
}

/** `--stream-levels 32,128,512`: distinct concurrency levels, each 1..1024. */
export function parseLevels(text: string | undefined): number[] {
  if (text === undefined) return [...DEFAULT_STREAM_LOAD.levels];
  const levels = text.split(',').map((part) => part.trim()).filter(Boolean).map(Number);
  if (levels.length === 0 || levels.some((level) => !Number.isInteger(level) || level < 1 || level > 1_024)) throw new Error('--stream-levels takes integers between 1 and 1024, comma-separated');
  if (new Set(levels).size !== levels.length) throw new Error('--stream-levels needs distinct levels');
  return levels;
}

/** Memory of a process group, bytes: PSS (proc-stat's memoryBytes) and RSS. */
export interface GroupMemory { pssBytes: number; rssBytes: number }

export function rssBytes(pid: number): number {
  try {
    const rss = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return rss ? Number(rss[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** Samples each group's memory every `intervalMs` until stopped; keeps each group's largest PSS and RSS. */
export function sampleMemoryPeaks(groups: () => Promise<ProcessGroup[]>, intervalMs = 250): { stop(): Promise<Map<string, GroupMemory>> } {
  const peaks = new Map<string, GroupMemory>();
  let reading: Promise<void> = Promise.resolve();
  const read = async () => {
    for (const group of await groups()) {
      const pss = group.pids.reduce((total, pid) => total + memoryBytes(pid), 0);
      const rss = group.pids.reduce((total, pid) => total + rssBytes(pid), 0);
      const peak = peaks.get(group.name) ?? { pssBytes: 0, rssBytes: 0 };
      peaks.set(group.name, { pssBytes: Math.max(peak.pssBytes, pss), rssBytes: Math.max(peak.rssBytes, rss) });
    }
  };
  const timer = setInterval(() => { reading = reading.then(read).catch(() => undefined); }, intervalMs);
  return {
    stop: async () => {
      clearInterval(timer);
      await reading;
      await read().catch(() => undefined);
      return peaks;
    },
  };
}

/** One target at one level. */
export interface StreamLevelFigures {
  target: string;
  level: number;
  started: number;
  completed: number;
  /** Streams answered with something else than 200, or failed. */
  errors: number;
  stalls: number;
  stalledStreams: number;
  maxGapMs: number;
  ttftP50Ms: number;
  ttftP99Ms: number;
  frames: number;
  /** CPU µs per completed stream, all the target's processes. */
  cpuMicrosPerStream: number;
  /** CPU µs per frame read at the client, per process group. */
  cpuMicrosPerFrameByGroup: Record<string, number>;
  /** Largest PSS / RSS of each process group under the load, MB. */
  memoryMegabytes: Record<string, { pss: number; rss: number }>;
  /** Other work on the machine during the measured part, cores. */
  othersCores: number;
}

export function levelFigures(
  target: string,
  level: number,
  result: LoadResult,
  cpuSeconds: Map<string, number>,
  memory: Map<string, GroupMemory>,
  othersCores: number,
): StreamLevelFigures {
  const streams = result.streams;
  const completed = streams?.completed ?? 0;
  const frames = streams?.frames ?? 0;
  const total = [...cpuSeconds.values()].reduce((sum, seconds) => sum + seconds, 0);
  const MB = 1024 * 1024;
  return {
    target,
    level,
    started: streams?.started ?? 0,
    completed,
    errors: result.errors,
    stalls: streams?.stalls ?? 0,
    stalledStreams: streams?.stalledStreams ?? 0,
    maxGapMs: streams?.gaps.maxMs ?? Number.NaN,
    ttftP50Ms: result.firstChunk?.p50Ms ?? Number.NaN,
    ttftP99Ms: result.firstChunk?.p99Ms ?? Number.NaN,
    frames,
    cpuMicrosPerStream: completed > 0 ? (total / completed) * 1e6 : Number.NaN,
    cpuMicrosPerFrameByGroup: Object.fromEntries([...cpuSeconds].map(([group, seconds]) => [group, frames > 0 ? (seconds / frames) * 1e6 : Number.NaN])),
    memoryMegabytes: Object.fromEntries([...memory].map(([group, bytes]) => [group, { pss: bytes.pssBytes / MB, rss: bytes.rssBytes / MB }])),
    othersCores,
  };
}

const fixed = (value: number, digits = 0) =>
  Number.isFinite(value) ? value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits }) : 'n/a';
const signedMs = (value: number) => {
  if (!Number.isFinite(value)) return 'n/a';
  const digits = Math.abs(value) >= 100 ? 0 : 1;
  return `${value >= 0 ? '+' : ''}${fixed(value, digits)} ms`;
};
const sumOf = (record: Record<string, number>) => Object.values(record).reduce((total, value) => total + value, 0);

/**
 * The phase's tables: one row per target (as the issue's), a cell per level — stalls, added TTFT p50 (p99),
 * streams completed of started — then CPU per stream and per frame at the lowest and highest level; below
 * it each target's CPU per frame by process group and its largest memory. `reference` names the rows that
 * TTFT is added over (the upstream alone).
 */
export function formatConcurrentStreams(rows: StreamLevelFigures[], options: Pick<StreamLoadOptions, 'deltas' | 'gapMs' | 'stallMs'>, reference = 'upstream'): string {
  const levels = [...new Set(rows.map((row) => row.level))].sort((a, b) => a - b);
  const targets = [...new Set(rows.map((row) => row.target))];
  const find = (target: string, level: number) => rows.find((row) => row.target === target && row.level === level);
  const low = levels[0]!;
  const high = levels.at(-1)!;
  const lines = [
    `Concurrent streams: ${options.deltas} deltas ${options.gapMs} ms apart from the upstream; a stall is a gap over ${options.stallMs} ms between two reads of a stream; TTFT added over the upstream's own at the same level.`,
    '',
    `| target | ${levels.map((level) => `N=${level}`).join(' | ')} | CPU per stream, µs (N=${low} / ${high}) | CPU per frame, µs (N=${low} / ${high}) |`,
    `|---|${levels.map(() => '---|').join('')}---|---|`,
  ];
  for (const target of targets) {
    const cells = levels.map((level) => {
      const row = find(target, level);
      if (!row) return 'not run';
      const base = find(reference, level);
      const added = target === reference ? '' : `, added TTFT ${signedMs(row.ttftP50Ms - (base?.ttftP50Ms ?? Number.NaN))} (p99 ${signedMs(row.ttftP99Ms - (base?.ttftP99Ms ?? Number.NaN))})`;
      const own = target === reference ? `, TTFT ${fixed(row.ttftP50Ms, 1)} ms (p99 ${fixed(row.ttftP99Ms, 1)})` : '';
      const stalls = row.stalls > 0 ? `**${fixed(row.stalls)} stalls** (${fixed(row.stalledStreams)} streams)` : '0 stalls';
      const complete = row.completed === row.started && row.errors === 0 ? `${fixed(row.completed)} complete` : `**${fixed(row.completed)} of ${fixed(row.started)} complete**${row.errors ? `, ${fixed(row.errors)} errors` : ''}`;
      return `${stalls}${added}${own}, ${complete}`;
    });
    const perStream = [find(target, low), find(target, high)].map((row) => fixed(row?.cpuMicrosPerStream ?? Number.NaN)).join(' / ');
    const perFrame = [find(target, low), find(target, high)].map((row) => fixed(row ? sumOf(row.cpuMicrosPerFrameByGroup) : Number.NaN)).join(' / ');
    lines.push(`| ${target} | ${cells.join(' | ')} | ${perStream} | ${perFrame} |`);
  }
  lines.push('', '| target | N | CPU µs per frame by process | frames | largest gap, ms | memory under load, MB PSS / RSS | other work, cores |', '|---|---|---|---|---|---|---|');
  for (const target of targets) {
    for (const level of levels) {
      const row = find(target, level);
      if (!row) continue;
      const byGroup = Object.entries(row.cpuMicrosPerFrameByGroup).map(([group, micros]) => `${group} ${fixed(micros, 1)}`).join(', ');
      const memory = Object.entries(row.memoryMegabytes).map(([group, megabytes]) => `${group} ${fixed(megabytes.pss)} / ${fixed(megabytes.rss)}`).join(', ');
      lines.push(`| ${target} | ${level} | ${byGroup} | ${fixed(row.frames)} | ${fixed(row.maxGapMs)} | ${memory} | ${fixed(row.othersCores, 2)} |`);
    }
  }
  return lines.join('\n');
}
