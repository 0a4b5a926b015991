import type { Provider } from '@gateway/proto';
import type { ProviderAdapter, SecretSource } from '../provider-adapter.js';
import { GeminiAdapter, type GeminiMethod } from './gemini-adapter.js';

/** Where `kind: gemini` goes when the config gives no base_url. */
export const GEMINI_DEFAULT_BASE_URL = 'https://generativelanguage.googleapis.com/v1beta';

/**
 * The path of a model's method under a Gemini API base URL: `{base path}/models/{model}:{method}`. A
 * model written as `models/x` (as the API lists them) is taken as `x`; tuned models keep their own
 * collection (`tunedModels/x`).
 */
export function geminiModelPath(basePath: string, model: string, method: GeminiMethod): string {
  const name = model.includes('/') ? model.replace(/^\/+/, '') : `models/${model}`;
  return `${basePath}/${name}:${method}`;
}

/**
 * The adapter of a `kind: gemini` provider: the Gemini API with its key (api_key_env) in
 * `x-goog-api-key`. JSON modes are native (responseJsonSchema), so no instructed fallback is wrapped.
 */
export function createGeminiAdapter(provider: Provider, secretFor: SecretSource): ProviderAdapter | undefined {
  const baseUrl = provider.baseUrl || GEMINI_DEFAULT_BASE_URL;
  const basePath = new URL(baseUrl).pathname.replace(/\/+$/, '');
  const apiKey = provider.apiKeyEnv ? secretFor(provider.apiKeyEnv) : undefined;
  // One object for every request: the adapter merges headers once for it.
  const auth: Record<string, string> = apiKey ? { 'x-goog-api-key': apiKey } : {};
  return new GeminiAdapter({
    providerId: provider.id,
    kind: 'gemini',
    baseUrl,
    modelPath: (model, method) => geminiModelPath(basePath, model, method),
    authHeaders: () => auth,
    headers: provider.headers,
  });
}
