import { randomBytes } from 'node:crypto';
import { formatCredits, UNATTRIBUTED_AUDIT, type AuditCallContext, type Logger } from '@gateway/platform';
import { appendAudit, auditedTransaction, listAccountAudit, readAuditChain, sql } from '@gateway/platform/db';
import { usageColumns } from './migrations.js';
import { giveBack, RESERVE_PICO, withTransientRetry, type LedgerDatabase, type ReleasedHold } from './ledger-db.js';
import * as leases from './leases.js';
import { keyWindowUsage, pruneSpendDays, type LimitReset } from './key-windows.js';
import * as budgets from './budgets.js';
import type { BudgetPeriod, BudgetRefusal } from './budgets.js';
import { listGenerations, modelLatency, pruneGenerations, readGeneration, GENERATION_RETENTION_MS } from './generations.js';
import {
  dedupeByRequest, settleBatchValues, SETTLE_STATEMENT, SETTLE_STATEMENT_NAME, UINT32_MAX, type SettlementItem, type SettlementResult,
} from './settlement-batch.js';

/** The chain the ledger's audit entries form (docs/governance.md): top-ups, budgets. */
export const LEDGER_AUDIT_CHAIN = 'ledger';

export { RESERVE_PICO, withTransientRetry, type LedgerDatabase } from './ledger-db.js';
export { DEFAULT_LEASE_DRAIN_MS, DEFAULT_LEASE_LIFETIME_MS, MAX_LEASE_REQUESTS, MAX_RENEWED_LEASES, type LeaseOutcome, type LeaseRequest } from './leases.js';
export { usageFromColumns, usageValue, type SettlementItem, type SettlementResult } from './settlement-batch.js';

/** Longer than the 15-minute body limit plus the longest stream, so a live request is never swept. */
export const DEFAULT_RESERVATION_LIFETIME_MS = 20 * 60_000;
/** Bounds of a read: activity rows per answer, key ids per usage query, reservations per sweep pass. */
export const MAX_ACTIVITY_ROWS = 10_000;
export const MAX_KEY_IDS = 1_000;
export const SWEEP_PASS_LIMIT = 1_000;
/**
 * Closed reservations are kept this long (they answer a repeated request id), then deleted. Far
 * above the reservation lifetime: a repeat after that re-evaluates, which the spec allows.
 */
export const DEFAULT_RESERVATION_RETENTION_MS = 7 * 24 * 3_600_000;
/** Rows per delete statement and statements per sweep pass: a pass stays short whatever the backlog. */
export const PRUNE_BATCH_ROWS = 5_000;
export const PRUNE_BATCHES_PER_PASS = 20;

export type VoidResult = 'voided' | 'refunded' | 'already_void' | 'not_owned';

export type AdmitOutcome =
  | { kind: 'admitted'; amountPico: bigint; expiresAt: Date | null; repeated: boolean }
  | { kind: 'rate_limited'; window: 'minute' | 'day'; retryAfterSeconds: number }
  | { kind: 'insufficient'; amountPico: bigint; availablePico: bigint }
  | { kind: 'key_limit'; amountPico: bigint; keyUsedPico: bigint; keyLimitPico: bigint }
  | BudgetRefusal;

export interface ActivityRecord {
  date: string;
  modelId: string;
  keyId: string;
  requests: number;
  usage: Record<(typeof usageColumns)[number], bigint>;
  estimated: boolean;
  costPico: bigint;
}

interface AdmitRow {
  outcome: string; amount_pico: bigint; expires_at: Date | null; available_pico: bigint | null;
  key_used_pico: bigint | null; retry_after_seconds: number | null; limit_window: 'minute' | 'day' | null;
  budget_key_id: string | null; budget_period: string | null; budget_limit_pico: bigint | null;
}

/** What Admit needs of a pg pool (kept structural so tests and callers need not import pg). */
export interface AdmitQueryable {
  query<Row>(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: Row[] }>;
}

