import { busCheck, createClient, ErrorReason, GatewayError, GrpcStatus, newId, startGrpcServer, unary, type EventBus, type InternalAuth, type Logger, type Registry } from '@gateway/platform';
import { createDatabase, migrate, postgresCheck, startAccountEventRelay, type Kysely } from '@gateway/platform/db';
import {
  AuthServiceClient, AuthServiceService, CatalogServiceClient, CatalogServiceService, JobsServiceService, LedgerServiceClient, LedgerServiceService,
  RouterServiceClient, RouterServiceService, type JobsServiceServer,
} from '@gateway/proto';
import { Batches, DEFAULT_BATCH_LIMITS, type BatchLimits } from './batches/batches.js';
import { BatchRunner, DEFAULT_BATCH_RUNNER_OPTIONS, type BatchRunnerOptions } from './batches/batch-runner.js';
import { BatchRetention, DEFAULT_BATCH_RETENTION, type BatchRetentionOptions } from './batches/batch-retention.js';
import { JOBS_MIGRATIONS, JOBS_SCHEMA, type JobsDatabase } from './jobs-schema.js';
import { PostgresFileContentStore } from './files/file-content-store.js';
import { DEFAULT_FILE_LIMITS, FILE_CHUNK_BYTES, Files, type FileLimits } from './files/files.js';
import { DEFAULT_RESPONSES_STORE, RESPONSES_STORE_MAX_RECEIVE_BYTES, ResponsesStore, responsesMigrations, type ResponsesStoreOptions, type ResponsesTables } from './responses/responses-store.js';
import { responsesStoreBinding } from './responses/responses-store-service.js';
import { ConversationsStore, conversationsMigrations, DEFAULT_CONVERSATIONS_STORE, type ConversationsStoreOptions, type ConversationsTables } from './responses/conversations-store.js';
import { BackgroundEvents, backgroundEventsMigrations, DEFAULT_BACKGROUND_EVENTS_LIMITS, type BackgroundEventsLimits, type BackgroundEventsTable } from './responses/background-events.js';
import { BackgroundResponses, backgroundMigrations, DEFAULT_BACKGROUND_LIMITS, type BackgroundLimits, type BackgroundResponsesTable } from './responses/background-responses.js';
import { DEFAULT_PRIORITY_GATE_OPTIONS, PriorityGate, type PriorityGateOptions } from './priority-gate.js';
import { BackgroundRunner } from './responses/background-runner.js';

export { JOBS_SCHEMA, JOBS_MIGRATIONS } from './jobs-schema.js';
export { DEFAULT_FILE_LIMITS, FILE_CHUNK_BYTES, type FileLimits } from './files/files.js';
export type { FileContentStore } from './files/file-content-store.js';
export { DEFAULT_RESPONSES_STORE, type ResponsesStoreOptions } from './responses/responses-store.js';
export { DEFAULT_CONVERSATIONS_STORE, type ConversationsStoreOptions } from './responses/conversations-store.js';
export { DEFAULT_BACKGROUND_LIMITS, type BackgroundLimits } from './responses/background-responses.js';
export { DEFAULT_BATCH_LIMITS, type BatchLimits } from './batches/batches.js';
export { DEFAULT_BATCH_RUNNER_OPTIONS, type BatchRunnerOptions } from './batches/batch-runner.js';
export { DEFAULT_PRIORITY_GATE_OPTIONS, type PriorityGateOptions } from './priority-gate.js';
export { DEFAULT_BATCH_RETENTION, type BatchRetentionOptions } from './batches/batch-retention.js';

/** Where batch lines go (routing's normal path) and what they are checked against. */
export interface BatchServiceOptions {
  authAddress: string;
  catalogAddress: string;
  ledgerAddress: string;
  routerAddress: string;
  limits?: Partial<BatchLimits>;
  /** Concurrency, leases, retries (docs/jobs.md); tests shorten the lease. */
  runner?: Partial<BatchRunnerOptions>;
  /** How lower-priority work gives way to interactive traffic (docs/jobs.md "Priority"); `false` turns it off. */
  priority?: Partial<PriorityGateOptions> | false;
}

