import { startAuthService } from '@gateway/auth';
import { startCatalogService } from '@gateway/catalog';
import { startEdge, type EdgeOptions, type RunningEdge } from '@gateway/edge';
import { startJobsService, type JobsServiceOptions, type RunningJobsService } from '@gateway/jobs';
import { startLedgerService, type LedgerServiceOptions, type RunningLedgerService } from '@gateway/ledger';
import { startMediaService } from '@gateway/media';
import { startRoutingService, type RoutingServiceOptions, type RunningRoutingService } from '@gateway/routing';
import { serviceLogger, type EventBus, type InternalAuth, type Logger, type Registry } from '@gateway/platform';

/** npm start reads sign-in from the environment as the edge's own process does (main.ts imports only this file). */
export { signInFromEnvironment } from '@gateway/edge';

/**
 * The composition root: every service in one process, each still behind its own gRPC server on
 * loopback, so the in-process stack exercises exactly the contracts the multi-process deployment
 * does. This package is the only one allowed to depend on apps (tag `type:composition`); no app
 * imports another.
 */
export interface StackOptions {
  databaseUrl: string;
  bus: EventBus;
  logger: Logger;
  configPath: string;
  keyHashSecret: string;
  /** Edge HTTP port; 0 picks a free one. */
  port: number;
  host?: string;
  /** Bind address for the internal gRPC servers (port 0 each). */
  grpcHost?: string;
  providerSecrets?: Record<string, string | undefined>;
  /** `reclaimLeasesOnStart`: only when no other process can hold this ledger's leases (the embedded default). */
  ledger?: Pick<LedgerServiceOptions, 'reservationLifetimeMs' | 'sweepIntervalMs' | 'leaseDrainMs' | 'leaseLifetimeMs' | 'reclaimLeasesOnStart' | 'consumer' | 'maxConnections' | 'webhooks' | 'webhookSecretKey'>;
  /** Auth knobs: its Postgres pool bound (default 10), the pace of its key events' relay and expiry sweep. */
  auth?: { maxConnections?: number; events?: { relayIntervalMs?: number; expirySweepIntervalMs?: number } };
  /** Routing knobs tests shorten (per-attempt timeout, attempts per request). */
  routing?: { attemptTimeoutMs?: number; maxAttempts?: number; usageOutboxDirectory?: string };
  /** Media knobs; `allowLoopbackUrlsForTests` lets URL fetches reach a test's loopback file server. */
  media?: { allowLoopbackUrlsForTests?: boolean };
  /** Jobs knobs: Files API bounds, batch bounds and pace, stored responses' retention and bounds (tests lower them). */
  jobs?: Pick<JobsServiceOptions, 'fileLimits' | 'responses' | 'background' | 'now' | 'eventRelayIntervalMs'> & { batches?: Partial<NonNullable<JobsServiceOptions['batches']>> };
  /** Edge knobs: `admission` 'leased' (the default) admits against leased budgets (DESIGN §2), 'ledger' with one Ledger.Admit per request. */
  edge?: {
    admission?: 'ledger' | 'leased';
    routerTransport?: 'exchange' | 'calls';
    reasoningTagKey?: string;
    streamPingIntervalMs?: number;
    overload?: EdgeOptions['overload'];
    drainTimeoutMs?: number;
    /** Body size and arrival limits, and multipart bounds (tests lower them). */
    bodyLimits?: EdgeOptions['bodyLimits'];
    multipartBounds?: EdgeOptions['multipartBounds'];
    /** Responses WebSocket and Idempotency-Key bounds (tests lower them). */
    responsesWebSocket?: EdgeOptions['responsesWebSocket'];
    idempotency?: EdgeOptions['idempotency'];
    /** Sign-in with an OpenID provider (docs/governance.md "Sign-in and roles"). */
    signIn?: EdgeOptions['signIn'];
    /** The admin credential the edge presents for signed-in operators on /v1/admin/ (npm start: its admin token). */
    operatorSessionCredential?: string;
    /** Stored responses' bounds at the edge (size, write-behind queue). */
    storedResponses?: EdgeOptions['storedResponses'];
    /** Files API route bounds (largest upload); tests lower them with jobs.fileLimits. */
    files?: EdgeOptions['files'];
  };
  /** One registry for every service of the process (npm start serves it on METRICS_PORT). */
  metrics?: Registry;
  /**
   * Internal gRPC authentication for every service and client of the stack (npm start: tokens of its
   * data dir). Unset: the stack's loopback servers do not check credentials (tests).
   */
  internalAuth?: InternalAuth;
}