// Named: each pooled connection parses and plans it once. Types are explicit so the plan never
// depends on the first call's values (a limit above 2^31 - 1 must not fail as int4).
// admit_budgeted (migration 0021) is admit behind the budgets' hard stops, in the same round trip.
const ADMIT_STATEMENT_NAME = 'ledger_admit_v5';
const ADMIT_STATEMENT = 'select outcome, amount_pico, expires_at, available_pico, key_used_pico, retry_after_seconds, limit_window, '
  + 'budget_key_id, budget_period, budget_limit_pico '
  + 'from admit_budgeted($1::text, $2::text, $3::text, $4::int8, $5::int8, $6::int8, $7::text, $8::int8, $9::int8, $10::text, $11::timestamptz)';

export interface LedgerClockOptions {
  /**
   * The clock (ms since the epoch) that picks a key's current spend window (limit_reset); tests move it.
   * Unset: the database's clock, the one every ledger replica shares.
   */
  now?: () => number;
}

/**
 * The ledger's state: balances, the append-only journal (`journal_entries`: the `journal` table's
 * top-ups and adjustments plus the `charges` table, each charge its own entry; balance =
 * sum(journal_entries) per account), reservations and leases. Every money amount is bigint pico-credits.
 */
export class Ledger {
  constructor(
    private readonly db: LedgerDatabase,
    private readonly logger: Logger,
    readonly reservationLifetimeMs: number,
    /** The pool behind `db`: Admit runs on it as a named (prepared) statement. */
    private readonly pool: AdmitQueryable,
    private readonly clock: LedgerClockOptions = {},
  ) {}

  /** The instant that picks key spend windows: null means the database's now(). */
  windowAt(): Date | null {
    return this.clock.now ? new Date(this.clock.now()) : null;
  }

  /**
   * Admits one request: counts it in its rate windows, checks the key credit limit, and reserves
   * `amountPico` (0 for a free model) — all in the `admit` SQL function, one round trip. A free
   * request without rate limits and without a key limit needs nothing from the database.
   */
  async admit(input: {
    requestId: string; accountId: string; keyId: string; amountPico: bigint; keyLimitPico: bigint | null;
    limitGroup: string; requestsPerMinute: number | null; requestsPerDay: number | null;
    /** The window keyLimitPico applies to; null or absent: the key's lifetime spend. */
    keyLimitReset?: LimitReset | null;
  }): Promise<AdmitOutcome> {
    if (input.amountPico === 0n && input.requestsPerMinute === null && input.requestsPerDay === null
      && (input.keyLimitPico === null || input.keyId === '')) {
      return { kind: 'admitted', amountPico: 0n, expiresAt: null, repeated: false };
    }
    // Rate limits go as int8: the catalog allows up to 4,294,967,295, past int4.
    const values = [
      input.requestId, input.accountId, input.keyId, input.amountPico.toString(), String(this.reservationLifetimeMs),
      input.keyLimitPico === null ? null : input.keyLimitPico.toString(), input.limitGroup,
      input.requestsPerMinute === null ? null : String(input.requestsPerMinute),
      input.requestsPerDay === null ? null : String(input.requestsPerDay),
      input.keyLimitReset ?? null, this.windowAt()?.toISOString() ?? null,
    ];
    const row = await withTransientRetry(
      async () => (await this.pool.query<AdmitRow>({ name: ADMIT_STATEMENT_NAME, text: ADMIT_STATEMENT, values })).rows[0]!,
      this.logger, 'admit');
    switch (row.outcome) {
      case 'admitted':
      case 'existing':
        return {
          kind: 'admitted',
          amountPico: row.amount_pico,
          // A free request holds nothing, so it has no deadline to report (its row only remembers the answer).
          expiresAt: row.amount_pico > 0n ? row.expires_at : null,
          repeated: row.outcome === 'existing',
        };
      case 'rate_limited':
        return { kind: 'rate_limited', window: row.limit_window ?? 'minute', retryAfterSeconds: row.retry_after_seconds ?? 1 };
      case 'insufficient':
        return { kind: 'insufficient', amountPico: row.amount_pico, availablePico: row.available_pico ?? 0n };
      case 'key_limit':
        return { kind: 'key_limit', amountPico: row.amount_pico, keyUsedPico: row.key_used_pico ?? 0n, keyLimitPico: input.keyLimitPico ?? 0n };
      case 'budget':
        return {
          kind: 'budget', amountPico: row.amount_pico, usedPico: row.key_used_pico ?? 0n, keyId: row.budget_key_id ?? '',
          period: (row.budget_period ?? 'monthly') as BudgetPeriod, limitPico: row.budget_limit_pico ?? 0n,
        };
      default:
        throw new Error(`admit returned an unknown outcome: ${row.outcome}`);
    }
  }

