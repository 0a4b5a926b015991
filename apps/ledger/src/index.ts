import {
  busCheck, observePool, startGrpcServer, subjects, type EventBus, type Logger, type Registry, type Subscription, type InternalAuth,
} from '@gateway/platform';
import { migrate, postgresCheck } from '@gateway/platform/db';
import { LeaseRecall, LedgerServiceService } from '@gateway/proto';
import { createLedgerDatabase } from './database.js';
import { DEFAULT_LEASE_DRAIN_MS, DEFAULT_LEASE_LIFETIME_MS, DEFAULT_RESERVATION_LIFETIME_MS, DEFAULT_RESERVATION_RETENTION_MS, Ledger } from './ledger.js';
import { LedgerMetrics, observeOpenHolds } from './ledger-metrics.js';
import { ledgerServiceImplementation } from './ledger-service.js';
import { LEDGER_SCHEMA, ledgerMigrations } from './migrations.js';
import { startSettlementConsumers, type SettlementConsumerOptions } from './settlement-consumer.js';
import { DEFAULT_SWEEP_INTERVAL_MS, startSweeper } from './sweeper.js';
import { startWebhookDispatcher, type WebhookDispatcherOptions } from './webhooks/webhook-dispatcher.js';
import { webhookServiceImplementation } from './webhooks/webhook-service.js';
import { sealLegacyWebhookSecrets } from './webhooks/webhook-endpoints.js';
import { webhookSecretKey } from './webhooks/secret-box.js';
import { consumeAccountEvents } from './webhooks/account-event-consumer.js';
import { lowBalanceServiceImplementation } from './webhooks/low-balance.js';

export { computeCostPico, PricingError } from './cost.js';
export { RESERVE_PICO, DEFAULT_RESERVATION_LIFETIME_MS, DEFAULT_RESERVATION_RETENTION_MS } from './ledger.js';
export type { SettlementConsumerOptions } from './settlement-consumer.js';
export type { WebhookDispatcherOptions } from './webhooks/webhook-dispatcher.js';

/** The key of in-process stacks and tests that give none: public, so it protects nothing (never for a deployment; the ledger's main requires WEBHOOK_SECRET_KEY). */
export const DEVELOPMENT_WEBHOOK_SECRET_KEY = Buffer.from('gateway-development-webhook-key!').toString('base64');

export interface LedgerServiceOptions {
  listenAddress: string;
  databaseUrl: string;
  bus: EventBus;
  logger: Logger;
  /** How long a reservation lives without its usage event (default 20 minutes). */
  reservationLifetimeMs?: number;
  /** How long closed reservations are kept before the sweeper deletes them (default 7 days; above the lifetime). */
  reservationRetentionMs?: number;
  /** How long a lease its holder returned with unsettled spend stays open for those charges (default 30 s). */
  leaseDrainMs?: number;
  /**
   * A lease's deadline after its grant or last renewal (default 45 s): a holder that stops renewing (it
   * died) has its leases closed this long after its last renewal. Its holder admits on a lease for this
   * less leaseDrainMs after each renewal; at least leaseDrainMs + 1 s.
   */
  leaseLifetimeMs?: number;
  /** How often expired reservations are released (default 30 s). */
  sweepIntervalMs?: number;
  /** Settlement consumers: events per transaction (default 5,120), linger (50 ms), transactions in flight per subject (2). */
  consumer?: { enabled?: boolean } & SettlementConsumerOptions;
  /** Postgres pool bound (default 10). */
  maxConnections?: number;
  /**
   * Close every open lease before serving (default false). Only where this ledger's edges are known to
   * be gone: the single-process `npm start`, whose edge cannot return its leases when Ctrl-C stops the
   * embedded Postgres first. Elsewhere a live replica's leases would be taken from under it.
   */
  reclaimLeasesOnStart?: boolean;
  /** The process's metrics registry (refusals, settlement, open holds, Postgres pool, dependency health). */
  metrics?: Registry;
  /** Internal gRPC authentication: what its server accepts and its clients send. Unset: unchecked. */
  internalAuth?: InternalAuth;
  /**
   * Clock (ms since the epoch) that picks a key's current spend window (limit_reset); tests move it.
   * Unset: the database's clock.
   */
  now?: () => number;
  /**
   * Webhook delivery (docs/governance.md "Webhooks"): the dispatcher's bounds and backoff, and whether
   * plain http and private receivers are allowed (GATEWAY_WEBHOOKS_ALLOW_PRIVATE). `enabled: false`
   * keeps this replica from sending (another replica sends); default on.
   */
  /**
   * The key webhook signing secrets are sealed with at rest (AES-256-GCM; 32 bytes in base64, WEBHOOK_SECRET_KEY).
   * The ledger's main requires it; an in-process stack or test without one uses DEVELOPMENT_WEBHOOK_SECRET_KEY, with a warning.
   */
  webhookSecretKey?: string;
  webhooks?: Partial<Omit<WebhookDispatcherOptions, 'secretKey'>> & {
    enabled?: boolean;
    /** After a secret rotation, how long deliveries also carry the old secret's signature (WEBHOOK_SECRET_OVERLAP_MS, default 24 h). */
    secretOverlapMs?: number;
  };
}

export interface RunningLedgerService {
  address: string;
  stop(): Promise<void>;
  /** Stops settling (messages in hand finish; unacked ones are redelivered to the next consumer). */
  stopConsumer(): Promise<void>;
}

