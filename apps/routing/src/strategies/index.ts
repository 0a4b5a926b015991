import { balancedStrategy } from './balanced-strategy.js';
import { cacheStrategy, latencyStrategy, reliabilityStrategy, throughputStrategy } from './other-strategies.js';
import type { Strategy } from './strategy.js';

export * from './strategy.js';
export { admitsProvider, applyProviderPreferences, priceSort, sortNamed } from './provider-preferences.js';
export { ProviderHealth } from './provider-health.js';
export { affinityKeyOf, CacheAffinity, MAX_AFFINITY_ENTRIES, preferAffine, rendezvousScore } from './cache-affinity.js';

const strategies = new Map<string, Strategy>(
  [balancedStrategy, reliabilityStrategy, latencyStrategy, throughputStrategy, cacheStrategy].map((strategy) => [strategy.name, strategy]),
);

export const DEFAULT_STRATEGY = balancedStrategy;

/** The edge validates the name; an unknown or empty one here falls back to the default. */
export function strategyNamed(name: string): Strategy {
  return strategies.get(name) ?? DEFAULT_STRATEGY;
}
