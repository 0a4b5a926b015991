import type { Provider } from '@gateway/proto';
import { AnthropicAdapter } from './anthropic/anthropic-adapter.js';
import { createAzureOpenAIAdapter } from './azure-openai/create-azure-openai-adapter.js';
import { createBedrockAdapter } from './bedrock/create-bedrock-adapter.js';
import { createGeminiAdapter } from './gemini/create-gemini-adapter.js';
import { OpenAIAdapter } from './openai/openai-adapter.js';
import type { ProviderAdapter, SecretSource } from './provider-adapter.js';
import { SimulatedAdapter } from './simulated/simulated-adapter.js';
import { InstructedStructuredOutput } from './structured-output.js';
import { createVertexAdapter } from './vertex/create-vertex-adapter.js';

/** The environment variables a provider's config names: their values decide whether its adapter is rebuilt. */
export function providerEnvNames(provider: Provider): string[] {
  return [provider.apiKeyEnv, provider.credentialsFileEnv, provider.accessKeyIdEnv, provider.secretAccessKeyEnv, provider.sessionTokenEnv]
    .filter((name) => name !== '');
}

/**
 * Adapter for a catalog provider; undefined for a kind this build has no adapter for (it is then
 * skipped). Each kind's folder exports its own factory; every factory honours `provider.headers`.
 */
export function createAdapter(provider: Provider, secretFor: SecretSource): ProviderAdapter | undefined {
  const apiKey = provider.apiKeyEnv ? secretFor(provider.apiKeyEnv) : undefined;
  switch (provider.kind) {
    case 'openai':
      return new OpenAIAdapter({ providerId: provider.id, baseUrl: provider.baseUrl, apiKey, headers: provider.headers });
    case 'anthropic':
      // JSON modes instructed and checked: output_config.format exists only on newer models, and the
      // ones without it refuse the request outright.
      return new InstructedStructuredOutput(new AnthropicAdapter({ providerId: provider.id, baseUrl: provider.baseUrl, apiKey, headers: provider.headers }));
    case 'gemini':
      return createGeminiAdapter(provider, secretFor);
    case 'vertex':
      return createVertexAdapter(provider, secretFor);
    case 'bedrock':
      return createBedrockAdapter(provider, secretFor);
    case 'azure-openai':
      return createAzureOpenAIAdapter(provider, secretFor);
    case 'simulated':
      // No native JSON modes: instructed, and its answers checked against the schema.
      return new InstructedStructuredOutput(new SimulatedAdapter(provider.id));
    default:
      return undefined;
  }
}
