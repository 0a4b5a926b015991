import { formatCredits, type Logger } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import type { Usage } from '@gateway/proto';
import { usageColumns, type LedgerTables } from './migrations.js';
import { booleanArrayLiteral, integerArrayLiteral, textArrayLiteral } from './pg-arrays.js';

/** What a paid request holds while it runs (spec §8). */
export const RESERVE_PICO = 50_000_000_000n;
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
/** A deadlock or serialization failure is retried this many times before the caller sees it. */
const MAX_TRANSIENT_ATTEMPTS = 4;

export type LedgerDatabase = Kysely<LedgerTables>;

export type AdmitOutcome =
  | { kind: 'admitted'; amountPico: bigint; expiresAt: Date | null; repeated: boolean }
  | { kind: 'rate_limited'; window: 'minute' | 'day'; retryAfterSeconds: number }
  | { kind: 'insufficient'; amountPico: bigint; availablePico: bigint }
  | { kind: 'key_limit'; amountPico: bigint; keyUsedPico: bigint; keyLimitPico: bigint };

/** One event ready to settle: the decoded event plus its price, computed before the transaction. */
export interface SettlementItem {
  requestId: string;
  accountId: string;
  keyId: string;
  modelId: string;
  providerId: string;
  endpoint: string;
  served: boolean;
  usage: Usage;
  costPico: bigint;
  occurredAtMs: bigint;
  streamed: boolean;
  /** The lease the request was admitted against; '' for a per-request reservation. */
  leaseId?: string;
  /** The request's W3C traceparent ('' or absent: not traced); the settlement span links to it. */
  traceParent?: string;
}

export type LeaseOutcome =
  | { kind: 'granted'; leaseId: string; grantedPico: bigint; expiresAt: Date; grantedRequests: number; requestsValidUntil: Date | null }
  | { kind: 'rate_limited'; window: 'minute' | 'day'; retryAfterSeconds: number }
  | { kind: 'insufficient'; amountPico: bigint; availablePico: bigint }
  | { kind: 'key_limit'; amountPico: bigint; keyUsedPico: bigint; keyLimitPico: bigint }
  /** Refused for credits that other open leases hold; their holders are asked to return them (`recallIfHeld` only). */
  | { kind: 'recalling'; keyId: string };

/** Most requests one lease may take from a rate window at once. */
export const MAX_LEASE_REQUESTS = 100_000;

/**
 * Default time a returned lease whose charges may still be on the bus stays open (shrunk to them) before
 * the sweeper closes it. Settlement takes milliseconds to seconds; a charge later than this is charged
 * without moving the lease, as for any closed lease.
 */
export const DEFAULT_LEASE_DRAIN_MS = 30_000;

/** Thrown inside an acquisition's transaction so a refusal takes back the rate-window counts it made. */
class LeaseRefused extends Error {
  constructor(readonly outcome: Exclude<LeaseOutcome, { kind: 'granted' | 'recalling' }>) {
    super(outcome.kind);
  }
}

export interface SettlementResult {
  charged: number;
  duplicates: number;
  reservationsClosed: number;
}

export interface ActivityRecord {
  date: string;
  modelId: string;
  keyId: string;
  requests: number;
  usage: Record<(typeof usageColumns)[number], bigint>;
  estimated: boolean;
  costPico: bigint;
}

const UINT32_MAX = 4_294_967_295n;

interface AdmitRow {
  outcome: string; amount_pico: bigint; expires_at: Date | null; available_pico: bigint | null;
  key_used_pico: bigint | null; retry_after_seconds: number | null; limit_window: 'minute' | 'day' | null;
}

/** What Admit needs of a pg pool (kept structural so tests and callers need not import pg). */
export interface AdmitQueryable {
  query<Row>(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: Row[] }>;
}

