import { createServer } from 'node:http';
import { Server as NetServer } from 'node:net';
import { DEFAULT_MULTIPART_BOUNDS, type MultipartBounds } from './endpoints/multipart.js';
import { DEFAULT_UPLOAD_LIMITS, UploadArea, type UploadLimits } from './endpoints/upload-spool.js';
import type { AddressInfo } from 'node:net';
import {
  AuthServiceClient,
  AuthServiceService,
  CatalogChanged,
  CatalogServiceClient,
  CatalogServiceService,
  JobsServiceClient,
  JobsServiceService,
  KeysChanged,
  LeaseRecall,
  LedgerServiceClient,
  LedgerServiceService,
  MediaServiceClient,
  MediaServiceService,
  ResponsesStoreServiceClient,
  ResponsesStoreServiceService,
  RouterServiceClient,
  RouterServiceService,
} from '@gateway/proto';
import { createClient, newId, parseGrpcTarget, Registry, subjects, type EventBus, type InternalAuth, type Logger, type Subscription } from '@gateway/platform';
import { LedgerAdmission, type Admission } from './inference/admission.js';
import { LeasedAdmission } from './inference/leased-admission.js';
import { createRequestListener } from './app.js';
import { checkedSignInOptions, type OidcSignInOptions } from './sign-in/sign-in-config.js';
import { SignIn } from './sign-in/sign-in-routes.js';
import { ApiKeyCache } from './inference/auth-cache.js';
import { answerClientError } from './client-error.js';
import { CatalogCache } from './catalog-cache.js';
import type { EdgeContext } from './context.js';
import { DEFAULT_BODY_LIMITS, type BodyLimits } from './http.js';
import { RouterExchange, type ChatRouter, type RouterExchangeOptions } from './inference/router-exchange.js';
import { exchangeMember, resolverFor, RouterPool, type RouterResolver } from './inference/router-pool.js';
import { ReasoningTags } from './canonical/reasoning-tags.js';
import { EdgeMetrics } from './observability/edge-metrics.js';
import { ObservedAdmission, ObservedChatRouter } from './observability/observed-edge.js';
import { DEFAULT_OVERLOAD_LIMITS, InFlightLimiter, type OverloadLimits } from './observability/overload.js';
import { Readiness } from './observability/readiness.js';
import { RequestTracker } from './observability/request-tracker.js';
import { TimedResponse } from './observability/timed-response.js';
import { ResponsesWebSocketServer, type ResponsesWebSocketLimits } from './dialects/responses/responses-websocket.js';
import { DEFAULT_STORED_RESPONSES_LIMITS, StoredResponses, type StoredResponsesLimits } from './dialects/responses/stored-responses.js';
import { backgroundRenderer } from './dialects/responses/render-background.js';
import { backgroundStreamer } from './dialects/responses/render-background-stream.js';
import { idempotencyStore, type IdempotencyLimits } from './inference/idempotency-store.js';
import { DEFAULT_FILES_ROUTE_OPTIONS, type FilesRouteOptions } from './routes/files-options.js';

export { toApiError, renderErrorBody, EdgeError, type ApiError, type Dialect } from './errors.js';
export type { Admission, AdmissionRequest, AdmissionTicket } from './inference/admission.js';
export { API_VERSION } from './http.js';
export { DEFAULT_FILES_ROUTE_OPTIONS, type FilesRouteOptions } from './routes/files-options.js';
export { DEFAULT_OVERLOAD_LIMITS, type OverloadLimits } from './observability/overload.js';
export { DEFAULT_UPLOAD_LIMITS, type UploadLimits } from './endpoints/upload-spool.js';
export { DEFAULT_IDEMPOTENCY_LIMITS, type IdempotencyLimits } from './inference/idempotency-store.js';
export { DEFAULT_RESPONSES_WEBSOCKET_LIMITS, type ResponsesWebSocketLimits } from './dialects/responses/responses-websocket.js';
export { parseGroupRoles, signInFromEnvironment, type GroupMembership, type OidcSignInOptions } from './sign-in/sign-in-config.js';
export { DEFAULT_STORED_RESPONSES_LIMITS, type StoredResponsesLimits } from './dialects/responses/stored-responses.js';

