import { parseCredits } from '@gateway/platform';
import type { Pricing } from '@gateway/proto';
import { healthyFirst, type Candidate, type RoutingContext, type Strategy } from './strategy.js';

/**
 * Price of one offer in pico-credits per token. Offers carry no price of their own yet (the model's
 * pricing is the same for all of them), so today every weight is equal and `balanced` spreads load
 * evenly; when offers gain a cost, only this function changes.
 */
const priceCache = new WeakMap<Pricing, bigint>();

/** An offer's price in pico-credits per token (the model's input plus output price, today). */
export function balancedOfferPrice(candidate: Candidate, pricing: Pricing | undefined): bigint {
  return offerPricePico(candidate, pricing);
}

function offerPricePico(_candidate: Candidate, pricing: Pricing | undefined): bigint {
  if (!pricing) return 0n;
  // Pricing objects live as long as their catalog snapshot: parse each once, not once per request.
  const cached = priceCache.get(pricing);
  if (cached !== undefined) return cached;
  const price = parsePrice(pricing);
  priceCache.set(pricing, price);
  return price;
}

function parsePrice(pricing: Pricing): bigint {
  const text = pricing.perInputToken ?? pricing.perToken ?? '0';
  try {
    return parseCredits(text) + parseCredits(pricing.perOutputToken ?? '0');
  } catch {
    return 0n;
  }
}

/** Weighted random order without replacement over healthy offers, weight inverse to price. */
export const balancedStrategy: Strategy = {
  name: 'balanced',
  order(candidates, context: RoutingContext) {
    return healthyFirst(candidates, context, (healthy) => {
      const pool = healthy.map((candidate) => {
        const price = offerPricePico(candidate, context.pricing);
        // Free offers get the weight of the cheapest priced one: 1 / (price + 1) keeps it finite.
        return { candidate, weight: 1 / (Number(price) + 1) };
      });
      const ordered: Candidate[] = [];
      while (pool.length > 0) {
        const total = pool.reduce((sum, item) => sum + item.weight, 0);
        let pick = context.random() * total;
        let index = 0;
        for (; index < pool.length - 1; index++) {
          pick -= pool[index]!.weight;
          if (pick < 0) break;
        }
        ordered.push(pool[index]!.candidate);
        pool.splice(index, 1);
      }
      return ordered;
    });
  },
};
