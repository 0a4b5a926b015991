import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { ErrorReason, GatewayError, GrpcStatus, subjects, type EventBus, type Subscription } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { KeysChanged } from '@gateway/proto';
import { eventually } from '@gateway/testing';
import { generateKey, keyPrefixes } from '../src/index.js';
import { rejection, startAuthRig, type AuthRig } from './auth-rig.js';

const keyHashSecret = 'auth-test-secret-0123456789abcdefghijklmnopqrstuvwxyz';

let rig: AuthRig | undefined;
let database: AuthRig['database'];
let testBus: AuthRig['testBus'];
let auth: AuthRig['auth'];
let db: AuthRig['db'];
let listenerBus: EventBus;
let keysChangedSubscription: Subscription;
const keysChangedSeen: KeysChanged[] = [];

async function expectFailure(promise: Promise<unknown>, status: GrpcStatus, reason: ErrorReason): Promise<GatewayError> {
  const error = await rejection(promise);
  expect({ status: error.status, reason: error.reason }).toEqual({ status, reason });
  return error;
}

async function newAccount(name = 'acme', tier = 'tier-2') {
  const created = await auth.createAccount({ name, tier, idempotencyKey: '' });
  return { accountId: created.account!.id, provisioningKey: created.provisioningKey };
}

async function newApiKey(accountId: string, overrides: { creditLimit?: string; defaultRoutingStrategy?: string; name?: string } = {}) {
  const created = await auth.createApiKey({
    accountId,
    name: overrides.name ?? 'key',
    creditLimit: overrides.creditLimit,
    defaultRoutingStrategy: overrides.defaultRoutingStrategy ?? '',
  });
  return { keyId: created.key!.id, plaintext: created.plaintext, key: created.key! };
}

beforeAll(async () => {
  rig = await startAuthRig(keyHashSecret);
  ({ database, testBus, auth, db } = rig);
  // An edge replica's view: another NATS connection on the same namespace.
  listenerBus = await testBus.connectAnother();
  keysChangedSubscription = listenerBus.subscribe(subjects.keysChanged, (data) => keysChangedSeen.push(KeysChanged.decode(data)));
  // The subscription is live once a probe sent from the service's connection arrives.
  await eventually(() => {
    testBus.bus.broadcast(subjects.keysChanged, KeysChanged.encode({ accountId: 'probe', keyIds: [] }).finish());
    expect(keysChangedSeen.some((event) => event.accountId === 'probe')).toBe(true);
  }, 5_000, 50);
});

afterAll(async () => {
  await keysChangedSubscription?.stop();
  await rig?.stop();
});

