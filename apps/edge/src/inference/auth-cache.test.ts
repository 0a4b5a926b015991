import { describe, expect, it } from 'vitest';
import type { AuthServiceClient } from '@gateway/proto';
import { ErrorReason, GatewayError, GrpcStatus, type PromiseClient } from '@gateway/platform';
import { ApiKeyCache } from './auth-cache.js';

function fakeAuth(keys: Map<string, { accountId: string; keyId: string }>) {
  const calls: string[] = [];
  const client = {
    verifyApiKey: async ({ key }: { key: string }) => {
      calls.push(key);
      const found = keys.get(key);
      if (!found) throw new GatewayError(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY, 'Invalid API key.');
      return { ...found, tier: 'tier-1', defaultRoutingStrategy: '' };
    },
  } as unknown as PromiseClient<AuthServiceClient>;
  return { client, calls };
}

const keys = () =>
  new Map([
    ['sk-a', { accountId: 'acct_1', keyId: 'key_a' }],
    ['sk-b', { accountId: 'acct_1', keyId: 'key_b' }],
    ['sk-c', { accountId: 'acct_2', keyId: 'key_c' }],
  ]);

describe('ApiKeyCache', () => {
  it('answers from cache within the TTL and asks again after it', async () => {
    let now = 1_000;
    const { client, calls } = fakeAuth(keys());
    const cache = new ApiKeyCache(client, { ttlMs: 30_000, maxEntries: 10, now: () => now });
    expect((await cache.verify('sk-a', 'r1')).keyId).toBe('key_a');
    await cache.verify('sk-a', 'r2');
    expect(calls).toEqual(['sk-a']);
    now += 30_001;
    await cache.verify('sk-a', 'r3');
    expect(calls).toEqual(['sk-a', 'sk-a']);
  });

  it('refuses a malformed credential (the empty string credentials.ts gives it) without asking Auth', async () => {
    const { client, calls } = fakeAuth(keys());
    const cache = new ApiKeyCache(client, { ttlMs: 30_000, maxEntries: 10 });
    const refusal = await cache.verify('', 'r1').catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(GatewayError);
    expect((refusal as GatewayError).status).toBe(GrpcStatus.UNAUTHENTICATED);
    expect(calls).toEqual([]);
  });

  it('shares one Auth call between concurrent first requests', async () => {
    const { client, calls } = fakeAuth(keys());
    const cache = new ApiKeyCache(client, { ttlMs: 30_000, maxEntries: 10 });
    await Promise.all([cache.verify('sk-a', 'r1'), cache.verify('sk-a', 'r2'), cache.verify('sk-a', 'r3')]);
    expect(calls).toEqual(['sk-a']);
  });

  it('does not cache refusals', async () => {
    const { client, calls } = fakeAuth(keys());
    const cache = new ApiKeyCache(client, { ttlMs: 30_000, maxEntries: 10 });
    await expect(cache.verify('sk-nope', 'r1')).rejects.toBeInstanceOf(GatewayError);
    await expect(cache.verify('sk-nope', 'r2')).rejects.toBeInstanceOf(GatewayError);
    expect(calls).toEqual(['sk-nope', 'sk-nope']);
    expect(cache.size).toBe(0);
  });

  it('evicts the least recently used entry beyond its bound', async () => {
    const { client, calls } = fakeAuth(keys());
    const cache = new ApiKeyCache(client, { ttlMs: 30_000, maxEntries: 2 });
    await cache.verify('sk-a', 'r');
    await cache.verify('sk-b', 'r');
    await cache.verify('sk-a', 'r'); // a is now the most recent
    await cache.verify('sk-c', 'r'); // evicts b
    expect(cache.size).toBe(2);
    calls.length = 0;
    await cache.verify('sk-a', 'r');
    await cache.verify('sk-b', 'r');
    expect(calls).toEqual(['sk-b']);
  });

  it('drops the named key ids, or every key of the account when none is named', async () => {
    const { client, calls } = fakeAuth(keys());
    const cache = new ApiKeyCache(client, { ttlMs: 30_000, maxEntries: 10 });
    for (const key of ['sk-a', 'sk-b', 'sk-c']) await cache.verify(key, 'r');
    cache.invalidate('acct_1', ['key_a']);
    calls.length = 0;
    for (const key of ['sk-a', 'sk-b', 'sk-c']) await cache.verify(key, 'r');
    expect(calls).toEqual(['sk-a']);
    cache.invalidate('acct_1', []);
    calls.length = 0;
    for (const key of ['sk-a', 'sk-b', 'sk-c']) await cache.verify(key, 'r');
    expect(calls).toEqual(['sk-a', 'sk-b']);
  });

  it('does not store an answer fetched before an invalidation', async () => {
    const map = keys();
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const calls: string[] = [];
    const client = {
      verifyApiKey: async ({ key }: { key: string }) => {
        calls.push(key);
        if (calls.length === 1) await gate;
        return { ...map.get(key), tier: 'tier-1', defaultRoutingStrategy: '' };
      },
    } as unknown as PromiseClient<AuthServiceClient>;
    const cache = new ApiKeyCache(client, { ttlMs: 30_000, maxEntries: 10 });
    const first = cache.verify('sk-a', 'r1');
    cache.invalidate('acct_1', ['key_a']);
    release();
    await first;
    await cache.verify('sk-a', 'r2');
    expect(calls).toEqual(['sk-a', 'sk-a']);
  });

  it('refuses a cached key from its expires_at on (key_expired), without asking Auth, however fresh the entry', async () => {
    let now = 1_000;
    const calls: string[] = [];
    const client = {
      verifyApiKey: async ({ key }: { key: string }) => {
        calls.push(key);
        return { accountId: 'acct_1', keyId: 'key_x', tier: 'tier-1', defaultRoutingStrategy: '', limitReset: 'daily', expiresAtMs: 5_000n };
      },
    } as unknown as PromiseClient<AuthServiceClient>;
    const cache = new ApiKeyCache(client, { ttlMs: 30_000, maxEntries: 10, now: () => now });
    expect(await cache.verify('sk-x', 'r1')).toMatchObject({ keyId: 'key_x', limitReset: 'daily', expiresAtMs: 5_000 });
    now = 4_999;
    expect((await cache.verify('sk-x', 'r2')).keyId).toBe('key_x');
    now = 5_000;
    const refused = await cache.verify('sk-x', 'r3').then(() => undefined, (error: unknown) => error);
    expect(refused).toBeInstanceOf(GatewayError);
    expect({ status: (refused as GatewayError).status, reason: (refused as GatewayError).reason, code: (refused as GatewayError).code })
      .toEqual({ status: GrpcStatus.UNAUTHENTICATED, reason: ErrorReason.ERROR_REASON_INVALID_API_KEY, code: 'key_expired' });
    expect(calls).toEqual(['sk-x']);
    expect(cache.size).toBe(0);
  });
});
