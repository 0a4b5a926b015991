import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createClient, formatCredits, parseCredits } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { eventually, type FakeUpstream } from '@gateway/testing';
import { pricedTokens } from './chat-e2e-harness.js';
import { startConfiguredStack, type ConfiguredStack } from './configured-stack.js';

// Spec §7's 403 "account may not use the model" over the whole stack (real auth, catalog, ledger,
// routing, Postgres, NATS; accounts made by gatewayctl) with the real `openai` client: a model is for
// the tiers its limit group names (every tier when the group names none). A tier-1 account asking for a
// tier-4 model is refused before admission — nothing reserved, nothing charged, nothing sent upstream —
// a tier-4 account is served and charged, and GET /v1/models with a key lists only what the tier may use.

const INPUT_PRICE = '0.000001';
const OUTPUT_PRICE = '0.000002';
const EVERY_TIER = ['free', 'tier-1', 'tier-2', 'tier-3', 'tier-4'];

function config(upstream: FakeUpstream): string {
  const model = (id: string, group: string, created: number, aliases: string[] = []) => `
  - id: ${id}
    owned_by: testco
    created: ${created}
    aliases: [${aliases.join(', ')}]
    supported_parameters: [temperature, stream_options]
    pricing: { per_input_token: "${INPUT_PRICE}", per_output_token: "${OUTPUT_PRICE}" }
    limit_group: ${group}
    offers:
      - { provider: upstream, upstream_model: ${id.replace('/', '-')}, endpoints: [chat.completions] }`;
  return `
startups:
  - { id: testco, display_name: Test Co }
providers:
  - { id: upstream, kind: openai, base_url: ${upstream.url}, api_key_env: TIERS_KEY }
limit_groups:
  - id: premium
    tiers: { tier-4: { minute: 600 } }
  - id: default
    tiers: { free: { minute: 600 }, tier-1: { minute: 600 }, tier-4: { minute: 600 } }
  - id: open
    tiers: {}
models:${model('testco/premium', 'premium', 1_767_000_003, ['premium'])}${model('testco/standard', 'default', 1_767_000_002)}${model('testco/open', 'open', 1_767_000_001)}
`;
}

interface Account {
  accountId: string;
  apiKey: string;
  client: OpenAI;
}

