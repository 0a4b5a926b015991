// The two URL styles an azure-openai provider can use, shared by the Azure OpenAI adapter tests.

export const API_VERSION = '2025-04-01-preview';

/** The two URL styles an azure-openai provider can use, and the path each sends a route to. */
export const URL_STYLES = [
  { style: 'deployment URLs (api_version set)', apiVersion: API_VERSION as string | undefined, pathOf: (route: string, deployment: string) => `/openai/deployments/${deployment}/${route}?api-version=${API_VERSION}` },
  { style: 'v1 API (no api_version)', apiVersion: undefined as string | undefined, pathOf: (route: string, _deployment: string) => `/openai/v1/${route}` },
];
