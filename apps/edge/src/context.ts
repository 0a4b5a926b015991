import type { Response } from 'express';
import type {
  AuthServiceClient,
  CatalogServiceClient,
  LedgerServiceClient,
  MediaServiceClient,
  RouterServiceClient,
} from '@gateway/proto';
import type { Logger, PromiseClient } from '@gateway/platform';
import type { Admission } from './admission.js';
import type { ApiKeyCache, VerifiedApiKey } from './auth-cache.js';
import type { CatalogCache } from './catalog-cache.js';
import { malformedApiKey } from './credentials.js';
import type { BodyLimits } from './http.js';

/** What every route handler needs; built once by startEdge. */
export interface EdgeContext {
  auth: PromiseClient<AuthServiceClient>;
  catalog: PromiseClient<CatalogServiceClient>;
  ledger: PromiseClient<LedgerServiceClient>;
  router: PromiseClient<RouterServiceClient>;
  /** Present when the edge was given a media address (file blocks need it: URL fetch, PDF text). */
  media?: PromiseClient<MediaServiceClient>;
  apiKeys: ApiKeyCache;
  catalogCache: CatalogCache;
  admission: Admission;
  logger: Logger;
  bodyLimits: BodyLimits;
  /** A Router stream silent this long is ended as a failure. */
  streamIdleTimeoutMs: number;
  /** Milliseconds since the epoch: the clock model stop times are judged by (tests move it). */
  now: () => number;
}

/** Set by the first middleware on every request. */
export function requestIdOf(response: Response): string {
  return response.locals.requestId as string;
}

/** Cached Auth.VerifyApiKey; a malformed credential is refused without a call. */
export function verifyApiKey(context: EdgeContext, key: string, requestId: string): Promise<VerifiedApiKey> {
  if (key === '') return Promise.reject(malformedApiKey());
  return context.apiKeys.verify(key, requestId);
}
