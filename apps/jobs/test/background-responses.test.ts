import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { createClient, GatewayError, GrpcStatus, InProcessEventBus } from '@gateway/platform';
import { ChatRequest, ResponsesStoreServiceClient, ResponsesStoreServiceService, type CreateBackgroundResponseRequest } from '@gateway/proto';
import { createTestDatabase, testLogger, type TestDatabase } from '@gateway/testing';
import { startJobsService, type RunningJobsService } from '../src/index.js';

// Background responses in the jobs service over its real gRPC server and real Postgres: creation kept
// with its stored response, the per-account cap of queued + running (kept under concurrent creations),
// cancel keyed by account, and a deleted response taking its run with it. The runner polls rarely here
// (nothing is run: the routing services are unreachable addresses); the e2e tests run them.

const MAX_ACTIVE = 2;

describe('background responses (jobs service)', () => {
  let database: TestDatabase;
  let jobs: RunningJobsService;
  let client: ReturnType<typeof createClient<ResponsesStoreServiceClient>>;
  let db: pg.Client;

  beforeAll(async () => {
    database = await createTestDatabase();
    const nowhere = '127.0.0.1:1';
    jobs = await startJobsService({
      listenAddress: '127.0.0.1:0',
      databaseUrl: database.url,
      logger: testLogger('jobs'),
      bus: new InProcessEventBus(testLogger('jobs-bus')),
      background: { maxActivePerAccount: MAX_ACTIVE },
      batches: { authAddress: nowhere, catalogAddress: nowhere, ledgerAddress: nowhere, routerAddress: nowhere, runner: { pollIntervalMs: 600_000 } },
    });
    client = createClient(ResponsesStoreServiceClient, ResponsesStoreServiceService, jobs.address);
    db = new pg.Client({ connectionString: database.url });
    db.on('error', () => undefined);
    await db.connect();
  });

  afterAll(async () => {
    await db?.end();
    client?.close();
    await jobs?.stop();
    await database?.drop();
  });

  const request = (accountId: string, responseId: string): CreateBackgroundResponseRequest => ({
    response: {
      accountId,
      responseId,
      keyId: 'key_1',
      responseJson: JSON.stringify({ id: responseId, object: 'response', status: 'queued', background: true, output: [] }),
      inputItemsJson: JSON.stringify([{ role: 'user', content: 'later' }]),
      createdAt: BigInt(Math.floor(Date.now() / 1000)),
      conversationId: '',
      conversationItemsJson: '',
    },
    tier: 'tier-1',
    request: ChatRequest.fromPartial({ modelId: 'testco/m', endpoint: 'responses' }),
    holdCredits: '0.05',
    requestJson: JSON.stringify({ model: 'testco/m', input: 'later', background: true }),
    modelId: 'testco/m',
  });
  const failsWith = (promise: Promise<unknown>, status: GrpcStatus) => expect(promise).rejects.toSatisfy((error) => error instanceof GatewayError && error.status === status);
  const rows = async (accountId: string) => (await db.query(`select response_id, status from jobs.background_responses where account_id = $1 order by response_id`, [accountId])).rows;

  it('stores the run beside its response; creating it again changes nothing; GetResponse answers its state', async () => {
    await client.createBackgroundResponse(request('acc_a', 'resp_a1'));
    await client.createBackgroundResponse(request('acc_a', 'resp_a1'));
    expect(await rows('acc_a')).toEqual([{ response_id: 'resp_a1', status: 'queued' }]);
    const found = await client.getResponse({ accountId: 'acc_a', responseId: 'resp_a1' });
    expect(JSON.parse(found.responseJson)).toMatchObject({ status: 'queued', background: true });
    expect(found.background).toMatchObject({ status: 'queued', modelId: 'testco/m', errorJson: '' });
    expect(found.background?.answer).toBeUndefined();
    // Another account: not found, for the lookup and for a cancel.
    await failsWith(client.getResponse({ accountId: 'acc_b', responseId: 'resp_a1' }), GrpcStatus.NOT_FOUND);
    await failsWith(client.cancelBackgroundResponse({ accountId: 'acc_b', responseId: 'resp_a1' }), GrpcStatus.NOT_FOUND);
    expect(await rows('acc_a')).toEqual([{ response_id: 'resp_a1', status: 'queued' }]);
  });

  it('refuses past the per-account cap of queued + running, counted under concurrent creations; other accounts are not affected; a cancel makes room', async () => {
    const results = await Promise.allSettled(Array.from({ length: 6 }, (_, index) => client.createBackgroundResponse(request('acc_cap', `resp_cap${index}`))));
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(MAX_ACTIVE);
    for (const result of results.filter((result) => result.status === 'rejected')) {
      expect(result.reason).toBeInstanceOf(GatewayError);
      expect((result.reason as GatewayError).status).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
      expect((result.reason as GatewayError).code).toBe('background_responses_limit');
    }
    // The refused ones stored nothing (neither the run nor the response).
    const admitted = (await rows('acc_cap')).map((row: { response_id: string }) => row.response_id);
    expect(admitted).toHaveLength(MAX_ACTIVE);
    const refused = Array.from({ length: 6 }, (_, index) => `resp_cap${index}`).filter((id) => !admitted.includes(id));
    await failsWith(client.getResponse({ accountId: 'acc_cap', responseId: refused[0]! }), GrpcStatus.NOT_FOUND);
    await client.createBackgroundResponse(request('acc_other', 'resp_other1'));
    const cancelled = await client.cancelBackgroundResponse({ accountId: 'acc_cap', responseId: admitted[0]! });
    expect(cancelled.background?.status).toBe('cancelled');
    expect(Number(cancelled.background?.endedAt)).toBeGreaterThan(0);
    // A cancel of a finished one answers it as it is.
    expect((await client.cancelBackgroundResponse({ accountId: 'acc_cap', responseId: admitted[0]! })).background?.status).toBe('cancelled');
    await client.createBackgroundResponse(request('acc_cap', 'resp_cap_after'));
  });

  it('a response that is not a background one cannot be cancelled (FAILED_PRECONDITION); deleting a background response removes its run', async () => {
    await client.putResponses({ responses: [request('acc_c', 'resp_plain').response!] });
    await failsWith(client.cancelBackgroundResponse({ accountId: 'acc_c', responseId: 'resp_plain' }), GrpcStatus.FAILED_PRECONDITION);
    await client.createBackgroundResponse(request('acc_c', 'resp_bg'));
    await client.deleteResponse({ accountId: 'acc_c', responseId: 'resp_bg' });
    expect(await rows('acc_c')).toEqual([]);
    await failsWith(client.cancelBackgroundResponse({ accountId: 'acc_c', responseId: 'resp_bg' }), GrpcStatus.NOT_FOUND);
  });
});
