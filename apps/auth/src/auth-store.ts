import { createHash } from 'node:crypto';
import {
  errors, formatCredits, GatewayError, GrpcStatus, ErrorReason, newId, parseCredits, UNATTRIBUTED_AUDIT, type AuditCallContext,
} from '@gateway/platform';
import { appendAudit, auditedTransaction, listAccountAudit, readAuditChain, sql, type Kysely } from '@gateway/platform/db';
import type {
  Account,
  ApiKey,
  CreateAccountRequest,
  CreateApiKeyRequest,
  ListAccountsRequest,
  ListApiKeysRequest,
  ListAuthAuditEntriesRequest,
  ReadAuthAuditChainRequest,
  UpdateApiKeyRequest,
  VerifyApiKeyResponse,
  VerifyProvisioningKeyResponse,
} from '@gateway/proto';
import type { Selectable, Transaction, Updateable } from 'kysely';
import { generateKey, isWellFormedKey, KeyHasher, keyLabel, type KeyKind } from './key-format.js';
import type { AccountsTable, ApiKeysTable, AuthDatabase } from './schema.js';
import {
  creditLimit,
  decodeAccountCursor,
  decodeCursor,
  encodeAccountCursor,
  encodeCursor,
  expiresAt,
  IDEMPOTENCY_KEY_MAX_LENGTH,
  limitReset,
  listLimit,
  requireId,
  requireName,
  routingStrategy,
  tierOrDefault,
} from './validation.js';

/** Told after a key change has committed, so edge caches can drop the key (KeysChanged). */
export interface KeyChangeListener {
  keysChanged(accountId: string, keyIds: readonly string[]): void;
  /** A committed change wrote account events (the outbox relay can read them now rather than later). */
  eventsWritten?(): void;
}

export interface AuthStoreLimits {
  /** Live (not deleted) API keys one account may hold. */
  maxApiKeysPerAccount: number;
  /** Unrevoked provisioning keys one account may hold. */
  maxProvisioningKeysPerAccount: number;
}

export const defaultAuthStoreLimits: AuthStoreLimits = { maxApiKeysPerAccount: 1_000, maxProvisioningKeysPerAccount: 100 };

const invalidApiKey = () =>
  new GatewayError(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY, 'Invalid API key.');
const invalidProvisioningKey = () =>
  new GatewayError(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_PROVISIONING_KEY, 'Invalid provisioning key.');
const keyNotFound = () => errors.notFound('No such API key.');
/** A key past its expires_at: still the invalid-key refusal (401), with its own code so the caller knows why. */
export const expiredApiKey = () =>
  new GatewayError(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY, 'API key expired.', { code: 'key_expired' });
const accountNotFound = () => errors.notFound('No such account.');

/** Every column of an API key except its hash, which never leaves the store. */
const apiKeyColumns = [
  'seq',
  'id',
  'account_id',
  'name',
  'label',
  'disabled',
  'credit_limit',
  'default_routing_strategy',
  'created_at',
  'updated_at',
  'limit_reset',
  'expires_at',
] as const;

type ApiKeyRow = Pick<Selectable<ApiKeysTable>, (typeof apiKeyColumns)[number]>;

function toApiKey(row: ApiKeyRow): ApiKey {
  return {
    id: row.id,
    accountId: row.account_id,
    name: row.name,
    label: row.label,
    disabled: row.disabled,
    creditLimit: row.credit_limit === null ? undefined : formatCredits(parseCredits(row.credit_limit)),
    defaultRoutingStrategy: row.default_routing_strategy,
    createdAtMs: BigInt(row.created_at.getTime()),
    updatedAtMs: BigInt(row.updated_at.getTime()),
    ...(row.limit_reset === null ? {} : { limitReset: row.limit_reset }),
    ...(row.expires_at === null ? {} : { expiresAtMs: BigInt(row.expires_at.getTime()) }),
  };
}

function toAccount(row: Pick<Selectable<AccountsTable>, 'id' | 'name' | 'tier' | 'created_at'>): Account {
  return { id: row.id, name: row.name, tier: row.tier, createdAtMs: BigInt(row.created_at.getTime()) };
}

/** The chain this service's audit entries form (docs/governance.md). */
export const AUTH_AUDIT_CHAIN = 'auth';

