import { join } from 'node:path';
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
    // group-commit (default) or single: how usage events go to JetStream.
    USAGE_PUBLISHER: z.enum(['group-commit', 'single']).default('group-commit'),
    // One directory per process (it is locked; a restart on the same one replays it). Unset: one per
    // listen port under .data/usage-outbox/; "none" disables the durable outbox.
    USAGE_OUTBOX_DIR: z.string().optional(),
  });
  logger.level = config.LOG_LEVEL;
  const bus = await NatsEventBus.connect(config.NATS_URL, logger, { name: 'routing', namespace: config.NATS_NAMESPACE });
  const outboxDirectory = config.USAGE_OUTBOX_DIR ?? join('.data', 'usage-outbox', `routing-${config.GRPC_LISTEN.replace(/[^A-Za-z0-9.-]+/g, '_')}`);
  const service = await startRoutingService({
    listenAddress: config.GRPC_LISTEN, catalogAddress: config.CATALOG_ADDR, bus, logger,
    usage: { publisher: config.USAGE_PUBLISHER, ...(outboxDirectory === 'none' ? {} : { outboxDirectory }) },
  });
  return {
    stop: async () => {
      await service.stop();
      await bus.close();
    },
  };
});
