import { rendezvousScore } from './cache-affinity.js';
import { healthyFirst, type Strategy } from './strategy.js';

/** Highest recent success rate first; an open circuit sends a provider to the back for its cooldown. */
export const reliabilityStrategy: Strategy = {
  name: 'reliability',
  order(candidates, context) {
    return healthyFirst(candidates, context, (healthy) =>
      [...healthy].sort(
        (a, b) =>
          context.health.figures(b.offer.providerId, context.modelId).successRate -
          context.health.figures(a.offer.providerId, context.modelId).successRate,
      ),
    );
  },
};

/** Lowest recent time to first token; offers never measured go first so they get measured. */
export const latencyStrategy: Strategy = {
  name: 'latency',
  order(candidates, context) {
    return healthyFirst(candidates, context, (healthy) =>
      [...healthy].sort(
        (a, b) =>
          context.health.figures(a.offer.providerId, context.modelId).ttftMs -
          context.health.figures(b.offer.providerId, context.modelId).ttftMs,
      ),
    );
  },
};

/** Highest recent output tokens per second; unmeasured offers first. */
export const throughputStrategy: Strategy = {
  name: 'throughput',
  order(candidates, context) {
    const speed = (providerId: string) => {
      const figures = context.health.figures(providerId, context.modelId);
      return figures.outputTokensPerSecond === 0 ? Number.POSITIVE_INFINITY : figures.outputTokensPerSecond;
    };
    return healthyFirst(candidates, context, (healthy) =>
      [...healthy].sort((a, b) => speed(b.offer.providerId) - speed(a.offer.providerId)),
    );
  },
};

/**
 * Prompt-cache affinity: rendezvous hashing of the conversation prefix over the healthy offers, so the
 * same prefix lands on the same provider while it stays healthy, and only its share moves when one drops out.
 */
export const cacheStrategy: Strategy = {
  name: 'cache',
  order(candidates, context) {
    const score = (providerId: string) => rendezvousScore(context.conversationKey, providerId);
    return healthyFirst(candidates, context, (healthy) =>
      [...healthy].sort((a, b) => score(b.offer.providerId) - score(a.offer.providerId)),
    );
  },
};
