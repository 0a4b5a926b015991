import { z } from 'zod';
import { commonEnv, createLogger, grpcAddress, loadConfig, postgresUrl, runMain, serviceInternalAuth, startProcessMetrics } from '@gateway/platform';
import { DEFAULT_FILE_LIMITS, startJobsService } from './index.js';

const logger = createLogger('jobs');

void runMain('jobs', logger, async () => {
  const config = loadConfig({
    ...commonEnv,
    GRPC_LISTEN: grpcAddress.default('127.0.0.1:50056'),
    DATABASE_URL: postgresUrl,
    /** Files API bounds (docs/jobs.md "Limits"). */
    JOBS_MAX_FILE_BYTES: z.coerce.number().int().min(1).default(DEFAULT_FILE_LIMITS.maxFileBytes),
    JOBS_MAX_FILES_PER_ACCOUNT: z.coerce.number().int().min(1).default(DEFAULT_FILE_LIMITS.maxFilesPerAccount),
    JOBS_MAX_ACCOUNT_BYTES: z.coerce.number().int().min(1).default(DEFAULT_FILE_LIMITS.maxAccountBytes),
    JOBS_MAX_UPLOADS_PER_ACCOUNT: z.coerce.number().int().min(1).default(DEFAULT_FILE_LIMITS.maxUploadsPerAccount),
    /** Retention of files uploaded without expires_after, seconds; 0 keeps them until deleted. */
    JOBS_FILE_RETENTION_SECONDS: z.coerce.number().int().min(0).default(DEFAULT_FILE_LIMITS.defaultRetentionSeconds),
  });
  logger.level = config.LOG_LEVEL;
  const internalAuth = serviceInternalAuth(logger, false);
  // No NATS for jobs yet: the metrics server is started here (as media does).
  const metrics = await startProcessMetrics(logger);
  try {
    const service = await startJobsService({
      listenAddress: config.GRPC_LISTEN,
      databaseUrl: config.DATABASE_URL,
      logger,
      metrics: metrics.registry,
      internalAuth,
      fileLimits: {
        maxFileBytes: config.JOBS_MAX_FILE_BYTES,
        maxFilesPerAccount: config.JOBS_MAX_FILES_PER_ACCOUNT,
        maxAccountBytes: config.JOBS_MAX_ACCOUNT_BYTES,
        maxUploadsPerAccount: config.JOBS_MAX_UPLOADS_PER_ACCOUNT,
        defaultRetentionSeconds: config.JOBS_FILE_RETENTION_SECONDS,
      },
    });
    return { stop: async () => { await service.stop(); await metrics.stop(); } };
  } catch (error) {
    await metrics.stop().catch(() => undefined);
    throw error;
  }
});
