import { describe, expect, it } from 'vitest';
import type { ProviderAdapter } from '../providers/provider-adapter.js';
import { ProviderHealth, strategyNamed, type Candidate, type RoutingContext } from './index.js';

const candidates: Candidate[] = ['p1', 'p2', 'p3'].map((providerId) => ({
  offer: { providerId, upstreamModel: 'm', endpoints: ['chat.completions'] },
  adapter: {} as ProviderAdapter,
}));

function context(health = new ProviderHealth(), extra: Partial<RoutingContext> = {}): RoutingContext {
  return { modelId: 'model', pricing: { perInputToken: '0.000001', perOutputToken: '0.000002' }, health, conversationKey: 'k', random: Math.random, ...extra };
}

const ids = (ordered: Candidate[]) => ordered.map((candidate) => candidate.offer.providerId);

describe('strategies', () => {
  it('balanced returns every candidate once and spreads first picks', () => {
    const firsts = new Map<string, number>();
    for (let run = 0; run < 600; run++) {
      const ordered = ids(strategyNamed('balanced').order(candidates, context()));
      expect([...ordered].sort()).toEqual(['p1', 'p2', 'p3']);
      firsts.set(ordered[0]!, (firsts.get(ordered[0]!) ?? 0) + 1);
    }
    for (const id of ['p1', 'p2', 'p3']) expect(firsts.get(id)).toBeGreaterThan(120);
  });

  it('moves a provider with an open circuit to the back, and reliability prefers the successful', () => {
    const health = new ProviderHealth();
    for (let failure = 0; failure < 5; failure++) health.recordFailure('p1', 'model');
    health.recordFailure('p2', 'model');
    health.recordSuccess('p3', 'model', {});
    expect(health.figures('p1', 'model').circuitOpen).toBe(true);
    expect(ids(strategyNamed('reliability').order(candidates, context(health)))).toEqual(['p3', 'p2', 'p1']);
    for (let run = 0; run < 50; run++) expect(ids(strategyNamed('balanced').order(candidates, context(health))).at(-1)).toBe('p1');
  });

  it('closes the circuit after its cooldown', () => {
    let now = 1_000_000;
    const health = new ProviderHealth(() => now);
    for (let failure = 0; failure < 5; failure++) health.recordFailure('p1', 'model');
    expect(health.figures('p1', 'model').circuitOpen).toBe(true);
    now += 31_000;
    expect(health.figures('p1', 'model').circuitOpen).toBe(false);
  });

  it('latency and throughput order by measured figures', () => {
    const health = new ProviderHealth();
    health.recordSuccess('p1', 'model', { ttftMs: 300, outputTokens: 100, durationMs: 1_000 });
    health.recordSuccess('p2', 'model', { ttftMs: 100, outputTokens: 100, durationMs: 4_000 });
    health.recordSuccess('p3', 'model', { ttftMs: 200, outputTokens: 100, durationMs: 2_000 });
    expect(ids(strategyNamed('latency').order(candidates, context(health)))).toEqual(['p2', 'p3', 'p1']);
    expect(ids(strategyNamed('throughput').order(candidates, context(health)))).toEqual(['p1', 'p3', 'p2']);
  });

  it('cache is sticky per conversation and varies across conversations', () => {
    const first = (key: string) => ids(strategyNamed('cache').order(candidates, context(undefined, { conversationKey: key })))[0];
    expect(first('conversation-1')).toBe(first('conversation-1'));
    const chosen = new Set(Array.from({ length: 40 }, (_, index) => first(`conversation-${index}`)));
    expect(chosen.size).toBeGreaterThan(1);
  });

  it('falls back to balanced for an unknown name', () => {
    expect(strategyNamed('nonsense').name).toBe('balanced');
    expect(strategyNamed('').name).toBe('balanced');
  });
});

describe('shared provider health', () => {
  it('merges fresh figures of other replicas, weighted by samples, and forgets stale ones', () => {
    let now = 5_000_000;
    const here = new ProviderHealth(() => now);
    const there = new ProviderHealth(() => now);
    for (let failure = 0; failure < 5; failure++) there.recordFailure('p1', 'model');
    here.recordSuccess('p1', 'model', { ttftMs: 100 });
    here.mergeRemote('replica-2', there.localStats());
    const merged = here.figures('p1', 'model');
    expect(merged.samples).toBe(6);
    expect(merged.circuitOpen).toBe(true);
    expect(merged.successRate).toBeCloseTo((1 * 1 + 0.8 ** 5 * 5) / 6, 6);
    expect(ids(strategyNamed('reliability').order(candidates, context(here))).at(-1)).toBe('p1');
    now += 31_000;
    expect(here.figures('p1', 'model')).toMatchObject({ samples: 1, circuitOpen: false });
  });
});
