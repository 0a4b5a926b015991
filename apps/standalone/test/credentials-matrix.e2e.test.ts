import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKey, parseCredits } from '@gateway/platform';
import { eventually } from '@gateway/testing';
import { chatBody, exampleTokenCostPico, startAccountStack, type Account, type AccountStack, type CallOptions, type HttpAnswer } from './account-harness.js';

// Spec §5 as a table: every kind of credential against every route group the edge serves, each cell
// checked for its exact status and error `type` (and, where it succeeds, that it acted for the right
// account). The "bad body" / "bad query" routes check the order of checks: the credential is judged
// before the request, so a wrong credential with a bad body is a 401, never a 400. The stack runs with
// internal authentication, as deployed, so the operator's admin token and the services' internal token
// are two more kinds: only the /v1/admin/ routes take the admin token (which the edge itself never
// holds), and the service token opens no HTTP route (a 403 on /v1/admin/, a bad key elsewhere).

type CredentialKind =
  | 'none'
  | 'malformed bearer'
  | 'non-bearer scheme'
  | 'unknown api key'
  | 'unknown provisioning key'
  | 'disabled api key'
  | 'deleted api key'
  | 'api key (bearer)'
  | 'api key (x-api-key)'
  | 'provisioning key'
  | 'provisioning key (x-api-key)'
  | "other account's api key"
  | "other account's provisioning key"
  | 'admin token'
  | 'service token';

type Expected = { status: number; type?: string };

interface Fixture {
  owner: Account;
  other: Account;
  /** A live API key of the owner. */
  ownerKeyId: string;
  credentials: Record<CredentialKind, CallOptions>;
  /** What each account's paid inferences of the matrix cost (pico credits), from the usage each answer reported. */
  spentPico: Map<string, bigint>;
}

interface RouteGroup {
  name: string;
  /** Makes the call; `fresh` is an API key id of the owner made for this cell ({key_id} routes). */
  call(harness: AccountStack, credential: CallOptions, fresh: string): Promise<HttpAnswer>;
  expected(kind: CredentialKind): Expected;
  /** Extra checks of a success: it acted for the account the credential belongs to. */
  check?(answer: HttpAnswer, kind: CredentialKind, fixture: Fixture, fresh: string): void | Promise<void>;
  needsFreshKey?: boolean;
}

const ok = (status = 200): Expected => ({ status });
const invalidApiKey: Expected = { status: 401, type: 'invalid_api_key' };
// Spec §4.14: an invalid provisioning key draws type invalid_request_error.
const invalidProvisioningKey: Expected = { status: 401, type: 'invalid_request_error' };
const badRequest: Expected = { status: 400, type: 'invalid_request_error' };
const notFound: Expected = { status: 404, type: 'not_found_error' };
// The admin routes' refusals: any credential that is not an internal token is a 401, the service token a 403.
const invalidAdminToken: Expected = { status: 401, type: 'authentication_error' };
const notAdmin: Expected = { status: 403, type: 'permission_error' };
/** Admin routes: only the operator's admin token. */
const adminOnly = (success: Expected) => (kind: CredentialKind) =>
  kind === 'admin token' ? success : kind === 'service token' ? notAdmin : invalidAdminToken;
/** The account the admin top-up cells credit (made in beforeAll with 1 credit): only the admin token's cell adds to it. */
const topUpTarget = { accountId: '' };

const VALID_API_KEYS: ReadonlySet<CredentialKind> = new Set(['api key (bearer)', 'api key (x-api-key)', "other account's api key"]);
const OWN_PROVISIONING = 'provisioning key';
const OTHER_PROVISIONING = "other account's provisioning key";

/** Inference: only a live API key passes; everything else, a provisioning key included, is invalid_api_key. */
const inference = (success: Expected) => (kind: CredentialKind) => (VALID_API_KEYS.has(kind) ? success : invalidApiKey);
/** Optional key (models, limits): none passes; a presented key must be a live API key. */
const optionalApiKey = (kind: CredentialKind) => (kind === 'none' || VALID_API_KEYS.has(kind) ? ok() : invalidApiKey);
/** Account routes: only a provisioning key sent as Bearer. */
const account = (own: Expected, other: Expected = own) => (kind: CredentialKind) =>
  kind === OWN_PROVISIONING ? own : kind === OTHER_PROVISIONING ? other : invalidProvisioningKey;