// Named: each pooled connection parses and plans it once. Types are explicit so the plan never
// depends on the first call's values (a limit above 2^31 - 1 must not fail as int4).
const ADMIT_STATEMENT_NAME = 'ledger_admit_v3';
const ADMIT_STATEMENT = 'select outcome, amount_pico, expires_at, available_pico, key_used_pico, retry_after_seconds, limit_window '
  + 'from admit($1::text, $2::text, $3::text, $4::int8, $5::int8, $6::int8, $7::text, $8::int8, $9::int8)';

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
type ReleasedHold = { account_id: string; key_id: string; amount_pico: bigint };

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
  ) {}

  /**
   * Admits one request: counts it in its rate windows, checks the key credit limit, and reserves
   * `amountPico` (0 for a free model) — all in the `admit` SQL function, one round trip. A free
   * request without rate limits and without a key limit needs nothing from the database.
   */
  async admit(input: {
    requestId: string; accountId: string; keyId: string; amountPico: bigint; keyLimitPico: bigint | null;
    limitGroup: string; requestsPerMinute: number | null; requestsPerDay: number | null;
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
      default:
        throw new Error(`admit returned an unknown outcome: ${row.outcome}`);
    }
  }

  /** Deletes rate-window counters older than two days (nothing reads them), a bounded batch at a time. */
  async pruneRateWindows(): Promise<number> {
    const result = await sql`
      delete from rate_windows where ctid in (
        select ctid from rate_windows where window_start < now() - interval '2 days' limit ${SWEEP_PASS_LIMIT}
      )`.execute(this.db);
    return Number(result.numAffectedRows ?? 0n);
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

  /** Closes an open reservation without a charge. False when there was none (settled, swept, never made). */
  async release(requestId: string, accountId: string): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      const closed = await sql<{ account_id: string; key_id: string; amount_pico: bigint }>`
        update reservations set closed_at = now(), close_reason = 'released'
        where request_id = ${requestId} and closed_at is null and (${accountId} = '' or account_id = ${accountId})
        returning account_id, key_id, amount_pico`.execute(trx);
      await this.giveBack(trx, closed.rows);
      return closed.rows.length > 0;
    });
  }

  /**
   * Adds credits once per idempotency key. Returns the balance after it, or `conflict` when the key
   * was already used for another account or amount.
   */
  async topUp(input: { accountId: string; amountPico: bigint; idempotencyKey: string; note: string }): Promise<{ balancePico: bigint } | { conflict: true }> {
    const inserted = await sql<{ balance_pico: bigint }>`
      with entry as (
        insert into journal (account_id, kind, amount_pico, idempotency_key, note)
        values (${input.accountId}, 'topup', ${input.amountPico}, ${input.idempotencyKey}, ${input.note})
        on conflict (kind, idempotency_key) where idempotency_key is not null do nothing
        returning account_id, amount_pico
      )
      insert into balances (account_id, balance_pico)
      select account_id, amount_pico from entry
      on conflict (account_id) do update set balance_pico = balances.balance_pico + excluded.balance_pico, updated_at = now()
      returning balance_pico`.execute(this.db);
    if (inserted.rows[0]) return { balancePico: inserted.rows[0].balance_pico };
    const first = await this.db.selectFrom('journal').select(['account_id', 'amount_pico'])
      .where('kind', '=', 'topup').where('idempotency_key', '=', input.idempotencyKey).executeTakeFirst();
    if (!first || first.account_id !== input.accountId || first.amount_pico !== input.amountPico) return { conflict: true };
    return { balancePico: (await this.balance(input.accountId)).balancePico };
  }

  async balance(accountId: string): Promise<{ balancePico: bigint; reservedPico: bigint }> {
    const row = await this.db.selectFrom('balances').select(['balance_pico', 'reserved_pico']).where('account_id', '=', accountId).executeTakeFirst();
    return { balancePico: row?.balance_pico ?? 0n, reservedPico: row?.reserved_pico ?? 0n };
  }

  /** Spent credits per key; every asked-for key is answered (0 when it never spent). Empty list: all keys of the account. */
  async keyUsage(accountId: string, keyIds: readonly string[]): Promise<Array<{ keyId: string; spentPico: bigint }>> {
    let query = this.db.selectFrom('key_totals').select(['key_id', 'spent_pico']).where('account_id', '=', accountId);
    if (keyIds.length > 0) query = query.where('key_id', 'in', [...keyIds]);
    const rows = await query.orderBy('key_id').limit(MAX_KEY_IDS).execute();
    const spent = new Map(rows.map((row) => [row.key_id, row.spent_pico]));
    const ordered = keyIds.length > 0 ? [...new Set(keyIds)] : rows.map((row) => row.key_id);
    return ordered.map((keyId) => ({ keyId, spentPico: spent.get(keyId) ?? 0n }));
  }

  /** Charges per UTC day × model × key over the last `days` days (today included), newest day first. */
  async activity(accountId: string, days: number, keyId: string): Promise<ActivityRecord[]> {
    const sums = usageColumns.map((column) => sql`sum(${sql.ref(column)})::text as ${sql.ref(column)}`);
    const result = await sql<Record<string, string | boolean>>`
      select to_char(occurred_at at time zone 'UTC', 'YYYY-MM-DD') as day, model_id, key_id,
             count(*)::text as requests, ${sql.join(sums)}, bool_or(estimated) as estimated, sum(cost_pico)::text as cost_pico
      from charges
      where account_id = ${accountId}
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

  private closeLeases(operation: string, expiredOnly: boolean): Promise<number> {
    return this.sweepInPasses(operation, (trx) => sql<ReleasedHold>`
      with expired as (
        select lease_id from leases
        where closed_at is null and (${!expiredOnly} or expires_at < now())
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
        await this.giveBack(trx, closed.rows);
        return closed.rows.length;
      }), this.logger, operation);
      total += closedCount;
      if (closedCount < SWEEP_PASS_LIMIT) return total;
    }
  }

  /**
   * Grants a lease: up to `requestedPico` of reservation capacity (never below RESERVE_PICO) for one
   * (account, key), and with rate limits up to `requestedRequests` requests counted at once in the
   * current windows. Lock order as in `admit`: rate-window rows, the key row, the balance row.
   */
  async acquireLease(input: {
    leaseId: string; accountId: string; keyId: string; holder: string; requestedPico: bigint; keyLimitPico: bigint | null;
    /** The least grant the holder can use (one request's hold); default RESERVE_PICO. */
    minimumPico?: bigint;
    limitGroup: string; requestsPerMinute: number | null; requestsPerDay: number | null; requestedRequests: number;
    lifetimeMs: number; recallIfHeld?: boolean;
  }): Promise<LeaseOutcome> {
    const minimumPico = input.minimumPico !== undefined && input.minimumPico > RESERVE_PICO ? input.minimumPico : RESERVE_PICO;
    const requestedPico = input.requestedPico < minimumPico ? minimumPico : input.requestedPico;
    try {
      return await withTransientRetry(() => this.db.transaction().execute(async (trx) => {
        let grantedRequests = 0;
        let requestsValidUntil: Date | null = null;
        const windowStarts = new Map<'minute' | 'day', Date>();
        const limited = input.requestsPerMinute !== null || input.requestsPerDay !== null;
        if (limited) {
          let want = Math.max(1, Math.min(input.requestedRequests, MAX_LEASE_REQUESTS));
          const windows: Array<{ kind: 'minute' | 'day'; limit: number }> = [];
          if (input.requestsPerMinute !== null) windows.push({ kind: 'minute', limit: input.requestsPerMinute });
          if (input.requestsPerDay !== null) windows.push({ kind: 'day', limit: input.requestsPerDay });
          const locked: Array<{ kind: 'minute' | 'day'; start: Date; end: Date }> = [];
          // Minute before day, as admit: each row is locked, then all move by the smallest grant.
          for (const window of windows) {
            const start = window.kind === 'minute'
              ? sql`date_trunc('minute', now())`
              : sql`(date_trunc('day', now() at time zone 'UTC') at time zone 'UTC')`;
            const length = window.kind === 'minute' ? sql`interval '1 minute'` : sql`interval '1 day'`;
            // Two statements: a row another acquisition inserts meanwhile is only seen (and waited for) by a new statement.
            await sql`
              insert into rate_windows (account_id, limit_group, window_kind, window_start, request_count)
              values (${input.accountId}, ${input.limitGroup}, ${window.kind}, ${start}, 0)
              on conflict (account_id, limit_group, window_kind, window_start) do nothing`.execute(trx);
            const row = (await sql<{ window_start: Date; window_end: Date; request_count: number; retry_after_seconds: number }>`
              select w.window_start, w.window_start + ${length} as window_end, w.request_count,
                     greatest(1, ceil(extract(epoch from w.window_start + ${length} - clock_timestamp())))::integer as retry_after_seconds
              from rate_windows w
              where w.account_id = ${input.accountId} and w.limit_group = ${input.limitGroup}
                and w.window_kind = ${window.kind} and w.window_start = ${start}
              for update`.execute(trx)).rows[0]!;
            const room = window.limit - Number(row.request_count);
            if (room <= 0) throw new LeaseRefused({ kind: 'rate_limited', window: window.kind, retryAfterSeconds: row.retry_after_seconds });
            want = Math.min(want, room);
            locked.push({ kind: window.kind, start: row.window_start, end: row.window_end });
          }
          for (const window of locked) {
            await sql`
              update rate_windows set request_count = request_count + ${want}
              where account_id = ${input.accountId} and limit_group = ${input.limitGroup}
                and window_kind = ${window.kind} and window_start = ${window.start}`.execute(trx);
          }
          grantedRequests = want;
          for (const window of locked) windowStarts.set(window.kind, window.start);
          requestsValidUntil = locked.reduce<Date | null>((earliest, window) => (earliest === null || window.end < earliest ? window.end : earliest), null);
        }

        let grant = requestedPico;
        if (input.keyId !== '') {
          await sql`insert into key_totals (key_id, account_id) values (${input.keyId}, ${input.accountId}) on conflict (key_id) do nothing`.execute(trx);
          const key = (await sql<{ spent_pico: bigint; reserved_pico: bigint }>`
            select spent_pico, reserved_pico from key_totals where key_id = ${input.keyId} for update`.execute(trx)).rows[0]!;
          if (input.keyLimitPico !== null) {
            const used = BigInt(key.spent_pico) + BigInt(key.reserved_pico);
            const room = input.keyLimitPico - used;
            if (room < minimumPico) throw new LeaseRefused({ kind: 'key_limit', amountPico: minimumPico, keyUsedPico: used, keyLimitPico: input.keyLimitPico });
            if (room < grant) grant = room;
          }
        }
        const balance = (await sql<{ balance_pico: bigint; reserved_pico: bigint }>`
          select balance_pico, reserved_pico from balances where account_id = ${input.accountId} for update`.execute(trx)).rows[0];
        const available = balance ? BigInt(balance.balance_pico) - BigInt(balance.reserved_pico) : 0n;
        if (available < minimumPico) throw new LeaseRefused({ kind: 'insufficient', amountPico: minimumPico, availablePico: available });
        // A small balance is not handed to the first replica whole: at most half of it, in whole holds
        // (never below the minimum), so a second replica asking for the account is granted the rest
        // without a recall, and no lease keeps a sliver smaller than a hold that nobody can use.
        if (available < 2n * grant) {
          const half = (available / 2n / RESERVE_PICO) * RESERVE_PICO;
          grant = half < minimumPico ? minimumPico : half;
        }
        if (available < grant) grant = available;

        await sql`update balances set reserved_pico = reserved_pico + ${grant}, updated_at = now() where account_id = ${input.accountId}`.execute(trx);
        if (input.keyId !== '') await sql`update key_totals set reserved_pico = reserved_pico + ${grant} where key_id = ${input.keyId}`.execute(trx);
        const minuteWindow = windowStarts.get('minute') ?? null;
        const dayWindow = windowStarts.get('day') ?? null;
        const lease = (await sql<{ expires_at: Date }>`
          insert into leases (lease_id, account_id, key_id, holder, limit_group, granted_requests, minute_window, day_window, granted_pico, expires_at)
          values (${input.leaseId}, ${input.accountId}, ${input.keyId}, ${input.holder}, ${input.limitGroup}, ${grantedRequests},
                  ${minuteWindow}, ${dayWindow}, ${grant}, now() + make_interval(secs => ${input.lifetimeMs} / 1000.0))
          returning expires_at`.execute(trx)).rows[0]!;
        return { kind: 'granted' as const, leaseId: input.leaseId, grantedPico: grant, expiresAt: lease.expires_at, grantedRequests, requestsValidUntil };
      }), this.logger, 'acquire lease');
    } catch (error) {
      if (!(error instanceof LeaseRefused)) throw error;
      const outcome = error.outcome;
      if (input.recallIfHeld && outcome.kind === 'rate_limited') {
        // The window is full, but open leases counted in it may not have used their requests yet.
        const window = outcome.window === 'minute'
          ? sql`minute_window = date_trunc('minute', now())`
          : sql`day_window = (date_trunc('day', now() at time zone 'UTC') at time zone 'UTC')`;
        const held = (await sql<{ held: boolean }>`
          select exists (
            select 1 from leases
            where account_id = ${input.accountId} and closed_at is null and returned_at is null
              and limit_group = ${input.limitGroup} and granted_requests > 0 and ${window}
          ) as held`.execute(this.db)).rows[0]!;
        if (held.held) return { kind: 'recalling', keyId: '' };
      }
      if (input.recallIfHeld && (outcome.kind === 'insufficient' || outcome.kind === 'key_limit')) {
        // Room the refusal lacked that open leases (not already draining) hold unsettled: worth a recall.
        const keyId = outcome.kind === 'key_limit' ? input.keyId : '';
        const held = (await sql<{ held: string }>`
          select coalesce(sum(granted_pico - settled_pico), 0)::text as held from leases
          where account_id = ${input.accountId} and closed_at is null and returned_at is null
            and (${keyId} = '' or key_id = ${keyId})`.execute(this.db)).rows[0]!;
        const room = outcome.kind === 'insufficient' ? outcome.availablePico : outcome.keyLimitPico - outcome.keyUsedPico;
        if (room + BigInt(held.held) >= minimumPico) return { kind: 'recalling', keyId };
      }
      return outcome;
    }
  }

  /**
   * Closes an open lease and gives back granted − settled, and the `unusedRequests` (at most what it
   * was granted) to the rate windows it was counted in. Returns null when it is unknown, already closed
   * or already returned. With `spentPico` (the holder's upper bound of its finished requests' cost, whose
   * charges may still be on the bus) the lease is shrunk to max(settled, min(granted, spent)) instead and
   * stays open for `drainMs`, so those charges still move it (it is closed at once when nothing is
   * left to settle); the rest is given back now.
   * Lock order: the lease, rate-window rows, the key row, the balance row.
   */
  async returnLease(leaseId: string, unusedRequests = 0, spentPico: bigint | null = null, drainMs = DEFAULT_LEASE_DRAIN_MS): Promise<bigint | null> {
    const keep = spentPico === null ? null : spentPico < 0n ? 0n : spentPico;
    return withTransientRetry(() => this.db.transaction().execute(async (trx) => {
      const closed = await sql<{
        account_id: string; key_id: string; amount_pico: bigint; limit_group: string; granted_requests: number;
        minute_window: Date | null; day_window: Date | null;
      }>`
        with held as (
          select lease_id, granted_pico as old_granted,
                 case when ${keep}::bigint is null then settled_pico else greatest(settled_pico, least(granted_pico, ${keep}::bigint)) end as kept,
                 settled_pico
          from leases where lease_id = ${leaseId} and closed_at is null and returned_at is null
          for update
        )
        update leases l set
          granted_pico = h.kept,
          returned_at = now(),
          expires_at = least(l.expires_at, now() + make_interval(secs => ${drainMs} / 1000.0)),
          closed_at = case when h.kept = h.settled_pico then now() end,
          close_reason = case when h.kept = h.settled_pico then 'returned' end
        from held h where l.lease_id = h.lease_id
        returning l.account_id, l.key_id, h.old_granted - h.kept as amount_pico, l.limit_group, l.granted_requests, l.minute_window, l.day_window`.execute(trx);
      if (closed.rows.length === 0) return null;
      const lease = closed.rows[0]!;
      const unused = Math.min(Math.max(0, Math.floor(unusedRequests)), lease.granted_requests);
      if (unused > 0) {
        for (const [kind, start] of [['minute', lease.minute_window], ['day', lease.day_window]] as const) {
          if (start === null) continue;
          await sql`
            update rate_windows set request_count = greatest(0, request_count - ${unused})
            where account_id = ${lease.account_id} and limit_group = ${lease.limit_group}
              and window_kind = ${kind} and window_start = ${start}`.execute(trx);
        }
      }
      await this.giveBack(trx, closed.rows);
      return BigInt(closed.rows[0]!.amount_pico);
    }), this.logger, 'return lease');
  }

  /** Keeps what the settler cannot read or price, for an operator; nothing is dropped silently. */
  async recordRejected(entries: ReadonlyArray<{ msgId: string; requestId: string; reason: string; payload: Uint8Array }>): Promise<void> {
    if (entries.length === 0) return;
    await this.db.insertInto('rejected_events')
      .values(entries.map((entry) => ({ msg_id: entry.msgId, request_id: entry.requestId, reason: entry.reason, payload: Buffer.from(entry.payload) })) as any)
      .onConflict((conflict) => conflict.columns(['msg_id', 'request_id']).doNothing())
      .execute();
  }

  private async giveBack(trx: LedgerDatabase, closed: readonly ReleasedHold[]): Promise<void> {
    await this.applyDeltas(trx, closed.map((row) => ({ accountId: row.account_id, keyId: row.key_id, spentPico: 0n, releasedPico: row.amount_pico })));
  }

  /**
   * Moves key totals and balances by the batch's charges and released reservations. Rows are
   * touched in key order, keys before balances — the same order `admit` locks them — so the settler,
   * the sweeper and admissions never deadlock each other.
   */
  private async applyDeltas(
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
}

