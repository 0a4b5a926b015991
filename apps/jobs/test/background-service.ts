import { expect } from 'vitest';
import pg from 'pg';
import { createClient, GatewayError, GrpcStatus, InProcessEventBus, type PromiseClient } from '@gateway/platform';
import { ChatRequest, ResponsesStoreServiceClient, ResponsesStoreServiceService, type CreateBackgroundResponseRequest } from '@gateway/proto';
import { createTestDatabase, testLogger, type TestDatabase } from '@gateway/testing';
import { startJobsService, type JobsServiceOptions, type RunningJobsService } from '../src/index.js';

/**
 * The jobs service the store tests (stored and background responses, conversations) run against: its
 * real gRPC server over a database of its own, a client of its ResponsesStore service and a plain
 * Postgres client to read its rows. Nothing is run: the routing services are unreachable addresses and
 * the runner polls rarely (the e2e tests run background responses; these tests play the runner's part
 * by hand where they need it).
 */
export interface BackgroundService {
  database: TestDatabase;
  jobs: RunningJobsService;
  client: PromiseClient<ResponsesStoreServiceClient>;
  db: pg.Client;
  stop(): Promise<void>;
}

export async function startBackgroundService(
  options: Pick<JobsServiceOptions, 'background' | 'backgroundEvents' | 'responses' | 'conversations' | 'now'> = {},
): Promise<BackgroundService> {
  const database = await createTestDatabase();
  const nowhere = '127.0.0.1:1';
  const jobs = await startJobsService({
    listenAddress: '127.0.0.1:0',
    databaseUrl: database.url,
    logger: testLogger('jobs'),
    bus: new InProcessEventBus(testLogger('jobs-bus')),
    ...options,
    batches: { authAddress: nowhere, catalogAddress: nowhere, ledgerAddress: nowhere, routerAddress: nowhere, runner: { pollIntervalMs: 600_000 } },
  });
  const client = createClient(ResponsesStoreServiceClient, ResponsesStoreServiceService, jobs.address);
  const db = new pg.Client({ connectionString: database.url });
  db.on('error', () => undefined);
  await db.connect();
  return {
    database,
    jobs,
    client,
    db,
    async stop() {
      await db.end();
      client.close();
      await jobs.stop();
      await database.drop();
    },
  };
}

/** A background response as the edge creates it (model testco/m, tier-1); `overrides` change its parts. */
export function backgroundRequest(
  accountId: string,
  responseId: string,
  overrides: { inputItemsJson?: string; holdCredits?: string; requestJson?: string } = {},
): CreateBackgroundResponseRequest {
  return {
    response: {
      accountId,
      responseId,
      keyId: 'key_1',
      responseJson: JSON.stringify({ id: responseId, object: 'response', status: 'queued', background: true, output: [] }),
      inputItemsJson: overrides.inputItemsJson ?? JSON.stringify([{ role: 'user', content: 'later' }]),
      createdAt: BigInt(Math.floor(Date.now() / 1000)),
      conversationId: '',
      conversationItemsJson: '',
    },
    tier: 'tier-1',
    request: ChatRequest.fromPartial({ modelId: 'testco/m', endpoint: 'responses' }),
    holdCredits: overrides.holdCredits ?? '0.05',
    requestJson: overrides.requestJson ?? JSON.stringify({ model: 'testco/m', input: 'later', background: true }),
    modelId: 'testco/m',
  };
}

/** The call is refused with `status`. */
export const failsWith = (promise: Promise<unknown>, status: GrpcStatus) =>
  expect(promise).rejects.toSatisfy((error) => error instanceof GatewayError && error.status === status);