/** Largest request the jobs service reads: one upload chunk (1 MiB) and its few other fields. */
export const JOBS_MAX_RECEIVE_BYTES = FILE_CHUNK_BYTES + 64 * 1024;
/**
 * Largest CreateMessageBatch (an Anthropic Message Batch's converted requests, in one message): the
 * edge bounds the create body at 16 MiB (EDGE_MESSAGE_BATCH_MAX_BYTES); its protobuf is no larger
 * than its JSON but for framing, hence the margin.
 */
export const MESSAGE_BATCH_MAX_RECEIVE_BYTES = 20 * 1024 * 1024;

export interface JobsServiceOptions {
  listenAddress: string;
  databaseUrl: string;
  logger: Logger;
  /** Where batch.completed events go (the outbox relay publishes them for the ledger's webhooks). */
  bus: EventBus;
  /** How often the outbox relay reads the outbox (ms; default 1000). */
  eventRelayIntervalMs?: number;
  /** Files API bounds (docs/jobs.md "Limits"); tests lower them. */
  fileLimits?: Partial<FileLimits>;
  /** Stored responses (docs/stored-responses.md): retention, size bound, sweep period; tests lower them. */
  responses?: Partial<ResponsesStoreOptions>;
  /** Conversations (docs/stored-responses.md "Conversations"): bounds per conversation and account; retention is the responses'. */
  conversations?: Partial<Omit<ConversationsStoreOptions, 'retentionSeconds'>>;
  /** Background responses' bounds (docs/stored-responses.md); run only where batches run (the routing services are known). */
  background?: Partial<BackgroundLimits>;
  /** Bounds and pace of background runs' stored records (docs/stored-responses.md "Streaming a background response"). */
  backgroundEvents?: Partial<BackgroundEventsLimits>;
  /** Clock of stored responses' retention (ms since the epoch); tests move it. Default Date.now. */
  now?: () => number;
  /** Batches: the services their lines go through. Absent: the batch RPCs answer UNAVAILABLE (files only). */
  batches?: BatchServiceOptions;
  /** How long finished batches' rows are kept, and the sweep's pace (docs/jobs.md); tests shorten them. */
  batchRetention?: Partial<BatchRetentionOptions>;
  /** Postgres pool bound (default 10). */
  maxConnections?: number;
  metrics?: Registry;
  /** Internal gRPC authentication: what its server accepts and its clients send. Unset: unchecked. */
  internalAuth?: InternalAuth;
}

export interface RunningJobsService {
  address: string;
  stop(): Promise<void>;
}

