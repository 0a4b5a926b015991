import type { Provider } from '@gateway/proto';
import { createAnthropicAdapter } from './anthropic/create-anthropic-adapter.js';
import { createAzureOpenAIAdapter } from './azure-openai/create-azure-openai-adapter.js';
import { createBedrockAdapter } from './bedrock/create-bedrock-adapter.js';
import { createGeminiAdapter } from './gemini/create-gemini-adapter.js';
import { createOpenAIAdapter } from './openai/create-openai-adapter.js';
import type { ProviderAdapter, SecretSource } from './provider-adapter.js';
import { createSimulatedAdapter } from './simulated/create-simulated-adapter.js';
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
  switch (provider.kind) {
    case 'openai':
      return createOpenAIAdapter(provider, secretFor);
    case 'anthropic':
      return createAnthropicAdapter(provider, secretFor);
    case 'gemini':
      return createGeminiAdapter(provider, secretFor);
    case 'vertex':
      return createVertexAdapter(provider, secretFor);
    case 'bedrock':
      return createBedrockAdapter(provider, secretFor);
    case 'azure-openai':
      return createAzureOpenAIAdapter(provider, secretFor);
    case 'simulated':
      return createSimulatedAdapter(provider);
    default:
      return undefined;
  }
}
