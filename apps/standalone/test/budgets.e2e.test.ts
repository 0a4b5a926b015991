import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { parseCredits } from '@gateway/platform';
import { eventually, type FakeUpstream } from '@gateway/testing';
import { bearerJson, startConfiguredStack, statusOf, testCatalog, type ConfiguredStack } from './configured-stack.js';
import { pricedTokens } from './chat-e2e-harness.js';

// Budgets (issue 42 item 3, docs/governance.md) through the whole stack with the real `openai` client and
// two edges: the account's owner sets budgets over HTTP with the provisioning key; 50 concurrent requests
// crossing 80 % fire that threshold exactly once; a hard stop answers 402 budget_exceeded naming the
// budget, and what is charged never passes the limit.

const MODEL = 'testco/budgeted';
// A short answer costs a few hundredths of a credit: tens of requests cross a 1-credit budget.
const INPUT_PRICE = '0.0005';
const OUTPUT_PRICE = '0.001';

function config(upstream: FakeUpstream): string {
  return testCatalog(upstream, {
    apiKeyEnv: 'BUDGET_KEY',
    perMinute: 10_000,
    models: [{ id: MODEL, upstreamModel: 'budgeted', inputPrice: INPUT_PRICE, outputPrice: OUTPUT_PRICE, supportedParameters: ['temperature', 'max_completion_tokens'] }],
  });
}

