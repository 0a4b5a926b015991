import type { ProviderStat } from '@gateway/proto';
import { CacheAffinity } from './cache-affinity.js';

/**
 * Recent behaviour of each (provider, model) pair on this replica: exponentially weighted success
 * rate, time to first token and output speed, plus a circuit breaker. Strategies read it to order offers.
 */
export interface HealthFigures {
  successRate: number;
  ttftMs: number;
  outputTokensPerSecond: number;
  samples: number;
  circuitOpen: boolean;
}

interface Entry extends HealthFigures {
  consecutiveFailures: number;
  openUntil: number;
  lastUsed: number;
}

/** Weight of the newest sample in the moving averages. */
const SMOOTHING = 0.2;
/** Consecutive failures that open a provider's circuit, and how long it stays open. */
const FAILURES_TO_OPEN = 5;
const COOLDOWN_MS = 30_000;
/** Most (provider, model) pairs tracked; the least recently used is forgotten beyond it. */
const MAX_ENTRIES = 10_000;
/** Other replicas' figures count while this fresh (they publish every few seconds). */
const REMOTE_FRESH_MS = 30_000;
/** Most other replicas remembered; beyond it the stalest is forgotten. */
const MAX_REMOTE_REPLICAS = 256;

interface RemoteReplica {
  receivedAt: number;
  stats: Map<string, ProviderStat>;
}

/** A pair's figures as the ProviderStat message carries them (an error rate, not a success rate). */
function statOf(providerId: string, modelId: string, figures: HealthFigures): ProviderStat {
  const { ttftMs, outputTokensPerSecond, successRate, circuitOpen, samples } = figures;
  return { providerId, modelId, ttftMs, outputTokensPerSecond, errorRate: 1 - successRate, circuitOpen, samples };
}

export class ProviderHealth {
  private readonly entries = new Map<string, Entry>();
  private readonly remote = new Map<string, RemoteReplica>();
  /**
   * Which provider last served each cacheable prefix on this replica (prompt-cache affinity). Kept here
   * because it is the same kind of memory: this replica's picture of its providers, read when ordering offers.
   */
  readonly affinity = new CacheAffinity();

  constructor(private readonly now: () => number = Date.now) {}

  private key(providerId: string, modelId: string) {
    return `${providerId}\0${modelId}`;
  }

  private entry(providerId: string, modelId: string): Entry {
    const key = this.key(providerId, modelId);
    let entry = this.entries.get(key);
    if (!entry) {
      if (this.entries.size >= MAX_ENTRIES) {
        const oldest = [...this.entries.entries()].sort((a, b) => a[1].lastUsed - b[1].lastUsed)[0];
        if (oldest) this.entries.delete(oldest[0]);
      }
      entry = { successRate: 1, ttftMs: 0, outputTokensPerSecond: 0, samples: 0, circuitOpen: false, consecutiveFailures: 0, openUntil: 0, lastUsed: 0 };
      this.entries.set(key, entry);
    }
    entry.lastUsed = this.now();
    return entry;
  }

  /** This replica's figures merged with fresh ones from other replicas, weighted by their samples. */
  figures(providerId: string, modelId: string): HealthFigures {
    const key = this.key(providerId, modelId);
    const now = this.now();
    const entry = this.entries.get(key);
    let samples = entry?.samples ?? 0;
    let success = (entry?.successRate ?? 1) * samples;
    let ttftWeight = entry && entry.ttftMs > 0 ? entry.samples : 0;
    let ttft = ttftWeight * (entry?.ttftMs ?? 0);
    let speedWeight = entry && entry.outputTokensPerSecond > 0 ? entry.samples : 0;
    let speed = speedWeight * (entry?.outputTokensPerSecond ?? 0);
    let circuitOpen = entry ? entry.openUntil > now : false;
    for (const replica of this.remote.values()) {
      if (now - replica.receivedAt > REMOTE_FRESH_MS) continue;
      const stat = replica.stats.get(key);
      if (!stat || stat.samples === 0) continue;
      samples += stat.samples;
      success += (1 - stat.errorRate) * stat.samples;
      if (stat.ttftMs > 0) { ttft += stat.ttftMs * stat.samples; ttftWeight += stat.samples; }
      if (stat.outputTokensPerSecond > 0) { speed += stat.outputTokensPerSecond * stat.samples; speedWeight += stat.samples; }
      circuitOpen ||= stat.circuitOpen;
    }
    return {
      successRate: samples > 0 ? success / samples : 1,
      ttftMs: ttftWeight > 0 ? ttft / ttftWeight : 0,
      outputTokensPerSecond: speedWeight > 0 ? speed / speedWeight : 0,
      samples,
      circuitOpen,
    };
  }