describe('accounts and verification', () => {
  it('creates an account whose provisioning key and API keys verify, and refuses each where the other belongs', async () => {
    const created = await auth.createAccount({ name: 'Acme', tier: 'tier-3', idempotencyKey: '' });
    expect(created.account).toMatchObject({ name: 'Acme', tier: 'tier-3' });
    expect(created.account!.id).toMatch(/^acc_/);
    expect(created.provisioningKey.startsWith(keyPrefixes.provisioning)).toBe(true);
    const accountId = created.account!.id;

    const provisioning = await auth.verifyProvisioningKey({ key: created.provisioningKey });
    expect(provisioning.accountId).toBe(accountId);
    expect(provisioning.provisioningKeyId).not.toBe('');

    const { plaintext, key } = await newApiKey(accountId, { creditLimit: '12.50', defaultRoutingStrategy: 'latency', name: 'prod' });
    expect(key).toMatchObject({ accountId, name: 'prod', disabled: false, creditLimit: '12.5', defaultRoutingStrategy: 'latency' });
    expect(key.id).toMatch(/^key_/);
    expect(plaintext.startsWith(keyPrefixes.api)).toBe(true);
    expect(key.label).toBe(`${plaintext.slice(0, 10)}...${plaintext.slice(-3)}`);

    expect(await auth.verifyApiKey({ key: plaintext })).toEqual({
      accountId, keyId: key.id, tier: 'tier-3', creditLimit: '12.5', defaultRoutingStrategy: 'latency',
    });
    const plain = await newApiKey(accountId);
    const verifiedPlain = await auth.verifyApiKey({ key: plain.plaintext });
    expect(verifiedPlain.defaultRoutingStrategy).toBe('');
    expect(verifiedPlain.creditLimit).toBeUndefined();

    await expectFailure(auth.verifyApiKey({ key: created.provisioningKey }), GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY);
    await expectFailure(auth.verifyProvisioningKey({ key: plaintext }), GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_PROVISIONING_KEY);
    // Well-formed but never issued.
    await expectFailure(auth.verifyApiKey({ key: generateKey('api') }), GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY);
    await expectFailure(auth.verifyProvisioningKey({ key: generateKey('provisioning') }), GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_PROVISIONING_KEY);

    expect(await auth.getAccount({ accountId })).toEqual({ account: created.account });
    await expectFailure(auth.getAccount({ accountId: 'acc_missing' }), GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND);

    const extra = await auth.createProvisioningKey({ accountId, name: 'ci' });
    expect((await auth.verifyProvisioningKey({ key: extra.provisioningKey })).provisioningKeyId).toBe(extra.provisioningKeyId);
    await expectFailure(auth.createProvisioningKey({ accountId: 'acc_missing', name: 'x' }), GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND);
  });

  it('defaults the tier to tier-1 and refuses unknown tiers and empty names', async () => {
    expect((await auth.createAccount({ name: 'defaulted', tier: '', idempotencyKey: '' })).account!.tier).toBe('tier-1');
    const tier = await expectFailure(auth.createAccount({ name: 'x', tier: 'tier-9', idempotencyKey: '' }), GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST);
    expect(tier.param).toBe('tier');
    await expectFailure(auth.createAccount({ name: '  ', tier: 'free', idempotencyKey: '' }), GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST);
  });

  it('replays CreateAccount by idempotency key: same account, no second provisioning key; another body conflicts', async () => {
    const idempotencyKey = `create-${Date.now()}`;
    const first = await auth.createAccount({ name: 'Replay', tier: '', idempotencyKey });
    const replay = await auth.createAccount({ name: 'Replay', tier: 'tier-1', idempotencyKey });
    expect(first.provisioningKey).not.toBe('');
    expect(replay.provisioningKey).toBe('');
    expect(replay.account).toEqual(first.account);

    await expectFailure(auth.createAccount({ name: 'Other', tier: 'tier-1', idempotencyKey }), GrpcStatus.ALREADY_EXISTS, ErrorReason.ERROR_REASON_CONFLICT);
    await expectFailure(auth.createAccount({ name: 'Replay', tier: 'tier-4', idempotencyKey }), GrpcStatus.ALREADY_EXISTS, ErrorReason.ERROR_REASON_CONFLICT);

    const accounts = await db.selectFrom('accounts').select('id').where('idempotency_key', '=', idempotencyKey).execute();
    expect(accounts).toHaveLength(1);
    const provisioningKeys = await db.selectFrom('provisioning_keys').select('id').where('account_id', '=', first.account!.id).execute();
    expect(provisioningKeys).toHaveLength(1);
  });

  it('racing first calls with one idempotency key make one account and hand out one provisioning key', async () => {
    const idempotencyKey = `race-${Date.now()}`;
    const answers = await Promise.all(Array.from({ length: 8 }, () => auth.createAccount({ name: 'Race', tier: 'free', idempotencyKey })));
    expect(new Set(answers.map((answer) => answer.account!.id)).size).toBe(1);
    expect(answers.filter((answer) => answer.provisioningKey !== '')).toHaveLength(1);
    const winner = answers.find((answer) => answer.provisioningKey !== '')!;
    expect((await auth.verifyProvisioningKey({ key: winner.provisioningKey })).accountId).toBe(winner.account!.id);
  });
});

