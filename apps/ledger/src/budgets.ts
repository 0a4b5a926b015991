import { errors, formatCredits, GatewayError, GrpcStatus, UNATTRIBUTED_AUDIT, type AuditCallContext } from '@gateway/platform';
import { appendAudit, auditedTransaction, sql } from '@gateway/platform/db';
import { ErrorReason } from '@gateway/proto';
import type { LedgerDatabase } from './ledger-db.js';

/*
 * Budgets (issue 42 item 3, docs/governance.md; tables and triggers in migration 0021). A budget is a
 * spend window like a key's limit_reset (the same UTC day / ISO week / month, the same spend-day rows)
 * with alert thresholds and an optional hard stop, per account or per key. Thresholds fire in the
 * settlement transaction (trigger on charges); the hard stop is checked where holds are made: admit
 * (admit_budgeted) and lease grants (leases.ts), under the budget row's lock.
 */

export const BUDGET_PERIODS = ['daily', 'weekly', 'monthly'] as const;
export type BudgetPeriod = (typeof BUDGET_PERIODS)[number];
/** Most thresholds per budget. */
export const MAX_THRESHOLDS = 10;
/** The largest budget limit: far above any real budget, and its ×100 stays well inside numeric. */
export const MAX_BUDGET_PICO = 1_000_000n * 1_000_000_000_000n;
/** An account holds at most its keys' budgets plus its own: keys are bounded by Auth (1,000). */
export const MAX_BUDGETS_PER_ACCOUNT = 1_001;
/** Fired alerts listed with the budgets. */
export const MAX_LISTED_ALERTS = 100;
/** The ledger's chain name (ledger.ts LEDGER_AUDIT_CHAIN), repeated here to keep this module free of ledger.ts. */
const AUDIT_CHAIN = 'ledger';

export type BudgetRefusal = { kind: 'budget'; amountPico: bigint; usedPico: bigint; keyId: string; period: BudgetPeriod; limitPico: bigint };

/** The 402 of a hard stop: names the budget (scope and period), what is used and what the request needs. */
export function budgetRefusal(outcome: BudgetRefusal): GatewayError {
  const scope = outcome.keyId === '' ? 'the account\'s' : `key ${outcome.keyId}'s`;
  return new GatewayError(
    GrpcStatus.FAILED_PRECONDITION,
    ErrorReason.ERROR_REASON_BUDGET_EXCEEDED,
    `Budget reached: ${scope} ${outcome.period} budget of ${formatCredits(outcome.limitPico)} credits (hard stop) has ` +
      `${formatCredits(outcome.usedPico)} spent or held this period, and this request needs ${formatCredits(outcome.amountPico)} more.`,
    { code: 'budget_exceeded' },
  );
}

export interface Budget {
  accountId: string;
  keyId: string;
  period: BudgetPeriod;
  limitPico: bigint;
  thresholds: number[];
  hardStop: boolean;
  createdAt: Date;
  updatedAt: Date;
}

export interface BudgetStatus extends Budget {
  /** Spend of the scope in the current period. */
  spentPico: bigint;
  periodStart: string;
  /** Thresholds already fired in the current period. */
  firedThresholds: number[];
}

export interface BudgetAlert {
  eventId: string;
  accountId: string;
  keyId: string;
  period: BudgetPeriod;
  periodStart: string;
  thresholdPercent: number;
  limitPico: bigint;
  spentPico: bigint;
  firedAt: Date;
  deliveryState: string;
}

export function parsePeriod(value: string): BudgetPeriod {
  if ((BUDGET_PERIODS as readonly string[]).includes(value)) return value as BudgetPeriod;
  throw errors.invalidRequest(`period must be one of ${BUDGET_PERIODS.join(', ')}`, 'period');
}

/** Percent thresholds: integers 1..100, at most MAX_THRESHOLDS, sorted and without repeats. */
export function parseThresholds(values: readonly number[]): number[] {
  if (values.length > MAX_THRESHOLDS) throw errors.invalidRequest(`thresholds holds at most ${MAX_THRESHOLDS} values`, 'thresholds');
  for (const value of values) {
    if (!Number.isInteger(value) || value < 1 || value > 100) throw errors.invalidRequest('thresholds must be whole percents from 1 to 100', 'thresholds');
  }
  return [...new Set(values)].sort((a, b) => a - b);
}

