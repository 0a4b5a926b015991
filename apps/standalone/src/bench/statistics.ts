/**
 * Latency statistics of the bench: exact nearest-rank percentiles over a bounded sample buffer.
 * Pure (no I/O) so the math is unit-tested.
 */

/** Most samples one phase keeps; past it, reservoir sampling keeps a uniform subset (bounded memory). */
export const MAX_SAMPLES = 2_000_000;

export interface LatencySummary {
  count: number;
  meanMs: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
}

/**
 * Nearest-rank percentile of an ascending array: the smallest value such that at least p% of the
 * samples are <= it. p in [0, 100]; NaN for an empty array.
 */
export function percentile(sortedAscending: ArrayLike<number>, p: number): number {
  const count = sortedAscending.length;
  if (count === 0) return Number.NaN;
  if (!(p >= 0 && p <= 100)) throw new RangeError(`percentile out of range: ${p}`);
  const rank = Math.max(1, Math.ceil((p / 100) * count));
  return sortedAscending[Math.min(count, rank) - 1]!;
}

export function summarize(samples: ArrayLike<number>): LatencySummary {
  const sorted = Float64Array.from(samples).sort();
  let sum = 0;
  for (const value of sorted) sum += value;
  const count = sorted.length;
  return {
    count,
    meanMs: count === 0 ? Number.NaN : sum / count,
    p50Ms: percentile(sorted, 50),
    p90Ms: percentile(sorted, 90),
    p99Ms: percentile(sorted, 99),
    maxMs: count === 0 ? Number.NaN : sorted[count - 1]!,
  };
}

/** Collects samples up to a bound; beyond it keeps a uniform random subset (Algorithm R). */
export class SampleRecorder {
  private readonly values: number[] = [];
  private seen = 0;

  constructor(private readonly capacity = MAX_SAMPLES, private readonly random: () => number = Math.random) {}

  record(value: number): void {
    this.seen += 1;
    if (this.values.length < this.capacity) {
      this.values.push(value);
      return;
    }
    const slot = Math.floor(this.random() * this.seen);
    if (slot < this.capacity) this.values[slot] = value;
  }

  /** Every value recorded, kept or not. */
  get count(): number {
    return this.seen;
  }

  samples(): readonly number[] {
    return this.values;
  }
}
