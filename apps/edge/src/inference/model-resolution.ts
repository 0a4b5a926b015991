import type { EndpointName as InferenceEndpoint } from '@gateway/platform';
import type { VerifiedApiKey } from './auth-cache.js';
import { isExpired, tierMayUse, type CatalogModel } from '../catalog-cache.js';
import type { EdgeContext } from '../context.js';
import { edgeErrors } from '../errors.js';

// Every inference route passes its own endpoint name and the caller's verified key to `resolveModel`,
// the one place the model named in a request is looked up and the one place access to it is judged.
export { ENDPOINT_NAMES as INFERENCE_ENDPOINTS, type EndpointName as InferenceEndpoint } from '@gateway/platform';

/**
 * The model a request names, from the catalog cache (no hop): an id or an alias (answers then report
 * `model.id`, the catalog id). Unknown: 400 `model_not_found`. Past its stop time by the edge's clock
 * (`context.now`, injectable): 410 `model_gone`. Not for the key's account tier (its limit group does
 * not name the tier): 403 `model_not_available_for_tier`. Not offered on this endpoint: 400
 * `unsupported_endpoint`. Everything here comes before admission, so a refusal reserves and charges nothing.
 * The order matters: a retired model answers 410 on every route and to every tier, even where it was
 * never served; a model the tier may not use is a 403 whatever the route.
 */
export function resolveModel(
  context: EdgeContext,
  name: string,
  endpoint: InferenceEndpoint | string,
  key: VerifiedApiKey,
): CatalogModel {
  // Only a route whose schema lets `model` out (moderations, images, responses input_tokens) gets here with none: the catalog's default.
  if (name === '') name = defaultModelFor(context, endpoint);
  const model = context.catalogCache.resolve(name);
  if (!model) throw edgeErrors.modelNotFound(name);
  if (isExpired(model, context.now() / 1000)) throw edgeErrors.modelGone(model.id);
  if (!tierMayUse(model, key.tier)) throw edgeErrors.modelNotAvailableForTier(model.id, key.tier, model.availableTiers);
  if (!model.endpoints.has(endpoint)) {
    throw edgeErrors.invalidRequest(`body.model: the model \`${model.id}\` is not served on ${endpoint}.`, 'body.model', 'unsupported_endpoint');
  }
  return model;
}

function defaultModelFor(context: EdgeContext, endpoint: string): string {
  const chosen = context.catalogCache.defaultModel(endpoint);
  if (chosen === undefined) {
    throw edgeErrors.invalidRequest(`body.model: is required: this gateway has no default model for ${endpoint}.`, 'body.model');
  }
  return chosen;
}
