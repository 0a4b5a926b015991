import { STRATEGY_HEADER } from './strategy.js';

const NONE: readonly string[] = [];

/**
 * The gateway headers of every inference answer, chat dialects and endpoint families alike: the strategy
 * that routed it, the request fields no provider was sent (`x-gateway-dropped-params`: the edge's drops
 * and the router's, each once, sorted) and the tools dropped before the provider (`x-gateway-dropped-tools`).
 */
export function gatewayHeaders(
  strategy: string,
  edgeDropped: readonly string[] = NONE,
  routerDropped: readonly string[] = NONE,
  droppedTools?: readonly string[],
): Record<string, string> {
  const headers: Record<string, string> = { [STRATEGY_HEADER]: strategy };
  if (edgeDropped.length > 0 || routerDropped.length > 0) {
    headers['x-gateway-dropped-params'] = [...new Set([...edgeDropped, ...routerDropped])].sort().join(',');
  }
  if (droppedTools !== undefined && droppedTools.length > 0) headers['x-gateway-dropped-tools'] = droppedTools.join(',');
  return headers;
}