describe('listing accounts (operators)', () => {
  it('pages through every account newest first, ties by id, each exactly once, and validates limit and cursor', async () => {
    const mine: string[] = [];
    for (let index = 0; index < 5; index++) mine.push((await newAccount(`list-${index}`, 'tier-1')).accountId);
    // Two accounts with the very same creation time: the id breaks the tie, and paging still sees both.
    await db.updateTable('accounts').set({ created_at: new Date('2030-01-01T00:00:00.123Z') }).where('id', 'in', [mine[3]!, mine[4]!]).execute();

    const seen: string[] = [];
    let cursor = '';
    let pages = 0;
    do {
      const page = await auth.listAccounts({ limit: 2, cursor });
      expect(page.accounts.length).toBeLessThanOrEqual(2);
      seen.push(...page.accounts.map((account) => account.id));
      cursor = page.nextCursor;
      pages++;
    } while (cursor !== '' && pages < 1_000);
    expect(new Set(seen).size).toBe(seen.length);
    const everyAccount = await db.selectFrom('accounts').select(['id', 'created_at']).execute();
    expect(seen.length).toBe(everyAccount.length);
    // Newest first: the two accounts moved to 2030 lead, the larger id first.
    expect(seen.slice(0, 2)).toEqual([mine[3]!, mine[4]!].sort().reverse());
    const listed = (await auth.listAccounts({ limit: 0, cursor: '' })).accounts.find((account) => account.id === mine[0]);
    expect(listed).toMatchObject({ id: mine[0], name: 'list-0', tier: 'tier-1' });

    const error = await expectFailure(auth.listAccounts({ limit: 101, cursor: '' }), GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST);
    expect(error.param).toBe('limit');
    for (const badCursor of ['garbage!', Buffer.from('v1:12').toString('base64url'), 'x'.repeat(300)]) {
      const refused = await expectFailure(auth.listAccounts({ limit: 1, cursor: badCursor }), GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST);
      expect(refused.param).toBe('cursor');
    }
  });
});

describe('malformed keys never reach the database', () => {
  it('answers a malformed key while the key tables are locked; a well-formed one has to wait for them', async () => {
    const { accountId } = await newAccount();
    const { plaintext } = await newApiKey(accountId);
    const body = plaintext.slice(keyPrefixes.api.length, keyPrefixes.api.length + 32);
    const malformedApiKeys = [
      `${plaintext.slice(0, -1)}${plaintext.endsWith('a') ? 'b' : 'a'}`, // bad checksum
      plaintext.replace('gw-api-', 'gw-apj-'), // wrong prefix
      `${keyPrefixes.provisioning}${body}-${plaintext.slice(-6)}`, // other kind's prefix
      plaintext.slice(0, -2), // wrong length
      `${plaintext}x`,
      '',
    ];
    const locker = new pg.Client({ connectionString: database.url });
    await locker.connect();
    try {
      await locker.query('begin');
      await locker.query('lock table auth.api_keys, auth.provisioning_keys, auth.accounts in access exclusive mode');
      for (const key of malformedApiKeys) {
        await expectFailure(auth.verifyApiKey({ key }, { deadlineMs: 2_000 }), GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY);
        await expectFailure(auth.verifyProvisioningKey({ key }, { deadlineMs: 2_000 }), GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_PROVISIONING_KEY);
      }
      await expectFailure(auth.verifyProvisioningKey({ key: plaintext }, { deadlineMs: 2_000 }), GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_PROVISIONING_KEY);
      // Control: a well-formed key does need the table, so under the lock it cannot be answered.
      const blocked = await rejection(auth.verifyApiKey({ key: plaintext }, { deadlineMs: 300 }));
      expect(blocked.status).toBe(GrpcStatus.DEADLINE_EXCEEDED);
    } finally {
      await locker.query('rollback');
      await locker.end();
    }
    expect((await auth.verifyApiKey({ key: plaintext })).accountId).toBe(accountId);
  });
});

