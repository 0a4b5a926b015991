/**
 * Summary of a V8 .cpuprofile (what `node --cpu-prof` writes): self time per function and per
 * package. Pure, so it is unit-tested on a hand-made profile.
 */

export interface CpuProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  hitCount?: number;
  children?: number[];
}

export interface CpuProfile {
  nodes: CpuProfileNode[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

export interface SelfTimeEntry {
  /** `function (file:line)` or a V8 pseudo-frame like `(garbage collector)`. */
  name: string;
  selfMs: number;
  /** Share of all sampled time, 0..1 (idle included in the total). */
  share: number;
}

export interface ProfileSummary {
  totalMs: number;
  idleMs: number;
  functions: SelfTimeEntry[];
  /** Self time grouped by where the code lives: node_modules package, node: internals, our workspace package, V8. */
  places: SelfTimeEntry[];
}

/** Where a frame's code lives, coarse enough to read a profile at a glance. */
export function placeOf(url: string, functionName: string): string {
  if (!url) return functionName.startsWith('(') ? functionName : '(native)';
  if (url.startsWith('node:')) return 'node:' + url.slice('node:'.length).split('/')[0]!.replace(/^internal$/, 'internal');
  const packageMatch = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (packageMatch) return packageMatch[1]!;
  const workspaceMatch = /\/(apps|libs)\/([^/]+)\//.exec(url);
  if (workspaceMatch) return `${workspaceMatch[1]}/${workspaceMatch[2]}`;
  return url;
}

function shortUrl(url: string): string {
  if (!url) return '';
  const packageIndex = url.lastIndexOf('node_modules/');
  if (packageIndex >= 0) return url.slice(packageIndex + 'node_modules/'.length);
  const workspace = /\/((?:apps|libs)\/.*)$/.exec(url);
  if (workspace) return workspace[1]!;
  return url.replace(/^file:\/\//, '');
}

/**
 * Self time per function and per place. `window` (microseconds of the monotonic clock, which is what
 * V8 stamps samples with and what process.hrtime reads) keeps only the samples taken inside it, e.g.
 * the measured part of a load phase without start-up and warm-up.
 */
export function summarizeProfile(profile: CpuProfile, top = 15, window?: { startMicros: number; endMicros: number }): ProfileSummary {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const selfMicros = new Map<number, number>();
  if (profile.samples && profile.timeDeltas && profile.samples.length === profile.timeDeltas.length) {
    // Each delta is the time before its sample: attribute the time to the sample it precedes.
    let timestamp = profile.startTime;
    for (let index = 0; index < profile.samples.length; index += 1) {
      const delta = Math.max(0, profile.timeDeltas[index]!);
      timestamp += delta;
      if (window && (timestamp < window.startMicros || timestamp > window.endMicros)) continue;
      const id = profile.samples[index]!;
      selfMicros.set(id, (selfMicros.get(id) ?? 0) + delta);
    }
  } else {
    const totalHits = profile.nodes.reduce((sum, node) => sum + (node.hitCount ?? 0), 0) || 1;
    const perHit = (profile.endTime - profile.startTime) / totalHits;
    for (const node of profile.nodes) selfMicros.set(node.id, (node.hitCount ?? 0) * perHit);
  }
  let totalMicros = 0;
  for (const value of selfMicros.values()) totalMicros += value;
  const functions = new Map<string, number>();
  const places = new Map<string, number>();
  let idleMicros = 0;
  for (const [id, micros] of selfMicros) {
    const frame = byId.get(id)?.callFrame;
    if (!frame) continue;
    const functionName = frame.functionName || '(anonymous)';
    if (functionName === '(idle)') {
      idleMicros += micros;
      continue;
    }
    const name = frame.url ? `${functionName} (${shortUrl(frame.url)}:${frame.lineNumber + 1})` : functionName;
    functions.set(name, (functions.get(name) ?? 0) + micros);
    const place = placeOf(frame.url, functionName);
    places.set(place, (places.get(place) ?? 0) + micros);
  }
  const rank = (entries: Map<string, number>) =>
    [...entries]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, micros]) => ({ name, selfMs: micros / 1000, share: totalMicros === 0 ? 0 : micros / totalMicros }));
  return { totalMs: totalMicros / 1000, idleMs: idleMicros / 1000, functions: rank(functions), places: rank(places) };
}
