import type { ChatRequest, Model } from '@gateway/proto';

/**
 * Parameters a model lacks are dropped at the edge, the one place that drops (DESIGN §2 step 3,
 * spec §1): the edge's table (apps/edge/src/canonical/parameters.ts) knows each dialect's spelling,
 * so `x-gateway-dropped-params` names what the client sent, and extra_body there holds only the
 * model's extra_parameters. The edge is the Router's only caller; the router forwards the request as
 * the edge made it and reports nothing dropped.
 *
 * Kept (as the identity) only because candidates.ts (split out of router.ts) still calls it: that call
 * and this file go together.
 */
export function dropUnsupportedParameters(request: ChatRequest, _model: Model): { request: ChatRequest; dropped: string[] } {
  return { request, dropped: [] };
}
