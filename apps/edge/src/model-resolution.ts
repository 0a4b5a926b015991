import type { EndpointName as InferenceEndpoint } from '@gateway/platform';
import { isExpired, type CatalogModel } from './catalog-cache.js';
import type { EdgeContext } from './context.js';
import { edgeErrors } from './errors.js';

// Every inference route passes its own endpoint name to `resolveModel`, the one place the model named
// in a request is looked up.
export { ENDPOINT_NAMES as INFERENCE_ENDPOINTS, type EndpointName as InferenceEndpoint } from '@gateway/platform';

/**
 * The model a request names, from the catalog cache (no hop): an id or an alias (answers then report
 * `model.id`, the catalog id). Unknown: 400 `model_not_found`. Past its stop time by the edge's clock
 * (`context.now`, injectable): 410 `model_gone`. Not offered on this endpoint: 400 `unsupported_endpoint`.
 * The order matters: a retired model answers 410 on every route, even one it was never served on.
 */
export function resolveModel(context: EdgeContext, name: string, endpoint: InferenceEndpoint | string): CatalogModel {
  const model = context.catalogCache.resolve(name);
  if (!model) throw edgeErrors.modelNotFound(name);
  if (isExpired(model, context.now() / 1000)) throw edgeErrors.modelGone(model.id);
  if (!model.endpoints.has(endpoint)) {
    throw edgeErrors.invalidRequest(`body.model: the model \`${model.id}\` is not served on ${endpoint}.`, 'body.model', 'unsupported_endpoint');
  }
  return model;
}
