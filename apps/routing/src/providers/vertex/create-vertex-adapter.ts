import type { Provider } from '@gateway/proto';
import { AnthropicAdapter } from '../anthropic/anthropic-adapter.js';
import type { AnthropicRequestBody } from '../anthropic/anthropic-api-types.js';
import { anthropicHttpError } from '../anthropic/anthropic-error.js';
import { GeminiAdapter } from '../gemini/gemini-adapter.js';
import type { ProviderAdapter, SecretSource } from '../provider-adapter.js';
import { InstructedStructuredOutput } from '../structured-output.js';
import { VertexAdapter } from './vertex-adapter.js';
import { GoogleAccessToken } from './vertex-auth.js';
import { VertexEmbedder } from './vertex-embeddings.js';
import { vertexHttpError } from './vertex-error.js';
import { defaultVertexBaseUrl, VERTEX_ANTHROPIC_VERSION, VertexPaths } from './vertex-paths.js';

/**
 * The Messages body as Claude on Vertex takes it: the model is named by the path, not the body, and
 * `anthropic_version` goes into the body (Anthropic's Vertex SDK does the same rewrite).
 */
export function vertexClaudeBody(body: AnthropicRequestBody): object {
  const { model: _model, ...rest } = body;
  return { anthropic_version: VERTEX_ANTHROPIC_VERSION, ...rest };
}

export interface VertexAdapterSettings {
  /** Renew the access token this long before it expires (default 5 minutes). */
  refreshMarginMs?: number;
}

/**
 * `kind: vertex`. The service account comes from the file whose path the `credentials_file_env`
 * variable holds; without that field, from Application Default Credentials (google-auth-library looks
 * for GOOGLE_APPLICATION_CREDENTIALS, gcloud's file, the metadata server). A variable that is named but
 * unset is a misconfiguration: every request fails over instead of trying other credentials.
 */
export function createVertexAdapter(provider: Provider, secretFor: SecretSource, settings: VertexAdapterSettings = {}): ProviderAdapter | undefined {
  const envName = provider.credentialsFileEnv;
  const credentialsFile = envName ? secretFor(envName) || undefined : undefined;
  const token = new GoogleAccessToken({
    credentialsFile,
    refreshMarginMs: settings.refreshMarginMs,
    unavailable: envName && credentialsFile === undefined ? `${envName} is not set (the path of the service-account file)` : undefined,
  });
  const baseUrl = provider.baseUrl || defaultVertexBaseUrl(provider.location);
  const paths = new VertexPaths(baseUrl, provider.project, provider.location);
  // JSON modes instructed and checked, as for kind anthropic: older Claude models refuse output_config.
  const claude = new InstructedStructuredOutput(new AnthropicAdapter({
    providerId: provider.id,
    kind: 'vertex',
    baseUrl: paths.origin,
    apiKey: undefined,
    headers: provider.headers,
    requestPath: paths.claude,
    transformBody: vertexClaudeBody,
    authHeaders: token.headers,
    // Vertex refused the token (revoked before its expiry): the next request gets a fresh one.
    httpError: vertexHttpError(anthropicHttpError, () => token.invalidate()),
  }));
  // Gemini's JSON modes are native (responseJsonSchema): no instructed fallback, as for kind gemini.
  const gemini = new GeminiAdapter({
    providerId: provider.id,
    kind: 'vertex',
    baseUrl: paths.origin,
    modelPath: paths.gemini,
    authHeaders: token.headers,
    headers: provider.headers,
  });
  const embedder = new VertexEmbedder({
    origin: paths.origin,
    predictPath: (model) => paths.gemini(model, 'predict'),
    authHeaders: token.headers,
    headers: provider.headers,
  });
  return new VertexAdapter({ providerId: provider.id, claude, gemini, embedder, onUnauthenticated: () => token.invalidate() });
}