describe('budgets, end to end', () => {
  let fixture: ConfiguredStack;
  let secondEdgeUrl: string;

  beforeAll(async () => {
    fixture = await startConfiguredStack({
      name: 'budgets', config, keyHashSecret: 'budgets-e2e-secret-budgets-e2e-secret-01', providerSecrets: { BUDGET_KEY: 'sk-budget' },
      ledger: { leaseDrainMs: 500 },
    });
    secondEdgeUrl = (await fixture.startSecondEdge({ name: 'edge-budgets-2' })).url;
  }, 120_000);

  afterAll(async () => {
    await fixture?.stop();
  });

  const account = async (credits: string) => {
    const { accountId, provisioningKey, keyId, apiKey } = await fixture.accountKey('budgeted', credits);
    const clientOf = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
    return { accountId, provisioningKey, keyId, clients: [clientOf(fixture.stack.url), clientOf(secondEdgeUrl)] };
  };
  const http = (method: string, path: string, bearer: string, body?: unknown) => bearerJson(`${fixture.stack.url}${path}`, method, bearer, body);
  const spentPico = async (accountId: string) => (await fixture.charged(accountId)).costPico;
  const ask = (client: OpenAI, index: number) => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `Budget question ${index}` }], max_completion_tokens: 16 });

  it('sets, reads and refuses budgets over HTTP, for the account and its own keys only', async () => {
    const owner = await account('5');
    const stranger = await account('5');
    const put = await http('PUT', '/v1/account/budgets/account', owner.provisioningKey, { period: 'monthly', limit: '2', thresholds: [80, 50], hard_stop: false });
    expect(put.status, put.text).toBe(200);
    expect(put.body).toMatchObject({ object: 'budget', scope: 'account', key_id: null, period: 'monthly', limit: '2', thresholds: [50, 80], hard_stop: false, spent: '0', fired_thresholds: [] });
    const keyBudget = await http('PUT', `/v1/account/budgets/keys/${owner.keyId}`, owner.provisioningKey, { period: 'daily', limit: 0.5, hard_stop: true });
    expect(keyBudget.status, keyBudget.text).toBe(200);
    expect(keyBudget.body).toMatchObject({ scope: 'key', key_id: owner.keyId, thresholds: [50, 80, 100], hard_stop: true });
    // Another account's key is not found; an API key is no provisioning key.
    expect((await http('PUT', `/v1/account/budgets/keys/${owner.keyId}`, stranger.provisioningKey, { period: 'daily', limit: 1 })).status).toBe(404);
    expect((await http('GET', '/v1/account/budgets', stranger.provisioningKey)).body.data).toEqual([]);
    expect((await http('GET', '/v1/account/budgets', owner.provisioningKey)).body.data).toHaveLength(2);
    for (const bad of [{}, { period: 'hourly', limit: 1 }, { period: 'daily', limit: 0 }, { period: 'daily', limit: '1', thresholds: [0] }, { period: 'daily', limit: 1, extra: 1 }, { period: 'daily', limit: 1, hard_stop: 'yes' }]) {
      const refused = await http('PUT', '/v1/account/budgets/account', owner.provisioningKey, bad);
      expect(refused.status, `${JSON.stringify(bad)}: ${refused.text}`).toBe(400);
      expect(refused.body.error.type).toBe('invalid_request_error');
    }
    expect((await http('DELETE', `/v1/account/budgets/keys/${owner.keyId}`, owner.provisioningKey)).status).toBe(200);
    expect((await http('DELETE', `/v1/account/budgets/keys/${owner.keyId}`, owner.provisioningKey)).status).toBe(404);
    // Each change is in the account's audit log.
    const audit = await http('GET', '/v1/account/audit', owner.provisioningKey);
    expect(audit.body.data.filter((entry: { action: string }) => entry.action.startsWith('budget.')).map((entry: { action: string }) => entry.action))
      .toEqual(['budget.delete', 'budget.create', 'budget.create']);
  });

  it('50 concurrent requests on two edges crossing 80 % fire it exactly once', async () => {
    const owner = await account('50');
    // One request's cost, to size the budget so that the 50 cross 80 % but not 100 %.
    expect(await statusOf(ask(owner.clients[0]!, -1))).toBe(200);
    await eventually(async () => expect(await spentPico(owner.accountId)).toBeGreaterThan(0n), 10_000);
    const onePico = await spentPico(owner.accountId);
    const limitPico = (onePico * 51n * 100n) / 90n; // 51 requests ≈ 90 % of it
    const limit = `${limitPico / 1_000_000_000_000n}.${(limitPico % 1_000_000_000_000n).toString().padStart(12, '0')}`;
    expect((await http('PUT', '/v1/account/budgets/account', owner.provisioningKey, { period: 'monthly', limit, thresholds: [50, 80, 100] })).status).toBe(200);
    const answers = await Promise.all(Array.from({ length: 50 }, (_, index) => ask(owner.clients[index % 2]!, index)));
    const chargedPico = answers.reduce((sum, answer) => sum + pricedTokens(answer.usage!.prompt_tokens, answer.usage!.completion_tokens, INPUT_PRICE, OUTPUT_PRICE), onePico);
    await eventually(async () => expect(await spentPico(owner.accountId)).toBe(chargedPico), 20_000);
    expect(chargedPico * 100n >= limitPico * 80n && chargedPico < limitPico).toBe(true);
    const listed = await http('GET', '/v1/account/budgets', owner.provisioningKey);
    expect(listed.body.data[0]).toMatchObject({ fired_thresholds: [50, 80] });
    expect(listed.body.alerts.map((alert: { threshold: number }) => alert.threshold)).toEqual([80, 50]);
    expect(listed.body.alerts.every((alert: { delivery_state: string }) => alert.delivery_state === 'pending')).toBe(true);
  });

  it('a hard stop answers 402 budget_exceeded naming the budget, and the charges never pass it', async () => {
    const owner = await account('50');
    const limit = '0.2';
    expect((await http('PUT', `/v1/account/budgets/keys/${owner.keyId}`, owner.provisioningKey, { period: 'daily', limit, thresholds: [100], hard_stop: true })).status).toBe(200);
    const statuses: Array<number | string> = [];
    // Rounds of concurrent requests on both edges until the budget refuses every one of a round.
    for (let round = 0; round < 20; round++) {
      const answers = await Promise.all(Array.from({ length: 8 }, (_, index) => statusOf(ask(owner.clients[index % 2]!, round * 8 + index))));
      statuses.push(...answers);
      expect(answers.every((status) => status === 200 || status === '402 budget_exceeded' || status === '402 insufficient_quota'), answers.join()).toBe(true);
      if (answers.every((status) => status !== 200)) break;
    }
    expect(statuses.filter((status) => status === 200).length).toBeGreaterThan(0);
    // Settled: the key's charges are at most the budget.
    await eventually(async () => {
      const budgets = await http('GET', '/v1/account/budgets', owner.provisioningKey);
      expect(parseCredits(budgets.body.data[0].spent)).toBe(await spentPico(owner.accountId));
    }, 20_000);
    expect(await spentPico(owner.accountId)).toBeLessThanOrEqual(parseCredits(limit));
    // Once settled and with nothing running, the refusal is the ledger's, naming the budget. (With
    // per-request admission a round can be refused only while earlier holds were still open; what room
    // settling left may admit a few more, one by one, never past the budget.)
    let refusal: unknown;
    for (let attempt = 0; attempt < 10 && refusal === undefined; attempt++) {
      try {
        await ask(owner.clients[1]!, 900 + attempt);
        await eventually(async () => {
          const budgets = await http('GET', '/v1/account/budgets', owner.provisioningKey);
          expect(parseCredits(budgets.body.data[0].spent)).toBe(await spentPico(owner.accountId));
        }, 20_000);
        expect(await spentPico(owner.accountId)).toBeLessThanOrEqual(parseCredits(limit));
      } catch (error) {
        refusal = error;
      }
    }
    expect(refusal).toBeInstanceOf(OpenAI.APIError);
    const apiError = refusal as InstanceType<typeof OpenAI.APIError>;
    expect(apiError.status).toBe(402);
    expect(apiError.code).toBe('budget_exceeded');
    expect(apiError.message).toMatch(new RegExp(`key ${owner.keyId}'s daily budget of 0.2 credits`));
    expect(await spentPico(owner.accountId)).toBeLessThanOrEqual(parseCredits(limit));
  });
});