export interface EdgeOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** 0 picks a free port. */
  port: number;
  authAddress: string;
  catalogAddress: string;
  /** One ledger (host:port) or several replicas (ipv4:a:p,b:p, dns:///name:port): round-robin over those up. */
  ledgerAddress: string;
  routerAddress: string;
  /** Media service: chat file blocks (URL fetch, PDF text) need it; without it they answer 500. */
  mediaAddress?: string;
  /** Jobs service: the Files API needs it; without it its routes answer 404. */
  jobsAddress?: string;
  /** Bounds of the Files API routes (largest upload); the jobs service checks them again. */
  files?: Partial<FilesRouteOptions>;
  /**
   * The ResponsesStore (docs/stored-responses.md), served by the jobs service; default `jobsAddress`. With
   * it `store` (default true) keeps responses and `previous_response_id` continues them; without it
   * nothing is stored.
   */
  responsesStoreAddress?: string;
  /** Bounds of stored responses at the edge (size, write-behind queue); tests lower them. */
  storedResponses?: Partial<StoredResponsesLimits>;
  bus: EventBus;
  logger: Logger;
  /** Lifetime of a cached Auth.VerifyApiKey answer. Default 30 s. */
  authCacheTtlMs?: number;
  /** Bound of the API key cache (LRU). Default 10,000 keys. */
  authCacheMaxEntries?: number;
  /** Periodic catalog refresh (besides catalog.changed). Default 30 s. */
  catalogRefreshMs?: number;
  /** How long start-up waits for the catalog's first snapshot. Default 30 s. */
  catalogStartTimeoutMs?: number;
  /** Body size and arrival limits (spec §8); tests shorten the timeouts. */
  bodyLimits?: Partial<BodyLimits>;
  /** Multipart upload bounds (image edits, audio); tests lower them. */
  multipartBounds?: Partial<MultipartBounds>;
  /** Spool directory and in-memory budget of uploaded files (EDGE_UPLOAD_DIR, EDGE_UPLOAD_MEMORY_BYTES, EDGE_UPLOAD_WAIT_MS). */
  uploads?: Partial<UploadLimits>;
  /** Absolute origin of the URLs the edge answers for hosted images (EDGE_PUBLIC_URL); unset: the request's Host. */
  publicUrl?: string;
  /** The built console (apps/console/dist) served at /console/ (EDGE_CONSOLE_DIR); unset: the repository's. */
  consoleDir?: string;
  /** A Router stream that sends nothing for this long is ended as a failure. Default 5 minutes. */
  streamIdleTimeoutMs?: number;
  /** Keep-alive period of pinging dialects (messages) while no content flows. Default 5 s. */
  streamPingIntervalMs?: number;
  /**
   * Secret (≥ 16 bytes) of the issuer tags on returned reasoning (src/canonical/reasoning-tags.ts).
   * Every edge of a deployment needs the same one. Default: random per process (a replayed
   * conversation's reasoning is then foreign after a restart and stripped, never misrouted).
   */
  reasoningTagKey?: string;
  /**
   * 'leased' (default): DESIGN §2 leased budgets (src/inference/leased-admission.ts), recalled over NATS
   * (`lease.recall`) when another replica needs the capacity. 'ledger': one Ledger.Admit per request.
   * Or an Admission of the caller's own.
   */
  admission?: Admission | 'ledger' | 'leased';
  /**
   * 'exchange' (default): chat requests travel as frames of one long-lived Router.Exchange call
   * (src/inference/router-exchange.ts; requests over `exchange.maxFrameBytes` get a call of their own).
   * 'calls': one Router.Chat / Router.ChatStream call per request.
   */
  routerTransport?: 'exchange' | 'calls';
  exchange?: RouterExchangeOptions;
  /** How often a dns:/// routerAddress is resolved again (docs/running.md "Edge to routing: client-side balancing"). Default 15 s. */
  routerResolveIntervalMs?: number;
  /** Replaces the resolution of a multi-server routerAddress (tests). */
  routerResolver?: RouterResolver;
  /** Clock (ms since the epoch) that model stop times are judged by; tests move it. Default Date.now. */
  now?: () => number;
  /**
   * Load shedding (docs/operations.md "Overload (load shedding)"): most requests in flight, most declared body bytes in flight, and
   * the Retry-After of the 503 past them. Default DEFAULT_OVERLOAD_LIMITS (4,096 requests, 512 MiB, 1 s).
   */
  overload?: Partial<OverloadLimits>;
  /**
   * How long stop() lets requests in flight (streams) finish once it stopped accepting new ones, before
   * cutting them. Default 2 s; the edge binary's EDGE_DRAIN_TIMEOUT_MS defaults to 25 s.
   */
  drainTimeoutMs?: number;
  /** Where the edge's metrics go (the process's registry). Default: a registry of the edge's own, not served. */
  metrics?: Registry;
  /** Internal gRPC authentication: the service credential its calls carry. Unset: none sent, and the /v1/admin/ routes answer 403. */
  internalAuth?: InternalAuth;
  /** Bounds of the responses WebSocket mode (docs/dialects.md "WebSocket mode"); tests lower them. */
  responsesWebSocket?: Partial<ResponsesWebSocketLimits>;
  /** Idempotency-Key records (docs/operations.md "Idempotency-Key"): how long and how much is kept, how long duplicates wait. */
  idempotency?: Partial<IdempotencyLimits>;
  /** Sign-in with an OpenID provider (docs/governance.md "Sign-in and roles"). Unset: /v1/auth/login answers 404. */
  signIn?: OidcSignInOptions;
  /**
   * The admin credential the /v1/admin/ routes present for a signed-in operator. Unset: operator sessions are
   * refused there (machines' admin tokens work either way).
   */
  operatorSessionCredential?: string;
}

