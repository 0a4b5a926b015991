import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, ErrorReason, GrpcStatus, type PromiseClient } from '@gateway/platform';
import { AuthServiceClient, AuthServiceService } from '@gateway/proto';
import { testLogger } from '@gateway/testing';
import { startAuthService, type RunningAuthService } from '../src/index.js';
import { rejection, startAuthRig, type AuthRig } from './auth-rig.js';

const keyHashSecret = 'verify-admin-test-secret-0123456789abcdefghij';
const SERVICE = 'service-token-of-the-verify-admin-test-000001';
const ADMIN = 'admin-token-of-the-verify-admin-test-00000001';

// Two real auth services on one database: one with internal authentication (service and admin
// tokens), one without. The edge's /v1/admin/ routes ask VerifyAdmin with the caller's token.
describe('AuthService.VerifyAdmin', () => {
  // The rig's service checks internal credentials; `unchecked` is a second one on the same database without.
  let rig: AuthRig;
  let client: PromiseClient<AuthServiceClient>;
  let unchecked: RunningAuthService;
  let uncheckedClient: PromiseClient<AuthServiceClient>;

  beforeAll(async () => {
    rig = await startAuthRig(keyHashSecret, { internalAuth: { accepted: { service: [SERVICE], admin: [ADMIN] }, credential: SERVICE } });
    client = rig.auth;
    unchecked = await startAuthService({
      listenAddress: '127.0.0.1:0', databaseUrl: rig.database.url, bus: rig.testBus.bus, keyHashSecret, logger: testLogger('auth-unchecked'),
    });
    uncheckedClient = createClient(AuthServiceClient, AuthServiceService, unchecked.address, { maxAttempts: 1 });
  });

  afterAll(async () => {
    uncheckedClient?.close();
    await unchecked?.stop();
    await rig?.stop();
  });

  it('accepts the admin token', async () => {
    expect(await client.verifyAdmin({}, { credential: ADMIN })).toEqual({});
  });

  it('refuses the service token as PERMISSION_DENIED', async () => {
    const error = await rejection(client.verifyAdmin({}, { credential: SERVICE }));
    expect({ status: error.status, reason: error.reason }).toEqual({ status: GrpcStatus.PERMISSION_DENIED, reason: ErrorReason.ERROR_REASON_FORBIDDEN });
  });

  it('refuses no credential, an unknown one and an API key as UNAUTHENTICATED', async () => {
    const account = await client.createAccount({ name: 'acme', tier: 'tier-1', idempotencyKey: '' }, { credential: ADMIN });
    const key = await client.createApiKey({ accountId: account.account!.id, name: 'k', defaultRoutingStrategy: '' }, { credential: SERVICE });
    for (const credential of [undefined, 'a-token-nobody-issued-0000000000000000000', key.plaintext, account.provisioningKey]) {
      const error = await rejection(client.verifyAdmin({}, credential === undefined ? {} : { credential }));
      expect(error.status).toBe(GrpcStatus.UNAUTHENTICATED);
    }
  });

  it('answers FAILED_PRECONDITION without internal authentication, whatever the call carries', async () => {
    for (const credential of [undefined, ADMIN, SERVICE]) {
      const error = await rejection(uncheckedClient.verifyAdmin({}, credential === undefined ? {} : { credential }));
      expect({ status: error.status, reason: error.reason }).toEqual({ status: GrpcStatus.FAILED_PRECONDITION, reason: ErrorReason.ERROR_REASON_FORBIDDEN });
      expect(error.message).toContain('without internal authentication');
    }
  });
});
