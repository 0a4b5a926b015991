import { busCheck, createClient, newId, startGrpcServer, subjects, type EventBus, type Logger, type Registry, type InternalAuth } from '@gateway/platform';
import { CatalogServiceClient, CatalogServiceService, ProviderStats } from '@gateway/proto';
import { CatalogCache } from './catalog/catalog-cache.js';
import { routerService, routerServiceDefinition } from './grpc/router-service.js';
import { ExchangeService } from './grpc/exchange.js';
import { GenAiTelemetry } from './observability/gen-ai-telemetry.js';
import { captureMessageContentFromEnv } from './observability/gen-ai-content.js';
import { AttemptMetrics, ObservedUsagePublisher, observeProviderHealth, observeRoutingLoad, RoutingLoad } from './observability/routing-metrics.js';
import { LearnedCapabilities } from './routing/learned-capabilities.js';
import { Router } from './routing/router.js';
import { ProviderHealth } from './strategies/index.js';
import { createUsagePublisher, type UsagePublisherOptions } from './usage/create-usage-publisher.js';
import type { UsagePublisher } from './usage/usage-publisher.js';

export type { UsagePublisher } from './usage/usage-publisher.js';
export { JetStreamUsagePublisher } from './usage/usage-publisher.js';
export { GroupCommitUsagePublisher, encodeUsageEventBatch } from './usage/group-commit-publisher.js';
export { UsageOutbox } from './usage/usage-outbox.js';
export { CHECKPOINT_INTERVAL_MS, FIRST_CHECKPOINT_AFTER_MS } from './usage/stream-checkpoints.js';
export { createUsagePublisher, type UsagePublisherOptions } from './usage/create-usage-publisher.js';
export type { ProviderAdapter, ProviderAdapterV1 } from './providers/provider-adapter.js';
export { LearnedCapabilities, LEARNED_BUCKET, LEARNED_KEY } from './routing/learned-capabilities.js';

export interface RoutingServiceOptions {
  listenAddress: string;
  catalogAddress: string;
  bus: EventBus;
  logger: Logger;
  /** Provider secrets by env-var name (the catalog's api_key_env); falls back to process.env. */
  providerSecrets?: Record<string, string | undefined>;
  /** Per provider attempt (whole answer, or first/next stream part). Default 120 s. */
  attemptTimeoutMs?: number;
  /** Provider attempts per request, failovers included. Default 3. */
  maxAttempts?: number;
  /** Fallback catalog refresh period when a catalog.changed broadcast is missed. Default 30 s. */
  catalogRefreshIntervalMs?: number;
  /** How often this replica shares its provider health on provider.stats. Default 5 s. */
  statsIntervalMs?: number;
  /** Usage publishing: group commit (default) or one message per event, and the durable outbox directory. */
  usage?: Omit<UsagePublisherOptions, 'bus' | 'logger'>;
  /** The process's metrics registry (provider attempts and health, usage publishing and outbox, dependency health). */
  metrics?: Registry;
  /** Internal gRPC authentication: what its server accepts and its clients send. Unset: unchecked. */
  internalAuth?: InternalAuth;
  /** GOAWAY to connections older than this, so edges balancing over a headless Service see new pods (docs/running.md "Edge to routing: client-side balancing"). */
  maxConnectionAgeMs?: number;
  /**
   * Record chat message content (prompts, answers, tool calls and definitions) on the GenAI attempt spans
   * when tracing is on. Default: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true, else off.
   */
  captureMessageContent?: boolean;
}

export interface RunningRoutingService {
  address: string;
  stop(): Promise<void>;
}

