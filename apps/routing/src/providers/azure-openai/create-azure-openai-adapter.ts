import type { Provider } from '@gateway/proto';
import type { ProviderAdapter, SecretSource } from '../provider-adapter.js';
import { AzureOpenAIAdapter } from './azure-openai-adapter.js';

/**
 * The adapter of an `azure-openai` provider: base_url is the resource endpoint, api_version (optional)
 * selects deployment URLs over the v1 API, the key comes from the variable api_key_env names.
 */
export function createAzureOpenAIAdapter(provider: Provider, secretFor: SecretSource): ProviderAdapter | undefined {
  return new AzureOpenAIAdapter({
    providerId: provider.id,
    baseUrl: provider.baseUrl,
    apiKey: provider.apiKeyEnv ? secretFor(provider.apiKeyEnv) : undefined,
    apiVersion: provider.apiVersion || undefined,
    headers: provider.headers,
  });
}
