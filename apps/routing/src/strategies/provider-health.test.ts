import { describe, expect, it } from 'vitest';
import { ProviderHealth } from './provider-health.js';

// ProviderHealth.report: what GetProviderHealth answers (the console's provider view).
describe('ProviderHealth.report', () => {
  it('lists every pair asked for and every pair seen, sorted by provider then model, unused ones at zero', () => {
    const health = new ProviderHealth(() => 1_000);
    health.recordSuccess('zeta', 'm-1', { ttftMs: 200, outputTokens: 50, durationMs: 1_000 });
    const report = health.report([
      { providerId: 'beta', modelId: 'm-2' },
      { providerId: 'alpha', modelId: 'm-9' },
      { providerId: 'beta', modelId: 'm-1' },
      // Asked twice, and also seen: listed once.
      { providerId: 'zeta', modelId: 'm-1' },
      { providerId: 'zeta', modelId: 'm-1' },
    ]);
    expect(report.map((stat) => `${stat.providerId}/${stat.modelId}`)).toEqual(['alpha/m-9', 'beta/m-1', 'beta/m-2', 'zeta/m-1']);
    expect(report[0]).toEqual({ providerId: 'alpha', modelId: 'm-9', ttftMs: 0, outputTokensPerSecond: 0, errorRate: 0, circuitOpen: false, samples: 0 });
    expect(report[3]).toEqual({ providerId: 'zeta', modelId: 'm-1', ttftMs: 200, outputTokensPerSecond: 50, errorRate: 0, circuitOpen: false, samples: 1 });
  });

  it("lists a pair only this replica has seen (no longer in the catalog), with its error rate as 1 - success rate and its circuit", () => {
    let now = 1_000;
    const health = new ProviderHealth(() => now);
    for (let failure = 0; failure < 5; failure++) health.recordFailure('gone', 'old-model');
    const [stat] = health.report([]);
    expect(stat).toMatchObject({ providerId: 'gone', modelId: 'old-model', samples: 5, circuitOpen: true });
    // Five failures: the success rate decays from 1 by a factor 0.8 each.
    expect(stat!.errorRate).toBeCloseTo(1 - 0.8 ** 5, 12);
    now += 31_000;
    expect(health.report([])[0]!.circuitOpen).toBe(false);
  });

  it("merges fresh figures of other replicas as routing reads them, and lists their pairs when asked for", () => {
    let now = 10_000;
    const health = new ProviderHealth(() => now);
    health.recordSuccess('p', 'm', { ttftMs: 100 });
    health.mergeRemote('replica-2', [
      { providerId: 'p', modelId: 'm', ttftMs: 400, outputTokensPerSecond: 0, errorRate: 0.5, circuitOpen: false, samples: 3 },
      { providerId: 'q', modelId: 'm', ttftMs: 0, outputTokensPerSecond: 0, errorRate: 1, circuitOpen: true, samples: 2 },
    ]);
    const report = health.report([{ providerId: 'q', modelId: 'm' }]);
    expect(report.map((stat) => stat.providerId)).toEqual(['p', 'q']);
    // p/m: 1 local success + 3 remote samples at 50 % errors; ttft weighted by samples.
    expect(report[0]!.samples).toBe(4);
    expect(report[0]!.errorRate).toBeCloseTo(1 - (1 + 0.5 * 3) / 4, 12);
    expect(report[0]!.ttftMs).toBeCloseTo((100 + 400 * 3) / 4, 9);
    expect(report[1]).toMatchObject({ providerId: 'q', samples: 2, errorRate: 1, circuitOpen: true });
    // Stale remote figures stop counting.
    now += 31_000;
    expect(health.report([{ providerId: 'q', modelId: 'm' }])).toMatchObject([
      { providerId: 'p', samples: 1, errorRate: 0 },
      { providerId: 'q', samples: 0, errorRate: 0, circuitOpen: false },
    ]);
  });
});