/** What an audit entry records of a key: its settings, never its hash. */
function auditedKey(row: ApiKeyRow | undefined) {
  if (!row) return null;
  return {
    name: row.name,
    label: row.label,
    disabled: row.disabled,
    credit_limit: row.credit_limit === null ? null : formatCredits(parseCredits(row.credit_limit)),
    limit_reset: row.limit_reset,
    default_routing_strategy: row.default_routing_strategy,
    expires_at: row.expires_at === null ? null : row.expires_at.toISOString(),
  };
}

/**
 * Accounts, API keys and provisioning keys. Plaintext keys exist only in the return value of the
 * call that mints them; the database holds HMACs. Every key-id operation is scoped by account id,
 * so another account's key is indistinguishable from a missing one.
 */
export class AuthStore {
  constructor(
    private readonly db: Kysely<AuthDatabase>,
    private readonly hasher: KeyHasher,
    private readonly listener: KeyChangeListener,
    private readonly limits: AuthStoreLimits = defaultAuthStoreLimits,
  ) {}

  async createAccount(request: CreateAccountRequest, audit: AuditCallContext = UNATTRIBUTED_AUDIT): Promise<{ account: Account; provisioningKey: string }> {
    const name = requireName(request.name);
    const tier = tierOrDefault(request.tier);
    const idempotencyKey = request.idempotencyKey === '' ? null : request.idempotencyKey;
    if (idempotencyKey !== null && idempotencyKey.length > IDEMPOTENCY_KEY_MAX_LENGTH) {
      throw errors.invalidRequest(`idempotency_key must be at most ${IDEMPOTENCY_KEY_MAX_LENGTH} characters`, 'idempotency_key');
    }
    const fingerprint = idempotencyKey === null ? null : createHash('sha256').update(JSON.stringify([name, tier])).digest('hex');
    return auditedTransaction(this.db, async (trx) => {
      // ON CONFLICT waits for a concurrent insert of the same key to commit, so two racing first
      // calls end with one account, and the loser reads the winner's row below.
      const inserted = await trx
        .insertInto('accounts')
        .values({ id: newId('acc'), name, tier, idempotency_key: idempotencyKey, request_fingerprint: fingerprint })
        .onConflict((conflict) => conflict.column('idempotency_key').doNothing())
        .returning(['id', 'name', 'tier', 'created_at'])
        .executeTakeFirst();
      if (!inserted) {
        const existing = await trx
          .selectFrom('accounts')
          .select(['id', 'name', 'tier', 'created_at', 'request_fingerprint'])
          .where('idempotency_key', '=', idempotencyKey)
          .executeTakeFirstOrThrow();
        if (existing.request_fingerprint !== fingerprint) {
          throw errors.conflict('idempotency_key was already used with a different name or tier');
        }
        return { account: toAccount(existing), provisioningKey: '' };
      }
      const { id, plaintext } = await this.insertProvisioningKey(trx, inserted.id, 'default');
      await appendAudit(trx, AUTH_AUDIT_CHAIN, {
        ...audit, accountId: inserted.id, action: 'account.create', targetType: 'account', targetId: inserted.id,
        before: null, after: { name: inserted.name, tier: inserted.tier, provisioning_key_id: id },
      });
      return { account: toAccount(inserted), provisioningKey: plaintext };
    });
  }

  async getAccount(accountId: string): Promise<Account> {
    requireId(accountId, 'account_id');
    const row = await this.db.selectFrom('accounts').select(['id', 'name', 'tier', 'created_at']).where('id', '=', accountId).executeTakeFirst();
    if (!row) throw accountNotFound();
    return toAccount(row);
  }

  /** Newest first, ties by id; the cursor names the last account of the previous page. */
  async listAccounts(request: ListAccountsRequest): Promise<{ accounts: Account[]; nextCursor: string }> {
    const limit = listLimit(request.limit);
    const after = decodeAccountCursor(request.cursor);
    const rows = await this.db
      .selectFrom('accounts')
      .select(['id', 'name', 'tier', 'created_at'])
      // Compared with the cursor account's own row: created_at has microseconds, which a JS Date would cut.
      .$if(after !== undefined, (query) =>
        query.where(sql<boolean>`(created_at, id) < (select c.created_at, c.id from accounts c where c.id = ${after!})`),
      )
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(limit + 1)
      .execute();
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    const nextCursor = rows.length > limit && last ? encodeAccountCursor(last.id) : '';
    return { accounts: page.map(toAccount), nextCursor };
  }