/** The jobs service (DESIGN §1): files and batches; its own schema `jobs` in the shared Postgres. */
export async function startJobsService(options: JobsServiceOptions): Promise<RunningJobsService> {
  const { logger } = options;
  const db = createDatabase<JobsDatabase>(
    { url: options.databaseUrl, schema: JOBS_SCHEMA, maxConnections: options.maxConnections ?? 10, applicationName: 'jobs', ...(options.metrics ? { metrics: options.metrics } : {}) },
    logger,
  );
  try {
    await migrate(db, JOBS_SCHEMA, { ...JOBS_MIGRATIONS, ...responsesMigrations, ...backgroundMigrations, ...backgroundEventsMigrations, ...conversationsMigrations }, logger, { allowUnorderedMigrations: true });
  } catch (error) {
    await db.destroy();
    throw error;
  }
  const responses = new ResponsesStore(db as unknown as Kysely<ResponsesTables>, { ...DEFAULT_RESPONSES_STORE, ...options.responses }, logger, options.now);
  const conversations = new ConversationsStore(
    db as unknown as Kysely<ConversationsTables>,
    { ...DEFAULT_CONVERSATIONS_STORE, ...options.conversations, retentionSeconds: options.responses?.retentionSeconds ?? DEFAULT_RESPONSES_STORE.retentionSeconds },
    logger,
    options.now,
  );
  responses.conversations = conversations;
  const files = new Files(db, new PostgresFileContentStore(db), { ...DEFAULT_FILE_LIMITS, ...options.fileLimits }, logger);
  const batchOptions = options.batches;
  const internal = { credential: options.internalAuth?.credential };
  const clients = batchOptions
    ? {
        auth: createClient(AuthServiceClient, AuthServiceService, batchOptions.authAddress, internal),
        catalog: createClient(CatalogServiceClient, CatalogServiceService, batchOptions.catalogAddress, internal),
        ledger: createClient(LedgerServiceClient, LedgerServiceService, batchOptions.ledgerAddress, internal),
        router: createClient(RouterServiceClient, RouterServiceService, batchOptions.routerAddress, internal),
      }
    : undefined;
  const closeClients = () => {
    if (clients) for (const client of Object.values(clients)) client.close();
  };
  const batches = new Batches(db, files, { ...DEFAULT_BATCH_LIMITS, ...batchOptions?.limits });
  const retention = new BatchRetention(db, { ...DEFAULT_BATCH_RETENTION, ...options.batchRetention }, logger);
  const runnerOptions = { ...DEFAULT_BATCH_RUNNER_OPTIONS, maxLines: batches.limits.maxLines, replicaId: newId('jobs'), ...batchOptions?.runner };
  // Batch lines and background responses share one lower-priority budget per replica (`concurrency`),
  // of which the gate lets them use what interactive traffic leaves (routing's GetLoad).
  const gate = clients && batchOptions?.priority !== false
    ? new PriorityGate(async () => clients.router.getLoad({}, { deadlineMs: 1_000 }), { ...DEFAULT_PRIORITY_GATE_OPTIONS, ...batchOptions?.priority }, logger)
    : undefined;
  let backgroundRunner: BackgroundRunner | undefined;
  const events = clients
    ? new BackgroundEvents(db as unknown as Kysely<{ background_events: BackgroundEventsTable }>, { ...DEFAULT_BACKGROUND_EVENTS_LIMITS, ...options.backgroundEvents }, logger)
    : undefined;
  const runner = clients
    ? new BatchRunner(db, files, clients, runnerOptions, logger, () => backgroundRunner?.runningCount ?? 0, gate)
    : undefined;
  if (clients && runner) {
    backgroundRunner = new BackgroundRunner(
      db as unknown as Kysely<{ background_responses: BackgroundResponsesTable }>,
      clients,
      {
        replicaId: runnerOptions.replicaId,
        concurrency: runnerOptions.concurrency,
        leaseMs: runnerOptions.leaseMs,
        pollIntervalMs: runnerOptions.pollIntervalMs,
        maxAttempts: runnerOptions.maxAttempts,
        runTimeoutMs: runnerOptions.lineTimeoutMs,
      },
      logger,
      () => runner.runningCount,
      events!,
      gate,
    );
  }
  const background = backgroundRunner
    ? new BackgroundResponses(db as unknown as Kysely<ResponsesTables & { background_responses: BackgroundResponsesTable }>, responses, { ...DEFAULT_BACKGROUND_LIMITS, ...options.background })
    : undefined;
  if (background && backgroundRunner) {
    const heard = backgroundRunner;
    background.onCancelled = (accountId, responseId) => heard.cancelled(accountId, responseId);
  }
  const batchesOnly = <T>(work: () => Promise<T>): Promise<T> => {
    if (!runner) throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_UNSPECIFIED, 'This jobs service runs no batches (it was started without the routing services).');
    return work();
  };
  const implementation: JobsServiceServer = {
    beginUpload: unary(logger, 'BeginUpload', (request) => files.beginUpload(request.accountId, request.filename)),
    appendUpload: unary(logger, 'AppendUpload', async (request) => ({
      storedBytes: BigInt(await files.appendUpload(request.accountId, request.fileId, Number(request.offset), request.data)),
    })),
    completeUpload: unary(logger, 'CompleteUpload', async (request) => ({
      file: await files.completeUpload(request.accountId, request.fileId, Number(request.bytes), request.purpose, request.expiresAfterSeconds),
    })),
    abortUpload: unary(logger, 'AbortUpload', async (request) => ({ aborted: await files.abortUpload(request.accountId, request.fileId) })),
    getFile: unary(logger, 'GetFile', async (request) => ({ file: await files.getFile(request.accountId, request.fileId) })),
    listFiles: unary(logger, 'ListFiles', (request) => files.listFiles(request.accountId, request.purpose, request.limit, request.after, request.order)),
    readFileContent: unary(logger, 'ReadFileContent', async (request) => {
      const page = await files.readContent(request.accountId, request.fileId, Number(request.offset), request.maxBytes);
      return { data: page.data, totalBytes: BigInt(page.totalBytes), filename: page.filename };
    }),
    deleteFile: unary(logger, 'DeleteFile', (request) => files.deleteFile(request.accountId, request.fileId)),
    createBatch: unary(logger, 'CreateBatch', (request) => batchesOnly(async () => ({ batch: await batches.create(request) }))),
    getBatch: unary(logger, 'GetBatch', async (request) => ({ batch: await batches.get(request.accountId, request.batchId) })),
    listBatches: unary(logger, 'ListBatches', (request) => batches.list(request.accountId, request.limit, request.after, request.kind, request.before)),
    cancelBatch: unary(logger, 'CancelBatch', async (request) => ({ batch: await batches.cancel(request.accountId, request.batchId) })),
    createMessageBatch: unary(logger, 'CreateMessageBatch', (request) => batchesOnly(async () => ({ batch: await batches.createMessageBatch(request) }))),
    listMessageBatchResults: unary(logger, 'ListMessageBatchResults', (request) => batches.messageResults(request.accountId, request.batchId, request.fromIndex, request.limit)),
    deleteBatch: unary(logger, 'DeleteBatch', (request) => batches.delete(request.accountId, request.batchId)),
  };
  let server;
  try {
    server = await startGrpcServer({
      credentials: options.internalAuth?.accepted,
      address: options.listenAddress,
      services: [{ definition: JobsServiceService, implementation, name: 'gateway.v1.JobsService' }, responsesStoreBinding(responses, background, events, logger, conversations)],
      logger,
      // A PutResponses batch of the edge's is the largest message this server reads.
      // A message batch's create is the largest (MESSAGE_BATCH_MAX_RECEIVE_BYTES); a PutResponses batch next.
      maxReceiveMessageBytes: Math.max(JOBS_MAX_RECEIVE_BYTES, RESPONSES_STORE_MAX_RECEIVE_BYTES, MESSAGE_BATCH_MAX_RECEIVE_BYTES),
      dependencies: [postgresCheck(options.databaseUrl, 'jobs'), busCheck(options.bus)],
      ...(options.metrics ? { metrics: options.metrics } : {}),
    });
  } catch (error) {
    files.stop();
    responses.stop();
    closeClients();
    await db.destroy();
    throw error;
  }
  gate?.start();
  runner?.start();
  retention.start();
  backgroundRunner?.start();
  const relay = startAccountEventRelay(db, options.bus, logger, { intervalMs: options.eventRelayIntervalMs });
  const running = server;
  return {
    address: running.address,
    stop: async () => {
      await running.stop();
      await Promise.all([runner?.stop(), backgroundRunner?.stop()]);
      // After the runner: a batch it ended while stopping has its event published now or by the next start.
      await relay.stop();
      gate?.stop();
      retention.stop();
      files.stop();
      responses.stop();
      closeClients();
      await db.destroy();
    },
  };
}
