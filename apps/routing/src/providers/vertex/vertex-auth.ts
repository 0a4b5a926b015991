import { GoogleAuth, JWT, type AuthClient } from 'google-auth-library';
import { ProviderError, type AttemptSignal } from '../provider-adapter.js';
import { vertexCredentialsError, vertexTokenError } from './vertex-error.js';

/** The OAuth scope Vertex AI takes (the one Anthropic's Vertex SDK asks for too). */
export const CLOUD_PLATFORM_SCOPE = 'https://www.googleapis.com/auth/cloud-platform';
/** Where google-auth-library sends the signed-JWT grant of a service account, whatever the key file says. */
export const GOOGLE_TOKEN_URL = 'https://oauth2.googleapis.com/token';
/** A token is renewed this long before it expires (google-auth-library's own default margin). */
export const DEFAULT_REFRESH_MARGIN_MS = 5 * 60 * 1000;

export interface GoogleAccessTokenOptions {
  /** Path of a service-account JSON key file; undefined: Application Default Credentials. */
  credentialsFile: string | undefined;
  /** Renew the token this long before its expiry (default 5 minutes). */
  refreshMarginMs?: number | undefined;
  /** Set: the credentials cannot be had (why, without secrets); every request fails as misconfigured. */
  unavailable?: string | undefined;
}

interface CurrentToken {
  /** `{ authorization: 'Bearer …' }`, the same object while the token lasts (adapters reuse merged headers by identity). */
  headers: Record<string, string>;
  /** Epoch ms after which the token is renewed (its expiry minus the margin); 0 when the library gave no expiry. */
  renewAt: number;
}

/**
 * The bearer token of a Vertex provider. google-auth-library does the OAuth work (it signs the JWT grant
 * with the service account's key and caches the token); this class keeps the current header object and
 * hands it out without asking the library again until the token nears its expiry, with one renewal in
 * flight however many requests wait for it.
 *
 * google-auth-library 11 posts the grant to oauth2.googleapis.com whatever `token_uri` the key file
 * names (its gtoken has the URL as a constant). A file naming another token endpoint (a private
 * universe's, or a test's) gets its grant sent there, with that endpoint as the JWT's audience.
 */
export class GoogleAccessToken {
  private readonly credentialsFile: string | undefined;
  private readonly refreshMarginMs: number;
  private readonly unavailable: string | undefined;
  private client: Promise<AuthClient> | undefined;
  private current: CurrentToken | undefined;
  private renewal: Promise<Record<string, string>> | undefined;

  constructor(options: GoogleAccessTokenOptions) {
    this.credentialsFile = options.credentialsFile;
    this.refreshMarginMs = options.refreshMarginMs ?? DEFAULT_REFRESH_MARGIN_MS;
    this.unavailable = options.unavailable;
  }

  /** The Authorization header of a valid token; synchronous while the current one lasts. Throws ProviderErrors. */
  readonly headers = (signal?: AttemptSignal): Promise<Record<string, string>> | Record<string, string> => {
    const current = this.current;
    if (current && current.renewAt > Date.now()) return current.headers;
    if (!this.renewal) {
      this.renewal = this.renew().finally(() => { this.renewal = undefined; });
      // Waiters that gave up (aborted) leave the renewal unobserved: its failure is theirs to see, not the process's.
      this.renewal.catch(() => undefined);
    }
    return signal ? untilAborted(this.renewal, signal) : this.renewal;
  };

  /** Forget the current token (Vertex refused it): the next request asks the library for a fresh one. */
  invalidate(): void {
    this.current = undefined;
  }

  private async renew(): Promise<Record<string, string>> {
    if (this.unavailable !== undefined) throw new ProviderError('misconfigured', this.unavailable);
    let client: AuthClient;
    try {
      this.client ??= this.loadClient();
      client = await this.client;
    } catch (error) {
      // A missing or broken key file may be fixed on disk: the next request reads it again.
      this.client = undefined;
      throw vertexCredentialsError(error);
    }
    let token: string | null | undefined;
    try {
      // A token the adapter dropped (invalidate) must not come back from the library's cache either.
      if (this.current === undefined && client.credentials.access_token) client.credentials = { ...client.credentials, expiry_date: 1 };
      token = (await client.getAccessToken()).token;
    } catch (error) {
      throw vertexTokenError(error);
    }
    if (!token) throw new ProviderError('misconfigured', 'Google credentials gave no access token');
    const expiry = client.credentials.expiry_date;
    const headers = { authorization: `Bearer ${token}` };
    this.current = { headers, renewAt: typeof expiry === 'number' ? expiry - this.refreshMarginMs : 0 };
    return headers;
  }

  private async loadClient(): Promise<AuthClient> {
    const auth = new GoogleAuth({
      scopes: [CLOUD_PLATFORM_SCOPE],
      clientOptions: { eagerRefreshThresholdMillis: this.refreshMarginMs },
      ...(this.credentialsFile !== undefined ? { keyFilename: this.credentialsFile } : {}),
    });
    const client = await auth.getClient();
    // The key file the library read (the named one, or the one ADC found): a service account's token_uri.
    const tokenUri = (auth.jsonContent as { token_uri?: unknown } | null)?.token_uri;
    if (client instanceof JWT && typeof tokenUri === 'string' && tokenUri !== '' && tokenUri !== GOOGLE_TOKEN_URL) sendGrantsTo(client, tokenUri);
    return client;
  }
}

/**
 * Points a service account's JWT grant at `tokenUri`, with that endpoint as the JWT's audience. The
 * library builds its token client (gtoken) at the first renewal, from these settings.
 */
function sendGrantsTo(client: JWT, tokenUri: string): void {
  const target = new URL(tokenUri);
  client.additionalClaims = { ...client.additionalClaims, aud: tokenUri };
  client.transporter.interceptors.request.add({
    resolved: async (options) => {
      if (options.url.href === GOOGLE_TOKEN_URL) options.url = target;
      return options;
    },
  });
}

/** The promise, or the signal's abort (the renewal itself goes on for the next request). */
function untilAborted<T>(promise: Promise<T>, signal: AttemptSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort);
    promise.then(
      (value) => { signal.removeEventListener('abort', onAbort); resolve(value); },
      (error: unknown) => { signal.removeEventListener('abort', onAbort); reject(error); },
    );
  });
}