export async function startRoutingService(options: RoutingServiceOptions): Promise<RunningRoutingService> {
  const logger = options.logger;
  const catalogClient = createClient(CatalogServiceClient, CatalogServiceService, options.catalogAddress, { credential: options.internalAuth?.credential });
  const catalog = new CatalogCache({
    getSnapshot: (request) => catalogClient.getSnapshot(request),
    bus: options.bus,
    logger,
    secretFor: (name) => options.providerSecrets?.[name] ?? process.env[name],
    refreshIntervalMs: options.catalogRefreshIntervalMs,
  });
  try {
    await catalog.start();
  } catch (error) {
    catalogClient.close();
    await catalog.stop();
    throw error;
  }
  let usage: UsagePublisher;
  try {
    const created = await createUsagePublisher({ ...options.usage, bus: options.bus, logger });
    usage = options.metrics ? new ObservedUsagePublisher(created, options.metrics) : created;
  } catch (error) {
    catalogClient.close();
    await catalog.stop();
    throw error;
  }
  // Parameters upstream models refused, shared by every replica through the bus's key-value bucket.
  const learned = new LearnedCapabilities({ bus: options.bus, logger });
  await learned.start();
  const health = new ProviderHealth();
  const stopHealthReport = options.metrics ? observeProviderHealth(options.metrics, health) : () => undefined;
  // Replicas share provider health so every one routes on the same picture (DESIGN §2).
  const replicaId = newId('routing', 6);
  const statsSubscription = options.bus.subscribe(subjects.providerStats, (data) => {
    const message = ProviderStats.decode(data);
    if (message.replicaId !== replicaId) health.mergeRemote(message.replicaId, message.stats);
  });
  const statsTimer = setInterval(() => {
    const stats = health.localStats();
    if (stats.length === 0) return;
    options.bus.broadcast(subjects.providerStats, ProviderStats.encode({ replicaId, sentAtMs: BigInt(Date.now()), stats }).finish());
  }, options.statsIntervalMs ?? 5_000);
  statsTimer.unref();
  const router = new Router({
    catalog,
    health,
    usage,
    logger,
    attemptTimeoutMs: options.attemptTimeoutMs ?? 120_000,
    maxAttempts: options.maxAttempts ?? 3,
    learned,
    ...(options.metrics ? { attempts: new AttemptMetrics(options.metrics) } : {}),
    // GenAI client metrics on /metrics (with a registry) and over OTLP, spans when tracing: per attempt.
    // Message content on those spans only when the operator opted in (read once, here).
    genAi: new GenAiTelemetry(options.metrics, { captureMessageContent: options.captureMessageContent ?? captureMessageContentFromEnv() }),
  });
  // Requests in flight and streams, per replica: what the chart's load-based autoscalers read.
  const load = new RoutingLoad();
  const stopLoadReport = options.metrics ? observeRoutingLoad(options.metrics, load) : () => undefined;
  const exchanges = new ExchangeService(router, logger, load);
  const server = await startGrpcServer({
    credentials: options.internalAuth?.accepted,
    address: options.listenAddress,
    services: [{ definition: routerServiceDefinition, implementation: routerService(router, logger, { exchanges, load, providerHealth: () => health.report(catalog.offerPairs()) }), name: 'gateway.v1.RouterService' }],
    logger,
    // A request carries a whole request body (at most 32 MiB at the edge) or an upload, plus framing.
    maxReceiveMessageBytes: 48 * 1024 * 1024,
    dependencies: [busCheck(options.bus)],
    ...(options.metrics ? { metrics: options.metrics } : {}),
    ...(options.maxConnectionAgeMs ? { maxConnectionAgeMs: options.maxConnectionAgeMs } : {}),
  });
  return {
    address: server.address,
    stop: async () => {
      // Health says NOT_SERVING from the start of the drain: the edges' readiness and balancers see it.
      server.drain();
      clearInterval(statsTimer);
      await statsSubscription.stop();
      // Edges move new exchanges to another replica and end their call here once its exchanges answered.
      exchanges.drain();
      await server.stop();
      // Streams that ended publish their usage apart: it is stored before the publisher stops.
      await router.settled();
      await usage.stop();
      await learned.stop();
      await catalog.stop();
      catalogClient.close();
      stopHealthReport();
      stopLoadReport();
    },
  };
}
