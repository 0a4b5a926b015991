import { tmpdir } from 'node:os';
import { z } from 'zod';
import { assertWritableDirectory, commonEnv, createLogger, grpcAddress, loadConfig, postgresUrl, runMain, serviceInternalAuth, startProcessMetrics } from '@gateway/platform';
import { startMediaService } from './index.js';

const logger = createLogger('media');

void runMain('media', logger, async () => {
  const config = loadConfig({
    ...commonEnv,
    GRPC_LISTEN: grpcAddress.default('127.0.0.1:50055'),
    // The hosted image store (images answered as URLs).
    DATABASE_URL: postgresUrl,
    MEDIA_IMAGE_TTL_SECONDS: z.coerce.number().int().min(60).max(7 * 24 * 3600).default(3_600),
  });
  logger.level = config.LOG_LEVEL;
  // Audio conversions write their input and output to a fresh directory under the temporary directory.
  await assertWritableDirectory(
    'TMPDIR',
    tmpdir(),
    'media converts audio in temporary files there; give it a writable directory (e.g. --tmpfs /tmp in a read-only container) or set TMPDIR',
  );
  const internalAuth = serviceInternalAuth(logger, false);
  // No NATS for media (runBusService is for the services that have it): the metrics server is started here.
  const metrics = await startProcessMetrics(logger);
  try {
    const service = await startMediaService({
      listenAddress: config.GRPC_LISTEN,
      logger,
      metrics: metrics.registry,
      internalAuth,
      databaseUrl: config.DATABASE_URL,
      imageHosting: { ttlSeconds: config.MEDIA_IMAGE_TTL_SECONDS },
    });
    return { stop: async () => { await service.stop(); await metrics.stop(); } };
  } catch (error) {
    await metrics.stop().catch(() => undefined);
    throw error;
  }
});