  async verifyApiKey(key: string): Promise<VerifyApiKeyResponse> {
    // Malformed (including provisioning keys, whose prefix differs) ends here, before any query.
    if (!isWellFormedKey(key, 'api')) throw invalidApiKey();
    const row = await this.db
      .selectFrom('api_keys')
      .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
      .select([
        'api_keys.id', 'api_keys.account_id', 'api_keys.credit_limit', 'api_keys.default_routing_strategy', 'accounts.tier',
        'api_keys.limit_reset', 'api_keys.expires_at',
        // Judged by the database's clock, the one every Auth replica shares.
        sql<boolean>`api_keys.expires_at is not null and api_keys.expires_at <= now()`.as('expired'),
      ])
      .where('api_keys.key_hash', '=', this.hasher.hash(key))
      .where('api_keys.deleted_at', 'is', null)
      .where('api_keys.disabled', '=', false)
      .executeTakeFirst();
    if (!row) throw invalidApiKey();
    if (row.expired) throw expiredApiKey();
    return {
      accountId: row.account_id,
      keyId: row.id,
      tier: row.tier,
      creditLimit: row.credit_limit === null ? undefined : formatCredits(parseCredits(row.credit_limit)),
      defaultRoutingStrategy: row.default_routing_strategy,
      ...(row.limit_reset === null ? {} : { limitReset: row.limit_reset }),
      ...(row.expires_at === null ? {} : { expiresAtMs: BigInt(row.expires_at.getTime()) }),
    };
  }

  async verifyProvisioningKey(key: string): Promise<VerifyProvisioningKeyResponse> {
    if (!isWellFormedKey(key, 'provisioning')) throw invalidProvisioningKey();
    const row = await this.db
      .selectFrom('provisioning_keys')
      .select(['id', 'account_id'])
      .where('key_hash', '=', this.hasher.hash(key))
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    if (!row) throw invalidProvisioningKey();
    return { accountId: row.account_id, provisioningKeyId: row.id };
  }

  async createProvisioningKey(accountId: string, requestedName: string, audit: AuditCallContext = UNATTRIBUTED_AUDIT): Promise<{ id: string; plaintext: string }> {
    requireId(accountId, 'account_id');
    const name = requestedName.trim() === '' ? 'default' : requireName(requestedName);
    return auditedTransaction(this.db, async (trx) => {
      await this.lockAccount(trx, accountId);
      const { count } = await trx
        .selectFrom('provisioning_keys')
        .select((eb) => eb.fn.countAll<string>().as('count'))
        .where('account_id', '=', accountId)
        .where('revoked_at', 'is', null)
        .executeTakeFirstOrThrow();
      if (Number(count) >= this.limits.maxProvisioningKeysPerAccount) {
        throw errors.invalidRequest(`an account holds at most ${this.limits.maxProvisioningKeysPerAccount} provisioning keys`, '', 'key_limit_reached');
      }
      const created = await this.insertProvisioningKey(trx, accountId, name);
      await appendAudit(trx, AUTH_AUDIT_CHAIN, {
        ...audit, accountId, action: 'provisioning_key.create', targetType: 'provisioning_key', targetId: created.id,
        before: null, after: { name },
      });
      return created;
    });
  }

  async createApiKey(request: CreateApiKeyRequest, audit: AuditCallContext = UNATTRIBUTED_AUDIT): Promise<{ key: ApiKey; plaintext: string }> {
    requireId(request.accountId, 'account_id');
    const name = requireName(request.name);
    const limit = request.creditLimit === undefined ? null : creditLimit(request.creditLimit);
    const strategy = routingStrategy(request.defaultRoutingStrategy);
    const reset = limitReset(request.limitReset ?? '');
    const expires = request.expiresAtMs === undefined ? null : expiresAt(request.expiresAtMs, Date.now());
    const plaintext = generateKey('api');
    const row = await auditedTransaction(this.db, async (trx) => {
      // The account row lock serialises key creation per account, so the count bound holds.
      await this.lockAccount(trx, request.accountId);
      const { count } = await trx
        .selectFrom('api_keys')
        .select((eb) => eb.fn.countAll<string>().as('count'))
        .where('account_id', '=', request.accountId)
        .where('deleted_at', 'is', null)
        .executeTakeFirstOrThrow();
      if (Number(count) >= this.limits.maxApiKeysPerAccount) {
        throw errors.invalidRequest(`an account holds at most ${this.limits.maxApiKeysPerAccount} API keys`, '', 'key_limit_reached');
      }
      const inserted = await trx
        .insertInto('api_keys')
        .values({
          id: newId('key'),
          account_id: request.accountId,
          name,
          key_hash: this.hasher.hash(plaintext),
          label: keyLabel(plaintext, 'api'),
          credit_limit: limit,
          default_routing_strategy: strategy,
          limit_reset: reset,
          expires_at: expires,
        })
        .returning(apiKeyColumns)
        .executeTakeFirstOrThrow();
      await appendAudit(trx, AUTH_AUDIT_CHAIN, {
        ...audit, accountId: request.accountId, action: 'api_key.create', targetType: 'api_key', targetId: inserted.id,
        before: null, after: auditedKey(inserted),
      });
      return inserted;
    });
    this.listener.eventsWritten?.();
    return { key: toApiKey(row), plaintext };
  }