  /**
   * The merged figures (as `figures` reads them) of every pair in `pairs` and every pair this replica
   * has seen itself, sorted by provider then model: what GetProviderHealth answers. A pair never used
   * anywhere has 0 samples, error rate 0 and a closed circuit.
   */
  report(pairs: Iterable<{ providerId: string; modelId: string }>): ProviderStat[] {
    const keys = new Set<string>(this.entries.keys());
    for (const pair of pairs) keys.add(this.key(pair.providerId, pair.modelId));
    const stats = [...keys].map((key): ProviderStat => {
      const [providerId = '', modelId = ''] = key.split('\0');
      return statOf(providerId, modelId, this.figures(providerId, modelId));
    });
    const byText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
    return stats.sort((a, b) => byText(a.providerId, b.providerId) || byText(a.modelId, b.modelId));
  }

  /** This replica's own figures, to publish on provider.stats. */
  localStats(): ProviderStat[] {
    const now = this.now();
    return [...this.entries.entries()].map(([key, entry]) => {
      const [providerId = '', modelId = ''] = key.split('\0');
      return statOf(providerId, modelId, { ...entry, circuitOpen: entry.openUntil > now, samples: Math.min(entry.samples, 1_000) });
    });
  }

  /** Another replica's figures (its latest message replaces its previous one). */
  mergeRemote(replicaId: string, stats: readonly ProviderStat[]): void {
    if (!this.remote.has(replicaId) && this.remote.size >= MAX_REMOTE_REPLICAS) {
      const stalest = [...this.remote.entries()].sort((a, b) => a[1].receivedAt - b[1].receivedAt)[0];
      if (stalest) this.remote.delete(stalest[0]);
    }
    const byKey = new Map<string, ProviderStat>();
    for (const stat of stats.slice(0, MAX_ENTRIES)) byKey.set(this.key(stat.providerId, stat.modelId), stat);
    this.remote.set(replicaId, { receivedAt: this.now(), stats: byKey });
  }

  recordSuccess(providerId: string, modelId: string, sample: { ttftMs?: number; outputTokens?: number; durationMs?: number }): void {
    const entry = this.entry(providerId, modelId);
    const first = entry.samples === 0;
    entry.samples++;
    entry.consecutiveFailures = 0;
    entry.openUntil = 0;
    entry.successRate = entry.successRate * (1 - SMOOTHING) + SMOOTHING;
    if (sample.ttftMs !== undefined) entry.ttftMs = first || entry.ttftMs === 0 ? sample.ttftMs : entry.ttftMs * (1 - SMOOTHING) + sample.ttftMs * SMOOTHING;
    if (sample.outputTokens && sample.durationMs && sample.durationMs > 0) {
      const speed = (sample.outputTokens * 1000) / sample.durationMs;
      entry.outputTokensPerSecond = entry.outputTokensPerSecond === 0 ? speed : entry.outputTokensPerSecond * (1 - SMOOTHING) + speed * SMOOTHING;
    }
  }

  recordFailure(providerId: string, modelId: string): void {
    const entry = this.entry(providerId, modelId);
    entry.samples++;
    entry.consecutiveFailures++;
    entry.successRate *= 1 - SMOOTHING;
    if (entry.consecutiveFailures >= FAILURES_TO_OPEN) entry.openUntil = this.now() + COOLDOWN_MS;
  }
}
