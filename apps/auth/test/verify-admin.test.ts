import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, ErrorReason, GatewayError, GrpcStatus, type PromiseClient } from '@gateway/platform';
import { AuthServiceClient, AuthServiceService } from '@gateway/proto';
import { createTestBus, createTestDatabase, testLogger, type TestBus, type TestDatabase } from '@gateway/testing';
import { startAuthService, type RunningAuthService } from '../src/index.js';

const keyHashSecret = 'verify-admin-test-secret-0123456789abcdefghij';
const SERVICE = 'service-token-of-the-verify-admin-test-000001';
const ADMIN = 'admin-token-of-the-verify-admin-test-00000001';

async function refusal(promise: Promise<unknown>): Promise<GatewayError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(GatewayError);
    return error as GatewayError;
  }
  throw new Error('expected the call to be refused');
}

// Two real auth services on one database: one with internal authentication (service and admin
// tokens), one without. The edge's /v1/admin/ routes ask VerifyAdmin with the caller's token.
describe('AuthService.VerifyAdmin', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let checked: RunningAuthService;
  let unchecked: RunningAuthService;
  let client: PromiseClient<AuthServiceClient>;
  let uncheckedClient: PromiseClient<AuthServiceClient>;

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    const common = { listenAddress: '127.0.0.1:0', databaseUrl: database.url, bus: testBus.bus, keyHashSecret };
    checked = await startAuthService({
      ...common,
      logger: testLogger('auth-checked'),
      internalAuth: { accepted: { service: [SERVICE], admin: [ADMIN] }, credential: SERVICE },
    });
    unchecked = await startAuthService({ ...common, logger: testLogger('auth-unchecked') });
    // No client credential: each call says which it carries.
    client = createClient(AuthServiceClient, AuthServiceService, checked.address, { maxAttempts: 1 });
    uncheckedClient = createClient(AuthServiceClient, AuthServiceService, unchecked.address, { maxAttempts: 1 });
  });

  afterAll(async () => {
    client?.close();
    uncheckedClient?.close();
    await checked?.stop();
    await unchecked?.stop();
    await testBus?.destroy();
    await database?.drop();
  });

  it('accepts the admin token', async () => {
    expect(await client.verifyAdmin({}, { credential: ADMIN })).toEqual({});
  });

  it('refuses the service token as PERMISSION_DENIED', async () => {
    const error = await refusal(client.verifyAdmin({}, { credential: SERVICE }));
    expect({ status: error.status, reason: error.reason }).toEqual({ status: GrpcStatus.PERMISSION_DENIED, reason: ErrorReason.ERROR_REASON_FORBIDDEN });
  });

  it('refuses no credential, an unknown one and an API key as UNAUTHENTICATED', async () => {
    const account = await client.createAccount({ name: 'acme', tier: 'tier-1', idempotencyKey: '' }, { credential: ADMIN });
    const key = await client.createApiKey({ accountId: account.account!.id, name: 'k', defaultRoutingStrategy: '' }, { credential: SERVICE });
    for (const credential of [undefined, 'a-token-nobody-issued-0000000000000000000', key.plaintext, account.provisioningKey]) {
      const error = await refusal(client.verifyAdmin({}, credential === undefined ? {} : { credential }));
      expect(error.status).toBe(GrpcStatus.UNAUTHENTICATED);
    }
  });

  it('answers FAILED_PRECONDITION without internal authentication, whatever the call carries', async () => {
    for (const credential of [undefined, ADMIN, SERVICE]) {
      const error = await refusal(uncheckedClient.verifyAdmin({}, credential === undefined ? {} : { credential }));
      expect({ status: error.status, reason: error.reason }).toEqual({ status: GrpcStatus.FAILED_PRECONDITION, reason: ErrorReason.ERROR_REASON_FORBIDDEN });
      expect(error.message).toContain('without internal authentication');
    }
  });
});
