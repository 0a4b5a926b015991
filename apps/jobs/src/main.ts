import { z } from 'zod';
import { grpcAddress, grpcTarget, postgresUrl, runBusService } from '@gateway/platform';
import { DEFAULT_BACKGROUND_LIMITS, DEFAULT_CONVERSATIONS_STORE, DEFAULT_BATCH_LIMITS, DEFAULT_BATCH_RETENTION, DEFAULT_BATCH_RUNNER_OPTIONS, DEFAULT_FILE_LIMITS, DEFAULT_PRIORITY_GATE_OPTIONS, startJobsService } from './index.js';

await runBusService(
  'jobs',
  {
    GRPC_LISTEN: grpcAddress.default('127.0.0.1:50056'),
    DATABASE_URL: postgresUrl,
    /** Files API bounds (docs/jobs.md "Limits"). */
    JOBS_MAX_FILE_BYTES: z.coerce.number().int().min(1).default(DEFAULT_FILE_LIMITS.maxFileBytes),
    JOBS_MAX_FILES_PER_ACCOUNT: z.coerce.number().int().min(1).default(DEFAULT_FILE_LIMITS.maxFilesPerAccount),
    JOBS_MAX_ACCOUNT_BYTES: z.coerce.number().int().min(1).default(DEFAULT_FILE_LIMITS.maxAccountBytes),
    JOBS_MAX_UPLOADS_PER_ACCOUNT: z.coerce.number().int().min(1).default(DEFAULT_FILE_LIMITS.maxUploadsPerAccount),
    /** Retention of files uploaded without expires_after, seconds; 0 keeps them until deleted. */
    JOBS_FILE_RETENTION_SECONDS: z.coerce.number().int().min(0).default(DEFAULT_FILE_LIMITS.defaultRetentionSeconds),
    /** The services batch lines go through (routing's normal path). */
    AUTH_ADDR: grpcAddress.default('127.0.0.1:50051'),
    CATALOG_ADDR: grpcAddress.default('127.0.0.1:50052'),
    LEDGER_ADDR: grpcTarget.default('127.0.0.1:50053'),
    ROUTER_ADDR: grpcTarget.default('127.0.0.1:50054'),
    /** Batch bounds and pace (docs/jobs.md "Limits"). */
    JOBS_MAX_BATCH_LINES: z.coerce.number().int().min(1).max(50_000).default(DEFAULT_BATCH_LIMITS.maxLines),
    JOBS_MAX_UNFINISHED_BATCHES_PER_ACCOUNT: z.coerce.number().int().min(1).default(DEFAULT_BATCH_LIMITS.maxUnfinishedPerAccount),
    JOBS_BATCH_CONCURRENCY: z.coerce.number().int().min(1).max(1_000).default(DEFAULT_BATCH_RUNNER_OPTIONS.concurrency),
    JOBS_BATCH_ACCOUNT_CONCURRENCY: z.coerce.number().int().min(1).max(1_000).default(DEFAULT_BATCH_RUNNER_OPTIONS.perAccountConcurrency),
    JOBS_BATCH_LEASE_MS: z.coerce.number().int().min(1_000).default(DEFAULT_BATCH_RUNNER_OPTIONS.leaseMs),
    JOBS_BATCH_POLL_MS: z.coerce.number().int().min(50).default(DEFAULT_BATCH_RUNNER_OPTIONS.pollIntervalMs),
    /** Batch lines and background responses give way to interactive traffic (docs/jobs.md "Priority"); false: never. */
    JOBS_YIELD_TO_INTERACTIVE: z.enum(['true', 'false']).default('true'),
    /** Routing's event-loop utilization above which arriving interactive requests stop new lower-priority runs. */
    JOBS_YIELD_BUSY_ABOVE: z.coerce.number().min(0).max(1).default(DEFAULT_PRIORITY_GATE_OPTIONS.busyAbove),
    /** While yielding, one run may still start this often, ms. */
    JOBS_YIELD_TRICKLE_MS: z.coerce.number().int().min(10).max(3_600_000).default(DEFAULT_PRIORITY_GATE_OPTIONS.trickleMs),
    /** Finished batches' rows (batch and lines) are deleted this long after they finished, seconds; 0 keeps them. */
    JOBS_BATCH_RETENTION_SECONDS: z.coerce.number().int().min(0).default(DEFAULT_BATCH_RETENTION.retentionSeconds),
    /** Background responses one account may have queued or running (docs/stored-responses.md). */
    JOBS_MAX_BACKGROUND_RESPONSES_PER_ACCOUNT: z.coerce.number().int().min(1).max(100_000).default(DEFAULT_BACKGROUND_LIMITS.maxActivePerAccount),
    /** Items one conversation holds, and conversations one account keeps (docs/stored-responses.md "Conversations"). */
    JOBS_MAX_CONVERSATION_ITEMS: z.coerce.number().int().min(1).max(1_000_000).default(DEFAULT_CONVERSATIONS_STORE.maxItemsPerConversation),
    JOBS_MAX_CONVERSATIONS_PER_ACCOUNT: z.coerce.number().int().min(1).max(10_000_000).default(DEFAULT_CONVERSATIONS_STORE.maxConversationsPerAccount),
  },
  // NATS carries the batch.completed events of the outbox (docs/governance.md "Webhooks").
  async (config, bus, logger, { metrics, internalAuth }) =>
    startJobsService({
      listenAddress: config.GRPC_LISTEN,
      databaseUrl: config.DATABASE_URL,
      logger,
      bus,
      metrics,
      internalAuth,
      batchRetention: { retentionSeconds: config.JOBS_BATCH_RETENTION_SECONDS },
      background: { maxActivePerAccount: config.JOBS_MAX_BACKGROUND_RESPONSES_PER_ACCOUNT },
      conversations: { maxItemsPerConversation: config.JOBS_MAX_CONVERSATION_ITEMS, maxConversationsPerAccount: config.JOBS_MAX_CONVERSATIONS_PER_ACCOUNT },
      fileLimits: {
        maxFileBytes: config.JOBS_MAX_FILE_BYTES,
        maxFilesPerAccount: config.JOBS_MAX_FILES_PER_ACCOUNT,
        maxAccountBytes: config.JOBS_MAX_ACCOUNT_BYTES,
        maxUploadsPerAccount: config.JOBS_MAX_UPLOADS_PER_ACCOUNT,
        defaultRetentionSeconds: config.JOBS_FILE_RETENTION_SECONDS,
      },
      batches: {
        authAddress: config.AUTH_ADDR,
        catalogAddress: config.CATALOG_ADDR,
        ledgerAddress: config.LEDGER_ADDR,
        routerAddress: config.ROUTER_ADDR,
        limits: { maxLines: config.JOBS_MAX_BATCH_LINES, maxUnfinishedPerAccount: config.JOBS_MAX_UNFINISHED_BATCHES_PER_ACCOUNT },
        runner: {
          concurrency: config.JOBS_BATCH_CONCURRENCY,
          perAccountConcurrency: config.JOBS_BATCH_ACCOUNT_CONCURRENCY,
          leaseMs: config.JOBS_BATCH_LEASE_MS,
          pollIntervalMs: config.JOBS_BATCH_POLL_MS,
        },
        priority: config.JOBS_YIELD_TO_INTERACTIVE === 'false' ? false : { busyAbove: config.JOBS_YIELD_BUSY_ABOVE, trickleMs: config.JOBS_YIELD_TRICKLE_MS },
      },
    }),
);
