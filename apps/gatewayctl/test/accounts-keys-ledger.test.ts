import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  errors, GatewayError, GrpcStatus, ErrorReason, RUNTIME_ADDRESSES_FILE, startGrpcServer, unary, writeRuntimeAddresses, type RunningGrpcServer,
} from '@gateway/platform';
import {
  AuthServiceService,
  LedgerServiceService,
  type ApiKey,
  type AuthServiceServer,
  type CreateAccountRequest,
  type CreateApiKeyRequest,
  type DeleteApiKeyRequest,
  type GetAccountRequest,
  type GetBalanceRequest,
  type LedgerServiceServer,
  type ListAccountsRequest,
  type ListApiKeysRequest,
  type TopUpRequest,
  type UpdateApiKeyRequest,
  type VerifyJournalRequest,
} from '@gateway/proto';
import { testLogger } from '@gateway/testing';
import { cli } from './run-cli.js';

/**
 * Auth and ledger are built elsewhere; these fakes implement only the RPCs gatewayctl calls, over real
 * gRPC, and record what they receive.
 */
const received = {
  createAccount: [] as CreateAccountRequest[],
  getAccount: [] as GetAccountRequest[],
  listAccounts: [] as ListAccountsRequest[],
  createApiKey: [] as CreateApiKeyRequest[],
  listApiKeys: [] as ListApiKeysRequest[],
  updateApiKey: [] as UpdateApiKeyRequest[],
  deleteApiKey: [] as DeleteApiKeyRequest[],
  topUp: [] as TopUpRequest[],
  getBalance: [] as GetBalanceRequest[],
  verifyJournal: [] as VerifyJournalRequest[],
};
const behaviour = { failTopUp: false, mismatches: false };

const key = (id: string, overrides: Partial<ApiKey> = {}): ApiKey => ({
  id,
  accountId: 'acct_1',
  name: `key ${id}`,
  label: `sk-gw-${id.slice(-4)}…`,
  disabled: false,
  creditLimit: undefined,
  defaultRoutingStrategy: '',
  createdAtMs: 1_767_225_600_000n,
  updatedAtMs: 1_767_225_600_000n,
  ...overrides,
});
const keys = Array.from({ length: 150 }, (_, index) => key(`key_${String(index).padStart(4, '0')}`));
const accounts = Array.from({ length: 230 }, (_, index) => ({
  id: `acct_${String(index).padStart(4, '0')}`, name: `Account ${index}`, tier: 'tier-1', createdAtMs: 1_767_225_600_000n - BigInt(index) * 1000n,
}));

const notImplemented = () => {
  throw new GatewayError(GrpcStatus.UNIMPLEMENTED, ErrorReason.ERROR_REASON_INTERNAL, 'not in this fake');
};

/** UNIMPLEMENTED handlers for `methods` (the server type's camelCase names): the RPCs gatewayctl never calls. */
function notInThisFake<const Method extends string>(logger: Parameters<typeof unary>[0], methods: readonly Method[]) {
  const handlers = methods.map((method) => [method, unary<unknown, never>(logger, method[0]!.toUpperCase() + method.slice(1), notImplemented)] as const);
  return Object.fromEntries(handlers) as Record<Method, (typeof handlers)[number][1]>;
}

