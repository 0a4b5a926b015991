import { z } from 'zod';
import { grpcAddress, postgresUrl, runBusService } from '@gateway/platform';
import { startLedgerService } from './index.js';

await runBusService(
  'ledger',
  {
    GRPC_LISTEN: grpcAddress.default('127.0.0.1:50053'),
    DATABASE_URL: postgresUrl,
    RESERVATION_LIFETIME_MS: z.coerce.number().int().positive().default(20 * 60_000),
    RESERVATION_RETENTION_MS: z.coerce.number().int().positive().default(7 * 24 * 3_600_000),
    // A lease's deadline after its last renewal, and how long a lease's late charges are waited for.
    LEASE_LIFETIME_MS: z.coerce.number().int().positive().default(45_000),
    LEASE_DRAIN_MS: z.coerce.number().int().positive().default(30_000),
    SWEEP_INTERVAL_MS: z.coerce.number().int().positive().default(30_000),
    // How long a delivered usage message may stay unacknowledged (a settler that died) before redelivery.
    SETTLEMENT_ACK_WAIT_MS: z.coerce.number().int().positive().default(30_000),
    SETTLEMENT_CONCURRENCY: z.coerce.number().int().min(1).max(16).default(2),
    // Webhooks (docs/governance.md): plain http and private receivers only when the operator allows them.
    // The key webhook signing secrets are encrypted with at rest (AES-256-GCM): 32 bytes in base64 (openssl rand -base64 32).
    WEBHOOK_SECRET_KEY: z.string().min(44, { error: 'must be 32 bytes in base64 (openssl rand -base64 32)' }),
    GATEWAY_WEBHOOKS_ALLOW_PRIVATE: z.enum(['0', '1']).default('0'),
    WEBHOOK_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(100).default(15),
    WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(100).max(60_000).default(10_000),
    WEBHOOK_MAX_IN_FLIGHT: z.coerce.number().int().min(1).max(256).default(16),
    // After a secret rotation, how long deliveries are signed with the old secret too (default 24 h, at most 7 days).
    WEBHOOK_SECRET_OVERLAP_MS: z.coerce.number().int().min(0).max(7 * 24 * 3_600_000).default(24 * 3_600_000),
  },
  (config, bus, logger, { metrics, internalAuth }) =>
    startLedgerService({
      listenAddress: config.GRPC_LISTEN,
      databaseUrl: config.DATABASE_URL,
      bus,
      logger,
      reservationLifetimeMs: config.RESERVATION_LIFETIME_MS,
      reservationRetentionMs: config.RESERVATION_RETENTION_MS,
      sweepIntervalMs: config.SWEEP_INTERVAL_MS,
      leaseLifetimeMs: config.LEASE_LIFETIME_MS,
      leaseDrainMs: config.LEASE_DRAIN_MS,
      consumer: { ackWaitMs: config.SETTLEMENT_ACK_WAIT_MS, concurrency: config.SETTLEMENT_CONCURRENCY },
      metrics,
      internalAuth,
      webhookSecretKey: config.WEBHOOK_SECRET_KEY,
      webhooks: {
        allowPrivate: config.GATEWAY_WEBHOOKS_ALLOW_PRIVATE === '1',
        maxAttempts: config.WEBHOOK_MAX_ATTEMPTS,
        requestTimeoutMs: config.WEBHOOK_TIMEOUT_MS,
        maxInFlight: config.WEBHOOK_MAX_IN_FLIGHT,
        secretOverlapMs: config.WEBHOOK_SECRET_OVERLAP_MS,
      },
    }),
);
