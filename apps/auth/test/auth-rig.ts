import { expect } from 'vitest';
import { createClient, GatewayError, type PromiseClient } from '@gateway/platform';
import { createDatabase, type Kysely } from '@gateway/platform/db';
import { AuthServiceClient, AuthServiceService } from '@gateway/proto';
import { createTestBus, createTestDatabase, testLogger } from '@gateway/testing';
import { startAuthService, type AuthDatabase, type AuthServiceOptions } from '../src/index.js';

// What the Auth service tests start from: a real service on a fresh database and test bus.

/**
 * The Auth service on a database and bus of its own, a client to it, and its schema for direct reads;
 * `internalAuth` makes it check internal credentials, and then its client carries none of its own (each
 * call says which it carries) and tries once.
 */
export async function startAuthRig(keyHashSecret: string, options: Pick<AuthServiceOptions, 'internalAuth' | 'events'> = {}) {
  const database = await createTestDatabase();
  const testBus = await createTestBus('nats');
  const service = await startAuthService({
    listenAddress: '127.0.0.1:0', databaseUrl: database.url, bus: testBus.bus, logger: testLogger('auth'), keyHashSecret, ...options,
  });
  const auth: PromiseClient<AuthServiceClient> = options.internalAuth
    ? createClient(AuthServiceClient, AuthServiceService, service.address, { maxAttempts: 1 })
    : createClient(AuthServiceClient, AuthServiceService, service.address);
  const db: Kysely<AuthDatabase> = createDatabase<AuthDatabase>({ url: database.url, schema: 'auth', maxConnections: 2 });
  const stop = async () => {
    auth.close();
    await service.stop();
    await db.destroy();
    await testBus.destroy();
    await database.drop();
  };
  return { database, testBus, service, auth, db, stop };
}

export type AuthRig = Awaited<ReturnType<typeof startAuthRig>>;

/** The GatewayError `promise` rejects with (the test fails when it resolves or rejects with anything else). */
export async function rejection(promise: Promise<unknown>): Promise<GatewayError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(GatewayError);
    return error as GatewayError;
  }
  throw new Error('expected the call to fail');
}
