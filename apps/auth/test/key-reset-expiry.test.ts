import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorReason, GrpcStatus } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { rejection, startAuthRig, type AuthRig } from './auth-rig.js';

// limit_reset and expires_at on API keys (OpenRouter's key fields): stored, shown, validated, and an
// expired key refused by VerifyApiKey with code key_expired.

let rig: AuthRig | undefined;
let auth: AuthRig['auth'];
let db: AuthRig['db'];
let accountId: string;

beforeAll(async () => {
  rig = await startAuthRig('auth-reset-secret-0123456789abcdefghijklmnopqrstuvwxyz');
  ({ auth, db } = rig);
  accountId = (await auth.createAccount({ name: 'resets', tier: 'tier-1', idempotencyKey: '' })).account!.id;
});

afterAll(async () => {
  await rig?.stop();
});

describe('limit_reset', () => {
  it('is stored on create, shown by get, list and verify, changed and removed by update', async () => {
    const created = await auth.createApiKey({ accountId, name: 'daily', creditLimit: '2', defaultRoutingStrategy: '', limitReset: 'daily' });
    expect(created.key!.limitReset).toBe('daily');
    const keyId = created.key!.id;
    expect((await auth.getApiKey({ accountId, keyId })).key!.limitReset).toBe('daily');
    expect((await auth.verifyApiKey({ key: created.plaintext })).limitReset).toBe('daily');
    const listed = await auth.listApiKeys({ accountId, limit: 0, cursor: '', includeDisabled: false });
    expect(listed.keys.find((key) => key.id === keyId)!.limitReset).toBe('daily');

    const weekly = await auth.updateApiKey({ accountId, keyId, clearCreditLimit: false, limitReset: 'weekly' });
    expect(weekly.key!.limitReset).toBe('weekly');
    expect(weekly.key!.creditLimit).toBe('2');
    const cleared = await auth.updateApiKey({ accountId, keyId, clearCreditLimit: false, limitReset: '' });
    expect(cleared.key!.limitReset ?? '').toBe('');
    expect((await auth.verifyApiKey({ key: created.plaintext })).limitReset ?? '').toBe('');
  });

  it('refuses an unknown window on create and update', async () => {
    const onCreate = await rejection(auth.createApiKey({ accountId, name: 'x', defaultRoutingStrategy: '', limitReset: 'yearly' }));
    expect({ status: onCreate.status, reason: onCreate.reason, param: onCreate.param })
      .toEqual({ status: GrpcStatus.INVALID_ARGUMENT, reason: ErrorReason.ERROR_REASON_INVALID_REQUEST, param: 'limit_reset' });
    const key = (await auth.createApiKey({ accountId, name: 'y', defaultRoutingStrategy: '' })).key!;
    const onUpdate = await rejection(auth.updateApiKey({ accountId, keyId: key.id, clearCreditLimit: false, limitReset: 'Daily' }));
    expect(onUpdate.param).toBe('limit_reset');
  });
});

describe('expires_at', () => {
  it('refuses a past or present expiry and a combined set-and-clear', async () => {
    const past = await rejection(auth.createApiKey({ accountId, name: 'p', defaultRoutingStrategy: '', expiresAtMs: BigInt(Date.now() - 1_000) }));
    expect({ status: past.status, param: past.param, message: past.message })
      .toEqual({ status: GrpcStatus.INVALID_ARGUMENT, param: 'expires_at', message: 'expires_at must be in the future' });
    const key = (await auth.createApiKey({ accountId, name: 'q', defaultRoutingStrategy: '' })).key!;
    const both = await rejection(auth.updateApiKey({
      accountId, keyId: key.id, clearCreditLimit: false, expiresAtMs: BigInt(Date.now() + 60_000), clearExpiresAt: true,
    }));
    expect(both.param).toBe('expires_at');
  });

  it('verifies before it and answers its instant; refuses with key_expired from it on; clearing it revives the key', async () => {
    const at = Date.now() + 3_600_000;
    const created = await auth.createApiKey({ accountId, name: 'expiring', defaultRoutingStrategy: '', expiresAtMs: BigInt(at) });
    expect(created.key!.expiresAtMs).toBe(BigInt(at));
    const verified = await auth.verifyApiKey({ key: created.plaintext });
    expect(verified.expiresAtMs).toBe(BigInt(at));

    // Time passes (by the database's clock, the one Auth judges by): the key's instant is now behind it.
    await sql`update auth.api_keys set expires_at = now() - interval '1 millisecond' where id = ${created.key!.id}`.execute(db);
    const expired = await rejection(auth.verifyApiKey({ key: created.plaintext }));
    expect({ status: expired.status, reason: expired.reason, code: expired.code })
      .toEqual({ status: GrpcStatus.UNAUTHENTICATED, reason: ErrorReason.ERROR_REASON_INVALID_API_KEY, code: 'key_expired' });
    // Still listed and readable by its account (OpenRouter lists expired keys too).
    expect((await auth.getApiKey({ accountId, keyId: created.key!.id })).key!.expiresAtMs).toBeDefined();

    const revived = await auth.updateApiKey({ accountId, keyId: created.key!.id, clearCreditLimit: false, clearExpiresAt: true });
    expect(revived.key!.expiresAtMs).toBeUndefined();
    expect((await auth.verifyApiKey({ key: created.plaintext })).keyId).toBe(created.key!.id);
  });

  it('a disabled expired key is refused as invalid (not as expired): nothing about it is revealed', async () => {
    const created = await auth.createApiKey({ accountId, name: 'gone', defaultRoutingStrategy: '', expiresAtMs: BigInt(Date.now() + 60_000) });
    await sql`update auth.api_keys set expires_at = now() - interval '1 second', disabled = true where id = ${created.key!.id}`.execute(db);
    const refused = await rejection(auth.verifyApiKey({ key: created.plaintext }));
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_INVALID_API_KEY);
    expect(refused.code).toBe('');
  });
});