type BudgetRow = {
  account_id: string; key_id: string; period: BudgetPeriod; limit_pico: bigint; thresholds: number[]; hard_stop: boolean;
  created_at: Date; updated_at: Date;
};

const toBudget = (row: BudgetRow): Budget => ({
  accountId: row.account_id, keyId: row.key_id, period: row.period, limitPico: BigInt(row.limit_pico),
  thresholds: row.thresholds.map(Number), hardStop: row.hard_stop, createdAt: row.created_at, updatedAt: row.updated_at,
});

const audited = (budget: Budget | undefined) => budget === undefined ? null : ({
  period: budget.period, limit: formatCredits(budget.limitPico), thresholds: budget.thresholds, hard_stop: budget.hardStop,
});

/**
 * Creates or replaces the budget of a scope (key_id '' = the account), with its audit entry in the same
 * transaction. Thresholds already fired this period stay fired (each fires once per period).
 */
export async function setBudget(
  db: LedgerDatabase,
  input: { accountId: string; keyId: string; period: BudgetPeriod; limitPico: bigint; thresholds: number[]; hardStop: boolean },
  audit: AuditCallContext = UNATTRIBUTED_AUDIT,
): Promise<Budget> {
  if (input.limitPico <= 0n || input.limitPico > MAX_BUDGET_PICO) {
    throw errors.invalidRequest(`limit must be greater than 0 and at most ${formatCredits(MAX_BUDGET_PICO)}`, 'limit');
  }
  return auditedTransaction(db, async (trx) => {
    const before = (await sql<BudgetRow>`
      select * from budgets where account_id = ${input.accountId} and key_id = ${input.keyId} for update`.execute(trx)).rows[0];
    if (!before) {
      const count = (await sql<{ count: string }>`select count(*)::text as count from budgets where account_id = ${input.accountId}`.execute(trx)).rows[0]!;
      if (Number(count.count) >= MAX_BUDGETS_PER_ACCOUNT) {
        throw errors.invalidRequest(`an account holds at most ${MAX_BUDGETS_PER_ACCOUNT} budgets`, '', 'budget_limit_reached');
      }
    }
    const row = (await sql<BudgetRow>`
      insert into budgets (account_id, key_id, period, limit_pico, thresholds, hard_stop)
      values (${input.accountId}, ${input.keyId}, ${input.period}, ${input.limitPico}, ${input.thresholds}::smallint[], ${input.hardStop})
      on conflict (account_id, key_id) do update set
        period = excluded.period, limit_pico = excluded.limit_pico, thresholds = excluded.thresholds,
        hard_stop = excluded.hard_stop, updated_at = now()
      returning *`.execute(trx)).rows[0]!;
    const budget = toBudget(row);
    await appendAudit(trx, AUDIT_CHAIN, {
      ...audit, accountId: input.accountId, action: before ? 'budget.update' : 'budget.create',
      targetType: input.keyId === '' ? 'account_budget' : 'key_budget', targetId: input.keyId === '' ? input.accountId : input.keyId,
      before: audited(before && toBudget(before)), after: audited(budget),
    });
    return budget;
  });
}

/** Removes a scope's budget; false when it had none. Its fired alerts stay (they were sent). */
export async function deleteBudget(db: LedgerDatabase, accountId: string, keyId: string, audit: AuditCallContext = UNATTRIBUTED_AUDIT): Promise<boolean> {
  return auditedTransaction(db, async (trx) => {
    const deleted = (await sql<BudgetRow>`
      delete from budgets where account_id = ${accountId} and key_id = ${keyId} returning *`.execute(trx)).rows[0];
    if (!deleted) return false;
    await appendAudit(trx, AUDIT_CHAIN, {
      ...audit, accountId, action: 'budget.delete',
      targetType: keyId === '' ? 'account_budget' : 'key_budget', targetId: keyId === '' ? accountId : keyId,
      before: audited(toBudget(deleted)), after: null,
    });
    return true;
  });
}