  /**
   * Deletes rate-window counters older than two days, and key and account spend days older than any spend
   * window or budget period (nothing reads them), a bounded batch of each at a time.
   */
  async pruneRateWindows(): Promise<number> {
    const result = await sql`
      delete from rate_windows where ctid in (
        select ctid from rate_windows where window_start < now() - interval '2 days' limit ${SWEEP_PASS_LIMIT}
      )`.execute(this.db);
    return Number(result.numAffectedRows ?? 0n) + await pruneSpendDays(this.db, SWEEP_PASS_LIMIT);
  }

  /**
   * Deletes reservations closed more than `retentionMs` ago, `batchRows` per statement and at most
   * `maxBatches` statements per call (the next sweep pass continues). Open reservations are never
   * touched. Returns how many rows it deleted.
   */
  async pruneClosedReservations(retentionMs: number, batchRows = PRUNE_BATCH_ROWS, maxBatches = PRUNE_BATCHES_PER_PASS): Promise<number> {
    let total = 0;
    for (let batch = 0; batch < maxBatches; batch++) {
      const result = await sql`
        delete from reservations where request_id in (
          select request_id from reservations
          where closed_at is not null and closed_at < now() - make_interval(secs => ${retentionMs / 1000})
          order by closed_at limit ${batchRows}
        ) and closed_at is not null`.execute(this.db);
      const deleted = Number(result.numAffectedRows ?? 0n);
      total += deleted;
      if (deleted < batchRows) break;
    }
    return total;
  }

  /** The generation record of one request of the account (generations.ts). */
  generation(accountId: string, requestId: string) {
    return readGeneration(this.db, accountId, requestId);
  }

  /** A page of the account's generation records, newest first (generations.ts). */
  listGenerations(accountId: string, input: { limit: number; cursor: string; keyId: string }) {
    return listGenerations(this.db, accountId, input);
  }

  /** Requests and latency percentiles per model and provider, every account, last `days` days (generations.ts). */
  modelLatency(days: number) {
    return modelLatency(this.db, days);
  }

  /** Deletes generation records past retention, a bounded number per call (generations.ts). */
  pruneGenerations(retentionMs = GENERATION_RETENTION_MS): Promise<number> {
    return pruneGenerations(this.db, retentionMs);
  }