/**
 * One item per request id, in request id order (two settlers inserting overlapping batches then
 * wait on each other in the same order); a served event wins over a failed one (never lose a charge).
 */
function dedupeByRequest(items: readonly SettlementItem[]): SettlementItem[] {
  const byRequest = new Map<string, SettlementItem>();
  for (const item of items) {
    const seen = byRequest.get(item.requestId);
    if (!seen || (!seen.served && item.served)) byRequest.set(item.requestId, item);
  }
  return [...byRequest.values()].sort((left, right) => (left.requestId < right.requestId ? -1 : left.requestId > right.requestId ? 1 : 0));
}

/** `settle_batch` (migration 0008) as a named statement: parsed and planned once per connection. */
const SETTLE_STATEMENT_NAME = 'ledger_settle_batch_v1';
const SETTLE_PARAMETERS = 6 + usageColumns.length + 4 + 2 + 2;
const SETTLE_STATEMENT = `select charged_count as charged, closed_count as closed from settle_batch(${Array.from({ length: SETTLE_PARAMETERS }, (_, index) => `$${index + 1}`).join(', ')})`;

/**
 * The batch as `settle_batch`'s array parameters, in its argument order: array literals built in one
 * pass (src/pg-arrays.ts). A usage column that is zero for the whole batch goes as null (read as 0):
 * a chat batch uses 3–4 of the 14, and every array element costs parse time in Postgres.
 */
