import { ProviderError } from '../provider-adapter.js';

/*
 * Vertex's own failures. Its answers are Anthropic's (Claude) or Gemini's (Google models), mapped by
 * anthropic-error.ts and gemini-error.ts; what is Vertex's own is the service account's access token.
 */

/** The service-account key file (or Application Default Credentials) could not be loaded: ours to fix. */
export function vertexCredentialsError(error: unknown): ProviderError {
  return new ProviderError('misconfigured', `Google credentials unusable: ${messageOf(error)}`, 0, { cause: error });
}

/** A token request's failure: refused credentials are ours to fix; an unreachable or failing endpoint is transient. */
export function vertexTokenError(error: unknown): ProviderError {
  const status = (error as { status?: unknown; response?: { status?: unknown } } | null)?.status ?? (error as { response?: { status?: unknown } } | null)?.response?.status;
  const message = `Google access token: ${messageOf(error)}`;
  if (typeof status === 'number') {
    if (status === 408 || status === 429 || status >= 500) return new ProviderError('overloaded', message, 0, { cause: error });
    return new ProviderError('misconfigured', message, 0, { cause: error });
  }
  return new ProviderError('connection', message, 0, { cause: error });
}

/**
 * A wire format's HTTP error mapping for Vertex: a 401 means Vertex refused the bearer token (revoked
 * before its expiry), so `onRefusedToken` drops it and the next request gets a fresh one.
 */
export function vertexHttpError(
  wireError: (status: number, bodyText: string) => ProviderError,
  onRefusedToken: () => void,
): (status: number, bodyText: string) => ProviderError {
  return (status, bodyText) => {
    if (status === 401) onRefusedToken();
    return wireError(status, bodyText);
  };
}

function messageOf(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).slice(0, 300);
}
