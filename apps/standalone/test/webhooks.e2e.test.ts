import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { Webhook } from 'standardwebhooks';
import { formatCredits, parseCredits } from '@gateway/platform';
import { eventually, testLogger, type FakeUpstream } from '@gateway/testing';
import { startEdgeReplica, startLedgerReplica, type RunningEdge, type RunningLedgerService } from '../src/index.js';
import { testAdmission } from './admission-mode.js';
import { bearerJson, startConfiguredStack, statusOf, testCatalog, type ConfiguredStack } from './configured-stack.js';
import { startWebhookReceiver, type ReceivedWebhook } from './webhook-receiver.js';

// Webhooks (issue 42 item 4, docs/governance.md "Webhooks") through the whole stack: the account's owner
// registers an endpoint over HTTP; 50 concurrent requests (real `openai` client, two edges) crossing 80 %
// of a budget send exactly one signed webhook, with two ledger replicas dispatching; the stack's own
// ledger (no private receivers allowed, not dispatching) refuses a loopback or metadata receiver with a
// 400 in the envelope; another account's endpoint is a 404. A low-balance threshold: requests draining the
// account below it send exactly one signed balance.low; its route refuses bad values with a 400 and keeps
// to the caller's account.

const MODEL = 'testco/hooked';
const INPUT_PRICE = '0.0005';
const OUTPUT_PRICE = '0.001';

function config(upstream: FakeUpstream): string {
  return testCatalog(upstream, {
    apiKeyEnv: 'HOOK_KEY',
    perMinute: 10_000,
    models: [{ id: MODEL, upstreamModel: 'hooked', inputPrice: INPUT_PRICE, outputPrice: OUTPUT_PRICE, supportedParameters: ['max_completion_tokens'] }],
  });
}