function settleBatchValues(all: readonly SettlementItem[], served: readonly SettlementItem[]): Array<string | null> {
  const leased = served.filter((item) => item.leaseId);
  return [
    textArrayLiteral(served.map((item) => item.requestId)),
    textArrayLiteral(served.map((item) => item.accountId)),
    textArrayLiteral(served.map((item) => item.keyId)),
    textArrayLiteral(served.map((item) => item.modelId)),
    textArrayLiteral(served.map((item) => item.providerId)),
    textArrayLiteral(served.map((item) => item.endpoint)),
    ...usageColumns.map((name) => (served.some((item) => usageValue(item.usage, name) !== 0)
      ? integerArrayLiteral(served.map((item) => usageValue(item.usage, name)))
      : null)),
    booleanArrayLiteral(served.map((item) => item.usage.estimated)),
    integerArrayLiteral(served.map((item) => item.costPico)),
    booleanArrayLiteral(served.map((item) => item.streamed)),
    integerArrayLiteral(served.map((item) => item.occurredAtMs)),
    textArrayLiteral(all.map((item) => item.requestId)),
    booleanArrayLiteral(all.map((item) => item.served)),
    textArrayLiteral(leased.map((item) => item.requestId)),
    textArrayLiteral(leased.map((item) => item.leaseId!)),
  ];
}