/** Adds a paid answer's cost (its reported usage at chat-small's catalog prices) to the account of the key that made it. */
function addSpend(fixture: Fixture, kind: CredentialKind, cost: bigint): void {
  const accountId = kind === "other account's api key" ? fixture.other.accountId : fixture.owner.accountId;
  expect(cost).toBeGreaterThan(0n);
  fixture.spentPico.set(accountId, (fixture.spentPico.get(accountId) ?? 0n) + cost);
}

/** The messages dialect: the same cells, its envelope typing the refusal by status (spec §7). */
const messagesInference = (success: Expected) => (kind: CredentialKind) =>
  VALID_API_KEYS.has(kind) ? success : { status: 401, type: 'authentication_error' };
const messagesBody = { model: 'chat-small', max_tokens: 16, messages: [{ role: 'user', content: 'Say hello.' }] };

const routes: RouteGroup[] = [
  {
    name: 'POST /v1/chat/completions',
    call: (harness, credential) => harness.call('POST', '/v1/chat/completions', { ...credential, body: chatBody }),
    expected: inference(ok()),
    check: (answer, kind, fixture) => {
      expect(answer.body.object).toBe('chat.completion');
      const usage = answer.body.usage;
      addSpend(fixture, kind, exampleTokenCostPico('chat-small', { input: usage.prompt_tokens, cached: usage.prompt_tokens_details?.cached_tokens ?? 0, output: usage.completion_tokens }));
    },
  },
  {
    name: 'POST /v1/chat/completions (bad body)',
    call: (harness, credential) => harness.call('POST', '/v1/chat/completions', { ...credential, body: { model: 5, messages: 'no' } }),
    expected: inference(badRequest),
  },
  {
    name: 'POST /v1/messages',
    call: (harness, credential) => harness.call('POST', '/v1/messages', { ...credential, body: messagesBody }),
    expected: messagesInference(ok()),
    check: (answer, kind, fixture) => {
      expect(answer.body.type).toBe('message');
      // Messages usage: input_tokens excludes the cache reads, reported apart.
      const usage = answer.body.usage;
      const cached = (usage.cache_read_input_tokens ?? 0) as number;
      addSpend(fixture, kind, exampleTokenCostPico('chat-small', { input: usage.input_tokens + cached + (usage.cache_creation_input_tokens ?? 0), cached, output: usage.output_tokens }));
    },
  },
  {
    name: 'POST /v1/messages (bad body)',
    call: (harness, credential) => harness.call('POST', '/v1/messages', { ...credential, body: { model: 'chat-small', messages: [] } }),
    expected: messagesInference(badRequest),
  },
  {
    name: 'POST /v1/messages/count_tokens',
    call: (harness, credential) => harness.call('POST', '/v1/messages/count_tokens', { ...credential, body: { model: 'chat-small', messages: messagesBody.messages } }),
    expected: messagesInference(ok()),
    check: (answer) => expect(answer.body.input_tokens).toBeGreaterThan(0),
  },
  {
    // Like count_tokens: the inference credentials, nothing charged (no spend added).
    name: 'POST /v1/responses/input_tokens',
    call: (harness, credential) => harness.call('POST', '/v1/responses/input_tokens', { ...credential, body: { model: 'chat-small', input: 'Count me.' } }),
    expected: inference(ok()),
    check: (answer) => expect(answer.body).toMatchObject({ object: 'response.input_tokens', input_tokens: expect.any(Number) }),
  },
  // Stored responses (responses-stored.e2e.test.ts has the owner's and the other account's reads): an id no
  // account has is OpenAI's 404 for every live API key, invalid_api_key for every other credential.
  ...(['GET /v1/responses/{id}', 'DELETE /v1/responses/{id}', 'GET /v1/responses/{id}/input_items'] as const).map((name): RouteGroup => ({
    name,
    call: (harness, credential) => {
      const [method, path] = name.split(' ') as ['GET' | 'DELETE', string];
      return harness.call(method, path.replace('{id}', `resp_${'0'.repeat(32)}`), credential);
    },
    expected: inference({ status: 404, type: 'invalid_request_error' }),
  })),
  // Conversations (responses-conversations.e2e.test.ts has the owner's and the other account's calls): a
  // conversation no account has is OpenAI's 404 for every live API key, invalid_api_key for every other credential.
  ...(['GET /v1/conversations/{id}', 'DELETE /v1/conversations/{id}', 'GET /v1/conversations/{id}/items', 'GET /v1/conversations/{id}/items/{item}'] as const).map((name): RouteGroup => ({
    name,
    call: (harness, credential) => {
      const [method, path] = name.split(' ') as ['GET' | 'DELETE', string];
      return harness.call(method, path.replace('{id}', `conv_${'0'.repeat(48)}`).replace('{item}', 'msg_0'), credential);
    },
    expected: inference({ status: 404, type: 'invalid_request_error' }),
  })),
  {
    name: 'GET /v1/models',
    call: (harness, credential) => harness.call('GET', '/v1/models', credential),
    expected: optionalApiKey,
    check: (answer) => expect(answer.body.object).toBe('list'),
  },
  {
    name: 'GET /v1/limits',
    call: (harness, credential) => harness.call('GET', '/v1/limits', credential),
    expected: optionalApiKey,
    check: (answer) => expect(answer.body.object).toBe('list'),
  },
  {
    name: 'GET /v1/startups',
    call: (harness, credential) => harness.call('GET', '/v1/startups', credential),
    // Public: a presented key, valid or not, changes nothing.
    expected: () => ok(),
    check: (answer) => expect(answer.body.data.map((startup: { id: string }) => startup.id)).toContain('acme'),
  },
  {
    name: 'GET /v1/account/balance',
    call: (harness, credential) => harness.call('GET', '/v1/account/balance', credential),
    expected: account(ok()),
    // The owner started with 10 credits, the other account with 7; the matrix's chats spend far less than 1.
    check: (answer, kind) => {
      const balance = parseCredits(answer.body.balance);
      const start = parseCredits(kind === OWN_PROVISIONING ? '10' : '7');
      expect(balance).toBeLessThanOrEqual(start);
      expect(balance).toBeGreaterThan(start - parseCredits('1'));
    },
  },
  {
    name: 'POST /v1/account/keys',
    call: (harness, credential) => harness.call('POST', '/v1/account/keys', { ...credential, body: { name: 'matrix', credit_limit: 1 } }),
    expected: account(ok(201)),
    check: (answer) => expect(answer.body.key).toMatch(/^gw-api-/),
  },
  {
    name: 'POST /v1/account/keys (bad body)',
    call: (harness, credential) => harness.call('POST', '/v1/account/keys', { ...credential, body: { name: 'matrix', credit_limit: -1 } }),
    expected: account(badRequest),
  },
  {
    name: 'GET /v1/account/keys',
    call: (harness, credential) => harness.call('GET', '/v1/account/keys?include_disabled=true', credential),
    expected: account(ok()),
    check: (answer, kind, fixture) => {
      const ids = answer.body.data.map((key: { id: string }) => key.id);
      const ownerKeyId = fixture.ownerKeyId;
      if (kind === OWN_PROVISIONING) expect(ids).toContain(ownerKeyId);
      else expect(ids).not.toContain(ownerKeyId);
    },
  },
  {
    name: 'GET /v1/account/keys/{key_id}',
    needsFreshKey: true,
    call: (harness, credential, fresh) => harness.call('GET', `/v1/account/keys/${fresh}`, credential),
    expected: account(ok(), notFound),
    check: (answer, _kind, _fixture, fresh) => expect(answer.body.id).toBe(fresh),
  },
  {
    name: 'PATCH /v1/account/keys/{key_id}',
    needsFreshKey: true,
    call: (harness, credential, fresh) => harness.call('PATCH', `/v1/account/keys/${fresh}`, { ...credential, body: { name: 'patched' } }),
    expected: account(ok(), notFound),
    check: (answer) => expect(answer.body.name).toBe('patched'),
  },
  {
    name: 'DELETE /v1/account/keys/{key_id}',
    needsFreshKey: true,
    call: (harness, credential, fresh) => harness.call('DELETE', `/v1/account/keys/${fresh}`, credential),
    expected: account(ok(), notFound),
    check: (answer) => expect(answer.body).toEqual({ deleted: true }),
  },
  {
    name: 'GET /v1/account/activity',
    call: (harness, credential) => harness.call('GET', '/v1/account/activity?days=7', credential),
    expected: account(ok()),
    check: (answer) => expect(answer.body.days).toBe(7),
  },
  {
    name: 'GET /v1/account/activity (bad query)',
    call: (harness, credential) => harness.call('GET', '/v1/account/activity?days=31', credential),
    expected: account(badRequest),
  },
  {
    name: 'GET /v1/account/generations',
    // Both accounts made paid chats above, so once settled each list holds records. Each listed record is
    // read back with the same credential through GET /v1/generation, which answers 404 for another
    // account's id: a list leaking a record of the other account fails here.
    call: async (harness, credential) => {
      const list = () => harness.call('GET', '/v1/account/generations?limit=100', credential);
      let answer = await list();
      if (answer.status !== 200) return answer;
      await eventually(async () => {
        answer = await list();
        expect(answer.body.data.length).toBeGreaterThan(0);
      }, 10_000);
      const reads = await Promise.all(answer.body.data.map((record: { id: string }) =>
        harness.call('GET', `/v1/generation?id=${encodeURIComponent(record.id)}`, credential)));
      return { ...answer, body: { ...answer.body, read_back: reads.map((read) => read.status) } };
    },
    expected: account(ok()),
    check: (answer) => {
      expect(answer.body.data.length).toBeGreaterThan(0);
      expect(answer.body.read_back).toEqual(answer.body.data.map(() => 200));
    },
  },
  {
    name: 'GET /v1/account/audit',
    call: (harness, credential) => harness.call('GET', '/v1/account/audit?limit=100', credential),
    expected: account(ok()),
    // Each account's creation is in its log; every entry is the credential's account's.
    check: (answer, kind, fixture) => {
      const accountId = kind === OTHER_PROVISIONING ? fixture.other.accountId : fixture.owner.accountId;
      expect(answer.body.data.length).toBeGreaterThan(0);
      expect(answer.body.data.every((entry: { account_id: string }) => entry.account_id === accountId)).toBe(true);
    },
  },
  {
    name: 'GET /v1/account/budgets',
    call: (harness, credential) => harness.call('GET', '/v1/account/budgets', credential),
    expected: account(ok()),
    check: (answer) => expect(answer.body.object).toBe('list'),
  },
  {
    name: 'PUT /v1/account/budgets/keys/{key_id}, then DELETE',
    needsFreshKey: true,
    call: async (harness, credential, fresh) => {
      const put = await harness.call('PUT', `/v1/account/budgets/keys/${fresh}`, { ...credential, body: { period: 'monthly', limit: 100 } });
      if (put.status !== 200) return put;
      expect(put.body).toMatchObject({ scope: 'key', key_id: fresh, limit: '100' });
      return harness.call('DELETE', `/v1/account/budgets/keys/${fresh}`, credential);
    },
    expected: account(ok(), notFound),
    check: (answer) => expect(answer.body).toEqual({ deleted: true }),
  },
  {
    name: 'PUT /v1/account/budgets/account (bad body)',
    call: (harness, credential) => harness.call('PUT', '/v1/account/budgets/account', { ...credential, body: { period: 'hourly', limit: 1 } }),
    expected: account(badRequest),
  },
  {
    name: 'GET /v1/account/webhooks',
    call: (harness, credential) => harness.call('GET', '/v1/account/webhooks', credential),
    expected: account(ok()),
    check: (answer) => expect(answer.body).toEqual({ object: 'list', data: [] }),
  },
  {
    name: 'POST /v1/account/webhooks (a loopback receiver: refused)',
    call: (harness, credential) => harness.call('POST', '/v1/account/webhooks', { ...credential, body: { url: 'https://127.0.0.1/hook', event_types: ['credits.topped_up'] } }),
    expected: account(badRequest),
  },
  {
    name: 'GET /v1/admin/audit',
    call: (harness, credential) => harness.call('GET', '/v1/admin/audit?chain=auth&limit=10', credential),
    expected: adminOnly(ok()),
    check: (answer) => expect(answer.body.head.seq).toBeGreaterThan(0),
  },
  {
    name: 'GET /v1/admin/providers',
    call: (harness, credential) => harness.call('GET', '/v1/admin/providers', credential),
    expected: adminOnly(ok()),
    check: (answer) => {
      const pairs = answer.body.data.map((row: { provider: string; model: string }) => `${row.provider}/${row.model}`);
      expect(pairs).toContain('simulated/acme/chat-small');
    },
  },
  {
    name: 'GET /v1/admin/models/latency',
    call: (harness, credential) => harness.call('GET', '/v1/admin/models/latency?days=7', credential),
    expected: adminOnly(ok()),
    check: (answer) => {
      expect(answer.body.days).toBe(7);
      expect(Array.isArray(answer.body.data)).toBe(true);
    },
  },
  {
    name: 'GET /v1/admin/models/latency (bad query)',
    call: (harness, credential) => harness.call('GET', '/v1/admin/models/latency?days=31', credential),
    expected: adminOnly(badRequest),
  },
  {
    name: 'GET /v1/admin/accounts',
    call: (harness, credential) => harness.call('GET', '/v1/admin/accounts?limit=100', credential),
    expected: adminOnly(ok()),
    check: (answer, _kind, fixture) => {
      const ids = answer.body.data.map((row: { id: string }) => row.id);
      expect(ids).toEqual(expect.arrayContaining([fixture.owner.accountId, fixture.other.accountId, topUpTarget.accountId]));
    },
  },
  {
    name: 'POST /v1/admin/accounts/{id}/credits',
    call: (harness, credential) => harness.call('POST', `/v1/admin/accounts/${topUpTarget.accountId}/credits`, { ...credential, body: { amount: '0.5' } }),
    expected: adminOnly(ok()),
    // The one cell that may credit it: from 1 credit to exactly 1.5.
    check: (answer) => expect(answer.body).toEqual({ account_id: topUpTarget.accountId, balance: '1.5' }),
  },
  {
    name: 'POST /v1/admin/…/credits (bad body)',
    call: (harness, credential) => harness.call('POST', `/v1/admin/accounts/${topUpTarget.accountId}/credits`, { ...credential, body: { amount: '-2' } }),
    expected: adminOnly(badRequest),
  },
];

