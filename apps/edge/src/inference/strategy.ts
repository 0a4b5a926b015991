import { z } from 'zod';
import type { VerifiedApiKey } from './auth-cache.js';
import { echoed } from '../echoed-value.js';
import { edgeErrors } from '../errors.js';

/** Spec §1 routing strategies. */
export const ROUTING_STRATEGIES = ['reliability', 'balanced', 'latency', 'throughput', 'cache'] as const;
export type RoutingStrategy = (typeof ROUTING_STRATEGIES)[number];
export const routingStrategy = z.enum(ROUTING_STRATEGIES);

export const STRATEGY_HEADER = 'x-gateway-routing-strategy';

const KNOWN_STRATEGIES: ReadonlySet<string> = new Set(routingStrategy.options);

/** The strategy header, checked before any service is asked: an unknown value is a 400. */
export function parseStrategyHeader(value: string | string[] | undefined): RoutingStrategy | undefined {
  if (typeof value !== 'string' || value.trim() === '') return undefined;
  const trimmed = value.trim();
  if (KNOWN_STRATEGIES.has(trimmed)) return trimmed as RoutingStrategy;
  throw edgeErrors.invalidRequest(
    `header.${STRATEGY_HEADER}: unknown routing strategy \`${echoed(value)}\`; expected one of ${ROUTING_STRATEGIES.join(', ')}.`,
    `header.${STRATEGY_HEADER}`,
  );
}

/** DESIGN §3: body `routing`, then the header, then the key's default, then `balanced`. */
export function chooseStrategy(bodyValue: RoutingStrategy | null | undefined, headerValue: RoutingStrategy | undefined, key: VerifiedApiKey): RoutingStrategy {
  if (bodyValue) return bodyValue;
  if (headerValue) return headerValue;
  // A set lookup, not safeParse: most keys have no default (''), and a failed zod parse builds an
  // error object on every request (~1% of the edge's CPU in the bench profile).
  return KNOWN_STRATEGIES.has(key.defaultRoutingStrategy) ? (key.defaultRoutingStrategy as RoutingStrategy) : 'balanced';
}