function fakeAuth(logger = testLogger('fake-auth')): AuthServiceServer {
  return {
    ...notInThisFake(logger, [
      'verifyAdmin', 'verifyApiKey', 'listAuthAuditEntries', 'readAuthAuditChain', 'verifyProvisioningKey', 'createProvisioningKey', 'getApiKey',
      // Sign-in sessions are the edge's, never gatewayctl's.
      'createSession', 'verifySession', 'revokeSession',
      // Members are the edge's account routes' too.
      'listMembers', 'addMember', 'updateMember', 'removeMember', 'resolveMemberships',
    ]),
    createAccount: unary(logger, 'CreateAccount', async (request: CreateAccountRequest) => {
      received.createAccount.push(request);
      if (request.name === 'taken') throw errors.conflict('idempotency key reused with a different name');
      return {
        account: { id: 'acct_1', name: request.name, tier: request.tier, createdAtMs: 1_767_225_600_000n },
        provisioningKey: 'gw-prov-secret-1',
      };
    }),
    getAccount: unary(logger, 'GetAccount', async (request: GetAccountRequest) => {
      received.getAccount.push(request);
      if (request.accountId !== 'acct_1') throw errors.notFound(`account ${request.accountId} does not exist`);
      return { account: { id: 'acct_1', name: 'Dev', tier: 'tier-2', createdAtMs: 1_767_225_600_000n } };
    }),
    listAccounts: unary(logger, 'ListAccounts', async (request: ListAccountsRequest) => {
      received.listAccounts.push(request);
      const start = request.cursor === '' ? 0 : Number(request.cursor);
      const page = accounts.slice(start, start + (request.limit || 100));
      const next = start + page.length;
      return { accounts: page, nextCursor: next < accounts.length ? String(next) : '' };
    }),
    createApiKey: unary(logger, 'CreateApiKey', async (request: CreateApiKeyRequest) => {
      received.createApiKey.push(request);
      if (request.defaultRoutingStrategy === 'fastest') throw errors.invalidRequest('unknown routing strategy', 'default_routing_strategy');
      return {
        key: key('key_new', {
          name: request.name, creditLimit: request.creditLimit, defaultRoutingStrategy: request.defaultRoutingStrategy,
          limitReset: request.limitReset, expiresAtMs: request.expiresAtMs,
        }),
        plaintext: 'sk-gw-plaintext-new',
      };
    }),
    listApiKeys: unary(logger, 'ListApiKeys', async (request: ListApiKeysRequest) => {
      received.listApiKeys.push(request);
      const start = request.cursor === '' ? 0 : Number(request.cursor);
      const page = keys.slice(start, start + request.limit);
      const next = start + page.length;
      return { keys: page, nextCursor: next < keys.length ? String(next) : '' };
    }),
    updateApiKey: unary(logger, 'UpdateApiKey', async (request: UpdateApiKeyRequest) => {
      received.updateApiKey.push(request);
      if (request.keyId !== 'key_0001') throw errors.notFound('no such key in this account');
      return { key: key(request.keyId, { disabled: request.disabled ?? false }) };
    }),
    deleteApiKey: unary(logger, 'DeleteApiKey', async (request: DeleteApiKeyRequest) => {
      received.deleteApiKey.push(request);
      if (request.keyId !== 'key_0001') throw errors.notFound('no such key in this account');
      return { deleted: true };
    }),
  };
}

function fakeLedger(logger = testLogger('fake-ledger')): LedgerServiceServer {
  return {
    ...notInThisFake(logger, [
      'admit', 'release', 'voidCharge', 'settleUsage', 'setBudget', 'deleteBudget', 'listBudgets', 'listLedgerAuditEntries', 'readLedgerAuditChain',
      'getGeneration', 'listGenerations', 'getModelLatency', 'getBalances', 'getKeyUsage', 'getActivity', 'acquireLease', 'returnLease', 'renewLeases',
      // Webhook endpoints are the edge's account routes'.
      'createWebhookEndpoint', 'listWebhookEndpoints', 'getWebhookEndpoint', 'updateWebhookEndpoint', 'deleteWebhookEndpoint', 'listWebhookDeliveries', 'redeliverWebhook',
      'setLowBalanceThreshold', 'getLowBalanceThreshold', 'rotateWebhookSecret',
    ]),
    topUp: unary(logger, 'TopUp', async (request: TopUpRequest) => {
      received.topUp.push(request);
      if (behaviour.failTopUp) throw errors.invalidRequest('ledger refuses today');
      return { balance: request.credits === '10' ? '10' : `1${request.credits}` };
    }),
    getBalance: unary(logger, 'GetBalance', async (request: GetBalanceRequest) => {
      received.getBalance.push(request);
      return { balance: '4.25', available: '4.2', reserved: '0.05' };
    }),
    verifyJournal: unary(logger, 'VerifyJournal', async (request: VerifyJournalRequest) => {
      received.verifyJournal.push(request);
      return {
        accountsChecked: request.accountId ? 1 : 7,
        mismatches: behaviour.mismatches ? [{ accountId: 'acct_9', storedBalance: '5', journalBalance: '4.5' }] : [],
      };
    }),
  };
}