export interface RunningStack {
  url: string;
  port: number;
  addresses: { auth: string; catalog: string; ledger: string; routing: string; media: string; jobs: string };
  stop(): Promise<void>;
}

export async function startStack(options: StackOptions): Promise<RunningStack> {
  const grpcHost = options.grpcHost ?? '127.0.0.1';
  const listenAddress = `${grpcHost}:0`;
  // Each service's lines name it once (a pino child would repeat the parent's `service` key).
  const child = (service: string) => serviceLogger(options.logger, service);
  const metrics = {
    ...(options.metrics ? { metrics: options.metrics } : {}),
    ...(options.internalAuth ? { internalAuth: options.internalAuth } : {}),
  };
  const started: { stop(): Promise<void> }[] = [];
  try {
    const [auth, catalog, ledger, media] = await Promise.all([
      startAuthService({ listenAddress, databaseUrl: options.databaseUrl, bus: options.bus, logger: child('auth'), keyHashSecret: options.keyHashSecret, ...options.auth, ...metrics }),
      startCatalogService({ listenAddress, databaseUrl: options.databaseUrl, bus: options.bus, logger: child('catalog'), configPath: options.configPath, ...metrics }),
      startLedgerService({ listenAddress, databaseUrl: options.databaseUrl, bus: options.bus, logger: child('ledger'), ...options.ledger, ...metrics }),
      startMediaService({ listenAddress, databaseUrl: options.databaseUrl, logger: child('media'), ...options.media, ...metrics }),
    ]);
    started.push(auth, catalog, ledger, media);
    const routing = await startRoutingService({
      listenAddress,
      catalogAddress: catalog.address,
      bus: options.bus,
      logger: child('routing'),
      providerSecrets: options.providerSecrets ?? process.env,
      attemptTimeoutMs: options.routing?.attemptTimeoutMs,
      maxAttempts: options.routing?.maxAttempts,
      usage: options.routing?.usageOutboxDirectory ? { outboxDirectory: options.routing.usageOutboxDirectory } : undefined,
      ...metrics,
    });
    started.push(routing);
    // Batch lines go through routing's normal path: the jobs service starts once routing is up.
    const jobs = await startJobsService({
      listenAddress,
      databaseUrl: options.databaseUrl,
      bus: options.bus,
      logger: child('jobs'),
      ...options.jobs,
      batches: { authAddress: auth.address, catalogAddress: catalog.address, ledgerAddress: ledger.address, routerAddress: routing.address, ...options.jobs?.batches },
      ...metrics,
    });
    started.push(jobs);
    const edge = await startEdge({
      host: options.host ?? '127.0.0.1',
      port: options.port,
      authAddress: auth.address,
      catalogAddress: catalog.address,
      ledgerAddress: ledger.address,
      routerAddress: routing.address,
      mediaAddress: media.address,
      jobsAddress: jobs.address,
      bus: options.bus,
      logger: child('edge'),
      ...(options.edge?.admission ? { admission: options.edge.admission } : {}),
      ...(options.edge?.routerTransport ? { routerTransport: options.edge.routerTransport } : {}),
      ...(options.edge?.reasoningTagKey ? { reasoningTagKey: options.edge.reasoningTagKey } : {}),
      ...(options.edge?.streamPingIntervalMs ? { streamPingIntervalMs: options.edge.streamPingIntervalMs } : {}),
      ...(options.edge?.overload ? { overload: options.edge.overload } : {}),
      ...(options.edge?.drainTimeoutMs !== undefined ? { drainTimeoutMs: options.edge.drainTimeoutMs } : {}),
      ...(options.edge?.bodyLimits ? { bodyLimits: options.edge.bodyLimits } : {}),
      ...(options.edge?.multipartBounds ? { multipartBounds: options.edge.multipartBounds } : {}),
      ...(options.edge?.responsesWebSocket ? { responsesWebSocket: options.edge.responsesWebSocket } : {}),
      ...(options.edge?.idempotency ? { idempotency: options.edge.idempotency } : {}),
      ...(options.edge?.signIn ? { signIn: options.edge.signIn } : {}),
      ...(options.edge?.operatorSessionCredential ? { operatorSessionCredential: options.edge.operatorSessionCredential } : {}),
      ...(options.edge?.storedResponses ? { storedResponses: options.edge.storedResponses } : {}),
      ...(options.edge?.files ? { files: options.edge.files } : {}),
      ...metrics,
    });
    started.push(edge);
    let stopping: Promise<void> | undefined;
    return {
      url: edge.url,
      port: edge.port,
      addresses: { auth: auth.address, catalog: catalog.address, ledger: ledger.address, routing: routing.address, media: media.address, jobs: jobs.address },
      // Front to back: stop taking requests first, then the services they depend on. Once: a second
      // call waits for the first.
      stop: () => (stopping ??= (async () => {
        for (const service of [...started].reverse()) await service.stop().catch((error: unknown) => options.logger.error({ err: error }, 'stop failed'));
      })()),
    };
  } catch (error) {
    for (const service of started.reverse()) await service.stop().catch(() => undefined);
    throw error;
  }
}