/**
 * On stop, how long a connection accepted before the stop may still send its request (up to the drain
 * bound). Its request is not in flight until its headers arrived: with nothing in flight the stop went
 * straight on to closing every connection, and dropped a request the edge had accepted (issue 36: one
 * accepted 4 ms before SIGTERM got no answer). A kept-alive connection may be carrying a next request too.
 */
const DRAIN_ACCEPT_GRACE_MS = 1_000;

const openConnections = (server: Pick<NetServer, 'getConnections'>) =>
  new Promise<number>((resolve) => server.getConnections((error, count) => resolve(error ? 0 : count)));

export interface RunningEdge {
  url: string;
  port: number;
  /**
   * Drains, then stops: readiness fails at once, no new connection is accepted, each open connection
   * closes after its current answer, a connection accepted before the stop still has up to 1 s to send
   * its request (answered), requests in flight get up to `drainTimeoutMs`, then are cut.
   */
  stop(): Promise<void>;
  /** What the responses WebSockets of this edge remember together (characters of JSON, entries): tests check its bound. */
  readonly webSocketCache: { readonly totalChars: number; readonly entries: number };
}

/** Starts the HTTP ingress: catalog cache loaded, key invalidation subscribed, then listening. */
export async function startEdge(options: EdgeOptions): Promise<RunningEdge> {
  const logger = options.logger;
  const internal = { credential: options.internalAuth?.credential };
  const auth = createClient(AuthServiceClient, AuthServiceService, options.authAddress, internal);
  const catalog = createClient(CatalogServiceClient, CatalogServiceService, options.catalogAddress, internal);
  const ledgerTarget = parseGrpcTarget(options.ledgerAddress);
  if (!ledgerTarget) throw new Error(`ledgerAddress: expected host:port, ipv4:host:port,... or dns:///name:port, got ${options.ledgerAddress}`);
  // Several ledger replicas: grpc-js round_robin picks only connected ones, so a replica that is down
  // (connection refused, dropped) gets no call until it is back, and a call that found no connection is
  // sent again once (createClient).
  const ledger = createClient(LedgerServiceClient, LedgerServiceService, options.ledgerAddress, { ...internal, roundRobin: ledgerTarget.kind !== 'single' });
  const routerTarget = parseGrpcTarget(options.routerAddress);
  if (!routerTarget) throw new Error(`routerAddress: expected host:port, ipv4:host:port,... or dns:///name:port, got ${options.routerAddress}`);
  // Several routing servers: per-call RPCs spread by grpc-js, exchanges by the pool (one call per address).
  const balanced = routerTarget.kind !== 'single';
  const router = createClient(RouterServiceClient, RouterServiceService, options.routerAddress, { ...internal, roundRobin: balanced });
  const media = options.mediaAddress ? createClient(MediaServiceClient, MediaServiceService, options.mediaAddress, internal) : undefined;
  // Several jobs replicas (ipv4:a,b or dns:///): calls spread over the connected ones, as the ledger's.
  const spread = (address: string) => ({ ...internal, roundRobin: parseGrpcTarget(address)?.kind !== 'single' });
  const jobs = options.jobsAddress ? createClient(JobsServiceClient, JobsServiceService, options.jobsAddress, spread(options.jobsAddress)) : undefined;
  const responsesStoreAddress = options.responsesStoreAddress ?? options.jobsAddress;
  const responsesStore = responsesStoreAddress ? createClient(ResponsesStoreServiceClient, ResponsesStoreServiceService, responsesStoreAddress, spread(responsesStoreAddress)) : undefined;
  const exchangeOptions = { credential: router.credential, ...options.exchange };
  let exchange: (ChatRouter & { close(): void }) | undefined;
  if (options.routerTransport !== 'calls') {
    exchange = routerTarget.kind === 'single'
      ? new RouterExchange(router.raw, router, logger, exchangeOptions)
      : await RouterPool.start({
          resolve: options.routerResolver ?? resolverFor(routerTarget),
          member: (address, onCallLost, elsewhere) => exchangeMember(address, router, logger, exchangeOptions, onCallLost, elsewhere),
          logger,
          ...(options.routerResolveIntervalMs ? { resolveIntervalMs: options.routerResolveIntervalMs } : {}),
        });
  }
  const closeClients = () => {
    exchange?.close();
    for (const client of [auth, catalog, ledger, router]) client.close();
    media?.close();
    jobs?.close();
    responsesStore?.close();
  };

  const now = options.now ?? Date.now;
  const catalogCache = new CatalogCache({ catalog, logger, now });
  const apiKeys = new ApiKeyCache(auth, {
    ttlMs: options.authCacheTtlMs ?? 30_000,
    maxEntries: options.authCacheMaxEntries ?? 10_000,
  });
  const subscriptions: Subscription[] = [];
  let refreshTimer: NodeJS.Timeout | undefined;
  let server: { close(): unknown } | undefined;
  let admission: Admission | undefined;
  const limiter = new InFlightLimiter({ ...DEFAULT_OVERLOAD_LIMITS, ...options.overload });
  // Without the process's registry the metrics still count (cheaply) into one nobody serves; no
  // default Node collectors for it, which would add event-loop and GC observers per edge.
  // The tracker counts streams; before it exists (start-up) none are open.
  const metrics = new EdgeMetrics(options.metrics ?? new Registry(), () => limiter.inFlight, () => (tracker as RequestTracker | undefined)?.activeStreams ?? 0);
  const readiness = new Readiness({
    catalogReady: () => catalogCache.ready,
    draining: () => tracker.draining,
    services: { auth: options.authAddress, ledger: options.ledgerAddress, routing: options.routerAddress },
  });
  let tracker: RequestTracker;

  try {
    // Subscribe before the first load so a change published meanwhile is not missed.
    subscriptions.push(
      options.bus.subscribe(subjects.keysChanged, (data) => {
        try {
          const event = KeysChanged.decode(data);
          apiKeys.invalidate(event.accountId, event.keyIds);
        } catch (error) {
          // An undecodable invalidation: forget everything rather than keep a key that may be revoked.
          logger.warn({ err: error }, 'bad keys.changed payload; clearing the key cache');
          apiKeys.clear();
        }
      }),
      options.bus.subscribe(subjects.catalogChanged, (data) => {
        let version = '';
        try {
          version = CatalogChanged.decode(data).version;
        } catch {
          // Refresh anyway; GetSnapshot tells what is current.
        }
        if (version !== '' && version === catalogCache.version) return;
        catalogCache.refreshTo(version).catch((error: unknown) => logger.warn({ err: error }, 'catalog refresh failed'));
      }),
    );
    await catalogCache.loadInitial(options.catalogStartTimeoutMs ?? 30_000);
    refreshTimer = setInterval(() => {
      catalogCache.refresh().catch((error: unknown) => logger.warn({ err: error }, 'periodic catalog refresh failed'));
    }, options.catalogRefreshMs ?? 30_000);
    refreshTimer.unref();

    const bodyLimits: BodyLimits = { ...DEFAULT_BODY_LIMITS, ...options.bodyLimits };
    tracker = new RequestTracker({ logger, metrics, limiter, maxBodyBytes: bodyLimits.maxBytes });
    const ledgerAdmission = new LedgerAdmission(ledger, logger);
    if (options.admission === undefined || options.admission === 'leased') {
      const leased = new LeasedAdmission({ ledger, logger, holder: newId('edge'), fallback: ledgerAdmission });
      admission = leased;
      // The ledger asks for an account's leases back when another replica's acquisition needs them.
      subscriptions.push(options.bus.subscribe(subjects.leaseRecall, (data) => {
        try {
          const recall = LeaseRecall.decode(data);
          leased.recall(recall.accountId, recall.keyId);
        } catch (error) {
          logger.warn({ err: error }, 'bad lease.recall payload; ignored (idle leases are returned anyway)');
        }
      }));
    } else {
      admission = options.admission === 'ledger' ? ledgerAdmission : options.admission;
    }
    // The spool directory is made now: an edge that cannot write it refuses to start, naming it.
    const uploads = new UploadArea({ ...DEFAULT_UPLOAD_LIMITS, ...options.uploads });
    uploads.spoolDirectory();
    const unconfirmedStreams = new Set<Promise<void>>();
    const storedResponses = responsesStore
      ? new StoredResponses(responsesStore, { ...DEFAULT_STORED_RESPONSES_LIMITS, ...options.storedResponses }, logger)
      : undefined;
    const reasoningTags = new ReasoningTags(options.reasoningTagKey);
    // A background response's run is rendered by the edge, in the dialect, when it is read.
    if (storedResponses) {
      storedResponses.renderRun = backgroundRenderer(catalogCache, reasoningTags, logger);
      storedResponses.streamRun = backgroundStreamer(storedResponses.events, catalogCache, reasoningTags, logger);
    }
    const context: EdgeContext = {
      ...(storedResponses ? { storedResponses } : {}),
      unconfirmedStreams,
      auth,
      catalog,
      ledger,
      router,
      chatRouter: new ObservedChatRouter(exchange ?? router, tracker),
      ...(media ? { media } : {}),
      ...(jobs ? { jobs } : {}),
      files: { ...DEFAULT_FILES_ROUTE_OPTIONS, ...options.files },
      apiKeys,
      catalogCache,
      admission: new ObservedAdmission(admission, tracker),
      logger,
      bodyLimits,
      streamIdleTimeoutMs: options.streamIdleTimeoutMs ?? 5 * 60_000,
      streamPingIntervalMs: options.streamPingIntervalMs ?? 5_000,
      reasoningTags,
      multipartBounds: { ...DEFAULT_MULTIPART_BOUNDS, ...options.multipartBounds },
      uploads,
      publicUrl: options.publicUrl,
      ...(options.consoleDir ? { consoleDir: options.consoleDir } : {}),
      now,
      idempotency: idempotencyStore(options.bus, options.idempotency, logger),
      internalAuthEnabled: options.internalAuth !== undefined,
      ...(options.operatorSessionCredential === undefined ? {} : { operatorSessionCredential: options.operatorSessionCredential }),
    };
    const signIn = options.signIn === undefined ? undefined : new SignIn(context, checkedSignInOptions(options.signIn));
    const httpServer = createServer({ noDelay: true, ServerResponse: TimedResponse }, createRequestListener(context, tracker, readiness, signIn));
    server = httpServer;
    // Node's own whole-request timeout (default 5 min) would cut legitimate slow uploads: our body
    // reader enforces spec §8 (15 min total, 60 s stall) with a proper 408 instead.
    httpServer.requestTimeout = bodyLimits.totalTimeoutMs + 30_000;
    httpServer.headersTimeout = 60_000;
    httpServer.keepAliveTimeout = 65_000;
    httpServer.maxHeadersCount = 200;
    // Node's own answers to unparseable requests (431, 400, 408) carry no envelope and no request id.
    httpServer.on('clientError', (error: Error, socket) => answerClientError(error, socket, httpServer.headersTimeout));
    // GET /v1/responses upgraded: the responses dialect's WebSocket mode (its turns count in flight like requests).
    const webSockets = new ResponsesWebSocketServer(context, tracker, options.responsesWebSocket);
    httpServer.on('upgrade', webSockets.handleUpgrade);
    const host = options.host ?? '127.0.0.1';
    await new Promise<void>((resolve, reject) => {
      httpServer.once('error', reject);
      httpServer.listen(options.port, host, () => {
        httpServer.off('error', reject);
        resolve();
      });
    });
    const port = (httpServer.address() as AddressInfo).port;
    const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
    logger.info({ url }, 'edge listening');

    let stopped = false;
    const drainTimeoutMs = options.drainTimeoutMs ?? 2_000;
    const running = tracker;
    return {
      url,
      port,
      webSocketCache: webSockets.cacheBudget,
      stop: async () => {
        if (stopped) return;
        stopped = true;
        clearInterval(refreshTimer);
        running.drain();
        // WebSockets: idle ones close now (1001), busy ones after their response, all by the same bound.
        const socketsClosed = webSockets.drain(drainTimeoutMs);
        const drainStarted = performance.now();
        // Connections the kernel completed while this process was busy wait in the listen backlog with their
        // requests; closing the listener now would reset them unanswered (issue 36 item 5). libuv accepts
        // every pending connection when the listener polls readable, so the listener closes only after one
        // whole event-loop turn (two check phases around a poll phase).
        await new Promise((resolve) => setImmediate(resolve));
        await new Promise((resolve) => setImmediate(resolve));
        // Stops listening only: http.Server.close would also close every kept-alive idle connection at
        // once, and its client may be sending the next request on it right now (DRAIN_ACCEPT_GRACE_MS).
        const closed = new Promise<void>((resolve) => NetServer.prototype.close.call(httpServer, () => resolve()));
        // The grace ends early once no connection is left without a request in flight (each answer
        // during the drain closes its connection: the tracker turns keep-alive off).
        const graceEnd = drainStarted + Math.min(DRAIN_ACCEPT_GRACE_MS, drainTimeoutMs);
        while (performance.now() < graceEnd && (await openConnections(httpServer)) > running.inFlight) {
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        // Now http.Server.close: closes the idle connections and stops node's request-timeout sweep.
        httpServer.close();
        const inFlight = running.inFlight;
        if (!(await running.whenIdle(Math.max(0, drainTimeoutMs - (performance.now() - drainStarted))))) {
          logger.warn({ in_flight: running.inFlight, drain_timeout_ms: drainTimeoutMs }, 'requests still in flight after the drain bound; cutting them');
        } else if (inFlight > 0) {
          logger.info({ drained: inFlight }, 'requests in flight finished');
        }
        // Streams whose answers ended wait for routing to confirm their usage stored (a few ms): cutting their
        // calls now would leave their settlement to the ledger client that is about to close.
        const unconfirmed = [...unconfirmedStreams];
        const left = drainTimeoutMs - (performance.now() - drainStarted);
        if (unconfirmed.length > 0 && left > 0) {
          let bound: NodeJS.Timeout | undefined;
          await Promise.race([Promise.all(unconfirmed), new Promise((resolve) => { bound = setTimeout(resolve, left); })]);
          clearTimeout(bound);
        }
        await socketsClosed;
        // Connections kept alive past their last answer, and whatever the bound cut short.
        httpServer.closeAllConnections();
        await closed;
        // Responses answered and waiting to be stored: written now (nothing is lost on a clean stop), within the drain bound.
        await storedResponses?.stop(Math.max(1_000, drainTimeoutMs - (performance.now() - drainStarted)));
        for (const subscription of subscriptions) await subscription.stop().catch(() => undefined);
        await admission?.stop().catch((error: unknown) => logger.warn({ err: error }, 'admission stop failed'));
        readiness.close();
        metrics.stop();
        closeClients();
        uploads.close();
      },
    };
  } catch (error) {
    clearInterval(refreshTimer);
    readiness.close();
    metrics.stop();
    server?.close();
    await admission?.stop().catch(() => undefined);
    for (const subscription of subscriptions) await subscription.stop().catch(() => undefined);
    closeClients();
    throw error;
  }
}