  async listApiKeys(request: ListApiKeysRequest): Promise<{ keys: ApiKey[]; nextCursor: string }> {
    requireId(request.accountId, 'account_id');
    const limit = listLimit(request.limit);
    const after = decodeCursor(request.cursor);
    const rows = await this.db
      .selectFrom('api_keys')
      .select(apiKeyColumns)
      .where('account_id', '=', request.accountId)
      .where('deleted_at', 'is', null)
      .$if(!request.includeDisabled, (query) => query.where('disabled', '=', false))
      .$if(after !== undefined, (query) => query.where('seq', '<', after!))
      .orderBy('seq', 'desc')
      .limit(limit + 1)
      .execute();
    const page = rows.slice(0, limit);
    const nextCursor = rows.length > limit ? encodeCursor(page[page.length - 1]!.seq) : '';
    return { keys: page.map(toApiKey), nextCursor };
  }

  async getApiKey(accountId: string, keyId: string): Promise<ApiKey> {
    const row = await this.findLiveKey(this.db, accountId, keyId);
    if (!row) throw keyNotFound();
    return toApiKey(row);
  }

  /**
   * One UPDATE ... WHERE deleted_at IS NULL RETURNING: the row lock makes a concurrent update or
   * delete wait, then re-check the condition on the committed row, so an update never revives or
   * writes into a deleted key and two updates of different fields both land.
   */
  async updateApiKey(request: UpdateApiKeyRequest, audit: AuditCallContext = UNATTRIBUTED_AUDIT): Promise<ApiKey> {
    requireId(request.accountId, 'account_id');
    requireId(request.keyId, 'key_id');
    const changes: Updateable<ApiKeysTable> = {};
    if (request.name !== undefined) changes.name = requireName(request.name);
    if (request.disabled !== undefined) changes.disabled = request.disabled;
    if (request.clearCreditLimit) {
      if (request.creditLimit !== undefined) {
        throw errors.invalidRequest('credit_limit and clear_credit_limit cannot be combined', 'credit_limit');
      }
      changes.credit_limit = null;
    } else if (request.creditLimit !== undefined) {
      changes.credit_limit = creditLimit(request.creditLimit);
    }
    if (request.defaultRoutingStrategy !== undefined) changes.default_routing_strategy = routingStrategy(request.defaultRoutingStrategy);
    if (request.limitReset !== undefined) changes.limit_reset = limitReset(request.limitReset);
    if (request.clearExpiresAt) {
      if (request.expiresAtMs !== undefined) {
        throw errors.invalidRequest('expires_at and clear_expires_at cannot be combined', 'expires_at');
      }
      changes.expires_at = null;
    } else if (request.expiresAtMs !== undefined) {
      changes.expires_at = expiresAt(request.expiresAtMs, Date.now());
    }
    // A new expiry is announced (api_key.expired) when it passes, even if an earlier one was.
    if (changes.expires_at !== undefined) changes.expiry_announced_at = null;
    if (Object.keys(changes).length === 0) return this.getApiKey(request.accountId, request.keyId);

    // The row lock of SELECT … FOR UPDATE holds the key from the read of `before` to the update, so the
    // audit entry's before is the state this update replaced (a concurrent update waits its turn).
    const row = await auditedTransaction(this.db, async (trx) => {
      const before = await trx
        .selectFrom('api_keys')
        .select(apiKeyColumns)
        .where('id', '=', request.keyId)
        .where('account_id', '=', request.accountId)
        .where('deleted_at', 'is', null)
        .forUpdate()
        .executeTakeFirst();
      if (!before) return undefined;
      const after = await trx
        .updateTable('api_keys')
        .set({ ...changes, updated_at: sql<Date>`now()` })
        .where('id', '=', request.keyId)
        .where('account_id', '=', request.accountId)
        .where('deleted_at', 'is', null)
        .returning(apiKeyColumns)
        .executeTakeFirstOrThrow();
      await appendAudit(trx, AUTH_AUDIT_CHAIN, {
        ...audit, accountId: request.accountId, action: 'api_key.update', targetType: 'api_key', targetId: after.id,
        before: auditedKey(before), after: auditedKey(after),
      });
      return after;
    });
    if (!row) throw keyNotFound();
    this.listener.keysChanged(row.account_id, [row.id]);
    this.listener.eventsWritten?.();
    return toApiKey(row);
  }

