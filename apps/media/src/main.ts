import { commonEnv, createLogger, grpcAddress, loadConfig, runMain, startProcessMetrics } from '@gateway/platform';
import { startMediaService } from './index.js';

const logger = createLogger('media');

void runMain('media', logger, async () => {
  const config = loadConfig({ ...commonEnv, GRPC_LISTEN: grpcAddress.default('127.0.0.1:50055') });
  logger.level = config.LOG_LEVEL;
  // No NATS for media (runBusService is for the services that have it): the metrics server is started here.
  const metrics = await startProcessMetrics(logger);
  try {
    const service = await startMediaService({ listenAddress: config.GRPC_LISTEN, logger, metrics: metrics.registry });
    return { stop: async () => { await service.stop(); await metrics.stop(); } };
  } catch (error) {
    await metrics.stop().catch(() => undefined);
    throw error;
  }
});
