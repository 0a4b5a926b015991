import type {
  AuthServiceClient,
  CatalogServiceClient,
  LedgerServiceClient,
  MediaServiceClient,
  RouterServiceClient,
} from '@gateway/proto';
import type { Logger, PromiseClient } from '@gateway/platform';
import type { Admission } from './inference/admission.js';
import type { ApiKeyCache } from './inference/auth-cache.js';
import type { CatalogCache } from './catalog-cache.js';
import type { ChatRouter } from './inference/router-exchange.js';
import type { BodyLimits } from './http.js';
import type { MultipartBounds } from './endpoints/multipart.js';
import type { UploadArea } from './endpoints/upload-spool.js';
import type { ReasoningTags } from './canonical/reasoning-tags.js';
import type { IdempotencyStore } from './inference/idempotency-store.js';

/** What every route handler needs; built once by startEdge. */
export interface EdgeContext {
  auth: PromiseClient<AuthServiceClient>;
  catalog: PromiseClient<CatalogServiceClient>;
  ledger: PromiseClient<LedgerServiceClient>;
  router: PromiseClient<RouterServiceClient>;
  /** Chat and ChatStream: over Router.Exchange (default) or a call each (`router`). */
  chatRouter: ChatRouter;
  /** Present when the edge was given a media address (file blocks need it: URL fetch, PDF text). */
  media?: PromiseClient<MediaServiceClient>;
  apiKeys: ApiKeyCache;
  catalogCache: CatalogCache;
  admission: Admission;
  logger: Logger;
  bodyLimits: BodyLimits;
  /** A Router stream silent this long is ended as a failure. */
  streamIdleTimeoutMs: number;
  /** Keep-alive period of dialects that ping (messages): also how long a first token may take before the stream is committed. */
  streamPingIntervalMs: number;
  /** Issuer tags of reasoning the gateway returns (canonical/reasoning-tags.ts). */
  reasoningTags: ReasoningTags;
  /** Bounds of multipart uploads (image edits, audio). */
  multipartBounds: MultipartBounds;
  /** Spool directory and memory budget of uploaded files (endpoints/upload-spool.ts); unset: the process default. */
  uploads?: UploadArea;
  /** Absolute origin of URLs the edge answers (hosted images); unset: the request's Host. */
  publicUrl: string | undefined;
  /** The built console served at /console/ (EDGE_CONSOLE_DIR); unset: console-static.ts's default. */
  consoleDir?: string;
  /** Milliseconds since the epoch: the clock model stop times are judged by (tests move it). */
  now: () => number;
  /** Records of Idempotency-Key requests (inference/idempotency.ts), in the bus's key-value bucket. */
  idempotency?: IdempotencyStore;
  /** This edge runs with internal authentication (EdgeOptions.internalAuth): the /v1/admin/ routes need it. */
  internalAuthEnabled?: boolean;
  /**
   * The admin credential the /v1/admin/ routes present for a signed-in operator (EDGE_OPERATOR_SESSION_CREDENTIAL).
   * Unset: operator sessions are refused there (the admin token still works).
   */
  operatorSessionCredential?: string;
  /**
   * Router streams whose answer already reached the caller, waiting for routing's end (their usage stored,
   * stream-relay.ts); each settles when its relay ends. The drain waits for them within its bound.
   */
  unconfirmedStreams?: Set<Promise<void>>;
}
