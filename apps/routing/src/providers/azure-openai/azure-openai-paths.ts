import type { OpenAIRoute } from '../openai/openai-adapter.js';

/** Deployments whose paths are kept; the catalog names a handful, so this bound is only a guard. */
const MAX_CACHED_DEPLOYMENTS = 1_024;

/**
 * The resource's path prefix from its base_url: `https://r.openai.azure.com` is the usual form, and a
 * base_url that already ends in `/openai` or `/openai/v1` (as the SDKs spell their baseURL) means the same.
 */
export function azureResourcePrefix(baseUrl: string): string {
  return new URL(baseUrl).pathname.replace(/\/+$/, '').replace(/\/openai(\/v1)?$/, '');
}

/**
 * Request paths on Azure OpenAI. With a dated api_version the model is the deployment name and goes into
 * the URL: `/openai/deployments/{deployment}/{route}?api-version={version}` (openai-node `AzureOpenAI`
 * adds the deployment for the routes the gateway calls and sends `api-version` as a query parameter).
 * Without one, the v1 API: `/openai/v1/{route}`, the deployment named by `model` in the body.
 * Paths are built once per deployment and route, not per request.
 */
export function azurePathBuilder(baseUrl: string, apiVersion: string | undefined): (route: OpenAIRoute, upstreamModel: string) => string {
  const prefix = azureResourcePrefix(baseUrl);
  if (!apiVersion) {
    const root = `${prefix}/openai/v1`;
    const paths = new Map<OpenAIRoute, string>();
    return (route) => {
      let path = paths.get(route);
      if (path === undefined) {
        path = `${root}${route}`;
        paths.set(route, path);
      }
      return path;
    };
  }
  const query = `?api-version=${encodeURIComponent(apiVersion)}`;
  const byDeployment = new Map<string, Map<OpenAIRoute, string>>();
  return (route, deployment) => {
    let paths = byDeployment.get(deployment);
    if (paths === undefined) {
      if (byDeployment.size >= MAX_CACHED_DEPLOYMENTS) byDeployment.clear();
      paths = new Map();
      byDeployment.set(deployment, paths);
    }
    let path = paths.get(route);
    if (path === undefined) {
      path = `${prefix}/openai/deployments/${encodeURIComponent(deployment)}${route}${query}`;
      paths.set(route, path);
    }
    return path;
  };
}
