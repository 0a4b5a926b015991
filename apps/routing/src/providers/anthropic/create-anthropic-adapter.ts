import type { Provider } from '@gateway/proto';
import type { ProviderAdapter, SecretSource } from '../provider-adapter.js';
import { InstructedStructuredOutput } from '../structured-output.js';
import { AnthropicAdapter } from './anthropic-adapter.js';

/**
 * The adapter of a `kind: anthropic` provider: the Messages API at base_url, the key from the variable
 * api_key_env names. JSON modes are instructed and checked (InstructedStructuredOutput):
 * output_config.format exists only on newer models, and the ones without it refuse the request outright.
 */
export function createAnthropicAdapter(provider: Provider, secretFor: SecretSource): ProviderAdapter {
  const apiKey = provider.apiKeyEnv ? secretFor(provider.apiKeyEnv) : undefined;
  return new InstructedStructuredOutput(new AnthropicAdapter({ providerId: provider.id, baseUrl: provider.baseUrl, apiKey, headers: provider.headers }));
}