describe('API key lifecycle', () => {
  it('refuses disabled and deleted keys and announces each change on keys.changed', async () => {
    const { accountId } = await newAccount();
    const { keyId, plaintext } = await newApiKey(accountId, { creditLimit: '1' });
    await auth.verifyApiKey({ key: plaintext });

    const disabled = await auth.updateApiKey({ accountId, keyId, disabled: true, clearCreditLimit: false });
    expect(disabled.key!.disabled).toBe(true);
    await expectFailure(auth.verifyApiKey({ key: plaintext }), GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY);
    await eventually(() => expect(keysChangedSeen).toContainEqual({ accountId, keyIds: [keyId] }));

    const enabled = await auth.updateApiKey({ accountId, keyId, disabled: false, clearCreditLimit: true });
    expect(enabled.key).toMatchObject({ disabled: false, creditLimit: undefined });
    expect((await auth.verifyApiKey({ key: plaintext })).creditLimit).toBeUndefined();

    const before = keysChangedSeen.filter((event) => event.accountId === accountId).length;
    expect(await auth.deleteApiKey({ accountId, keyId })).toEqual({ deleted: true });
    await eventually(() => expect(keysChangedSeen.filter((event) => event.accountId === accountId).length).toBe(before + 1));
    expect(keysChangedSeen.filter((event) => event.accountId === accountId).at(-1)).toEqual({ accountId, keyIds: [keyId] });

    await expectFailure(auth.verifyApiKey({ key: plaintext }), GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY);
    await expectFailure(auth.getApiKey({ accountId, keyId }), GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND);
    await expectFailure(auth.updateApiKey({ accountId, keyId, disabled: false, clearCreditLimit: false }), GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND);
    await expectFailure(auth.deleteApiKey({ accountId, keyId }), GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND);
    const listed = await auth.listApiKeys({ accountId, limit: 0, cursor: '', includeDisabled: true });
    expect(listed.keys.map((key) => key.id)).not.toContain(keyId);
  });

  it('updates name, credit limit and strategy; validates every field', async () => {
    const { accountId } = await newAccount();
    const { keyId, plaintext } = await newApiKey(accountId);
    const updated = await auth.updateApiKey({ accountId, keyId, name: 'renamed', creditLimit: '0.000000000001', defaultRoutingStrategy: 'cache', clearCreditLimit: false });
    expect(updated.key).toMatchObject({ name: 'renamed', creditLimit: '0.000000000001', defaultRoutingStrategy: 'cache', disabled: false });
    expect(updated.key!.updatedAtMs).toBeGreaterThanOrEqual(updated.key!.createdAtMs);
    expect(await auth.getApiKey({ accountId, keyId })).toEqual({ key: updated.key });
    expect(await auth.verifyApiKey({ key: plaintext })).toMatchObject({ creditLimit: '0.000000000001', defaultRoutingStrategy: 'cache' });
    const cleared = await auth.updateApiKey({ accountId, keyId, defaultRoutingStrategy: '', clearCreditLimit: false });
    expect(cleared.key!.defaultRoutingStrategy).toBe('');

    const invalid = async (promise: Promise<unknown>, param: string) => {
      const error = await expectFailure(promise, GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST);
      expect(error.param).toBe(param);
    };
    await invalid(auth.createApiKey({ accountId, name: 'x', defaultRoutingStrategy: 'fastest' }), 'default_routing_strategy');
    await invalid(auth.updateApiKey({ accountId, keyId, defaultRoutingStrategy: 'fastest', clearCreditLimit: false }), 'default_routing_strategy');
    await invalid(auth.createApiKey({ accountId, name: 'x', creditLimit: '-1', defaultRoutingStrategy: '' }), 'credit_limit');
    await invalid(auth.createApiKey({ accountId, name: 'x', creditLimit: '0.0000000000001', defaultRoutingStrategy: '' }), 'credit_limit');
    await invalid(auth.createApiKey({ accountId, name: 'x', creditLimit: '1e3', defaultRoutingStrategy: '' }), 'credit_limit');
    await invalid(auth.updateApiKey({ accountId, keyId, creditLimit: 'NaN', clearCreditLimit: false }), 'credit_limit');
    await invalid(auth.createApiKey({ accountId, name: '', defaultRoutingStrategy: '' }), 'name');
    await invalid(auth.createApiKey({ accountId, name: 'n'.repeat(201), defaultRoutingStrategy: '' }), 'name');
    await invalid(auth.updateApiKey({ accountId, keyId, name: '', clearCreditLimit: false }), 'name');
    expect((await auth.createApiKey({ accountId, name: 'n'.repeat(200), defaultRoutingStrategy: '' })).key!.name).toHaveLength(200);
    await expectFailure(auth.createApiKey({ accountId: 'acc_missing', name: 'x', defaultRoutingStrategy: '' }), GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND);
    // The refused updates changed nothing.
    expect((await auth.getApiKey({ accountId, keyId })).key).toMatchObject({ name: 'renamed', creditLimit: '0.000000000001' });
  });

  it('lists newest first in pages, hides disabled keys unless asked, and validates limit and cursor', async () => {
    const { accountId } = await newAccount();
    const created: string[] = [];
    for (let index = 0; index < 7; index++) created.push((await newApiKey(accountId, { name: `k${index}` })).keyId);
    await auth.updateApiKey({ accountId, keyId: created[2]!, disabled: true, clearCreditLimit: false });

    const pages: string[][] = [];
    let cursor = '';
    do {
      const page = await auth.listApiKeys({ accountId, limit: 3, cursor, includeDisabled: true });
      expect(page.keys.length).toBeLessThanOrEqual(3);
      pages.push(page.keys.map((key) => key.id));
      cursor = page.nextCursor;
    } while (cursor !== '' && pages.length < 10);
    expect(pages.flat()).toEqual([...created].reverse());
    expect(pages.map((page) => page.length)).toEqual([3, 3, 1]);

    const enabledOnly = await auth.listApiKeys({ accountId, limit: 0, cursor: '', includeDisabled: false });
    expect(enabledOnly.keys.map((key) => key.id)).toEqual([...created].reverse().filter((id) => id !== created[2]));
    expect(enabledOnly.nextCursor).toBe('');

    for (const limit of [101, 1_000]) {
      const error = await expectFailure(auth.listApiKeys({ accountId, limit, cursor: '', includeDisabled: false }), GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST);
      expect(error.param).toBe('limit');
    }
    for (const badCursor of ['garbage!', Buffer.from('v1:abc').toString('base64url'), 'x'.repeat(65)]) {
      const error = await expectFailure(auth.listApiKeys({ accountId, limit: 1, cursor: badCursor, includeDisabled: false }), GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST);
      expect(error.param).toBe('cursor');
    }
  });
});

