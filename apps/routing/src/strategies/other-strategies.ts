import { rendezvousScore } from './cache-affinity.js';
import { healthyFirst, type RoutingContext, type Strategy } from './strategy.js';

/**
 * The strategies that rank the healthy offers by one score per provider, the highest first (ties keep
 * the catalog order, as healthyFirst does).
 */
function highestScoreFirst(name: string, score: (providerId: string, context: RoutingContext) => number): Strategy {
  return {
    name,
    order(candidates, context) {
      return healthyFirst(candidates, context, (healthy) =>
        [...healthy].sort((a, b) => score(b.offer.providerId, context) - score(a.offer.providerId, context)),
      );
    },
  };
}

/** Highest recent success rate first; an open circuit sends a provider to the back for its cooldown. */
export const reliabilityStrategy = highestScoreFirst('reliability', (providerId, context) => context.health.figures(providerId, context.modelId).successRate);

/** Lowest recent time to first token; offers never measured go first so they get measured. */
export const latencyStrategy = highestScoreFirst('latency', (providerId, context) => -context.health.figures(providerId, context.modelId).ttftMs);

/** Highest recent output tokens per second; unmeasured offers first. */
export const throughputStrategy = highestScoreFirst('throughput', (providerId, context) => {
  const figures = context.health.figures(providerId, context.modelId);
  return figures.outputTokensPerSecond === 0 ? Number.POSITIVE_INFINITY : figures.outputTokensPerSecond;
});

/**
 * Prompt-cache affinity: rendezvous hashing of the conversation prefix over the healthy offers, so the
 * same prefix lands on the same provider while it stays healthy, and only its share moves when one drops out.
 */
export const cacheStrategy = highestScoreFirst('cache', (providerId, context) => rendezvousScore(context.conversationKey, providerId));
