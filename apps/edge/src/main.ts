import { z } from 'zod';
import { commonEnv, createLogger, grpcAddress, loadConfig, natsUrl, NatsEventBus, runMain } from '@gateway/platform';
import { startEdge } from './index.js';

const logger = createLogger('edge');

await runMain('edge', logger, async () => {
  const config = loadConfig({
    ...commonEnv,
    PORT: z.coerce.number().int().min(0).max(65_535).default(8080),
    HOST: z.string().min(1).default('0.0.0.0'),
    AUTH_ADDR: grpcAddress.default('127.0.0.1:50051'),
    CATALOG_ADDR: grpcAddress.default('127.0.0.1:50052'),
    LEDGER_ADDR: grpcAddress.default('127.0.0.1:50053'),
    ROUTER_ADDR: grpcAddress.default('127.0.0.1:50054'),
    MEDIA_ADDR: grpcAddress.default('127.0.0.1:50055'),
    NATS_URL: natsUrl,
    NATS_NAMESPACE: z.string().optional(),
  });
  logger.level = config.LOG_LEVEL;
  const bus = await NatsEventBus.connect(config.NATS_URL, logger, {
    name: 'edge',
    ...(config.NATS_NAMESPACE ? { namespace: config.NATS_NAMESPACE } : {}),
  });
  const edge = await startEdge({
    host: config.HOST,
    port: config.PORT,
    authAddress: config.AUTH_ADDR,
    catalogAddress: config.CATALOG_ADDR,
    ledgerAddress: config.LEDGER_ADDR,
    routerAddress: config.ROUTER_ADDR,
    mediaAddress: config.MEDIA_ADDR,
    bus,
    logger,
  }).catch(async (error: unknown) => {
    await bus.close();
    throw error;
  });
  return {
    stop: async () => {
      await edge.stop();
      await bus.close();
    },
  };
});