describe('object-level authorisation', () => {
  it("treats another account's key id as not found on every key-id RPC, and leaves that key untouched", async () => {
    const owner = await newAccount('owner');
    const intruder = await newAccount('intruder');
    const { keyId, plaintext, key } = await newApiKey(owner.accountId, { name: 'owner-secret-name', creditLimit: '5' });
    const seenBefore = keysChangedSeen.length;

    const attempts: Array<() => Promise<unknown>> = [
      () => auth.getApiKey({ accountId: intruder.accountId, keyId }),
      () => auth.updateApiKey({ accountId: intruder.accountId, keyId, disabled: true, clearCreditLimit: false }),
      () => auth.updateApiKey({ accountId: intruder.accountId, keyId, name: 'stolen', clearCreditLimit: true }),
      () => auth.updateApiKey({ accountId: intruder.accountId, keyId, creditLimit: '1000', clearCreditLimit: false }),
      () => auth.deleteApiKey({ accountId: intruder.accountId, keyId }),
    ];
    for (const attempt of attempts) {
      const error = await expectFailure(attempt(), GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND);
      expect(error.message).not.toContain('owner-secret-name');
      expect(error.message).not.toContain(owner.accountId);
    }
    // A key id that does not exist at all answers exactly the same.
    const missing = await expectFailure(auth.getApiKey({ accountId: intruder.accountId, keyId: 'key_doesnotexist' }), GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND);
    const foreign = await rejection(auth.getApiKey({ accountId: intruder.accountId, keyId }));
    expect(foreign.message).toBe(missing.message);

    const intruderList = await auth.listApiKeys({ accountId: intruder.accountId, limit: 0, cursor: '', includeDisabled: true });
    expect(intruderList.keys).toEqual([]);
    expect((await auth.getApiKey({ accountId: owner.accountId, keyId })).key).toEqual(key);
    expect((await auth.verifyApiKey({ key: plaintext })).accountId).toBe(owner.accountId);
    expect(keysChangedSeen.slice(seenBefore).filter((event) => event.keyIds.includes(keyId))).toEqual([]);
  });
});

