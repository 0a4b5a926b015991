import { z } from 'zod';
import { commonEnv, createLogger, grpcAddress, loadConfig, natsUrl, NatsEventBus, postgresUrl, runMain } from '@gateway/platform';
import { startAuthService } from './index.js';

const logger = createLogger('auth');

await runMain('auth', logger, async () => {
  const config = loadConfig({
    ...commonEnv,
    GRPC_LISTEN: grpcAddress.default('127.0.0.1:50051'),
    DATABASE_URL: postgresUrl,
    NATS_URL: natsUrl,
    NATS_NAMESPACE: z.string().optional(),
    KEY_HASH_SECRET: z.string().min(32, 'must be at least 32 characters'),
  });
  logger.level = config.LOG_LEVEL;
  const bus = await NatsEventBus.connect(config.NATS_URL, logger, { namespace: config.NATS_NAMESPACE });
  try {
    const service = await startAuthService({
      listenAddress: config.GRPC_LISTEN,
      databaseUrl: config.DATABASE_URL,
      bus,
      logger,
      keyHashSecret: config.KEY_HASH_SECRET,
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