const usageFieldByColumn: Record<(typeof usageColumns)[number], keyof Usage> = {
  input_tokens: 'inputTokens', cached_input_tokens: 'cachedInputTokens', output_tokens: 'outputTokens',
  reasoning_tokens: 'reasoningTokens', input_audio_tokens: 'inputAudioTokens', output_audio_tokens: 'outputAudioTokens',
  input_audio_ms: 'inputAudioMs', output_audio_ms: 'outputAudioMs', output_text_tokens: 'outputTextTokens',
  input_text_characters: 'inputTextCharacters', output_text_characters: 'outputTextCharacters',
  output_image_tokens: 'outputImageTokens', input_image_tokens: 'inputImageTokens', input_text_tokens: 'inputTextTokens',
};

export function usageValue(usage: Usage, column: (typeof usageColumns)[number]): number {
  return Number(usage[usageFieldByColumn[column]]) >>> 0;
}

export function usageFromColumns(values: Record<(typeof usageColumns)[number], bigint>, estimated: boolean): Usage {
  // cache_write_tokens is not kept: it is a part of input_tokens (and priced as input), reported per
  // answer by the messages dialect only.
  const usage = { estimated, cacheWriteTokens: 0 } as Usage;
  for (const column of usageColumns) {
    const value = values[column];
    (usage as unknown as Record<string, number>)[usageFieldByColumn[column]] = Number(value > UINT32_MAX ? UINT32_MAX : value);
  }
  return usage;
}

export { formatCredits };
