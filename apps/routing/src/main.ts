import { z } from 'zod';
import { commonEnv, createLogger, grpcAddress, loadConfig, natsUrl, NatsEventBus, runMain } from '@gateway/platform';
import { startRoutingService } from './index.js';

const logger = createLogger('routing');

void runMain('routing', logger, async () => {
  const config = loadConfig({
    ...commonEnv,
    GRPC_LISTEN: grpcAddress.default('127.0.0.1:50054'),
    CATALOG_ADDR: grpcAddress.default('127.0.0.1:50052'),
    NATS_URL: natsUrl,
    NATS_NAMESPACE: z.string().optional(),
  });
  logger.level = config.LOG_LEVEL;
  const bus = await NatsEventBus.connect(config.NATS_URL, logger, { name: 'routing', namespace: config.NATS_NAMESPACE });
  const service = await startRoutingService({ listenAddress: config.GRPC_LISTEN, catalogAddress: config.CATALOG_ADDR, bus, logger });
  return {
    stop: async () => {
      await service.stop();
      await bus.close();
    },
  };
});