describe('webhooks, end to end', () => {
  let fixture: ConfiguredStack;
  let permissiveEdgeUrl: string;
  let permissiveEdge: RunningEdge | undefined;
  const replicas: RunningLedgerService[] = [];
  let received: ReceivedWebhook[] = [];
  let receiverUrl = '';
  let closeReceiver = async () => undefined as void;

  beforeAll(async () => {
    // The stack's ledger keeps the defaults (https, public addresses only) and does not dispatch.
    fixture = await startConfiguredStack({
      name: 'webhooks', config, keyHashSecret: 'webhooks-e2e-secret-webhooks-e2e-secret-1', providerSecrets: { HOOK_KEY: 'sk-hook' },
      ledger: { leaseDrainMs: 500, webhooks: { enabled: false } },
    });
    // Two more ledger replicas on the same database that allow a loopback receiver and dispatch.
    for (const name of ['ledger-hooks-1', 'ledger-hooks-2']) {
      replicas.push(await startLedgerReplica({
        databaseUrl: fixture.database.url, bus: await fixture.testBus.connectAnother(), logger: testLogger(name), consumer: { enabled: false },
        webhooks: { allowPrivate: true, intervalMs: 50, baseBackoffMs: 100, maxBackoffMs: 400 },
      }));
    }
    permissiveEdge = await startEdgeReplica(fixture.stack.addresses, {
      port: 0, bus: await fixture.testBus.connectAnother(), logger: testLogger('edge-hooks-2'), admission: testAdmission, ledgerAddress: replicas[0]!.address,
    });
    permissiveEdgeUrl = permissiveEdge.url;
    const receiver = await startWebhookReceiver('/gateway-hooks');
    ({ received, url: receiverUrl, close: closeReceiver } = receiver);
  }, 120_000);

  afterAll(async () => {
    await closeReceiver();
    await permissiveEdge?.stop();
    // The extra ledgers before the stack (whose stop drops the database under their pools).
    for (const replica of replicas) await replica.stop();
    await fixture?.stop();
  });

  const account = async (credits: string) => {
    const { accountId, provisioningKey, apiKey } = await fixture.accountKey('hooked', credits);
    const clientOf = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
    return { accountId, provisioningKey, clients: [clientOf(fixture.stack.url), clientOf(permissiveEdgeUrl)] };
  };
  const http = (method: string, path: string, bearer: string, body?: unknown, base = fixture.stack.url) => bearerJson(`${base}${path}`, method, bearer, body);
  const spentPico = async (accountId: string) => (await fixture.charged(accountId)).costPico;

  /** The one webhook the receiver gets for the account (still one half a second later), its signature verified. */
  const onlyWebhookOf = async (accountId: string, secret: string) => {
    const mine = () => received.filter((entry) => (JSON.parse(entry.body) as { account_id: string }).account_id === accountId);
    await eventually(async () => expect(mine()).toHaveLength(1), 20_000);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(mine()).toHaveLength(1);
    const entry = mine()[0]!;
    return new Webhook(secret).verify(entry.body, {
      'webhook-id': String(entry.headers['webhook-id']), 'webhook-timestamp': String(entry.headers['webhook-timestamp']), 'webhook-signature': String(entry.headers['webhook-signature']),
    });
  };

  it('refuses private and non-https receivers with a 400 in the envelope, and validates the body', async () => {
    const owner = await account('1');
    for (const url of ['http://example.com/hook', 'https://127.0.0.1/hook', 'https://169.254.169.254/latest/meta-data', 'https://[::1]/', 'https://10.0.0.8/', 'https://localhost/']) {
      const refused = await http('POST', '/v1/account/webhooks', owner.provisioningKey, { url, event_types: ['budget.threshold_crossed'] });
      expect(refused.status, `${url}: ${refused.text}`).toBe(400);
      expect(refused.body.error).toMatchObject({ type: 'invalid_request_error', code: 'webhook_url_refused', param: 'url' });
    }
    for (const bad of [{}, { url: 'https://203.0.114.7/' }, { url: 'https://203.0.114.7/', event_types: [] }, { url: 'https://203.0.114.7/', event_types: ['nope'] },
      { url: 'https://203.0.114.7/', event_types: ['credits.topped_up'], secret: 'mine' }, { url: 7, event_types: ['credits.topped_up'] }]) {
      const refused = await http('POST', '/v1/account/webhooks', owner.provisioningKey, bad);
      expect(refused.status, `${JSON.stringify(bad)}: ${refused.text}`).toBe(400);
      expect(refused.body.error.type).toBe('invalid_request_error');
    }
    expect((await http('GET', '/v1/account/webhooks', owner.provisioningKey)).body.data).toEqual([]);
  });

  it('manages endpoints for the owner only: another account\'s is a 404, each change is audited', async () => {
    const owner = await account('1');
    const stranger = await account('1');
    const created = await http('POST', '/v1/account/webhooks', owner.provisioningKey, { url: 'https://203.0.114.7/hook', event_types: ['credits.topped_up'], enabled: false });
    expect(created.status, created.text).toBe(201);
    expect(created.body).toMatchObject({ object: 'webhook_endpoint', url: 'https://203.0.114.7/hook', event_types: ['credits.topped_up'], enabled: false });
    expect(created.body.secret).toMatch(/^whsec_/);
    const id = created.body.id as string;
    const got = await http('GET', `/v1/account/webhooks/${id}`, owner.provisioningKey);
    expect(got.status).toBe(200);
    expect(got.body.secret).toBeUndefined();
    for (const [method, path, body] of [
      ['GET', `/v1/account/webhooks/${id}`, undefined], ['PATCH', `/v1/account/webhooks/${id}`, { enabled: true }], ['DELETE', `/v1/account/webhooks/${id}`, undefined],
      ['GET', `/v1/account/webhooks/${id}/deliveries`, undefined], ['POST', `/v1/account/webhooks/${id}/deliveries/1/redeliver`, undefined],
      ['POST', `/v1/account/webhooks/${id}/rotate-secret`, undefined],
    ] as const) {
      const refused = await http(method, path, stranger.provisioningKey, body);
      expect(refused.status, `${method} ${path}: ${refused.text}`).toBe(404);
      expect(refused.body.error.type).toBe('not_found_error');
    }
    expect((await http('GET', '/v1/account/webhooks', stranger.provisioningKey)).body.data).toEqual([]);
    const patched = await http('PATCH', `/v1/account/webhooks/${id}`, owner.provisioningKey, { event_types: ['budget.threshold_crossed', 'credits.topped_up'] });
    expect(patched.body).toMatchObject({ enabled: false, event_types: ['budget.threshold_crossed', 'credits.topped_up'] });
    expect((await http('PATCH', `/v1/account/webhooks/${id}`, owner.provisioningKey, { url: 'https://192.168.0.1/' })).body.error.code).toBe('webhook_url_refused');
    expect((await http('GET', `/v1/account/webhooks/${id}/deliveries?limit=0`, owner.provisioningKey)).status).toBe(400);
    // A rotation answers the new secret once (deliveries signed with both: apps/ledger/test/webhook-rotation.test.ts).
    const rotated = await http('POST', `/v1/account/webhooks/${id}/rotate-secret`, owner.provisioningKey);
    expect(rotated.status, rotated.text).toBe(200);
    expect(rotated.body).toMatchObject({ object: 'webhook_endpoint', id, enabled: false });
    expect(rotated.body.secret).toMatch(/^whsec_/);
    expect(rotated.body.secret).not.toBe(created.body.secret);
    expect(rotated.body.previous_secret_expires_at).toBeGreaterThan(Date.now() / 1000 + 3_600);
    expect((await http('GET', `/v1/account/webhooks/${id}`, owner.provisioningKey)).body.secret).toBeUndefined();
    expect((await http('DELETE', `/v1/account/webhooks/${id}`, owner.provisioningKey)).status).toBe(200);
    expect((await http('GET', `/v1/account/webhooks/${id}`, owner.provisioningKey)).status).toBe(404);
    const audit = await http('GET', '/v1/account/audit', owner.provisioningKey);
    expect(audit.body.data.filter((entry: { action: string }) => entry.action.startsWith('webhook.')).map((entry: { action: string }) => entry.action))
      .toEqual(['webhook.delete', 'webhook.rotate_secret', 'webhook.update', 'webhook.create']);
    expect(audit.text).not.toContain(created.body.secret);
    expect(audit.text).not.toContain(rotated.body.secret);
  });

  it('50 concurrent requests on two edges crossing 80 % send exactly one signed webhook, from two dispatching ledgers', async () => {
    const owner = await account('50');
    expect(await statusOf(owner.clients[0]!.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'first' }], max_completion_tokens: 16 }))).toBe(200);
    await eventually(async () => expect(await spentPico(owner.accountId)).toBeGreaterThan(0n), 10_000);
    const onePico = await spentPico(owner.accountId);
    const limitPico = (onePico * 51n * 100n) / 90n;
    const limit = `${limitPico / 1_000_000_000_000n}.${(limitPico % 1_000_000_000_000n).toString().padStart(12, '0')}`;
    // Registered through the edge whose ledger allows a loopback receiver.
    const created = await http('POST', '/v1/account/webhooks', owner.provisioningKey, { url: receiverUrl, event_types: ['budget.threshold_crossed'] }, permissiveEdgeUrl);
    expect(created.status, created.text).toBe(201);
    expect((await http('PUT', '/v1/account/budgets/account', owner.provisioningKey, { period: 'monthly', limit, thresholds: [80] })).status).toBe(200);
    const answers = await Promise.all(Array.from({ length: 50 }, (_, index) =>
      owner.clients[index % 2]!.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `hook ${index}` }], max_completion_tokens: 16 })));
    expect(answers).toHaveLength(50);
    const event = await onlyWebhookOf(owner.accountId, created.body.secret as string) as { type: string; data: { threshold: number; scope: string } };
    expect(event).toMatchObject({ type: 'budget.threshold_crossed', data: { threshold: 80, scope: 'account' } });
    const deliveries = await http('GET', `/v1/account/webhooks/${created.body.id}/deliveries`, owner.provisioningKey);
    expect(deliveries.body.data).toMatchObject([{ object: 'webhook_delivery', event_type: 'budget.threshold_crossed', state: 'delivered', dead_lettered: false, attempts: 1, last_status: 204 }]);
    await eventually(async () => {
      const budgets = await http('GET', '/v1/account/budgets', owner.provisioningKey);
      expect(budgets.body.alerts.map((alert: { delivery_state: string }) => alert.delivery_state)).toEqual(['delivered']);
    }, 5_000);
  });

  it('low-balance threshold: set, read and cleared for the caller\'s account only; bad values a 400 in the envelope; audited', async () => {
    const owner = await account('3');
    const stranger = await account('3');
    expect((await http('GET', '/v1/account/budgets/low-balance', owner.provisioningKey)).body).toEqual({ object: 'low_balance_threshold', threshold: null, balance: '3', below: false });
    for (const bad of [{ threshold: '-1' }, { threshold: -1 }, { threshold: 'ten' }, { threshold: '1.0000000000001' }, { threshold: '1000000.5' },
      { threshold: '123456789012345678901234567890' }, {}, { threshold: null }, { threshold: '1', account_id: stranger.accountId }]) {
      const refused = await http('PUT', '/v1/account/budgets/low-balance', owner.provisioningKey, bad);
      expect(refused.status, `${JSON.stringify(bad)}: ${refused.text}`).toBe(400);
      expect(refused.body.error.type).toBe('invalid_request_error');
    }
    const set = await http('PUT', '/v1/account/budgets/low-balance', owner.provisioningKey, { threshold: 2.5 });
    expect(set.status, set.text).toBe(200);
    expect(set.body).toEqual({ object: 'low_balance_threshold', threshold: '2.5', balance: '3', below: false });
    // The stranger's credential reaches only the stranger's account: its own threshold, never the owner's.
    expect((await http('GET', '/v1/account/budgets/low-balance', stranger.provisioningKey)).body.threshold).toBeNull();
    expect((await http('PUT', '/v1/account/budgets/low-balance', stranger.provisioningKey, { threshold: '0.5' })).body.threshold).toBe('0.5');
    expect((await http('GET', '/v1/account/budgets/low-balance', owner.provisioningKey)).body.threshold).toBe('2.5');
    expect((await http('DELETE', '/v1/account/budgets/low-balance', stranger.provisioningKey)).body.threshold).toBeNull();
    expect((await http('GET', '/v1/account/budgets/low-balance', owner.provisioningKey)).body.threshold).toBe('2.5');
    expect((await http('DELETE', '/v1/account/budgets/low-balance', owner.provisioningKey)).body).toMatchObject({ threshold: null });
    const audit = await http('GET', '/v1/account/audit', owner.provisioningKey);
    expect(audit.body.data.filter((entry: { action: string }) => entry.action.startsWith('low_balance.')).map((entry: { action: string }) => entry.action))
      .toEqual(['low_balance.clear', 'low_balance.set']);
   }, 90_000);

  it('50 concurrent requests on two edges draining the account below its threshold send exactly one signed balance.low', async () => {
    const owner = await account('5');
    expect(await statusOf(owner.clients[0]!.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'first' }], max_completion_tokens: 16 }))).toBe(200);
    await eventually(async () => expect(await spentPico(owner.accountId)).toBeGreaterThan(0n), 10_000);
    const onePico = await spentPico(owner.accountId);
    const balancePico = parseCredits((await http('GET', '/v1/account/balance', owner.provisioningKey)).body.balance as string);
    // Halfway down the 50 requests' spend: crossed once, with room to spare on both sides.
    const threshold = formatCredits(balancePico - (onePico * 51n) / 2n);
    const created = await http('POST', '/v1/account/webhooks', owner.provisioningKey, { url: receiverUrl, event_types: ['balance.low'] }, permissiveEdgeUrl);
    expect(created.status, created.text).toBe(201);
    expect((await http('PUT', '/v1/account/budgets/low-balance', owner.provisioningKey, { threshold })).status).toBe(200);
    const answers = await Promise.all(Array.from({ length: 50 }, (_, index) =>
      owner.clients[index % 2]!.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `low ${index}` }], max_completion_tokens: 16 })));
    expect(answers).toHaveLength(50);
    const event = await onlyWebhookOf(owner.accountId, created.body.secret as string) as { type: string; account_id: string; data: { account_id: string; threshold: string; balance: string } };
    expect(event).toMatchObject({ type: 'balance.low', account_id: owner.accountId, data: { account_id: owner.accountId, threshold } });
    // The balance the crossing settlement left (a batch may hold several of the account's charges).
    expect(parseCredits(event.data.balance)).toBeLessThan(parseCredits(threshold));
    expect((await http('GET', '/v1/account/budgets/low-balance', owner.provisioningKey)).body).toMatchObject({ threshold, below: true });
  });
});