  /** Closes an open reservation without a charge. False when there was none (settled, swept, never made). */
  async release(requestId: string, accountId: string): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      const closed = await sql<{ account_id: string; key_id: string; amount_pico: bigint }>`
        update reservations set closed_at = now(), close_reason = 'released'
        where request_id = ${requestId} and closed_at is null and (${accountId} = '' or account_id = ${accountId})
        returning account_id, key_id, amount_pico`.execute(trx);
      await giveBack(trx, closed.rows);
      return closed.rows.length > 0;
    });
  }

  /**
   * The request's answer reached nobody: no charge stands for it (`void_charge`, migration 0012). Before its
   * charge settled, the request is marked void and the charge is never applied; after, the charge is refunded.
   */
  async voidCharge(requestId: string, accountId: string, keyId: string): Promise<{ outcome: VoidResult; refundedPico: bigint }> {
    const result = await sql<{ outcome: VoidResult; refunded_pico: string }>`
      select outcome, refunded_pico::text from void_charge(${requestId}, ${accountId}, ${keyId})`.execute(this.db);
    const row = result.rows[0]!;
    return { outcome: row.outcome, refundedPico: BigInt(row.refunded_pico) };
  }

  /**
   * Adds credits once per idempotency key. Returns the balance after it, or `conflict` when the key
   * was already used for another account or amount.
   */
  async topUp(
    input: { accountId: string; amountPico: bigint; idempotencyKey: string; note: string },
    audit: AuditCallContext = UNATTRIBUTED_AUDIT,
  ): Promise<{ balancePico: bigint } | { conflict: true }> {
    // The journal entry, the balance and the audit entry commit together; a replayed key adds none of them.
    const inserted = await auditedTransaction(this.db, async (trx) => {
      const credited = await sql<{ balance_pico: bigint }>`
        with entry as (
          insert into journal (account_id, kind, amount_pico, idempotency_key, note)
          values (${input.accountId}, 'topup', ${input.amountPico}, ${input.idempotencyKey}, ${input.note})
          on conflict (kind, idempotency_key) where idempotency_key is not null do nothing
          returning account_id, amount_pico
        )
        insert into balances (account_id, balance_pico)
        select account_id, amount_pico from entry
        on conflict (account_id) do update set balance_pico = balances.balance_pico + excluded.balance_pico, updated_at = now()
        returning balance_pico`.execute(trx);
      const after = credited.rows[0];
      if (after) {
        await appendAudit(trx, LEDGER_AUDIT_CHAIN, {
          ...audit, accountId: input.accountId, action: 'credits.top_up', targetType: 'account', targetId: input.accountId,
          before: { balance: formatCredits(after.balance_pico - input.amountPico) },
          after: { balance: formatCredits(after.balance_pico), credits: formatCredits(input.amountPico), idempotency_key: input.idempotencyKey, note: input.note },
        });
        // The credits.topped_up webhook event (webhooks/), only for an account with an endpoint to tell.
        await sql`
          insert into webhook_events (event_id, account_id, type, data)
          select ${`evt_${randomBytes(16).toString('hex')}`}, ${input.accountId}, 'credits.topped_up',
            ${JSON.stringify({ credits: formatCredits(input.amountPico), balance: formatCredits(after.balance_pico) })}::jsonb
          where exists (select 1 from webhook_endpoints w where w.account_id = ${input.accountId})`.execute(trx);
      }
      return credited;
    });
    if (inserted.rows[0]) return { balancePico: inserted.rows[0].balance_pico };
    const first = await this.db.selectFrom('journal').select(['account_id', 'amount_pico'])
      .where('kind', '=', 'topup').where('idempotency_key', '=', input.idempotencyKey).executeTakeFirst();
    if (!first || first.account_id !== input.accountId || first.amount_pico !== input.amountPico) return { conflict: true };
    return { balancePico: (await this.balance(input.accountId)).balancePico };
  }

  /** Creates or replaces a scope's budget (budgets.ts), with its audit entry. */
  async setBudget(input: Parameters<typeof budgets.setBudget>[1], audit: AuditCallContext = UNATTRIBUTED_AUDIT) {
    return budgets.setBudget(this.db, input, audit);
  }

  async deleteBudget(accountId: string, keyId: string, audit: AuditCallContext = UNATTRIBUTED_AUDIT) {
    return budgets.deleteBudget(this.db, accountId, keyId, audit);
  }

  /** Budgets with the current period's spend, judged by the ledger's clock (tests move it). */
  async listBudgets(accountId: string) {
    return budgets.listBudgets(this.db, accountId, this.windowAt());
  }

  async listBudgetAlerts(accountId: string) {
    return budgets.listBudgetAlerts(this.db, accountId);
  }

  /** One account's audit entries, newest first. */
  async listAuditEntries(request: { accountId: string; limit: number; cursor: string }) {
    return listAccountAudit(this.db, LEDGER_AUDIT_CHAIN, request);
  }

  /** The whole chain (or one account's part of it), oldest first, with its head (admin). */
  async readAuditChain(request: { afterSeq: bigint; limit: number; accountId: string }) {
    return readAuditChain(this.db, LEDGER_AUDIT_CHAIN, request);
  }

  async balance(accountId: string): Promise<{ balancePico: bigint; reservedPico: bigint }> {
    return (await this.balances([accountId]))[0]!;
  }

  /** The balances of `accountIds` in one query, in the order given; an account without a row has 0 of each. */
  async balances(accountIds: readonly string[]): Promise<Array<{ accountId: string; balancePico: bigint; reservedPico: bigint }>> {
    if (accountIds.length === 0) return [];
    const rows = await this.db.selectFrom('balances').select(['account_id', 'balance_pico', 'reserved_pico'])
      .where('account_id', 'in', [...new Set(accountIds)]).execute();
    const byId = new Map(rows.map((row) => [row.account_id, row]));
    return accountIds.map((accountId) => {
      const row = byId.get(accountId);
      return { accountId, balancePico: row?.balance_pico ?? 0n, reservedPico: row?.reserved_pico ?? 0n };
    });
  }

  /**
   * Spent credits per key, in all and in the current UTC day, week and month; every asked-for key is
   * answered (0 when it never spent). Empty list: all keys of the account.
   */
  async keyUsage(accountId: string, keyIds: readonly string[]): Promise<Array<{
    keyId: string; spentPico: bigint; dailyPico: bigint; weeklyPico: bigint; monthlyPico: bigint;
  }>> {
    // One snapshot for both reads: a settlement committing between them would show a window's spend
    // above the lifetime spend (seen in account-keys.e2e once settlements grew two trigger statements).
    const { rows, ordered, windows } = await this.db.transaction().setIsolationLevel('repeatable read').execute(async (trx) => {
      let query = trx.selectFrom('key_totals').select(['key_id', 'spent_pico']).where('account_id', '=', accountId);
      if (keyIds.length > 0) query = query.where('key_id', 'in', [...keyIds]);
      const found = await query.orderBy('key_id').limit(MAX_KEY_IDS).execute();
      const keys = keyIds.length > 0 ? [...new Set(keyIds)] : found.map((row) => row.key_id);
      return { rows: found, ordered: keys, windows: await keyWindowUsage(trx, accountId, keys, this.windowAt()) };
    });
    const spent = new Map(rows.map((row) => [row.key_id, row.spent_pico]));
    return ordered.map((keyId) => {
      const window = windows.get(keyId);
      return {
        keyId, spentPico: spent.get(keyId) ?? 0n,
        dailyPico: window?.dailyPico ?? 0n, weeklyPico: window?.weeklyPico ?? 0n, monthlyPico: window?.monthlyPico ?? 0n,
      };
    });
  }

  /** Charges per UTC day × model × key over the last `days` days (today included), newest day first. */
  async activity(accountId: string, days: number, keyId: string): Promise<ActivityRecord[]> {
    const sums = usageColumns.map((column) => sql`sum(${sql.ref(column)})::text as ${sql.ref(column)}`);
    const result = await sql<Record<string, string | boolean>>`
      select to_char(occurred_at at time zone 'UTC', 'YYYY-MM-DD') as day, model_id, key_id,
             count(*)::text as requests, ${sql.join(sums)}, bool_or(estimated) as estimated, sum(cost_pico)::text as cost_pico
      from charges
      where account_id = ${accountId} and not voided
        and occurred_at >= (date_trunc('day', now() at time zone 'UTC') - make_interval(days => ${days - 1})) at time zone 'UTC'
        and (${keyId} = '' or key_id = ${keyId})
      group by 1, 2, 3
      order by 1 desc, 2, 3
      limit ${MAX_ACTIVITY_ROWS}`.execute(this.db);
    return result.rows.map((row) => ({
      date: row.day as string,
      modelId: row.model_id as string,
      keyId: row.key_id as string,
      requests: Number(BigInt(row.requests as string) > UINT32_MAX ? UINT32_MAX : BigInt(row.requests as string)),
      usage: Object.fromEntries(usageColumns.map((column) => [column, BigInt(row[column] as string)])) as ActivityRecord['usage'],
      estimated: row.estimated === true,
      costPico: BigInt(row.cost_pico as string),
    }));
  }

  /** Accounts whose stored balance differs from the sum of their journal, or whose reserved sum differs from their open reservations. */
  async verify(accountId: string): Promise<{
    accountsChecked: number;
    balanceMismatches: Array<{ accountId: string; storedPico: bigint; journalPico: bigint }>;
    reservedMismatches: Array<{ accountId: string; storedPico: bigint; openPico: bigint }>;
  }> {
    const result = await sql<{ account_id: string; stored: string | null; journal: string | null; reserved: string | null; open: string | null }>`
      with journal_sums as (
        select account_id, sum(amount_pico) as total from journal_entries where (${accountId} = '' or account_id = ${accountId}) group by account_id
      ), open_sums as (
        select account_id, sum(total) as total from (
          select account_id, amount_pico as total from reservations
          where closed_at is null and (${accountId} = '' or account_id = ${accountId})
          union all
          select account_id, granted_pico - settled_pico from leases
          where closed_at is null and (${accountId} = '' or account_id = ${accountId})
        ) open_holds group by account_id
      ), accounts as (
        select account_id from balances where (${accountId} = '' or account_id = ${accountId})
        union select account_id from journal_sums union select account_id from open_sums
      )
      select a.account_id, b.balance_pico::text as stored, j.total::text as journal, b.reserved_pico::text as reserved, o.total::text as open
      from accounts a
      left join balances b using (account_id)
      left join journal_sums j using (account_id)
      left join open_sums o using (account_id)`.execute(this.db);
    const balanceMismatches = [];
    const reservedMismatches = [];
    for (const row of result.rows) {
      const storedPico = BigInt(row.stored ?? '0');
      const journalPico = BigInt(row.journal ?? '0');
      if (storedPico !== journalPico) balanceMismatches.push({ accountId: row.account_id, storedPico, journalPico });
      const reservedPico = BigInt(row.reserved ?? '0');
      const openPico = BigInt(row.open ?? '0');
      if (reservedPico !== openPico) reservedMismatches.push({ accountId: row.account_id, storedPico: reservedPico, openPico });
    }
    return { accountsChecked: result.rows.length, balanceMismatches, reservedMismatches };
  }

  /**
   * Settles a batch in ONE transaction: a charge per served request id not charged before (the
   * charges primary key makes redelivery and duplicate publishes harmless; the charge row is the
   * journal entry), its debit, the close of every matching open reservation, and for charges naming a
   * lease the move of min(cost, rest) out of the lease. A charge may take the balance below zero: the
   * answer was already delivered, and the reservation only bounds how far.
   *
   * One call of `settle_batch` (migration 0008) whatever the batch size — one round trip, plans cached
   * by plpgsql; inside it key totals and then balances are touched last, in `admit`'s lock order.
   */
  /** Reservations and leases open now (metrics); both counts use the `closed_at is null` partial indexes. */
  async openHolds(): Promise<{ reservations: number; leases: number }> {
    const result = await sql<{ reservations: bigint; leases: bigint }>`
      select (select count(*) from reservations where closed_at is null) as reservations,
             (select count(*) from leases where closed_at is null) as leases`.execute(this.db);
    const row = result.rows[0];
    return { reservations: Number(row?.reservations ?? 0n), leases: Number(row?.leases ?? 0n) };
  }

  async settle(items: readonly SettlementItem[]): Promise<SettlementResult> {
    const unique = dedupeByRequest(items);
    if (unique.length === 0) return { charged: 0, duplicates: 0, reservationsClosed: 0 };
    const served = unique.filter((item) => item.served);
    const values = settleBatchValues(unique, served);
    const row = await withTransientRetry(
      async () => (await this.pool.query<{ charged: number; closed: number }>({ name: SETTLE_STATEMENT_NAME, text: SETTLE_STATEMENT, values })).rows[0]!,
      this.logger, 'settle');
    return { charged: row.charged, duplicates: served.length - row.charged, reservationsClosed: row.closed };
  }

  /** Closes reservations past their deadline and gives their amounts back. Returns how many it closed. */
  async sweepExpired(): Promise<number> {
    // SKIP LOCKED: a reservation the settler is closing right now is left to it.
    const reservations = await this.sweepInPasses('sweep', (trx) => sql<ReleasedHold>`
      with expired as (
        select request_id from reservations
        where closed_at is null and expires_at < now()
        order by expires_at limit ${SWEEP_PASS_LIMIT}
        for update skip locked
      )
      update reservations r set closed_at = now(), close_reason = 'expired'
      from expired e where r.request_id = e.request_id
      returning r.account_id, r.key_id, r.amount_pico`.execute(trx));
    // Leases past their deadline (a replica that died or lost track) give back what they did not settle.
    return reservations + await this.closeLeases('sweep leases', true);
  }

  /**
   * Closes every open lease as expired, giving back what it did not settle (charges still on the bus
   * that name one are charged only). For a start where no holder can be alive (see reclaimLeasesOnStart).
   */
  async closeOpenLeases(): Promise<number> {
    return this.closeLeases('close open leases', false);
  }

  private closeLeases(operation: string, expiredOnly: boolean, accountId = ''): Promise<number> {
    return this.sweepInPasses(operation, (trx) => sql<ReleasedHold>`
      with expired as (
        select lease_id from leases
        where closed_at is null and (${!expiredOnly} or expires_at < now()) and (${accountId} = '' or account_id = ${accountId})
        order by lease_id limit ${SWEEP_PASS_LIMIT}
        for update skip locked
      )
      update leases l set closed_at = now(), close_reason = 'expired'
      from expired e where l.lease_id = e.lease_id
      returning l.account_id, l.key_id, l.granted_pico - l.settled_pico as amount_pico`.execute(trx));
  }

  /** Runs one closing statement in bounded passes (one transaction each) until a pass closes fewer than the bound. */
  private async sweepInPasses(
    operation: string,
    close: (trx: LedgerDatabase) => Promise<{ rows: ReleasedHold[] }>,
  ): Promise<number> {
    let total = 0;
    for (;;) {
      const closedCount = await withTransientRetry(() => this.db.transaction().execute(async (trx) => {
        const closed = await close(trx);
        await giveBack(trx, closed.rows);
        return closed.rows.length;
      }), this.logger, operation);
      total += closedCount;
      if (closedCount < SWEEP_PASS_LIMIT) return total;
    }
  }

  /**
   * Grants a lease (leases.ts). A refusal for credits (with recallIfHeld) first closes the account's
   * leases past their deadline — their holder stopped renewing them (it died, or lost the ledger) and the
   * drain time in their lifetime has passed — instead of leaving them to the next sweep pass; when it
   * closed any, the answer is `recalling`, so the caller's retry finds what they gave back.
   */
  async acquireLease(input: leases.LeaseRequest): Promise<leases.LeaseOutcome> {
    const outcome = await leases.acquireLease(this.db, this.logger, { windowAt: this.windowAt(), ...input });
    if (!input.recallIfHeld || (outcome.kind !== 'insufficient' && outcome.kind !== 'key_limit' && outcome.kind !== 'recalling')) return outcome;
    const closed = await this.closeLeases('close lapsed leases', true, input.accountId);
    if (closed === 0 || outcome.kind === 'recalling') return outcome;
    this.logger.info({ account_id: input.accountId, leases: closed }, 'lapsed leases of the account closed for an acquisition');
    return { kind: 'recalling', keyId: outcome.kind === 'key_limit' ? input.keyId : '' };
  }

  /** Renews the holder's leases among `leaseIds` for `lifetimeMs`; returns those renewed (leases.ts). */
  renewLeases(holder: string, leaseIds: readonly string[], lifetimeMs: number): Promise<Set<string>> {
    return leases.renewLeases(this.db, this.logger, holder, leaseIds, lifetimeMs);
  }

  /** Returns a lease, or shrinks it to what may still be settled (leases.ts). */
  returnLease(leaseId: string, unusedRequests = 0, spentPico: bigint | null = null, drainMs = leases.DEFAULT_LEASE_DRAIN_MS): Promise<bigint | null> {
    return leases.returnLease(this.db, this.logger, leaseId, unusedRequests, spentPico, drainMs);
  }

  /** Keeps what the settler cannot read or price, for an operator; nothing is dropped silently. */
  async recordRejected(entries: ReadonlyArray<{ msgId: string; requestId: string; reason: string; payload: Uint8Array }>): Promise<void> {
    if (entries.length === 0) return;
    await this.db.insertInto('rejected_events')
      .values(entries.map((entry) => ({ msg_id: entry.msgId, request_id: entry.requestId, reason: entry.reason, payload: Buffer.from(entry.payload) })) as any)
      .onConflict((conflict) => conflict.columns(['msg_id', 'request_id']).doNothing())
      .execute();
  }
}

export { formatCredits };