describe('models a tier may not use, over the whole stack', () => {
  let fixture: ConfiguredStack | undefined;
  let tier1: Account;
  let tier4: Account;
  /** A tier-1 account that only ever asks for what its tier may not use. */
  let refused: Account;

  const account = async (name: string, tier: string): Promise<Account> => {
    const created = await fixture!.ctl('accounts', 'create', '--name', name, '--credits', '10', '--tier', tier, '--json');
    const apiKey = (await fixture!.ctl('keys', 'create', created.account_id!, '--name', `${name}-key`, '--json')).api_key!;
    return { accountId: created.account_id!, apiKey, client: new OpenAI({ baseURL: `${fixture!.stack.url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 }) };
  };
  const withLedger = async <T>(use: (ledger: ReturnType<typeof createClient<LedgerServiceClient>>) => Promise<T>): Promise<T> => {
    const ledger = createClient(LedgerServiceClient, LedgerServiceService, fixture!.stack.addresses.ledger);
    try {
      return await use(ledger);
    } finally {
      ledger.close();
    }
  };
  const activity = (accountId: string) =>
    withLedger(async (ledger) => (await ledger.getActivity({ accountId, days: 30, keyId: '' })).rows);
  const ids = (page: { data: Array<{ id: string }> }) => page.data.map((entry) => entry.id);

  beforeAll(async () => {
    fixture = await startConfiguredStack({
      name: 'tiers', config, keyHashSecret: 'model-tiers-secret-model-tiers-secret-1', providerSecrets: { TIERS_KEY: 'sk-tiers' },
    });
    tier1 = await account('tier-one', 'tier-1');
    tier4 = await account('tier-four', 'tier-4');
    refused = await account('refused', 'tier-1');
  }, 120_000);

  afterAll(async () => {
    await fixture?.stop();
  });

  it('a tier-1 account asking for a tier-4 model gets 403 in the spec envelope with x-request-id, plain and streamed', async () => {
    const upstreamCallsBefore = fixture!.upstream.requests.length;
    const attempts = [
      () => refused.client.chat.completions.create({ model: 'testco/premium', messages: [{ role: 'user', content: 'Hi' }] }),
      () => refused.client.chat.completions.create({ model: 'premium', messages: [{ role: 'user', content: 'Hi' }] }),
      () => refused.client.chat.completions.create({ model: 'testco/premium', messages: [{ role: 'user', content: 'Hi' }], stream: true }),
    ];
    for (const [index, attempt] of attempts.entries()) {
      const failure = await attempt().catch((error: unknown) => error);
      expect(failure, `attempt ${index}`).toBeInstanceOf(OpenAI.PermissionDeniedError);
      const denied = failure as InstanceType<typeof OpenAI.PermissionDeniedError>;
      expect(denied.status).toBe(403);
      expect(denied.error).toEqual({
        type: 'permission_error',
        message: "Your account's tier `tier-1` may not use model `testco/premium` (available to: tier-4).",
        code: 'model_not_available_for_tier',
        param: 'body.model',
      });
      expect(denied.headers?.get('x-request-id')).toMatch(/^req_/);
    }
    expect(fixture!.upstream.requests.length).toBe(upstreamCallsBefore);
  }, 60_000);

  it('a tier-4 account is served the same model and charged for it', async () => {
    const completion = await tier4.client.chat.completions.create({ model: 'premium', messages: [{ role: 'user', content: 'Hi' }] });
    expect(completion.model).toBe('testco/premium');
    const cost = pricedTokens(completion.usage!.prompt_tokens, completion.usage!.completion_tokens, INPUT_PRICE, OUTPUT_PRICE);
    expect(cost).toBeGreaterThan(0n);
    await eventually(async () => {
      const rows = (await activity(tier4.accountId)).filter((row) => row.modelId === 'testco/premium');
      expect(rows.map((row) => [row.requests, parseCredits(row.credits)])).toEqual([[1, cost]]);
    }, 15_000);
    await withLedger(async (ledger) => expect((await ledger.getBalance({ accountId: tier4.accountId })).balance).toBe(formatCredits(parseCredits('10') - cost)));
  }, 60_000);

  it('the refused account was charged nothing and holds no reservation', async () => {
    // After the tier-4 charge has settled: a usage event of the refused requests would have settled by now too.
    await withLedger(async (ledger) => {
      const balance = await ledger.getBalance({ accountId: refused.accountId });
      expect(balance).toMatchObject({ balance: '10', reserved: '0', available: '10' });
      expect((await ledger.verifyJournal({ accountId: refused.accountId })).mismatches).toEqual([]);
    });
    expect(await activity(refused.accountId)).toEqual([]);
  }, 30_000);

  it('a tier-1 account is served what its tier may use: a model of its group, and one whose group names no tier', async () => {
    for (const model of ['testco/standard', 'testco/open']) {
      const { data, response } = await tier1.client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }] }).withResponse();
      expect(data.model).toBe(model);
      expect(response.headers.get('x-request-id')).toBeTruthy();
    }
    const open = await tier4.client.chat.completions.create({ model: 'testco/open', messages: [{ role: 'user', content: 'Hi' }] });
    expect(open.model).toBe('testco/open');
  }, 60_000);

  it('GET /v1/models with a key lists only what the tier may use; without one, everything with its available_tiers', async () => {
    expect(ids(await tier1.client.models.list())).toEqual(['testco/standard', 'testco/open']);
    expect(ids(await refused.client.models.list())).toEqual(['testco/standard', 'testco/open']);
    expect(ids(await tier4.client.models.list())).toEqual(['testco/premium', 'testco/standard', 'testco/open']);
    const anonymous = await fetch(`${fixture!.stack.url}/v1/models`);
    const body = (await anonymous.json()) as { data: Array<{ id: string; available_tiers: string[] }> };
    expect(body.data.map((entry) => [entry.id, entry.available_tiers])).toEqual([
      ['testco/premium', ['tier-4']],
      ['testco/standard', ['free', 'tier-1', 'tier-4']],
      ['testco/open', EVERY_TIER],
    ]);
    // One model by name is answered whatever the tier: it exists, and says who may use it.
    const one = (await tier1.client.models.retrieve('premium')) as unknown as { id: string; available_tiers: string[] };
    expect(one).toMatchObject({ id: 'testco/premium', available_tiers: ['tier-4'] });
  }, 30_000);
});