describe('credential × route matrix', () => {
  let harness: AccountStack;
  let fixture: Fixture;

  beforeAll(async () => {
    harness = await startAccountStack({ internalAuth: true });
    const [owner, other, target] = await Promise.all([harness.newAccount('owner', '10'), harness.newAccount('other', '7'), harness.newAccount('top-up target', '1')]);
    topUpTarget.accountId = target.accountId;
    const create = (who: Account, name: string) => harness.createKey(who, { name, credit_limit: null });
    const [live, disabled, deleted, othersKey] = await Promise.all([
      create(owner, 'live'),
      create(owner, 'disabled'),
      create(owner, 'deleted'),
      create(other, 'others'),
    ]);
    expect((await harness.call('PATCH', `/v1/account/keys/${disabled.id}`, { bearer: owner.provisioningKey, body: { disabled: true } })).status).toBe(200);
    expect((await harness.call('DELETE', `/v1/account/keys/${deleted.id}`, { bearer: owner.provisioningKey })).status).toBe(200);
    fixture = {
      owner,
      other,
      ownerKeyId: live.id,
      credentials: {
        none: {},
        'malformed bearer': { bearer: 'not-a-key' },
        'non-bearer scheme': { authorization: `Basic ${Buffer.from(`x:${live.key}`).toString('base64')}` },
        'unknown api key': { bearer: generateKey('api') },
        'unknown provisioning key': { bearer: generateKey('provisioning') },
        'disabled api key': { bearer: disabled.key },
        'deleted api key': { bearer: deleted.key },
        'api key (bearer)': { bearer: live.key },
        'api key (x-api-key)': { apiKeyHeader: live.key },
        'provisioning key': { bearer: owner.provisioningKey },
        // Spec §5: provisioning keys travel only as Bearer.
        'provisioning key (x-api-key)': { apiKeyHeader: owner.provisioningKey },
        "other account's api key": { bearer: othersKey.key },
        "other account's provisioning key": { bearer: other.provisioningKey },
        'admin token': { bearer: harness.internalTokens!.admin },
        'service token': { bearer: harness.internalTokens!.service },
      },
      spentPico: new Map(),
    };
  }, 120_000);

  afterAll(async () => {
    await harness?.stop();
  });

  it('answers every cell with the exact status and error type', async () => {
    const kinds = Object.keys(fixture.credentials) as CredentialKind[];
    const failures: string[] = [];
    const rows: string[] = [];
    let cells = 0;
    for (const route of routes) {
      const row: string[] = [];
      for (const kind of kinds) {
        let fresh = 'key_none';
        if (route.needsFreshKey) fresh = (await harness.createKey(fixture.owner, { name: 'target', credit_limit: 2 })).id;
        const expected = route.expected(kind);
        const answer = await route.call(harness, fixture.credentials[kind], fresh);
        cells++;
        row.push(String(answer.status));
        const where = `${route.name} × ${kind}`;
        try {
          expect(answer.headers.get('x-request-id'), where).toBeTruthy();
          expect(answer.status, `${where}: ${answer.text}`).toBe(expected.status);
          if (expected.type !== undefined) {
            expect(answer.body?.error?.type, `${where}: ${answer.text}`).toBe(expected.type);
            expect(typeof answer.body.error.message, where).toBe('string');
          } else {
            expect(answer.body?.error, where).toBeUndefined();
            await route.check?.(answer, kind, fixture, fresh);
          }
          if (route.needsFreshKey && expected.status === 404) {
            // The other account's attempt left the owner's key as it was.
            const after = await harness.call('GET', `/v1/account/keys/${fresh}`, { bearer: fixture.owner.provisioningKey });
            expect(after.body, where).toMatchObject({ id: fresh, name: 'target' });
            expect(after.text, where).not.toContain('patched');
          }
        } catch (error) {
          failures.push((error as Error).message.split('\n')[0]!);
        }
      }
      rows.push(`${route.name.padEnd(40)} ${row.map((status) => status.padStart(4)).join('')}`);
    }
    console.log(
      [
        `credential matrix: ${cells} cells checked (${routes.length} route groups × ${kinds.length} credential kinds)`,
        `columns: ${kinds.map((kind, index) => `${index + 1}=${kind}`).join(', ')}`,
        `${''.padEnd(40)} ${kinds.map((_, index) => String(index + 1).padStart(4)).join('')}`,
        ...rows,
      ].join('\n'),
    );
    expect(failures).toEqual([]);
    expect(cells).toBe(routes.length * kinds.length);
  }, 120_000);

  it('charged each paid inference of the matrix to the account of the key that made it', async () => {
    const balance = async (who: Account) =>
      parseCredits((await harness.call('GET', '/v1/account/balance', { bearer: who.provisioningKey })).body.balance as string);
    // Owner: chat and messages with its key as Bearer and as x-api-key; other: chat and messages with its key.
    const owner = fixture.spentPico.get(fixture.owner.accountId) ?? 0n;
    const other = fixture.spentPico.get(fixture.other.accountId) ?? 0n;
    expect(owner).toBeGreaterThan(0n);
    expect(other).toBeGreaterThan(0n);
    // Exact balances: a charge on the wrong account (or none, or two) moves both away from these.
    await eventually(async () => {
      expect(await balance(fixture.owner)).toBe(parseCredits('10') - owner);
      expect(await balance(fixture.other)).toBe(parseCredits('7') - other);
    }, 10_000);
  });

  it('credited the top-up target once, by the admin token, whatever the refused cells sent', async () => {
    const accounts = await harness.call('GET', '/v1/admin/accounts?limit=100', { bearer: harness.internalTokens!.admin });
    const target = accounts.body.data.find((row: { id: string }) => row.id === topUpTarget.accountId);
    expect(target).toMatchObject({ balance: '1.5', available: '1.5' });
  });
});
