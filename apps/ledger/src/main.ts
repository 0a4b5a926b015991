import { z } from 'zod';
import { commonEnv, createLogger, grpcAddress, loadConfig, NatsEventBus, natsUrl, postgresUrl, runMain } from '@gateway/platform';
import { startLedgerService } from './index.js';

const logger = createLogger('ledger', process.env.LOG_LEVEL ?? 'info');

await runMain('ledger', logger, async () => {
  const config = loadConfig({
    ...commonEnv,
    GRPC_LISTEN: grpcAddress.default('127.0.0.1:50053'),
    DATABASE_URL: postgresUrl,
    NATS_URL: natsUrl,
    NATS_NAMESPACE: z.string().optional(),
    RESERVATION_LIFETIME_MS: z.coerce.number().int().positive().default(20 * 60_000),
    RESERVATION_RETENTION_MS: z.coerce.number().int().positive().default(7 * 24 * 3_600_000),
    SWEEP_INTERVAL_MS: z.coerce.number().int().positive().default(30_000),
    // How long a delivered usage message may stay unacknowledged (a settler that died) before redelivery.
    SETTLEMENT_ACK_WAIT_MS: z.coerce.number().int().positive().default(30_000),
    SETTLEMENT_CONCURRENCY: z.coerce.number().int().min(1).max(16).default(2),
  });
  logger.level = config.LOG_LEVEL;
  const bus = await NatsEventBus.connect(config.NATS_URL, logger, { name: 'ledger', namespace: config.NATS_NAMESPACE });
  try {
    const service = await startLedgerService({
      listenAddress: config.GRPC_LISTEN,
      databaseUrl: config.DATABASE_URL,
      bus,
      logger,
      reservationLifetimeMs: config.RESERVATION_LIFETIME_MS,
      reservationRetentionMs: config.RESERVATION_RETENTION_MS,
      sweepIntervalMs: config.SWEEP_INTERVAL_MS,
      consumer: { ackWaitMs: config.SETTLEMENT_ACK_WAIT_MS, concurrency: config.SETTLEMENT_CONCURRENCY },
    });
    return { stop: async () => { await service.stop(); await bus.close(); } };
  } catch (error) {
    await bus.close();
    throw error;
  }
});
