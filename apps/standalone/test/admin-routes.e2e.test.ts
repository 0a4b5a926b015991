import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { eventually } from '@gateway/testing';
import { exampleConfigPath, startAccountStack, type Account, type AccountStack } from './account-harness.js';

// The operator's HTTP routes (/v1/admin/*) on a whole stack with internal authentication, as deployed:
// the admin token reaches them through the edge, which holds none itself (docs/operations.md
// "Operator HTTP routes"). The credential matrix checks every credential kind against them; here, what
// a success answers and the refusals of bad requests.

/** Every (provider, model) offer of the example catalog, as `provider/model`. */
function exampleOffers(): string[] {
  const models = (parse(readFileSync(exampleConfigPath, 'utf8')) as { models: { id: string; offers: { provider: string }[] }[] }).models;
  return [...new Set(models.flatMap((model) => model.offers.map((offer) => `${offer.provider}/${model.id}`)))];
}

describe('operator HTTP routes (/v1/admin/)', () => {
  let harness: AccountStack;
  let admin: { bearer: string };
  let account: Account;

  beforeAll(async () => {
    harness = await startAccountStack({ internalAuth: true });
    admin = { bearer: harness.internalTokens!.admin };
    account = await harness.newAccount('admin-routes', '2');
  }, 120_000);

  afterAll(async () => {
    await harness?.stop();
  });

  const credits = (accountId: string, body: unknown) => harness.call('POST', `/v1/admin/accounts/${accountId}/credits`, { ...admin, body });
  const balanceOf = async (who: Account) => (await harness.call('GET', '/v1/account/balance', { bearer: who.provisioningKey })).body.balance as string;

  it('tops an account up by exactly the amount, a decimal string or a JSON number, each POST without a key a new top-up', async () => {
    const first = await credits(account.accountId, { amount: '1.25' });
    expect(first.status, first.text).toBe(200);
    expect(first.body).toEqual({ account_id: account.accountId, balance: '3.25' });
    const second = await credits(account.accountId, { amount: 0.000000000001 });
    expect(second.body).toEqual({ account_id: account.accountId, balance: '3.250000000001' });
    const third = await credits(account.accountId, { amount: '0.999999999999' });
    expect(third.body.balance).toBe('4.25');
    expect(await balanceOf(account)).toBe('4.25');
  });

  it('adds once per idempotency key; the same key with another amount or account is a 409', async () => {
    const target = await harness.newAccount('idempotent', '0');
    const other = await harness.newAccount('idempotent-other', '0');
    const key = `topup-${target.accountId}`;
    expect((await credits(target.accountId, { amount: '5', idempotency_key: key })).body.balance).toBe('5');
    const repeated = await credits(target.accountId, { amount: '5.000', idempotency_key: key });
    expect(repeated.status, repeated.text).toBe(200);
    expect(repeated.body.balance).toBe('5');
    for (const [accountId, amount] of [[target.accountId, '6'], [other.accountId, '5']] as const) {
      const conflict = await credits(accountId, { amount, idempotency_key: key });
      expect(conflict.status, conflict.text).toBe(409);
      expect(conflict.body.error.type).toBe('invalid_request_error');
    }
    expect(await balanceOf(target)).toBe('5');
    expect(await balanceOf(other)).toBe('0');
  });

  it('answers 404 for an unknown account and 400 for a bad amount or body, crediting nothing', async () => {
    for (const accountId of ['acc_nobody', 'x'.repeat(101)]) {
      const missing = await credits(accountId, { amount: '1' });
      expect(missing.status, missing.text).toBe(404);
      expect(missing.body.error.type).toBe('not_found_error');
    }
    const bad: unknown[] = [
      { amount: '0' }, { amount: '-1' }, { amount: -1 }, { amount: 'ten' }, { amount: '1.0000000000001' }, { amount: '1000000.000000000001' },
      {}, { amount: null }, { amount: '1', extra: true }, { amount: '1', idempotency_key: '' }, { amount: '1', idempotency_key: 'k'.repeat(201) },
      { amount: '1', idempotency_key: 5 }, [], 'not json',
    ];
    for (const body of bad) {
      const refused = await credits(account.accountId, body);
      expect(refused.status, `${JSON.stringify(body)}: ${refused.text}`).toBe(400);
      expect(refused.body.error.type).toBe('invalid_request_error');
    }
    expect(await balanceOf(account)).toBe('4.25');
  });

  it('lists accounts newest first with their balances, page by page with an opaque cursor', async () => {
    const made = [await harness.newAccount('page-a', '1'), await harness.newAccount('page-b', '2.5'), await harness.newAccount('page-c', '0')];
    const whole = await harness.call('GET', '/v1/admin/accounts', admin);
    expect(whole.status, whole.text).toBe(200);
    expect(whole.body.next_cursor).toBeNull();
    const rows = whole.body.data as Array<{ id: string; name: string; tier: string; created_at: number; balance: string; available: string }>;
    // Newest first: the three just made lead, in reverse order of creation.
    expect(rows.slice(0, 3).map((row) => row.id)).toEqual(made.map((entry) => entry.accountId).reverse());
    const b = rows.find((row) => row.id === made[1]!.accountId)!;
    expect(b).toEqual({ id: made[1]!.accountId, name: 'page-b', tier: expect.any(String), created_at: expect.any(Number), balance: '2.5', available: '2.5' });
    expect(Math.abs(b.created_at - Date.now() / 1000)).toBeLessThan(600);
    expect(rows.find((row) => row.id === account.accountId)).toMatchObject({ name: 'admin-routes', balance: '4.25', available: '4.25' });

    const paged: string[] = [];
    let cursor: string | null = '';
    let pages = 0;
    while (cursor !== null) {
      const page = await harness.call('GET', `/v1/admin/accounts?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, admin);
      expect(page.status, page.text).toBe(200);
      expect(page.body.data.length).toBeLessThanOrEqual(2);
      paged.push(...page.body.data.map((row: { id: string }) => row.id));
      cursor = page.body.next_cursor as string | null;
      pages++;
    }
    expect(paged).toEqual(rows.map((row) => row.id));
    expect(pages).toBe(Math.ceil(rows.length / 2));

    for (const query of ['limit=0', 'limit=101', 'limit=abc', 'limit=1&limit=2', 'cursor=not-a-cursor']) {
      const refused = await harness.call('GET', `/v1/admin/accounts?${query}`, admin);
      expect(refused.status, `${query}: ${refused.text}`).toBe(400);
      expect(refused.body.error.type).toBe('invalid_request_error');
    }
  });

  it('lists every offer of the catalog with its health, sorted, the chat model with samples after a chat', async () => {
    const apiKey = (await harness.createKey(account, { name: 'providers', credit_limit: null })).key;
    expect((await harness.chat(apiKey)).status).toBe(200);
    const answer = await harness.call('GET', '/v1/admin/providers', admin);
    expect(answer.status, answer.text).toBe(200);
    const rows = answer.body.data as Array<Record<string, unknown>>;
    const pairs = rows.map((row) => `${row.provider}/${row.model}`);
    expect(new Set(pairs)).toEqual(new Set(exampleOffers()));
    expect(pairs).toEqual([...pairs].sort());
    for (const row of rows) {
      expect(Object.keys(row).sort()).toEqual(['circuit', 'error_rate', 'model', 'output_tokens_per_second', 'provider', 'provider_name', 'samples', 'ttft_ms']);
      expect(row.provider_name).toBe(row.provider);
      expect(row.error_rate).toBeGreaterThanOrEqual(0);
      expect(row.error_rate).toBeLessThanOrEqual(1);
      expect(['open', 'closed']).toContain(row.circuit);
    }
    const chat = rows.find((row) => row.provider === 'simulated' && row.model === 'acme/chat-small')!;
    expect(chat.samples).toBeGreaterThan(0);
    expect(chat).toMatchObject({ error_rate: 0, circuit: 'closed' });
    expect(chat.ttft_ms).toBeGreaterThanOrEqual(0);
  });

  it("lists a chatted model's latency once its charge settled; days 1..30, default 7", async () => {
    const apiKey = (await harness.createKey(account, { name: 'latency', credit_limit: null })).key;
    expect((await harness.chat(apiKey)).status).toBe(200);
    await eventually(async () => {
      const answer = await harness.call('GET', '/v1/admin/models/latency', admin);
      expect(answer.status, answer.text).toBe(200);
      expect(answer.body.days).toBe(7);
      const row = (answer.body.data as Array<Record<string, unknown>>).find((entry) => entry.model === 'acme/chat-small');
      expect(row).toBeDefined();
      expect(Object.keys(row!).sort()).toEqual(['generation_time_p50_ms', 'latency_p50_ms', 'latency_p95_ms', 'model', 'provider', 'requests']);
      expect(row).toMatchObject({ provider: 'simulated' });
      expect(row!.requests).toBeGreaterThanOrEqual(1);
      expect(row!.latency_p95_ms as number).toBeGreaterThanOrEqual(row!.latency_p50_ms as number);
    }, 10_000);
    expect((await harness.call('GET', '/v1/admin/models/latency?days=1', admin)).body.days).toBe(1);
    for (const days of ['0', '31', 'seven', '-1', '1.5']) {
      const refused = await harness.call('GET', `/v1/admin/models/latency?days=${days}`, admin);
      expect(refused.status, `${days}: ${refused.text}`).toBe(400);
      expect(refused.body.error.type).toBe('invalid_request_error');
    }
  });
});

describe('operator HTTP routes on a stack without internal authentication', () => {
  let harness: AccountStack;

  beforeAll(async () => {
    harness = await startAccountStack();
  }, 120_000);

  afterAll(async () => {
    await harness?.stop();
  });

  it('refuses every admin route with 403: there is no admin token to check', async () => {
    const calls = [
      harness.call('GET', '/v1/admin/providers', { bearer: 'any-token-at-all-0123456789abcdef0123' }),
      harness.call('GET', '/v1/admin/models/latency', {}),
      harness.call('GET', '/v1/admin/accounts', { bearer: 'x' }),
      harness.call('POST', '/v1/admin/accounts/acc_x/credits', { bearer: 'x', body: { amount: '1' } }),
    ];
    for (const answer of await Promise.all(calls)) {
      expect(answer.status, answer.text).toBe(403);
      expect(answer.body.error).toMatchObject({ type: 'permission_error', code: 'internal_auth_disabled' });
      expect(answer.body.error.message).toContain('internal authentication');
    }
  });
});
