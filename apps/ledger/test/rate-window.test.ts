import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, GatewayError, GrpcStatus, type PromiseClient } from '@gateway/platform';
import { ErrorReason, LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { uniqueName } from '@gateway/testing';
import { createLedgerHarness, type LedgerHarness, rejection } from './harness.js';

let harness: LedgerHarness;
let client: PromiseClient<LedgerServiceClient>;

beforeAll(async () => {
  harness = await createLedgerHarness();
  const { address } = await harness.start({ consumer: { enabled: false } });
  // One attempt: the platform client would otherwise retry RESOURCE_EXHAUSTED on this idempotent RPC.
  client = createClient(LedgerServiceClient, LedgerServiceService, address, { maxAttempts: 1 });
});
afterAll(async () => { client?.close(); await harness?.close(); });

/** Keeps a minute-window test from straddling a minute boundary (not an assertion; the DB clock decides). */
async function awayFromMinuteEdge(): Promise<void> {
  const intoMinuteMs = Date.now() % 60_000;
  if (intoMinuteMs > 55_000) await new Promise((resolve) => setTimeout(resolve, 60_000 - intoMinuteMs + 100));
}

const admitFree = (accountId: string, requestId: string, limits: { requestsPerMinute?: number; requestsPerDay?: number }, limitGroup = 'default') =>
  client.admit({ context: { requestId, accountId, keyId: 'k' }, modelId: 'm', paid: false, tier: 'free', limitGroup, ...limits });

describe('rate windows', () => {
  it('admits up to the per-minute limit, then answers RATE_LIMITED with the seconds left in the window', async () => {
    await awayFromMinuteEdge();
    const accountId = uniqueName('acc');
    for (let index = 0; index < 3; index++) await admitFree(accountId, `${accountId}-${index}`, { requestsPerMinute: 3 });
    // A repeat of an admitted request id is answered from its record and does not count again.
    await admitFree(accountId, `${accountId}-0`, { requestsPerMinute: 3 });
    const before = Date.now();
    const refused = await rejection(admitFree(accountId, `${accountId}-3`, { requestsPerMinute: 3 }));
    const after = Date.now();
    expect(refused.status).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_RATE_LIMITED);
    const windowEnd = Math.floor(before / 60_000) * 60_000 + 60_000;
    expect(refused.retryAfterSeconds).toBeGreaterThanOrEqual(Math.ceil((windowEnd - after) / 1000));
    expect(refused.retryAfterSeconds).toBeLessThanOrEqual(Math.ceil((windowEnd - before) / 1000));
    expect(refused.message).toBe(`Rate limit reached. Please try again in ${refused.retryAfterSeconds}s.`);
    // Another limit group has its own window.
    await admitFree(accountId, `${accountId}-other`, { requestsPerMinute: 3 }, 'other-group');
  });

  it('applies the per-day window and does not count a day-refused request in the minute window', async () => {
    await awayFromMinuteEdge();
    const accountId = uniqueName('acc');
    await admitFree(accountId, `${accountId}-a`, { requestsPerMinute: 10, requestsPerDay: 2 });
    await client.topUp({ accountId, credits: '1', idempotencyKey: uniqueName('topup'), note: '' });
    await client.admit({ context: { requestId: `${accountId}-b`, accountId, keyId: 'k' }, modelId: 'm', paid: true, tier: 'free', limitGroup: 'default', requestsPerMinute: 10, requestsPerDay: 2 });
    const before = Date.now();
    const refused = await rejection(admitFree(accountId, `${accountId}-c`, { requestsPerMinute: 10, requestsPerDay: 2 }));
    const after = Date.now();
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_RATE_LIMITED);
    const dayEnd = Math.floor(before / 86_400_000) * 86_400_000 + 86_400_000;
    expect(refused.retryAfterSeconds).toBeGreaterThanOrEqual(Math.ceil((dayEnd - after) / 1000));
    expect(refused.retryAfterSeconds).toBeLessThanOrEqual(Math.ceil((dayEnd - before) / 1000));
    const windows = await harness.db.selectFrom('rate_windows').select(['window_kind', 'request_count'])
      .where('account_id', '=', accountId).orderBy('window_kind').execute();
    expect(windows).toEqual([{ window_kind: 'day', request_count: 2 }, { window_kind: 'minute', request_count: 2 }]);
    expect(await client.getBalance({ accountId })).toEqual({ balance: '1', available: '0.95', reserved: '0.05' });
  });

  it('accepts limits above 2^31 - 1 (the catalog allows up to 4,294,967,295) and counts against them', async () => {
    const accountId = uniqueName('acc');
    const limits = { requestsPerMinute: 4_000_000_000, requestsPerDay: 4_000_000_000 };
    expect(await admitFree(accountId, `${accountId}-free`, limits)).toEqual({ reservedCredits: '0', reservationExpiresAtMs: 0n });
    await client.topUp({ accountId, credits: '1', idempotencyKey: uniqueName('topup'), note: '' });
    const paid = await client.admit({ context: { requestId: `${accountId}-paid`, accountId, keyId: 'k' }, modelId: 'm', paid: true, tier: 'top', limitGroup: 'default', ...limits, keyCreditLimit: '1000' });
    expect(paid.reservedCredits).toBe('0.05');
    const windows = await harness.db.selectFrom('rate_windows').select(['window_kind', 'request_count'])
      .where('account_id', '=', accountId).orderBy('window_kind').execute();
    expect(windows).toEqual([{ window_kind: 'day', request_count: 2 }, { window_kind: 'minute', request_count: 2 }]);
  });

  it('a limit of 0 refuses every request', async () => {
    const refused = await rejection(admitFree(uniqueName('acc'), uniqueName('req'), { requestsPerMinute: 0 }));
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_RATE_LIMITED);
  });

  it('counts concurrent requests exactly: 50 calls against a limit of 20 admit 20', async () => {
    await awayFromMinuteEdge();
    const accountId = uniqueName('acc');
    const results = await Promise.allSettled(Array.from({ length: 50 }, (_, index) => admitFree(accountId, `${accountId}-${index}`, { requestsPerMinute: 20 })));
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(20);
  });
});