describe('secrets at rest', () => {
  it('stores no plaintext key anywhere in schema auth after creating 100 API keys', async () => {
    const { accountId, provisioningKey } = await newAccount('bulk');
    const extra = await auth.createProvisioningKey({ accountId, name: 'second' });
    const plaintexts: string[] = [provisioningKey, extra.provisioningKey];
    for (let batch = 0; batch < 10; batch++) {
      const created = await Promise.all(Array.from({ length: 10 }, (_, index) => newApiKey(accountId, { name: `bulk-${batch}-${index}` })));
      plaintexts.push(...created.map((entry) => entry.plaintext));
    }
    expect(new Set(plaintexts).size).toBe(102);
    // The secret part of a key is its 32-character body; no stored text may contain it (nor the whole key).
    const bodies = plaintexts.map((plaintext) => plaintext.split('-')[2]!);
    expect(bodies.every((body) => body.length === 32)).toBe(true);

    const columns = await sql<{ table_name: string; column_name: string }>`
      select table_name, column_name from information_schema.columns
      where table_schema = 'auth' and data_type in ('text', 'character varying', 'character', 'json', 'jsonb', 'bytea')
      order by table_name, column_name`.execute(db);
    const scanned = columns.rows.map((column) => `${column.table_name}.${column.column_name}`);
    expect(scanned).toEqual(expect.arrayContaining(['api_keys.key_hash', 'api_keys.label', 'api_keys.name', 'provisioning_keys.key_hash', 'provisioning_keys.label', 'accounts.name']));
    let valuesScanned = 0;
    for (const column of columns.rows) {
      const values = await sql<{ value: string | null }>`
        select ${sql.ref(column.column_name)}::text as value from ${sql.table(`auth.${column.table_name}`)}`.execute(db);
      for (const { value } of values.rows) {
        if (value === null) continue;
        valuesScanned++;
        for (const body of bodies) expect(value.includes(body), `${column.table_name}.${column.column_name}`).toBe(false);
      }
    }
    expect(valuesScanned).toBeGreaterThan(500);

    // And every key still verifies through its hash.
    const verified = await Promise.all(plaintexts.slice(2, 12).map((key) => auth.verifyApiKey({ key })));
    expect(verified.every((answer) => answer.accountId === accountId)).toBe(true);
    const stored = await db.selectFrom('api_keys').select(['key_hash', 'label']).where('account_id', '=', accountId).execute();
    expect(stored).toHaveLength(100);
    for (const row of stored) {
      expect(row.key_hash).toMatch(/^[0-9a-f]{64}$/);
      expect(row.label).toMatch(/^gw-api-[0-9A-Za-z]{3}\.\.\.[0-9A-Za-z]{3}$/);
    }
  });
});

describe('concurrent changes to one key', () => {
  it('updates of different fields racing each other all land (no lost update)', async () => {
    const { accountId } = await newAccount();
    for (let round = 0; round < 5; round++) {
      const { keyId } = await newApiKey(accountId, { name: `race-${round}` });
      await Promise.all([
        auth.updateApiKey({ accountId, keyId, name: `renamed-${round}`, clearCreditLimit: false }),
        auth.updateApiKey({ accountId, keyId, creditLimit: `${round}.25`, clearCreditLimit: false }),
        auth.updateApiKey({ accountId, keyId, disabled: true, clearCreditLimit: false }),
        auth.updateApiKey({ accountId, keyId, defaultRoutingStrategy: 'throughput', clearCreditLimit: false }),
      ]);
      expect((await auth.getApiKey({ accountId, keyId })).key).toMatchObject({
        name: `renamed-${round}`, creditLimit: `${round}.25`, disabled: true, defaultRoutingStrategy: 'throughput',
      });
    }
  });

  it('updates racing a delete never revive or modify the deleted key', async () => {
    const { accountId } = await newAccount();
    for (let round = 0; round < 5; round++) {
      const { keyId, plaintext } = await newApiKey(accountId, { name: `doomed-${round}` });
      const updates = Array.from({ length: 6 }, (_, index) =>
        auth.updateApiKey({ accountId, keyId, name: `update-${index}`, disabled: index % 2 === 0, clearCreditLimit: false }));
      const deletes = [auth.deleteApiKey({ accountId, keyId }), auth.deleteApiKey({ accountId, keyId })];
      const [updateResults, deleteResults] = await Promise.all([Promise.allSettled(updates), Promise.allSettled(deletes)]);

      // Exactly one delete wins; the other finds nothing left to delete.
      expect(deleteResults.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
      for (const result of [...updateResults, ...deleteResults]) {
        if (result.status === 'rejected') {
          expect(result.reason).toBeInstanceOf(GatewayError);
          expect((result.reason as GatewayError).status).toBe(GrpcStatus.NOT_FOUND);
        }
      }
      const row = await db.selectFrom('api_keys').selectAll().where('id', '=', keyId).executeTakeFirstOrThrow();
      expect(row.deleted_at).not.toBeNull();
      // The delete was the last write: an update landing after it would have moved updated_at.
      expect(row.updated_at.getTime()).toBe(row.deleted_at!.getTime());
      const succeeded = updateResults.filter((result) => result.status === 'fulfilled').map((result) => result.value.key!);
      if (succeeded.length > 0) {
        // The stored record is exactly one applied update's (name and disabled travel together).
        const writer = succeeded.find((key) => key.name === row.name);
        expect(writer).toBeDefined();
        expect(row.disabled).toBe(writer!.disabled);
      } else {
        expect(row.name).toBe(`doomed-${round}`);
      }
      await expectFailure(auth.verifyApiKey({ key: plaintext }), GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY);
      await expectFailure(auth.getApiKey({ accountId, keyId }), GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND);
    }
  });
});
