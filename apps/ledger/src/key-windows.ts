import { errors } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import type { LedgerDatabase } from './ledger-db.js';

/*
 * Keys that reset (OpenRouter's `limit_reset`): the window a key's credit limit applies to. Windows
 * start at UTC midnight: a day, an ISO week (from Monday), a calendar month. The spend of a window is
 * the sum of the key's charges whose time (`occurred_at`) falls in it, kept per UTC day in
 * `key_spend_days` (migration 0009); the SQL functions `key_window_start` / `key_window_spent` decide
 * the window, so admission, leases and the key records agree on every boundary.
 */

export const LIMIT_RESETS = ['daily', 'weekly', 'monthly'] as const;
export type LimitReset = (typeof LIMIT_RESETS)[number];

/** `key_limit_reset` of Admit / AcquireLease: absent or '' is a lifetime limit. */
export function parseLimitReset(value: string | undefined, param = 'key_limit_reset'): LimitReset | null {
  if (value === undefined || value === '') return null;
  if ((LIMIT_RESETS as readonly string[]).includes(value)) return value as LimitReset;
  throw errors.invalidRequest(`${param} must be one of ${LIMIT_RESETS.join(', ')}`, param);
}

/** The spend of the key's current window (pico); call it under the key row's lock for an exact check. */
export async function windowSpentPico(db: LedgerDatabase, keyId: string, reset: LimitReset, at: Date | null): Promise<bigint> {
  const row = (await sql<{ spent: string }>`
    select key_window_spent(${keyId}, ${reset}, coalesce(${at}::timestamptz, now()))::text as spent`.execute(db)).rows[0]!;
  return BigInt(row.spent);
}

export interface KeyWindowUsage {
  dailyPico: bigint;
  weeklyPico: bigint;
  monthlyPico: bigint;
}

/**
 * Spend in the current UTC day, week and month per key of the account (keys that never spent: 0).
 * Scoped by account through key_totals, which holds a row for every key that was ever charged.
 */
export async function keyWindowUsage(db: LedgerDatabase, accountId: string, keyIds: readonly string[], at: Date | null): Promise<Map<string, KeyWindowUsage>> {
  const usage = new Map<string, KeyWindowUsage>();
  if (keyIds.length === 0) return usage;
  const rows = await sql<{ key_id: string; daily: string; weekly: string; monthly: string }>`
    with clock as (select coalesce(${at}::timestamptz, now()) as at),
    bounds as (
      select key_window_start('daily', at) as day, key_window_start('weekly', at) as week, key_window_start('monthly', at) as month
      from clock
    )
    select d.key_id,
           coalesce(sum(d.spent_pico) filter (where d.day >= b.day), 0)::text as daily,
           coalesce(sum(d.spent_pico) filter (where d.day >= b.week), 0)::text as weekly,
           coalesce(sum(d.spent_pico) filter (where d.day >= b.month), 0)::text as monthly
    from bounds b
    join key_spend_days d on d.day >= least(b.week, b.month) and d.day <= b.day
    join key_totals k on k.key_id = d.key_id and k.account_id = ${accountId}
    where d.key_id = any(${[...keyIds]}::text[])
    group by d.key_id`.execute(db);
  for (const row of rows.rows) {
    usage.set(row.key_id, { dailyPico: BigInt(row.daily), weeklyPico: BigInt(row.weekly), monthlyPico: BigInt(row.monthly) });
  }
  return usage;
}

/**
 * Day rows older than any window can reach (a key's spend window or a budget period: a month is at most
 * 31 days), a bounded batch of each table at a time: `key_spend_days` and the budgets' `account_spend_days`.
 */
export async function pruneSpendDays(db: LedgerDatabase, batchRows: number): Promise<number> {
  const keys = await sql`
    delete from key_spend_days where (key_id, day) in (
      select key_id, day from key_spend_days where day < (now() at time zone 'UTC')::date - 62 limit ${batchRows}
    )`.execute(db);
  const accounts = await sql`
    delete from account_spend_days where (account_id, day) in (
      select account_id, day from account_spend_days where day < (now() at time zone 'UTC')::date - 62 limit ${batchRows}
    )`.execute(db);
  return Number(keys.numAffectedRows ?? 0n) + Number(accounts.numAffectedRows ?? 0n);
}
