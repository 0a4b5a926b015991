import type { Provider } from '@gateway/proto';
import type { ProviderAdapter, SecretSource } from '../provider-adapter.js';

/** The bedrock adapter is being built (issue 26); until it lands, a provider of this kind is skipped with a warning. */
export function createBedrockAdapter(_provider: Provider, _secretFor: SecretSource): ProviderAdapter | undefined {
  return undefined;
}
