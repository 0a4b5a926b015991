import { sql, type Kysely, type Migration, type Transaction } from 'kysely';
import { errors } from '../grpc/errors.js';
import {
  AUDIT_GENESIS_HASH, auditEntryHash, decodeAuditCursor, encodeAuditCursor, type AuditActor, type AuditRecord,
} from '../audit/audit-chain.js';
import { auditEntriesCommitted } from '../audit/audit-sink.js';

/*
 * The audit log's tables, one chain per service schema (docs/governance.md). A service appends inside
 * the transaction that makes the change, so a change and its entry commit or roll back together.
 *
 * Concurrency: `audit_head` holds one row per chain (its newest seq and hash). Appending locks that row
 * (SELECT … FOR UPDATE) until the change's transaction ends, so appends to one chain are serialised and
 * each entry's prev_hash is the hash of the entry committed just before it. Only audited changes take
 * that lock (key and credit changes, budgets, catalog loads); nothing on the inference path appends.
 *
 * Append-only: a trigger refuses UPDATE, DELETE and TRUNCATE of audit_log. Someone who can drop the
 * trigger (the schema's owner) can still change rows; the hash chain is what shows they did.
 */

export interface AuditLogTable {
  seq: bigint;
  occurred_at_ms: bigint;
  actor_kind: string;
  actor_id: string;
  account_id: string;
  action: string;
  target_type: string;
  target_id: string;
  before_json: string;
  after_json: string;
  request_id: string;
  source_address: string;
  prev_hash: string;
  hash: string;
}

export interface AuditHeadTable {
  chain: string;
  seq: bigint;
  hash: string;
}

export interface AuditTables {
  audit_log: AuditLogTable;
  audit_head: AuditHeadTable;
}

/** The migration that creates a chain's tables in the service's schema (search_path). */
export function auditLogMigration(chain: string): Migration {
  return {
    async up(db: Kysely<any>) {
      await sql`
        create table audit_log (
          seq bigint primary key check (seq > 0),
          occurred_at_ms bigint not null,
          actor_kind text not null,
          actor_id text not null,
          account_id text not null,
          action text not null,
          target_type text not null,
          target_id text not null,
          before_json text not null,
          after_json text not null,
          request_id text not null,
          source_address text not null,
          prev_hash text not null,
          hash text not null
        )`.execute(db);
      // An account's entries, newest first (GET /v1/account/audit).
      await sql`create index audit_log_account on audit_log (account_id, seq desc)`.execute(db);
      await sql`
        create table audit_head (
          chain text primary key,
          seq bigint not null,
          hash text not null
        )`.execute(db);
      await sql`insert into audit_head (chain, seq, hash) values (${chain}, 0, ${AUDIT_GENESIS_HASH})`.execute(db);
      await sql`
        create function audit_log_append_only() returns trigger language plpgsql as $$
        begin
          raise exception 'audit_log is append-only (% refused)', tg_op using errcode = 'insufficient_privilege';
        end $$`.execute(db);
      await sql`
        create trigger audit_log_no_change before update or delete on audit_log
        for each row execute function audit_log_append_only()`.execute(db);
      await sql`
        create trigger audit_log_no_truncate before truncate on audit_log
        for each statement execute function audit_log_append_only()`.execute(db);
    },
  };
}

/** One change to record: what the service knows (the actor comes from the call's metadata). */
export interface AuditChange {
  actor: AuditActor;
  accountId: string;
  action: string;
  targetType: string;
  targetId: string;
  before: unknown;
  after: unknown;
  requestId: string;
}

/** Entries of a page as the services answer them (AuditEntry of audit.proto without the chain's name). */
export type StoredAuditEntry = AuditRecord & { hash: string };

/** JSON with object keys sorted and bigints as decimal strings: the same value always reads the same. */
export function auditJson(value: unknown): string {
  const normalise = (item: unknown): unknown => {
    if (typeof item === 'bigint') return item.toString();
    if (item instanceof Date) return item.toISOString();
    if (Array.isArray(item)) return item.map(normalise);
    if (item !== null && typeof item === 'object') {
      const sorted: Record<string, unknown> = {};
      for (const key of Object.keys(item).sort()) {
        const field = (item as Record<string, unknown>)[key];
        if (field !== undefined) sorted[key] = normalise(field);
      }
      return sorted;
    }
    return item;
  };
  return JSON.stringify(normalise(value === undefined ? null : value));
}

const AUDIT_TEXT_MAX_LENGTH = 16 * 1024;

/** Entries appended in a transaction opened by auditedTransaction, told to the sink once it committed. */
const appendedIn = new WeakMap<object, StoredAuditEntry[]>();

/**
 * A transaction whose audit entries are handed to the process's audit sink (the OTLP log export) after
 * it commits: an entry of a change that rolled back is never exported. Use it for every transaction that
 * appends; an append in any other transaction is handed over at once (before its commit is known).
 */
export async function auditedTransaction<Database, Result>(db: Kysely<Database>, work: (trx: Transaction<Database>) => Promise<Result>): Promise<Result> {
  const appended: StoredAuditEntry[] = [];
  const result = await db.transaction().execute(async (trx) => {
    appendedIn.set(trx, appended);
    return work(trx);
  });
  auditEntriesCommitted(appended);
  return result;
}

/**
 * Appends one entry to the chain inside `trx` (the transaction of the change). Locks the chain's head
 * row until the transaction ends.
 */
