import type { ChatRequest, Model, ProviderOffer, Pricing } from '@gateway/proto';
import type { ProviderAdapter } from '../providers/provider-adapter.js';
import type { ProviderHealth } from './provider-health.js';

export interface Candidate {
  offer: ProviderOffer;
  adapter: ProviderAdapter;
  /**
   * Only on the candidates of a request with routing choices (model fallbacks, provider preferences):
   * the model this offer serves and the request as that model takes it. The failover loop switches the
   * request's model when it reaches a candidate of another one.
   */
  model?: Model;
  request?: ChatRequest;
}

export interface RoutingContext {
  modelId: string;
  pricing: Pricing | undefined;
  health: ProviderHealth;
  /** Stable key of the conversation prefix (cache affinity). */
  conversationKey: string;
  random: () => number;
}

/**
 * Orders a model's offers for one request: the router tries them in this order. Every strategy returns
 * every candidate (unhealthy ones last), so a request is refused only when all really failed.
 */
export interface Strategy {
  readonly name: string;
  order(candidates: readonly Candidate[], context: RoutingContext): Candidate[];
}

/** Healthy ones first, each part in the order `rank` gives; stable for ties (catalog order). */
export function healthyFirst(candidates: readonly Candidate[], context: RoutingContext, rank: (healthy: Candidate[]) => Candidate[]): Candidate[] {
  const healthy: Candidate[] = [];
  const open: Candidate[] = [];
  for (const candidate of candidates) {
    (context.health.figures(candidate.offer.providerId, context.modelId).circuitOpen ? open : healthy).push(candidate);
  }
  return [...rank(healthy), ...open];
}
