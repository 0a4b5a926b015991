import type { Logger } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import type { LedgerTables } from './migrations.js';

/*
 * What the ledger's operations (ledger.ts, leases.ts) share: the database, the retry of a transient
 * conflict, and moving balances and key totals by what a batch charged or gave back.
 */

export type LedgerDatabase = Kysely<LedgerTables>;

/** What a paid request holds while it runs (spec §8). */
export const RESERVE_PICO = 50_000_000_000n;

/** A deadlock or serialization failure is retried this many times before the caller sees it. */
const MAX_TRANSIENT_ATTEMPTS = 4;

/** Postgres error codes worth one more try: the other transaction has finished by then. */
function isTransient(error: unknown): boolean {
  const code = (error as { code?: string } | null)?.code;
  return code === '40P01' || code === '40001' || code === '23505';
}

export async function withTransientRetry<T>(work: () => Promise<T>, logger: Logger, what: string): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await work();
    } catch (error) {
      if (!isTransient(error) || attempt >= MAX_TRANSIENT_ATTEMPTS) throw error;
      logger.warn({ err: error, attempt, what }, 'transient database conflict; retrying');
    }
  }
}

/** What a sweep closed: the hold to give back to the balance and the key. */
export type ReleasedHold = { account_id: string; key_id: string; amount_pico: bigint };

/** Gives closed holds back to their balances and keys. */
export async function giveBack(trx: LedgerDatabase, closed: readonly ReleasedHold[]): Promise<void> {
  await applyDeltas(trx, closed.map((row) => ({ accountId: row.account_id, keyId: row.key_id, spentPico: 0n, releasedPico: row.amount_pico })));
}

/**
 * Moves key totals and balances by the batch's charges and released reservations. Rows are
 * touched in key order, keys before balances — the same order `admit` locks them — so the settler,
 * the sweeper and admissions never deadlock each other.
 */
export async function applyDeltas(
  trx: LedgerDatabase,
  deltas: ReadonlyArray<{ accountId: string; keyId: string; spentPico: bigint; releasedPico: bigint }>,
): Promise<void> {
  const byKey = new Map<string, { accountId: string; spent: bigint; released: bigint }>();
  const byAccount = new Map<string, { spent: bigint; released: bigint }>();
  for (const delta of deltas) {
    if (delta.spentPico === 0n && delta.releasedPico === 0n) continue;
    if (delta.keyId !== '') {
      const key = byKey.get(delta.keyId) ?? { accountId: delta.accountId, spent: 0n, released: 0n };
      key.spent += delta.spentPico;
      key.released += delta.releasedPico;
      byKey.set(delta.keyId, key);
    }
    const account = byAccount.get(delta.accountId) ?? { spent: 0n, released: 0n };
    account.spent += delta.spentPico;
    account.released += delta.releasedPico;
    byAccount.set(delta.accountId, account);
  }
  if (byKey.size > 0) {
    const keys = [...byKey.keys()].sort();
    // A key without a row has no open reservation, so a new row only ever carries spend.
    await sql`
      with delta as (
        select * from unnest(${keys}::text[], ${keys.map((key) => byKey.get(key)!.accountId)}::text[],
                             ${keys.map((key) => byKey.get(key)!.spent)}::bigint[], ${keys.map((key) => byKey.get(key)!.released)}::bigint[])
          as d(key_id, account_id, spent, released)
      )
      insert into key_totals (key_id, account_id, spent_pico)
      select key_id, account_id, spent from delta order by key_id
      on conflict (key_id) do update set
        spent_pico = key_totals.spent_pico + excluded.spent_pico,
        reserved_pico = key_totals.reserved_pico - (select d.released from delta d where d.key_id = excluded.key_id)`.execute(trx);
  }
  if (byAccount.size > 0) {
    const accounts = [...byAccount.keys()].sort();
    await sql`
      with delta as (
        select * from unnest(${accounts}::text[], ${accounts.map((account) => byAccount.get(account)!.spent)}::bigint[],
                             ${accounts.map((account) => byAccount.get(account)!.released)}::bigint[])
          as d(account_id, spent, released)
      )
      insert into balances (account_id, balance_pico)
      select account_id, -spent from delta order by account_id
      on conflict (account_id) do update set
        balance_pico = balances.balance_pico + excluded.balance_pico,
        reserved_pico = balances.reserved_pico - (select d.released from delta d where d.account_id = excluded.account_id),
        updated_at = now()`.execute(trx);
  }
}
