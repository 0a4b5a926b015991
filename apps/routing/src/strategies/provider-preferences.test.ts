import { describe, expect, it } from 'vitest';
import type { RoutingChoices } from '@gateway/proto';
import type { ProviderAdapter } from '../providers/provider-adapter.js';
import { admitsProvider, applyProviderPreferences, ProviderHealth, strategyNamed, type Candidate, type RoutingContext } from './index.js';

const candidates: Candidate[] = ['p1', 'p2', 'p3', 'p4'].map((providerId) => ({
  offer: { providerId, upstreamModel: 'm', endpoints: ['chat.completions'] },
  adapter: {} as ProviderAdapter,
}));

function context(health = new ProviderHealth()): RoutingContext {
  return { modelId: 'model', pricing: { perInputToken: '0.000001', perOutputToken: '0.000002' }, health, conversationKey: 'k', random: Math.random };
}

function choices(extra: Partial<RoutingChoices>): RoutingChoices {
  return { fallbackModels: [], order: [], orderOnly: false, only: [], ignore: [], sort: '', ...extra };
}

const ids = (ordered: Candidate[]) => ordered.map((candidate) => candidate.offer.providerId);
const reliability = strategyNamed('reliability');

describe('provider preferences', () => {
  it('puts the providers of `order` first, in its order, and the strategy orders the rest', () => {
    const health = new ProviderHealth();
    health.recordSuccess('p2', 'model', {});
    health.recordFailure('p3', 'model');
    // reliability alone: p1, p2, p4 (untouched 1.0), then p3 (failed).
    const ordered = ids(applyProviderPreferences(candidates, choices({ order: ['p3', 'p1', 'unknown'] }), reliability, context(health)));
    expect(ordered).toEqual(['p3', 'p1', 'p2', 'p4']);
  });

  it('`allow_fallbacks: false` keeps only the ordered providers; without an order only the first', () => {
    expect(ids(applyProviderPreferences(candidates, choices({ order: ['p4', 'p2'], orderOnly: true }), reliability, context()))).toEqual(['p4', 'p2']);
    expect(ids(applyProviderPreferences(candidates, choices({ orderOnly: true }), reliability, context()))).toEqual(['p1']);
  });

  it('`only` and `ignore` filter before ordering; unknown ids match nothing', () => {
    expect(ids(applyProviderPreferences(candidates, choices({ only: ['p2', 'p4', 'nope'] }), reliability, context()))).toEqual(['p2', 'p4']);
    expect(ids(applyProviderPreferences(candidates, choices({ ignore: ['p1', 'p3'] }), reliability, context()))).toEqual(['p2', 'p4']);
    expect(ids(applyProviderPreferences(candidates, choices({ only: ['p1'], ignore: ['p1'] }), reliability, context()))).toEqual([]);
    expect(admitsProvider(choices({ only: ['p1'] }), 'p2')).toBe(false);
    expect(admitsProvider(choices({ ignore: ['p2'] }), 'p2')).toBe(false);
    expect(admitsProvider(choices({ order: ['p1'], orderOnly: true }), 'p2')).toBe(false);
    expect(admitsProvider(choices({ order: ['p1'] }), 'p2')).toBe(true);
  });

  it('`sort` replaces the strategy with routing’s measured figures: latency lowest first, throughput highest first', () => {
    const health = new ProviderHealth();
    health.recordSuccess('p1', 'model', { ttftMs: 400, outputTokens: 100, durationMs: 1_000 });
    health.recordSuccess('p2', 'model', { ttftMs: 100, outputTokens: 500, durationMs: 1_000 });
    health.recordSuccess('p3', 'model', { ttftMs: 200, outputTokens: 300, durationMs: 1_000 });
    health.recordSuccess('p4', 'model', { ttftMs: 300, outputTokens: 200, durationMs: 1_000 });
    expect(ids(applyProviderPreferences(candidates, choices({ sort: 'latency' }), strategyNamed('balanced'), context(health)))).toEqual(['p2', 'p3', 'p4', 'p1']);
    expect(ids(applyProviderPreferences(candidates, choices({ sort: 'throughput' }), strategyNamed('balanced'), context(health)))).toEqual(['p2', 'p3', 'p4', 'p1']);
    // An explicit order still wins over the sort.
    expect(ids(applyProviderPreferences(candidates, choices({ sort: 'latency', order: ['p1'] }), strategyNamed('balanced'), context(health)))).toEqual(['p1', 'p2', 'p3', 'p4']);
  });

  it('`sort: price` is stable over equally priced offers, healthy ones first', () => {
    const health = new ProviderHealth();
    for (let failure = 0; failure < 5; failure++) health.recordFailure('p1', 'model');
    for (let run = 0; run < 20; run++) {
      expect(ids(applyProviderPreferences(candidates, choices({ sort: 'price' }), strategyNamed('balanced'), context(health)))).toEqual(['p2', 'p3', 'p4', 'p1']);
    }
  });
});