describe('gatewayctl accounts, keys and ledger commands', () => {
  let auth: RunningGrpcServer;
  let ledger: RunningGrpcServer;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    const logger = testLogger('fakes');
    auth = await startGrpcServer({
      address: '127.0.0.1:0',
      services: [{ definition: AuthServiceService, implementation: fakeAuth(), name: 'gateway.v1.AuthService' }],
      logger,
    });
    ledger = await startGrpcServer({
      address: '127.0.0.1:0',
      services: [{ definition: LedgerServiceService, implementation: fakeLedger(), name: 'gateway.v1.LedgerService' }],
      logger,
    });
    env = { AUTH_ADDR: auth.address, LEDGER_ADDR: ledger.address };
  });

  afterEach(() => {
    for (const list of Object.values(received)) list.length = 0;
    behaviour.failTopUp = false;
    behaviour.mismatches = false;
  });

  afterAll(async () => {
    await auth?.stop();
    await ledger?.stop();
  });

  it('accounts create: creates the account, tops it up keyed by the account, prints JSON', async () => {
    const result = await cli(['accounts', 'create', '--name', 'Dev', '--credits', '10', '--tier', 'tier-1', '--json'], env);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({
      account_id: 'acct_1',
      name: 'Dev',
      tier: 'tier-1',
      provisioning_key: 'gw-prov-secret-1',
      balance: '10',
    });
    expect(received.createAccount).toHaveLength(1);
    expect(received.createAccount[0]).toMatchObject({ name: 'Dev', tier: 'tier-1' });
    expect(received.createAccount[0]!.idempotencyKey).not.toBe('');
    expect(received.topUp).toEqual([
      { accountId: 'acct_1', credits: '10', idempotencyKey: 'account-create:acct_1', note: 'initial credits (gatewayctl accounts create)' },
    ]);
  });

  it('accounts create: defaults to the free tier, no top-up, and passes a given idempotency key', async () => {
    const result = await cli(['accounts', 'create', '--name', 'Quiet', '--idempotency-key', 'op-42', '--auth', auth.address], { LEDGER_ADDR: ledger.address });
    expect(result.code).toBe(0);
    expect(result.stdout).toBe('created account acct_1 (Quiet, free)\nprovisioning key: gw-prov-secret-1\nbalance: 4.25\n');
    expect(received.createAccount).toEqual([{ name: 'Quiet', tier: 'free', idempotencyKey: 'op-42' }]);
    expect(received.topUp).toEqual([]);
    expect(received.getBalance).toEqual([{ accountId: 'acct_1' }]);
  });

  it('accounts create: a failed top-up still shows the one-time provisioning key, then fails', async () => {
    behaviour.failTopUp = true;
    const result = await cli(['accounts', 'create', '--name', 'Dev', '--credits', '3', '--json'], env);
    expect(result.code).toBe(1);
    expect(JSON.parse(result.stdout)).toMatchObject({ account_id: 'acct_1', provisioning_key: 'gw-prov-secret-1', balance: null });
    expect(result.stderr).toBe('gatewayctl accounts create: ledger refuses today (INVALID_ARGUMENT/INVALID_REQUEST)\n');
  });

  it('accounts create: refuses bad arguments without calling auth, and reports auth refusals', async () => {
    for (const argv of [
      ['accounts', 'create', '--credits', '10'],
      ['accounts', 'create', '--name', 'Dev', '--credits', '-1'],
      ['accounts', 'create', '--name', 'Dev', '--credits', 'ten'],
      ['accounts', 'create', '--name', 'Dev', '--credits', '0.0000000000001'],
      ['accounts', 'create', 'extra', '--name', 'Dev'],
    ]) {
      const result = await cli(argv, env);
      expect(result.code, argv.join(' ')).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr).toMatch(/^gatewayctl accounts create: /);
    }
    expect(received.createAccount).toEqual([]);

    const conflict = await cli(['accounts', 'create', '--name', 'taken'], env);
    expect(conflict.code).toBe(1);
    expect(conflict.stderr).toBe('gatewayctl accounts create: idempotency key reused with a different name (ALREADY_EXISTS/CONFLICT)\n');
  });

  it('accounts top-up: sends the amount and key, refuses non-positive amounts', async () => {
    const result = await cli(['accounts', 'top-up', 'acct_1', '--credits', '5', '--idempotency-key', 'k-1', '--json'], env);
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({ account_id: 'acct_1', credits: '5', idempotency_key: 'k-1', balance: '15' });
    expect(received.topUp).toEqual([{ accountId: 'acct_1', credits: '5', idempotencyKey: 'k-1', note: 'gatewayctl top-up' }]);

    const generated = await cli(['accounts', 'top-up', 'acct_1', '--credits', '0.5'], env);
    expect(generated.stdout).toBe('added 0.5 credits to acct_1; balance: 10.5\n');
    expect(received.topUp[1]!.idempotencyKey).toMatch(/^gatewayctl-top-up-[0-9a-f-]{36}$/);

    for (const argv of [['accounts', 'top-up', 'acct_1', '--credits', '0'], ['accounts', 'top-up', 'acct_1'], ['accounts', 'top-up', '--credits', '5']]) {
      const refused = await cli(argv, env);
      expect(refused.code, argv.join(' ')).toBe(1);
    }
    expect(received.topUp).toHaveLength(2);
  });

  it('accounts list: pages through auth, one balance per account, --limit bounds it and says it cut', async () => {
    received.listAccounts.length = 0;
    received.getBalance.length = 0;
    const all = await cli(['accounts', 'list', '--limit', '500', '--json'], env);
    expect(all.code).toBe(0);
    const listed = JSON.parse(all.stdout) as { accounts: { account_id: string; balance: string; created_at: string }[]; truncated: boolean };
    expect(listed.truncated).toBe(false);
    expect(listed.accounts.map((account) => account.account_id)).toEqual(accounts.map((account) => account.id));
    expect(listed.accounts[1]).toEqual({ account_id: 'acct_0001', name: 'Account 1', tier: 'tier-1', created_at: '2025-12-31T23:59:59.000Z', balance: '4.25' });
    expect(received.listAccounts.map((request) => request.limit)).toEqual([100, 100, 100]);
    expect(new Set(received.getBalance.map((request) => request.accountId)).size).toBe(230);

    const cut = await cli(['accounts', 'list', '--limit', '3'], env);
    expect(cut.stdout.split('\n')).toEqual([
      'acct_0000  Account 0  tier tier-1  balance 4.25  created 2026-01-01T00:00:00.000Z',
      'acct_0001  Account 1  tier tier-1  balance 4.25  created 2025-12-31T23:59:59.000Z',
      'acct_0002  Account 2  tier tier-1  balance 4.25  created 2025-12-31T23:59:58.000Z',
      '(more accounts than 3; raise --limit to see more)',
      '',
    ]);
    const bad = await cli(['accounts', 'list', '--limit', '0'], env);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--limit must be an integer from 1 to 10000');
  });

  it('accounts show: account and balance together; unknown account is an error', async () => {
    const result = await cli(['accounts', 'show', 'acct_1', '--json'], env);
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({
      account_id: 'acct_1',
      name: 'Dev',
      tier: 'tier-2',
      created_at: '2026-01-01T00:00:00.000Z',
      balance: '4.25',
      available: '4.2',
      reserved: '0.05',
    });
    // Global flags may also come before the command words.
    const text = await cli(['--ledger', ledger.address, 'accounts', '--auth', auth.address, 'show', 'acct_1'], {});
    expect(text.stdout).toBe('acct_1  Dev  tier tier-2  created 2026-01-01T00:00:00.000Z\nbalance: 4.25 (available 4.2, reserved 0.05)\n');

    const missing = await cli(['accounts', 'show', 'acct_404'], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe('gatewayctl accounts show: account acct_404 does not exist (NOT_FOUND/NOT_FOUND)\n');
  });

  it('keys create: passes limit and routing, prints the plaintext once', async () => {
    const result = await cli(['keys', 'create', 'acct_1', '--name', 'ci', '--credit-limit', '2.5', '--routing', 'latency', '--json'], env);
    expect(result.code).toBe(0);
    expect(received.createApiKey).toEqual([{ accountId: 'acct_1', name: 'ci', creditLimit: '2.5', defaultRoutingStrategy: 'latency' }]);
    expect(JSON.parse(result.stdout)).toMatchObject({ key_id: 'key_new', name: 'ci', credit_limit: '2.5', api_key: 'sk-gw-plaintext-new' });

    const plain = await cli(['keys', 'create', 'acct_1', '--name', 'web'], env);
    expect(received.createApiKey[1]).toEqual({ accountId: 'acct_1', name: 'web', defaultRoutingStrategy: '' });
    expect(plain.stdout).toContain('api key: sk-gw-plaintext-new\n');

    const windowed = await cli(['keys', 'create', 'acct_1', '--name', 'daily', '--credit-limit', '1', '--limit-reset', 'daily', '--expires-at', '2030-01-01T00:00:00Z', '--json'], env);
    expect(windowed.code).toBe(0);
    expect(received.createApiKey[2]).toEqual({
      accountId: 'acct_1', name: 'daily', creditLimit: '1', defaultRoutingStrategy: '', limitReset: 'daily', expiresAtMs: BigInt(Date.UTC(2030, 0, 1)),
    });
    expect(JSON.parse(windowed.stdout)).toMatchObject({ limit_reset: 'daily', expires_at: '2030-01-01T00:00:00.000Z' });
    const zoneless = await cli(['keys', 'create', 'acct_1', '--name', 'x', '--expires-at', '2030-01-01T00:00:00'], env);
    expect(zoneless.code).not.toBe(0);
    expect(zoneless.stderr).toContain('--expires-at must be an ISO 8601 date-time with a time zone');
    expect(received.createApiKey).toHaveLength(3);

    const refused = await cli(['keys', 'create', 'acct_1', '--name', 'x', '--routing', 'fastest'], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe('gatewayctl keys create: unknown routing strategy (INVALID_ARGUMENT/INVALID_REQUEST, default_routing_strategy)\n');
  });

  it('keys list: walks every page, disabled keys included', async () => {
    const result = await cli(['keys', 'list', 'acct_1', '--json'], env);
    expect(result.code).toBe(0);
    const listed = JSON.parse(result.stdout) as { keys: { key_id: string }[]; truncated: boolean };
    expect(listed.keys.map((entry) => entry.key_id)).toEqual(keys.map((entry) => entry.id));
    expect(listed.truncated).toBe(false);
    expect(received.listApiKeys).toEqual([
      { accountId: 'acct_1', limit: 100, cursor: '', includeDisabled: true },
      { accountId: 'acct_1', limit: 100, cursor: '100', includeDisabled: true },
    ]);
    const text = await cli(['keys', 'list', 'acct_1'], env);
    expect(text.stdout.trimEnd().split('\n')).toHaveLength(150);
  });

  it('keys disable: sends disabled=true and reports unknown keys', async () => {
    const result = await cli(['keys', 'disable', 'acct_1', 'key_0001'], env);
    expect(result.code).toBe(0);
    expect(result.stdout).toBe('disabled key key_0001 of acct_1\n');
    expect(received.updateApiKey).toEqual([{ accountId: 'acct_1', keyId: 'key_0001', disabled: true, clearCreditLimit: false }]);

    const missing = await cli(['keys', 'disable', 'acct_1', 'key_9999'], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('no such key in this account (NOT_FOUND/NOT_FOUND)');
    const noKey = await cli(['keys', 'disable', 'acct_1'], env);
    expect(noKey.code).toBe(1);
    expect(noKey.stderr).toContain('missing KEY_ID');
  });

  it('keys enable sends disabled=false; keys delete deletes; both report unknown keys', async () => {
    const enabled = await cli(['keys', 'enable', 'acct_1', 'key_0001', '--json'], env);
    expect(enabled.code).toBe(0);
    expect(JSON.parse(enabled.stdout)).toMatchObject({ key_id: 'key_0001', disabled: false });
    expect(received.updateApiKey).toEqual([{ accountId: 'acct_1', keyId: 'key_0001', disabled: false, clearCreditLimit: false }]);
    const deleted = await cli(['keys', 'delete', 'acct_1', 'key_0001', '--json'], env);
    expect(deleted.code).toBe(0);
    expect(JSON.parse(deleted.stdout)).toEqual({ account_id: 'acct_1', key_id: 'key_0001', deleted: true });
    expect(received.deleteApiKey).toEqual([{ accountId: 'acct_1', keyId: 'key_0001' }]);
    for (const verb of ['enable', 'delete']) {
      const missing = await cli(['keys', verb, 'acct_1', 'key_9999'], env);
      expect(missing.code, verb).toBe(1);
      expect(missing.stderr, verb).toContain('no such key in this account (NOT_FOUND/NOT_FOUND)');
    }
  });

  it('ledger verify: exit 0 when balanced, 1 with the mismatches listed', async () => {
    const all = await cli(['ledger', 'verify'], env);
    expect(all).toEqual({ code: 0, stdout: '7 accounts checked, 0 mismatches\n', stderr: '' });
    behaviour.mismatches = true;
    const one = await cli(['ledger', 'verify', 'acct_9', '--json'], env);
    expect(one.code).toBe(1);
    expect(JSON.parse(one.stdout)).toEqual({
      accounts_checked: 1,
      mismatches: [{ account_id: 'acct_9', stored_balance: '5', journal_balance: '4.5' }],
    });
    expect(received.verifyJournal).toEqual([{ accountId: '' }, { accountId: 'acct_9' }]);
  });

  it('names the unreachable service', async () => {
    const result = await cli(['accounts', 'show', 'acct_1'], { AUTH_ADDR: auth.address, LEDGER_ADDR: '127.0.0.1:1' });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^gatewayctl accounts show: cannot reach ledger at 127\.0\.0\.1:1: /);
  });

  it("finds a running npm start's addresses in its data dir when no flag or env names them; flags and env still win", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'gatewayctl-data-'));
    try {
      writeRuntimeAddresses(dataDir, { auth: auth.address, ledger: ledger.address, catalog: '127.0.0.1:1', edge: 'http://127.0.0.1:1', pid: process.pid });
      expect(await cli(['ledger', 'verify'], { GATEWAY_DATA_DIR: dataDir })).toEqual({ code: 0, stdout: '7 accounts checked, 0 mismatches\n', stderr: '' });
      expect((await cli(['ledger', 'verify', '--data-dir', dataDir], {})).code).toBe(0);
      // An env var beats the file, a flag beats both.
      const envWins = await cli(['ledger', 'verify'], { GATEWAY_DATA_DIR: dataDir, LEDGER_ADDR: '127.0.0.1:1' });
      expect(envWins.stderr).toMatch(/cannot reach ledger at 127\.0\.0\.1:1/);
      expect((await cli(['ledger', 'verify', '--ledger', ledger.address], { GATEWAY_DATA_DIR: dataDir, LEDGER_ADDR: '127.0.0.1:1' })).code).toBe(0);
      // A file that is not an addresses file is named, not guessed around.
      await writeFile(join(dataDir, RUNTIME_ADDRESSES_FILE), '{"auth": 5}');
      const broken = await cli(['ledger', 'verify'], { GATEWAY_DATA_DIR: dataDir });
      expect(broken.code).toBe(1);
      expect(broken.stderr).toContain(`${join(dataDir, RUNTIME_ADDRESSES_FILE)} is not a gateway addresses file`);
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