export async function appendAudit(trx: Transaction<any> | Kysely<any>, chain: string, change: AuditChange): Promise<StoredAuditEntry> {
  const beforeJson = auditJson(change.before);
  const afterJson = auditJson(change.after);
  // Bounded: before/after are records of a key, a budget, a balance; never a request body.
  if (beforeJson.length > AUDIT_TEXT_MAX_LENGTH || afterJson.length > AUDIT_TEXT_MAX_LENGTH) {
    throw new Error(`audit entry for ${change.action} is larger than ${AUDIT_TEXT_MAX_LENGTH} characters`);
  }
  const head = (await sql<{ seq: bigint; hash: string }>`
    select seq, hash from audit_head where chain = ${chain} for update`.execute(trx)).rows[0];
  if (!head) throw new Error(`audit chain ${chain} has no head row`);
  const record: AuditRecord = {
    chain,
    seq: BigInt(head.seq) + 1n,
    occurredAtMs: BigInt(Date.now()),
    actorKind: change.actor.kind,
    actorId: change.actor.id,
    accountId: change.accountId,
    action: change.action,
    targetType: change.targetType,
    targetId: change.targetId,
    beforeJson,
    afterJson,
    requestId: change.requestId,
    sourceAddress: change.actor.sourceAddress,
    prevHash: head.hash,
  };
  const hash = auditEntryHash(record);
  await sql`
    insert into audit_log (seq, occurred_at_ms, actor_kind, actor_id, account_id, action, target_type, target_id,
                           before_json, after_json, request_id, source_address, prev_hash, hash)
    values (${record.seq}, ${record.occurredAtMs}, ${record.actorKind}, ${record.actorId}, ${record.accountId}, ${record.action},
            ${record.targetType}, ${record.targetId}, ${record.beforeJson}, ${record.afterJson}, ${record.requestId},
            ${record.sourceAddress}, ${record.prevHash}, ${hash})`.execute(trx);
  await sql`update audit_head set seq = ${record.seq}, hash = ${hash} where chain = ${chain}`.execute(trx);
  const stored = { ...record, hash };
  const pending = appendedIn.get(trx);
  if (pending) pending.push(stored);
  else auditEntriesCommitted([stored]);
  return stored;
}

type AuditRow = AuditLogTable;

function toStored(chain: string, row: AuditRow): StoredAuditEntry {
  return {
    chain,
    seq: BigInt(row.seq),
    occurredAtMs: BigInt(row.occurred_at_ms),
    actorKind: row.actor_kind,
    actorId: row.actor_id,
    accountId: row.account_id,
    action: row.action,
    targetType: row.target_type,
    targetId: row.target_id,
    beforeJson: row.before_json,
    afterJson: row.after_json,
    requestId: row.request_id,
    sourceAddress: row.source_address,
    prevHash: row.prev_hash,
    hash: row.hash,
  };
}

export const AUDIT_PAGE_MAX = 100;
export const AUDIT_CHAIN_PAGE_MAX = 1_000;
const ACCOUNT_ID_MAX_LENGTH = 200;
function pageLimit(limit: number, max: number): number {
  if (limit === 0) return max;
  if (!Number.isInteger(limit) || limit < 1 || limit > max) throw errors.invalidRequest(`limit must be between 1 and ${max}`, 'limit');
  return limit;
}

/** One account's entries, newest first; the query names the account, so no page holds another's. */
export async function listAccountAudit(
  db: Kysely<any>,
  chain: string,
  request: { accountId: string; limit: number; cursor: string },
): Promise<{ entries: StoredAuditEntry[]; nextCursor: string }> {
  if (request.accountId === '' || request.accountId.length > ACCOUNT_ID_MAX_LENGTH) {
    throw errors.invalidRequest('account_id is required', 'account_id');
  }
  const limit = pageLimit(request.limit, AUDIT_PAGE_MAX);
  const before = decodeAuditCursor(request.cursor);
  const rows = (await sql<AuditRow>`
    select * from audit_log
    where account_id = ${request.accountId} ${before === undefined ? sql`` : sql`and seq < ${before}`}
    order by seq desc limit ${limit + 1}`.execute(db)).rows;
  const page = rows.slice(0, limit).map((row) => toStored(chain, row));
  const last = page[page.length - 1];
  return { entries: page, nextCursor: rows.length > limit && last ? encodeAuditCursor(last.seq) : '' };
}

/** The chain from after_seq on, oldest first, and its head (read in one snapshot with the rows). */
export async function readAuditChain(
  db: Kysely<any>,
  chain: string,
  request: { afterSeq: bigint; limit: number; accountId: string },
): Promise<{ entries: StoredAuditEntry[]; headSeq: bigint; headHash: string }> {
  const limit = pageLimit(request.limit, AUDIT_CHAIN_PAGE_MAX);
  if (request.afterSeq < 0n) throw errors.invalidRequest('after_seq must not be negative', 'after_seq');
  if (request.accountId.length > ACCOUNT_ID_MAX_LENGTH) throw errors.invalidRequest('account_id is too long', 'account_id');
  return db.transaction().setIsolationLevel('repeatable read').execute(async (trx) => {
    const rows = (await sql<AuditRow>`
      select * from audit_log
      where seq > ${request.afterSeq} ${request.accountId === '' ? sql`` : sql`and account_id = ${request.accountId}`}
      order by seq limit ${limit}`.execute(trx)).rows;
    const head = (await sql<{ seq: bigint; hash: string }>`select seq, hash from audit_head where chain = ${chain}`.execute(trx)).rows[0];
    return {
      entries: rows.map((row) => toStored(chain, row)),
      headSeq: head ? BigInt(head.seq) : 0n,
      headHash: head?.hash ?? AUDIT_GENESIS_HASH,
    };
  });
}

