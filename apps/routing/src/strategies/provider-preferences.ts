import type { RoutingChoices } from '@gateway/proto';
import { balancedOfferPrice } from './balanced-strategy.js';
import { latencyStrategy, throughputStrategy } from './other-strategies.js';
import { healthyFirst, type Candidate, type RoutingContext, type Strategy } from './strategy.js';

/**
 * `provider.sort: price`: cheapest offer first (healthy ones first), stable for ties. Offers carry no
 * price of their own yet (one price per model), so today this keeps the catalog's order of the healthy
 * offers; it follows offer prices as soon as offers gain them (balanced-strategy.ts).
 */
export const priceSort: Strategy = {
  name: 'price',
  order(candidates, context) {
    return healthyFirst(candidates, context, (healthy) =>
      [...healthy].sort((a, b) => {
        const difference = balancedOfferPrice(a, context.pricing) - balancedOfferPrice(b, context.pricing);
        return difference < 0n ? -1 : difference > 0n ? 1 : 0;
      }),
    );
  },
};

/** The ordering a `provider.sort` asks for: routing's own measured figures (provider-health.ts) for latency and throughput. */
export function sortNamed(sort: string): Strategy | undefined {
  switch (sort) {
    case 'price':
      return priceSort;
    case 'latency':
      return latencyStrategy;
    case 'throughput':
      return throughputStrategy;
    default:
      return undefined;
  }
}

/** Whether the request's provider preferences let `providerId` serve it (`only`, `ignore`, `allow_fallbacks: false`). */
export function admitsProvider(choices: RoutingChoices, providerId: string): boolean {
  if (choices.only.length > 0 && !choices.only.includes(providerId)) return false;
  if (choices.ignore.includes(providerId)) return false;
  return !choices.orderOnly || choices.order.length === 0 || choices.order.includes(providerId);
}

/**
 * One model's offers under the request's provider preferences. Precedence (docs/dialects.md): the
 * filters first (`only`, `ignore`, `allow_fallbacks: false`); what they leave is ordered by `sort` when
 * given, else by the routing strategy; then the providers named in `order` go first, in its order,
 * whatever their health (an explicit order is the caller's decision). `allow_fallbacks: false` keeps only
 * the providers of `order`, or with no order only the first provider.
 */
export function applyProviderPreferences(candidates: readonly Candidate[], choices: RoutingChoices, strategy: Strategy, context: RoutingContext): Candidate[] {
  const allowed = candidates.filter((candidate) => admitsProvider(choices, candidate.offer.providerId));
  if (allowed.length <= 1) return allowed;
  const ordered = (sortNamed(choices.sort) ?? strategy).order(allowed, context);
  // `allow_fallbacks: false` without an order: the one provider the ordering puts first, no backup.
  if (choices.order.length === 0) return choices.orderOnly ? ordered.slice(0, 1) : ordered;
  const first: Candidate[] = [];
  for (const providerId of choices.order) {
    const named = ordered.find((candidate) => candidate.offer.providerId === providerId);
    if (named && !first.includes(named)) first.push(named);
  }
  for (const candidate of ordered) if (!first.includes(candidate)) first.push(candidate);
  return first;
}