// One more replica of a service, wired to a running stack's services: what a deployment with several
// edges, ledgers or routing replicas has (and what the integration tests under test/ start next to a
// stack). This file stays the only one that imports apps: nothing else reaches a service's code; the
// handle types are the services' own.
export type { EdgeOptions, RunningEdge, JobsServiceOptions, RunningJobsService, LedgerServiceOptions, RunningLedgerService, RoutingServiceOptions, RunningRoutingService };

/** The addresses a replica is wired to: a RunningStack's. */
export type StackAddresses = RunningStack['addresses'];

/** An edge's options besides the addresses of the services it calls (those come from the stack unless given). */
export type EdgeReplicaOptions = Omit<EdgeOptions, 'authAddress' | 'catalogAddress' | 'ledgerAddress' | 'routerAddress'>
  & Partial<Pick<EdgeOptions, 'authAddress' | 'catalogAddress' | 'ledgerAddress' | 'routerAddress'>>;

/** Another edge in front of the stack's services (each address may be replaced, say by another ledger or routing replica). */
export function startEdgeReplica(addresses: StackAddresses, options: EdgeReplicaOptions): Promise<RunningEdge> {
  return startEdge({
    authAddress: addresses.auth,
    catalogAddress: addresses.catalog,
    ledgerAddress: addresses.ledger,
    routerAddress: addresses.routing,
    mediaAddress: addresses.media,
    jobsAddress: addresses.jobs,
    ...options,
  });
}

/** Another jobs replica on a database (files, batches, stored responses); `listenAddress` defaults to a free loopback port. */
export function startJobsReplica(options: Omit<JobsServiceOptions, 'listenAddress'> & { listenAddress?: string }): Promise<RunningJobsService> {
  return startJobsService({ listenAddress: '127.0.0.1:0', ...options });
}

/**
 * A ledger on a database (another replica of a stack's, or the only service of a test of settlement).
 * `listenAddress` defaults to a free loopback port.
 */
export function startLedgerReplica(options: Omit<LedgerServiceOptions, 'listenAddress'> & { listenAddress?: string }): Promise<RunningLedgerService> {
  return startLedgerService({ listenAddress: '127.0.0.1:0', ...options });
}

/** Another routing replica reading the stack's catalog; `listenAddress` defaults to a free loopback port. */
export function startRoutingReplica(
  addresses: Pick<StackAddresses, 'catalog'>,
  options: Omit<RoutingServiceOptions, 'listenAddress' | 'catalogAddress'> & { listenAddress?: string },
): Promise<RunningRoutingService> {
  return startRoutingService({ listenAddress: '127.0.0.1:0', catalogAddress: addresses.catalog, ...options });
}
