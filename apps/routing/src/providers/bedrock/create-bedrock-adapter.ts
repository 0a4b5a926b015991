import type { Provider } from '@gateway/proto';
import type { ProviderAdapter, SecretSource } from '../provider-adapter.js';
import { InstructedStructuredOutput } from '../structured-output.js';
import { BedrockAdapter } from './bedrock-adapter.js';

/**
 * The adapter of a `kind: bedrock` provider. Static credentials when the catalog names the key
 * variables (and the session token's, for temporary keys); without them the standard AWS credential
 * chain. JSON modes are instructed and checked (InstructedStructuredOutput): Converse has no native JSON
 * schema output common to every model it serves.
 */
export function createBedrockAdapter(provider: Provider, secretFor: SecretSource): ProviderAdapter {
  const secret = (name: string) => (name ? secretFor(name) : undefined);
  return new InstructedStructuredOutput(
    new BedrockAdapter({
      providerId: provider.id,
      region: provider.region,
      baseUrl: provider.baseUrl,
      staticKeysNamed: provider.accessKeyIdEnv !== '',
      accessKeyId: secret(provider.accessKeyIdEnv),
      secretAccessKey: secret(provider.secretAccessKeyEnv),
      sessionToken: secret(provider.sessionTokenEnv),
      headers: provider.headers,
    }),
  );
}