  /** Permanent: the key never verifies again and is no longer listed or found (a second delete is NOT_FOUND). */
  async deleteApiKey(accountId: string, keyId: string, audit: AuditCallContext = UNATTRIBUTED_AUDIT): Promise<void> {
    requireId(accountId, 'account_id');
    requireId(keyId, 'key_id');
    const row = await auditedTransaction(this.db, async (trx) => {
      const deleted = await trx
        .updateTable('api_keys')
        .set({ deleted_at: sql<Date>`now()`, updated_at: sql<Date>`now()` })
        .where('id', '=', keyId)
        .where('account_id', '=', accountId)
        .where('deleted_at', 'is', null)
        .returning(apiKeyColumns)
        .executeTakeFirst();
      if (!deleted) return undefined;
      await appendAudit(trx, AUTH_AUDIT_CHAIN, {
        ...audit, accountId, action: 'api_key.delete', targetType: 'api_key', targetId: deleted.id,
        before: auditedKey(deleted), after: null,
      });
      return deleted;
    });
    if (!row) throw keyNotFound();
    this.listener.keysChanged(row.account_id, [row.id]);
    this.listener.eventsWritten?.();
  }

  /**
   * Marks up to `limit` keys whose expires_at has passed as announced, which writes their api_key.expired
   * events (the api_keys trigger, same statement). FOR UPDATE SKIP LOCKED: two replicas sweeping at once
   * take different keys, and a key is announced once. Returns how many were.
   */
  async announceExpiredKeys(limit = 100): Promise<number> {
    const result = await sql<{ id: string }>`
      update api_keys set expiry_announced_at = now()
      where expiry_announced_at is null and id in (
        select id from api_keys
        where expires_at <= now() and expiry_announced_at is null and expires_at is not null and deleted_at is null
        order by expires_at limit ${limit} for update skip locked)
      returning id`.execute(this.db);
    return result.rows.length;
  }

  /** One account's audit entries, newest first. */
  async listAuditEntries(request: ListAuthAuditEntriesRequest) {
    return listAccountAudit(this.db, AUTH_AUDIT_CHAIN, request);
  }

  /** The whole chain (or one account's part of it), oldest first, with the head (admin). */
  async readAuditChain(request: ReadAuthAuditChainRequest) {
    return readAuditChain(this.db, AUTH_AUDIT_CHAIN, request);
  }

  private async findLiveKey(db: Kysely<AuthDatabase> | Transaction<AuthDatabase>, accountId: string, keyId: string) {
    requireId(accountId, 'account_id');
    requireId(keyId, 'key_id');
    return db
      .selectFrom('api_keys')
      .select(apiKeyColumns)
      .where('id', '=', keyId)
      .where('account_id', '=', accountId)
      .where('deleted_at', 'is', null)
      .executeTakeFirst();
  }

  private async lockAccount(trx: Transaction<AuthDatabase>, accountId: string): Promise<void> {
    const account = await trx.selectFrom('accounts').select('id').where('id', '=', accountId).forUpdate().executeTakeFirst();
    if (!account) throw accountNotFound();
  }

  private async insertProvisioningKey(trx: Transaction<AuthDatabase>, accountId: string, name: string) {
    const kind: KeyKind = 'provisioning';
    const plaintext = generateKey(kind);
    const id = newId('pkey');
    await trx
      .insertInto('provisioning_keys')
      .values({ id, account_id: accountId, name, key_hash: this.hasher.hash(plaintext), label: keyLabel(plaintext, kind) })
      .execute();
    return { id, plaintext };
  }
}
