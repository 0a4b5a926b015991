import { commonEnv, createLogger, grpcAddress, loadConfig, runMain } from '@gateway/platform';
import { startMediaService } from './index.js';

const logger = createLogger('media');

void runMain('media', logger, async () => {
  const config = loadConfig({ ...commonEnv, GRPC_LISTEN: grpcAddress.default('127.0.0.1:50055') });
  logger.level = config.LOG_LEVEL;
  return startMediaService({ listenAddress: config.GRPC_LISTEN, logger });
});
