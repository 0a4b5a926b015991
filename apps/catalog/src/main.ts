import { commonEnv, createLogger, grpcAddress, loadConfig, NatsEventBus, natsUrl, postgresUrl, runMain } from '@gateway/platform';
import { z } from 'zod';
import { startCatalogService } from './index.js';

const logger = createLogger('catalog');

await runMain('catalog', logger, async () => {
  const config = loadConfig({
    ...commonEnv,
    GRPC_LISTEN: grpcAddress.default('127.0.0.1:50052'),
    DATABASE_URL: postgresUrl,
    NATS_URL: natsUrl,
    NATS_NAMESPACE: z.string().optional().transform((value) => value || undefined),
    // Empty counts as unset: no file, serve the version Postgres holds.
    GATEWAY_CONFIG: z.string().optional().transform((value) => value || undefined),
  });
  logger.level = config.LOG_LEVEL;
  const bus = await NatsEventBus.connect(config.NATS_URL, logger, { namespace: config.NATS_NAMESPACE });
  try {
    const service = await startCatalogService({
      listenAddress: config.GRPC_LISTEN,
      databaseUrl: config.DATABASE_URL,
      bus,
      logger,
      configPath: config.GATEWAY_CONFIG,
    });
    return {
      stop: async () => {
        await service.stop();
        await bus.close();
      },
    };
  } catch (error) {
    await bus.close().catch(() => undefined);
    throw error;
  }
});
