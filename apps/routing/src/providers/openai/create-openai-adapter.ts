import type { Provider } from '@gateway/proto';
import type { ProviderAdapter, SecretSource } from '../provider-adapter.js';
import { OpenAIAdapter } from './openai-adapter.js';

/**
 * The adapter of a `kind: openai` provider (any OpenAI-compatible server): base_url is the API root with
 * its version, the key from the variable api_key_env names goes in `Authorization: Bearer`. JSON modes are
 * native (response_format), so no instructed fallback is wrapped.
 */
export function createOpenAIAdapter(provider: Provider, secretFor: SecretSource): ProviderAdapter {
  const apiKey = provider.apiKeyEnv ? secretFor(provider.apiKeyEnv) : undefined;
  return new OpenAIAdapter({ providerId: provider.id, baseUrl: provider.baseUrl, apiKey, headers: provider.headers });
}
