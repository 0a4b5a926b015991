import type { Provider } from '@gateway/proto';
import { AnthropicAdapter } from './anthropic/anthropic-adapter.js';
import { OpenAIAdapter } from './openai/openai-adapter.js';
import type { ProviderAdapter } from './provider-adapter.js';
import { SimulatedAdapter } from './simulated/simulated-adapter.js';
import { InstructedStructuredOutput } from './structured-output.js';

/** Adapter for a catalog provider; undefined for a kind this build has no adapter for (it is then skipped). */
export function createAdapter(provider: Provider, secret: string | undefined): ProviderAdapter | undefined {
  switch (provider.kind) {
    case 'openai':
      return new OpenAIAdapter({ providerId: provider.id, baseUrl: provider.baseUrl, apiKey: secret });
    case 'anthropic':
      // JSON modes instructed and checked: output_config.format exists only on newer models, and the
      // ones without it refuse the request outright.
      return new InstructedStructuredOutput(new AnthropicAdapter({ providerId: provider.id, baseUrl: provider.baseUrl, apiKey: secret }));
    case 'simulated':
      // No native JSON modes: instructed, and its answers checked against the schema.
      return new InstructedStructuredOutput(new SimulatedAdapter(provider.id));
    default:
      return undefined;
  }
}