/** The account's budgets with the current period's spend and fired thresholds (`at`: the clock, null: the database's). */
export async function listBudgets(db: LedgerDatabase, accountId: string, at: Date | null): Promise<BudgetStatus[]> {
  const rows = await sql<BudgetRow & { spent_pico: bigint; period_start: string; fired: number[] | null }>`
    with clock as (select coalesce(${at}::timestamptz, now()) as at)
    select b.*, budget_spent(b.account_id, b.key_id, b.period, clock.at) as spent_pico,
           key_window_start(b.period, clock.at)::text as period_start,
           (select array_agg(a.threshold_percent order by a.threshold_percent) from budget_alerts a
             where a.account_id = b.account_id and a.key_id = b.key_id and a.period = b.period
               and a.period_start = key_window_start(b.period, clock.at)) as fired
    from budgets b, clock
    where b.account_id = ${accountId}
    order by b.key_id`.execute(db);
  return rows.rows.map((row) => ({
    ...toBudget(row), spentPico: BigInt(row.spent_pico), periodStart: row.period_start, firedThresholds: (row.fired ?? []).map(Number),
  }));
}

/** The account's fired alerts, newest first (the outbox rows, whatever their delivery state). */
export async function listBudgetAlerts(db: LedgerDatabase, accountId: string, limit = MAX_LISTED_ALERTS): Promise<BudgetAlert[]> {
  const rows = await sql<{
    event_id: string; account_id: string; key_id: string; period: BudgetPeriod; period_start: string; threshold_percent: number;
    limit_pico: bigint; spent_pico: bigint; fired_at: Date; delivery_state: string;
  }>`
    select event_id, account_id, key_id, period, period_start::text as period_start, threshold_percent, limit_pico, spent_pico, fired_at, delivery_state
    from budget_alerts where account_id = ${accountId} order by id desc limit ${limit}`.execute(db);
  return rows.rows.map((row) => ({
    eventId: row.event_id, accountId: row.account_id, keyId: row.key_id, period: row.period, periodStart: row.period_start,
    thresholdPercent: Number(row.threshold_percent), limitPico: BigInt(row.limit_pico), spentPico: BigInt(row.spent_pico),
    firedAt: row.fired_at, deliveryState: row.delivery_state,
  }));
}

/** A hard-stop budget locked for a lease grant. */
export interface HardStop {
  keyId: string;
  period: BudgetPeriod;
  limitPico: bigint;
}

/**
 * Locks the hard-stop budgets a hold for (account, key) must fit, account first: the first lock of a
 * lease grant, as of admit_budgeted, so the two never wait on each other in opposite orders.
 */
export async function lockHardStops(trx: LedgerDatabase, accountId: string, keyId: string): Promise<HardStop[]> {
  const rows = await sql<{ key_id: string; period: BudgetPeriod; limit_pico: bigint }>`
    select key_id, period, limit_pico from budgets
    where account_id = ${accountId} and hard_stop and (key_id = '' or (${keyId} <> '' and key_id = ${keyId}))
    order by key_id
    for update`.execute(trx);
  return rows.rows.map((row) => ({ keyId: row.key_id, period: row.period, limitPico: BigInt(row.limit_pico) }));
}

/**
 * Room a hard-stop budget leaves: limit − (the period's spend + what its scope holds). `heldPico`: the
 * scope's holds, read by the caller under the row lock it already took (balance or key row).
 */
export async function hardStopRoom(trx: LedgerDatabase, accountId: string, stop: HardStop, heldPico: bigint, at: Date | null): Promise<{ roomPico: bigint; usedPico: bigint }> {
  const spent = (await sql<{ spent: bigint }>`
    select budget_spent(${accountId}, ${stop.keyId}, ${stop.period}, coalesce(${at}::timestamptz, now())) as spent`.execute(trx)).rows[0]!;
  const usedPico = BigInt(spent.spent) + heldPico;
  return { roomPico: stop.limitPico - usedPico, usedPico };
}
