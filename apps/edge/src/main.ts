import { z } from 'zod';
import { grpcAddress, grpcTarget, runBusService } from '@gateway/platform';
import { DEFAULT_FILES_ROUTE_OPTIONS, DEFAULT_IDEMPOTENCY_LIMITS, DEFAULT_OVERLOAD_LIMITS, DEFAULT_RESPONSES_WEBSOCKET_LIMITS, DEFAULT_UPLOAD_LIMITS, signInFromEnvironment, startEdge } from './index.js';

/** Read first: a bad sign-in setting stops the start with its name. */
const signIn = signInFromEnvironment(process.env);

await runBusService(
  'edge',
  {
    PORT: z.coerce.number().int().min(0).max(65_535).default(8080),
    HOST: z.string().min(1).default('0.0.0.0'),
    AUTH_ADDR: grpcAddress.default('127.0.0.1:50051'),
    CATALOG_ADDR: grpcAddress.default('127.0.0.1:50052'),
    /** host:port, or several ledger replicas (ipv4:a:p,b:p or dns:///name:port): calls spread over those up, failing over when one is down. */
    LEDGER_ADDR: grpcTarget.default('127.0.0.1:50053'),
    /** host:port, ipv4:a:p,b:p or dns:///name:port (every routing pod behind a headless Service; docs/running.md "Edge to routing: client-side balancing"). */
    ROUTER_ADDR: grpcTarget.default('127.0.0.1:50054'),
    EDGE_ROUTER_RESOLVE_INTERVAL_MS: z.coerce.number().int().min(1_000).default(15_000),
    MEDIA_ADDR: grpcAddress.default('127.0.0.1:50055'),
    /** The jobs service (files, batches, stored responses; docs/jobs.md): host:port, or several replicas (ipv4:a:p,b:p or dns:///name:port), calls spread over those up. */
    JOBS_ADDR: grpcTarget.default('127.0.0.1:50056'),
    /** Largest file POST /v1/files lets through (keep it equal to the jobs service's JOBS_MAX_FILE_BYTES). */
    EDGE_MAX_FILE_BYTES: z.coerce.number().int().min(1).default(DEFAULT_FILES_ROUTE_OPTIONS.maxFileBytes),
    /** 'leased' (default): leased budgets (DESIGN §2); 'ledger': one Ledger.Admit per request. */
    EDGE_ADMISSION: z.enum(['ledger', 'leased']).default('leased'),
    /** 'exchange' (default): chat requests as frames of one long-lived Router.Exchange call; 'calls': a gRPC call each. */
    EDGE_ROUTER_TRANSPORT: z.enum(['exchange', 'calls']).default('exchange'),
    /** Secret of the issuer tags on returned reasoning; every edge replica needs the same one (docs/dialects.md "Reasoning provenance"). */
    GATEWAY_REASONING_TAG_KEY: z.string().min(16).optional(),
    /** Load shedding (docs/operations.md "Overload (load shedding)"): requests in flight, declared body bytes in flight, Retry-After of the 503. */
    EDGE_MAX_IN_FLIGHT: z.coerce.number().int().min(1).default(DEFAULT_OVERLOAD_LIMITS.maxInFlightRequests),
    EDGE_MAX_IN_FLIGHT_BODY_BYTES: z.coerce.number().int().min(1).default(DEFAULT_OVERLOAD_LIMITS.maxInFlightBodyBytes),
    EDGE_SHED_RETRY_AFTER_SECONDS: z.coerce.number().int().min(1).default(DEFAULT_OVERLOAD_LIMITS.retryAfterSeconds),
    /** On SIGTERM: how long streams in flight may finish before they are cut (below the pod's termination grace period). */
    EDGE_DRAIN_TIMEOUT_MS: z.coerce.number().int().min(0).default(25_000),
    /** Uploads (docs/endpoints.md "Embeddings, moderations, images and audio"): spool directory (must be writable), bytes of uploaded files held in memory at once, longest wait for that room before a 503. */
    EDGE_UPLOAD_DIR: z.string().min(1).default(DEFAULT_UPLOAD_LIMITS.dir),
    EDGE_UPLOAD_MEMORY_BYTES: z.coerce.number().int().min(1).default(DEFAULT_UPLOAD_LIMITS.memoryBytes),
    EDGE_UPLOAD_WAIT_MS: z.coerce.number().int().min(0).default(DEFAULT_UPLOAD_LIMITS.waitMs),
    /**
     * Idempotency-Key (docs/operations.md "Idempotency-Key"): largest answer kept (a record is one NATS message,
     * at most 1 MiB with its head), bytes of the whole bucket, longest wait of a duplicate for the first request.
     */
    EDGE_IDEMPOTENCY_MAX_ANSWER_BYTES: z.coerce.number().int().min(0).max(960 * 1024).default(DEFAULT_IDEMPOTENCY_LIMITS.maxAnswerBytes),
    EDGE_IDEMPOTENCY_BUCKET_BYTES: z.coerce.number().int().min(1024 * 1024).default(DEFAULT_IDEMPOTENCY_LIMITS.maxBucketBytes),
    EDGE_IDEMPOTENCY_WAIT_MS: z.coerce.number().int().min(0).default(DEFAULT_IDEMPOTENCY_LIMITS.waitMs),
    /** Bytes of kept answers per account (default: a sixteenth of the bucket) and most kept answers per account; past either the account's own oldest go. */
    EDGE_IDEMPOTENCY_ACCOUNT_BYTES: z.coerce.number().int().min(1024).optional(),
    EDGE_IDEMPOTENCY_ACCOUNT_RECORDS: z.coerce.number().int().min(1).max(8_192).default(DEFAULT_IDEMPOTENCY_LIMITS.maxAccountRecords),
    /** Most duplicates of one account waiting on one edge; past it a duplicate is a 409 idempotency_key_in_progress at once. */
    EDGE_IDEMPOTENCY_MAX_WAITING: z.coerce.number().int().min(0).default(DEFAULT_IDEMPOTENCY_LIMITS.maxWaitingPerAccount),
    /**
     * Responses WebSocket mode (docs/dialects.md "WebSocket mode"): open sockets per API key and per account on one
     * edge, and characters of JSON all its sockets remember together for previous_response_id.
     */
    EDGE_WS_MAX_SOCKETS_PER_KEY: z.coerce.number().int().min(1).default(DEFAULT_RESPONSES_WEBSOCKET_LIMITS.maxSocketsPerKey),
    EDGE_WS_MAX_SOCKETS_PER_ACCOUNT: z.coerce.number().int().min(1).default(DEFAULT_RESPONSES_WEBSOCKET_LIMITS.maxSocketsPerAccount),
    EDGE_WS_CACHE_CHARS: z.coerce.number().int().min(0).default(DEFAULT_RESPONSES_WEBSOCKET_LIMITS.maxCachedCharsTotal),
    /** Absolute origin of hosted image URLs (e.g. https://gateway.example.com); unset: the request's Host header. */
    EDGE_PUBLIC_URL: z.string().regex(/^https?:\/\/[^/?#]+\/?$/, 'expected http(s)://host[:port]').optional(),
    /** The built web console served at /console/; unset: apps/console/dist beside this package. */
    EDGE_CONSOLE_DIR: z.string().min(1).optional(),
    // Sign-in (EDGE_OIDC_*, EDGE_SESSION_*) is read by signInFromEnvironment (docs/governance.md "Sign-in and roles").
    /** The admin token the /v1/admin/ routes present for a signed-in operator; unset: operators use the admin token themselves. */
    EDGE_OPERATOR_SESSION_CREDENTIAL: z.string().min(16).optional(),
  },
  (config, bus, logger, { metrics, internalAuth }) =>
    startEdge({
      host: config.HOST,
      port: config.PORT,
      authAddress: config.AUTH_ADDR,
      catalogAddress: config.CATALOG_ADDR,
      ledgerAddress: config.LEDGER_ADDR,
      routerAddress: config.ROUTER_ADDR,
      mediaAddress: config.MEDIA_ADDR,
      jobsAddress: config.JOBS_ADDR,
      files: { maxFileBytes: config.EDGE_MAX_FILE_BYTES },
      admission: config.EDGE_ADMISSION,
      routerTransport: config.EDGE_ROUTER_TRANSPORT,
      routerResolveIntervalMs: config.EDGE_ROUTER_RESOLVE_INTERVAL_MS,
      ...(config.GATEWAY_REASONING_TAG_KEY ? { reasoningTagKey: config.GATEWAY_REASONING_TAG_KEY } : {}),
      overload: {
        maxInFlightRequests: config.EDGE_MAX_IN_FLIGHT,
        maxInFlightBodyBytes: config.EDGE_MAX_IN_FLIGHT_BODY_BYTES,
        retryAfterSeconds: config.EDGE_SHED_RETRY_AFTER_SECONDS,
      },
      drainTimeoutMs: config.EDGE_DRAIN_TIMEOUT_MS,
      uploads: { dir: config.EDGE_UPLOAD_DIR, memoryBytes: config.EDGE_UPLOAD_MEMORY_BYTES, waitMs: config.EDGE_UPLOAD_WAIT_MS },
      ...(config.EDGE_PUBLIC_URL ? { publicUrl: config.EDGE_PUBLIC_URL } : {}),
      ...(config.EDGE_CONSOLE_DIR ? { consoleDir: config.EDGE_CONSOLE_DIR } : {}),
      responsesWebSocket: {
        maxSocketsPerKey: config.EDGE_WS_MAX_SOCKETS_PER_KEY,
        maxSocketsPerAccount: config.EDGE_WS_MAX_SOCKETS_PER_ACCOUNT,
        maxCachedCharsTotal: config.EDGE_WS_CACHE_CHARS,
      },
      idempotency: {
        maxAnswerBytes: config.EDGE_IDEMPOTENCY_MAX_ANSWER_BYTES,
        maxBucketBytes: config.EDGE_IDEMPOTENCY_BUCKET_BYTES,
        waitMs: config.EDGE_IDEMPOTENCY_WAIT_MS,
        maxWaitingPerAccount: config.EDGE_IDEMPOTENCY_MAX_WAITING,
        maxAccountRecords: config.EDGE_IDEMPOTENCY_ACCOUNT_RECORDS,
        ...(config.EDGE_IDEMPOTENCY_ACCOUNT_BYTES !== undefined ? { maxAccountBytes: config.EDGE_IDEMPOTENCY_ACCOUNT_BYTES } : {}),
      },
      ...(signIn === undefined ? {} : { signIn }),
      ...(config.EDGE_OPERATOR_SESSION_CREDENTIAL ? { operatorSessionCredential: config.EDGE_OPERATOR_SESSION_CREDENTIAL } : {}),
      metrics,
      internalAuth,
      bus,
      logger,
    }),
);