export async function startLedgerService(options: LedgerServiceOptions): Promise<RunningLedgerService> {
  const logger = options.logger;
  const reservationLifetimeMs = options.reservationLifetimeMs ?? DEFAULT_RESERVATION_LIFETIME_MS;
  if (!Number.isInteger(reservationLifetimeMs) || reservationLifetimeMs <= 0) throw new Error(`reservationLifetimeMs must be a positive integer: ${reservationLifetimeMs}`);
  const reservationRetentionMs = options.reservationRetentionMs ?? DEFAULT_RESERVATION_RETENTION_MS;
  if (!Number.isInteger(reservationRetentionMs) || reservationRetentionMs < reservationLifetimeMs) {
    throw new Error(`reservationRetentionMs must be an integer of at least reservationLifetimeMs (${reservationLifetimeMs}): ${reservationRetentionMs}`);
  }
  const leaseLifetimeMs = options.leaseLifetimeMs ?? DEFAULT_LEASE_LIFETIME_MS;
  const leaseDrainMs = options.leaseDrainMs ?? DEFAULT_LEASE_DRAIN_MS;
  if (!Number.isInteger(leaseLifetimeMs) || leaseLifetimeMs - leaseDrainMs < 1_000) {
    throw new Error(`leaseLifetimeMs must be an integer at least 1 s above leaseDrainMs (${leaseDrainMs}): ${leaseLifetimeMs}`);
  }
  const { db, pool } = createLedgerDatabase({ url: options.databaseUrl, schema: LEDGER_SCHEMA, maxConnections: options.maxConnections ?? 10, applicationName: 'ledger' }, options.logger);
  try {
    await migrate(db, LEDGER_SCHEMA, ledgerMigrations, logger);
  } catch (error) {
    await db.destroy();
    throw error;
  }
  const allowPrivateWebhooks = options.webhooks?.allowPrivate ?? false;
  if (options.webhookSecretKey === undefined) logger.warn('no webhook secret key given: webhook secrets are sealed with the public development key');
  const secretBox = webhookSecretKey(options.webhookSecretKey ?? DEVELOPMENT_WEBHOOK_SECRET_KEY);
  try {
    const sealed = await sealLegacyWebhookSecrets(db, secretBox);
    if (sealed > 0) logger.info({ endpoints: sealed }, 'webhook secrets stored in plaintext are now encrypted');
  } catch (error) {
    await db.destroy();
    throw error;
  }
  const ledger = new Ledger(db, logger, reservationLifetimeMs, pool, options.now ? { now: options.now } : {});
  const metrics = options.metrics ? new LedgerMetrics(options.metrics) : undefined;
  const stopReporting = options.metrics
    ? [observePool(options.metrics, LEDGER_SCHEMA, pool), observeOpenHolds(options.metrics, ledger)]
    : [];
  if (options.reclaimLeasesOnStart) {
    const reclaimed = await ledger.closeOpenLeases();
    if (reclaimed > 0) logger.info({ leases: reclaimed }, 'leases of a previous run closed; their unsettled rest is available again');
  }
  const server = await startGrpcServer({
    credentials: options.internalAuth?.accepted,
    address: options.listenAddress,
    services: [{
      definition: LedgerServiceService,
      implementation: {
        ...ledgerServiceImplementation(ledger, logger, {
          recall: (accountId, keyId) => options.bus.broadcast(subjects.leaseRecall, LeaseRecall.encode({ accountId, keyId }).finish()),
          ...(options.leaseDrainMs !== undefined ? { leaseDrainMs: options.leaseDrainMs } : {}),
          ...(options.leaseLifetimeMs !== undefined ? { leaseLifetimeMs: options.leaseLifetimeMs } : {}),
          ...(metrics ? { metrics } : {}),
        }),
        ...webhookServiceImplementation(db, logger, secretBox, allowPrivateWebhooks, options.webhooks?.secretOverlapMs),
        ...lowBalanceServiceImplementation(db, logger),
      },
      name: 'gateway.v1.LedgerService',
    }],
    logger,
    dependencies: [postgresCheck(options.databaseUrl, 'ledger'), busCheck(options.bus)],
    ...(options.metrics ? { metrics: options.metrics } : {}),
  });
  let consumer: Subscription | null = null;
  let accountEvents: Subscription | null = null;
  if (options.consumer?.enabled ?? true) {
    consumer = await startSettlementConsumers(options.bus, ledger, logger, { ...options.consumer, ...(metrics ? { metrics } : {}) });
    // Key and batch events from auth's and jobs' outboxes, for webhooks (docs/governance.md "Webhooks").
    accountEvents = await consumeAccountEvents(options.bus, db, logger);
  }
  const webhookDispatcher = (options.webhooks?.enabled ?? true)
    ? startWebhookDispatcher(db, logger, { ...options.webhooks, allowPrivate: allowPrivateWebhooks, secretKey: secretBox })
    : null;
  const sweeper = startSweeper(ledger, logger, options.sweepIntervalMs ?? DEFAULT_SWEEP_INTERVAL_MS, reservationRetentionMs);

  const stopConsumer = async () => {
    const running = [consumer, accountEvents];
    consumer = null;
    accountEvents = null;
    await Promise.all(running.map((subscription) => subscription?.stop()));
  };
  let stopped: Promise<void> | null = null;
  return {
    address: server.address,
    stopConsumer,
    stop: () => {
      stopped ??= (async () => {
        // Health says NOT_SERVING while the settlement in hand finishes.
        server.drain();
        await stopConsumer();
        await webhookDispatcher?.stop();
        await sweeper.stop();
        await server.stop();
        for (const stopReport of stopReporting) stopReport();
        await db.destroy();
      })();
      return stopped;
    },
  };
}
