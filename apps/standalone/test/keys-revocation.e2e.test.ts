import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningEdge } from '../src/index.js';
import { startAccountStack, type Account, type AccountStack } from './account-harness.js';
import { startSecondEdge } from './configured-stack.js';

// Two edge replicas sharing one NATS namespace. Each caches key verifications; a key disabled or
// deleted through one must be refused by the other within 5 seconds (the KeysChanged broadcast), not
// after the cache's TTL, which the second replica sets far beyond the test's duration.

const REVOCATION_BOUND_MS = 5_000;

describe('key revocation across edge replicas', () => {
  let harness: AccountStack;
  let second: RunningEdge;
  let owner: Account;

  beforeAll(async () => {
    harness = await startAccountStack();
    // Only the broadcast can make this replica forget a key within the test.
    second = await startSecondEdge(harness.stack, harness.testBus, { authCacheTtlMs: 10 * 60_000 });
    owner = await harness.newAccount('owner', '10');
  }, 120_000);

  afterAll(async () => {
    await second?.stop();
    await harness?.stop();
  });

  /** GET /v1/limits with the key verifies it through the replica's cache and costs nothing. */
  const limitsStatus = async (apiKey: string, baseUrl: string) => (await harness.call('GET', '/v1/limits', { bearer: apiKey }, baseUrl)).status;

  /** Polls the second replica until it refuses the key; returns how long that took after the change was answered. */
  async function refusedWithin(apiKey: string, changedAtMs: number): Promise<number> {
    for (;;) {
      const status = await limitsStatus(apiKey, second.url);
      const elapsedMs = Date.now() - changedAtMs;
      if (status === 401) return elapsedMs;
      expect(status).toBe(200);
      if (elapsedMs > REVOCATION_BOUND_MS) throw new Error(`the second edge still accepted the key ${elapsedMs} ms after the change`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  for (const change of ['disable', 'delete'] as const) {
    it(`a key ${change}d through one edge is refused by the other within 5 s`, async () => {
      const key = await harness.createKey(owner, { name: `replicated-${change}`, credit_limit: null });
      // A new key works at once on both replicas, and each now holds it in its cache.
      for (const baseUrl of [harness.stack.url, second.url]) {
        expect(await limitsStatus(key.key, baseUrl)).toBe(200);
        expect((await harness.chat(key.key, baseUrl)).status).toBe(200);
      }

      const answer =
        change === 'disable'
          ? await harness.call('PATCH', `/v1/account/keys/${key.id}`, { bearer: owner.provisioningKey, body: { disabled: true } })
          : await harness.call('DELETE', `/v1/account/keys/${key.id}`, { bearer: owner.provisioningKey });
      const changedAtMs = Date.now();
      expect(answer.status).toBe(200);
      // The edge that made the change refuses it at once.
      expect(await limitsStatus(key.key, harness.stack.url)).toBe(401);

      const elapsedMs = await refusedWithin(key.key, changedAtMs);
      console.log(`${change}: second edge refused the key ${elapsedMs} ms after the change was answered`);
      expect(elapsedMs).toBeLessThanOrEqual(REVOCATION_BOUND_MS);
      const chat = await harness.chat(key.key, second.url);
      expect(chat.status).toBe(401);
      expect(chat.body.error.type).toBe('invalid_api_key');

      if (change === 'disable') {
        // Re-enabling is seen too: the replica does not keep a refusal.
        expect((await harness.call('PATCH', `/v1/account/keys/${key.id}`, { bearer: owner.provisioningKey, body: { disabled: false } })).status).toBe(200);
        expect(await limitsStatus(key.key, second.url)).toBe(200);
      }
    });
  }

  it('a key changed by an operator (gatewayctl over gRPC, no edge involved) is refused by both edges within 5 s', async () => {
    const key = await harness.createKey(owner, { name: 'operator-disabled', credit_limit: null });
    for (const baseUrl of [harness.stack.url, second.url]) expect(await limitsStatus(key.key, baseUrl)).toBe(200);
    const disabled = await harness.ctl('keys', 'disable', owner.accountId, key.id, '--json');
    expect(disabled.code, disabled.stderr).toBe(0);
    const changedAtMs = Date.now();
    expect(await refusedWithin(key.key, changedAtMs)).toBeLessThanOrEqual(REVOCATION_BOUND_MS);
    for (;;) {
      const status = await limitsStatus(key.key, harness.stack.url);
      if (status === 401) break;
      expect(Date.now() - changedAtMs).toBeLessThanOrEqual(REVOCATION_BOUND_MS);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  });
});
