import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from 'pg';
import { createClient, GatewayError, GrpcStatus, type PromiseClient } from '@gateway/platform';
import { AuthServiceClient, AuthServiceService, type CreateSessionRequest } from '@gateway/proto';
import { createTestBus, createTestDatabase, testLogger, type TestBus, type TestDatabase } from '@gateway/testing';
import { SESSION_TTL_MAX_SECONDS, SESSIONS_PER_SUBJECT_MAX, startAuthService, type RunningAuthService } from '../src/index.js';

const keyHashSecret = 'sessions-test-secret-0123456789abcdefghijklmn';
const SERVICE = 'service-token-of-the-sessions-test-0000000001';
const ADMIN = 'admin-token-of-the-sessions-test-000000000001';

async function refusal(promise: Promise<unknown>): Promise<GatewayError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(GatewayError);
    return error as GatewayError;
  }
  throw new Error('expected the call to be refused');
}

// Sign-in sessions in the auth service (a real gRPC server on a real Postgres, with internal
// authentication): hashed at rest, expiring, revocable, bounded per person, and only for roles of the
// table with the account they need.
describe('AuthService sessions', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let auth: RunningAuthService;
  let client: PromiseClient<AuthServiceClient>;
  let accountId: string;
  const call = { credential: SERVICE };
  const request = (overrides: Partial<CreateSessionRequest> = {}): CreateSessionRequest => ({
    accountId,
    role: 'viewer',
    issuer: 'https://idp.example',
    subject: 'person-1',
    displayName: 'person@example.com',
    ttlSeconds: 600,
    viaMembership: false,
    ...overrides,
  });
  const sql = async (text: string, values: unknown[] = []) => {
    const pg = new Client({ connectionString: database.url });
    await pg.connect();
    try {
      return (await pg.query(text, values)).rows;
    } finally {
      await pg.end();
    }
  };

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    auth = await startAuthService({
      listenAddress: '127.0.0.1:0',
      databaseUrl: database.url,
      bus: testBus.bus,
      keyHashSecret,
      logger: testLogger('auth-sessions'),
      internalAuth: { accepted: { service: [SERVICE], admin: [ADMIN] }, credential: SERVICE },
    });
    client = createClient(AuthServiceClient, AuthServiceService, auth.address, { maxAttempts: 1 });
    accountId = (await client.createAccount({ name: 'sessions', tier: 'tier-1', idempotencyKey: '' }, { credential: ADMIN })).account!.id;
  });

  afterAll(async () => {
    client?.close();
    await auth?.stop();
    await testBus?.destroy();
    await database?.drop();
  });

  it('creates a session whose token verifies to its account and role, stored only as its SHA-256', async () => {
    const created = await client.createSession(request({ role: 'billing' }), call);
    expect(created.sessionToken).toMatch(/^gw-sess-[A-Za-z0-9_-]{43}$/);
    const verified = await client.verifySession({ sessionToken: created.sessionToken }, call);
    expect(verified).toMatchObject({ sessionId: created.sessionId, accountId, role: 'billing', subject: 'person-1', displayName: 'person@example.com' });
    const rows = await sql('select token_hash from auth.sessions where id = $1', [created.sessionId]);
    expect(rows).toEqual([{ token_hash: createHash('sha256').update(created.sessionToken).digest('hex') }]);
  });

  it('refuses an expired, a revoked, an unknown and a malformed token as UNAUTHENTICATED', async () => {
    const expiring = await client.createSession(request(), call);
    await sql(`update auth.sessions set expires_at = now() - interval '1 second' where id = $1`, [expiring.sessionId]);
    const revoked = await client.createSession(request(), call);
    expect(await client.revokeSession({ sessionToken: revoked.sessionToken }, call)).toEqual({ revoked: true });
    expect(await client.revokeSession({ sessionToken: revoked.sessionToken }, call)).toEqual({ revoked: false });
    for (const sessionToken of [expiring.sessionToken, revoked.sessionToken, `gw-sess-${'A'.repeat(43)}`, 'gw-sess-short', '', 'x'.repeat(10_000)]) {
      const error = await refusal(client.verifySession({ sessionToken }, call));
      expect(error.status).toBe(GrpcStatus.UNAUTHENTICATED);
      expect(error.code).toBe('invalid_session');
    }
  });

  it('refuses a role outside the table, an account role without an account, an operator with one, and a bad lifetime or identity', async () => {
    const bad: Partial<CreateSessionRequest>[] = [
      { role: 'superuser' },
      { role: 'Owner' },
      { role: 'owner', accountId: '' },
      { role: 'operator' },
      { ttlSeconds: 59 },
      { ttlSeconds: SESSION_TTL_MAX_SECONDS + 1 },
      { subject: '' },
      { subject: 's'.repeat(256) },
      { issuer: '' },
      { subject: 'a\u0000b' },
    ];
    for (const overrides of bad) {
      const error = await refusal(client.createSession(request(overrides), call));
      expect(error.status, JSON.stringify(overrides)).toBe(GrpcStatus.INVALID_ARGUMENT);
    }
    const missing = await refusal(client.createSession(request({ accountId: 'acc_nobody' }), call));
    expect(missing.status).toBe(GrpcStatus.NOT_FOUND);
    const operator = await client.createSession(request({ role: 'operator', accountId: '' }), call);
    expect((await client.verifySession({ sessionToken: operator.sessionToken }, call))).toMatchObject({ role: 'operator', accountId: '' });
  });

  it('needs the service credential (no anonymous caller mints a session)', async () => {
    const error = await refusal(client.createSession(request(), {}));
    expect(error.status).toBe(GrpcStatus.UNAUTHENTICATED);
  });

  it('keeps at most SESSIONS_PER_SUBJECT_MAX live sessions per person, ending the oldest, also under concurrent sign-ins', async () => {
    const subject = 'busy-person';
    const first = await client.createSession(request({ subject }), call);
    await Promise.all(Array.from({ length: SESSIONS_PER_SUBJECT_MAX + 5 }, () => client.createSession(request({ subject }), call)));
    const live = await sql('select count(*)::int as live from auth.sessions where subject = $1 and revoked_at is null', [subject]);
    expect(live[0].live).toBe(SESSIONS_PER_SUBJECT_MAX);
    expect((await refusal(client.verifySession({ sessionToken: first.sessionToken }, call))).status).toBe(GrpcStatus.UNAUTHENTICATED);
  });
});
