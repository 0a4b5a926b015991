import type { Logger } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { giveBack, RESERVE_PICO, withTransientRetry, type LedgerDatabase } from './ledger-db.js';
import { windowSpentPico, type LimitReset } from './key-windows.js';
import { hardStopRoom, lockHardStops, type BudgetRefusal } from './budgets.js';

/*
 * Leases: a replica's bulk hold of reservation capacity (and of rate-window requests) for one
 * (account, key), granted, recalled, returned and drained here; the Ledger class delegates to these.
 */

export type LeaseOutcome =
  | { kind: 'granted'; leaseId: string; grantedPico: bigint; expiresAt: Date; grantedRequests: number; requestsValidUntil: Date | null; moreAvailable: boolean }
  | { kind: 'rate_limited'; window: 'minute' | 'day'; retryAfterSeconds: number }
  | { kind: 'insufficient'; amountPico: bigint; availablePico: bigint }
  | { kind: 'key_limit'; amountPico: bigint; keyUsedPico: bigint; keyLimitPico: bigint }
  | BudgetRefusal
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

/**
 * Default lifetime of a lease from its grant or last renewal: the holder's admission window (lifetime
 * less the drain time, told to it as renew_within_ms, 15 s by default) plus the drain time for the
 * charges of what it admitted in that window. A holder that dies (SIGKILL, OOM, node loss) stops
 * renewing, and its leases are closed this long after its last renewal instead of holding the account's
 * capacity until the 20-minute reservation sweep.
 */
export const DEFAULT_LEASE_LIFETIME_MS = 45_000;

/** Most lease ids one RenewLeases call may name. */
export const MAX_RENEWED_LEASES = 10_000;

/** Thrown inside an acquisition's transaction so a refusal takes back the rate-window counts it made. */
class LeaseRefused extends Error {
  constructor(readonly outcome: Exclude<LeaseOutcome, { kind: 'granted' | 'recalling' }>) {
    super(outcome.kind);
  }
}

/** What a holder asks for in acquireLease. */
export interface LeaseRequest {
  leaseId: string; accountId: string; keyId: string; holder: string; requestedPico: bigint; keyLimitPico: bigint | null;
  /** The least grant the holder can use (one request's hold); default RESERVE_PICO. */
  minimumPico?: bigint;
  limitGroup: string; requestsPerMinute: number | null; requestsPerDay: number | null; requestedRequests: number;
  lifetimeMs: number; recallIfHeld?: boolean;
  /** The window keyLimitPico applies to; null or absent: the key's lifetime spend. */
  keyLimitReset?: LimitReset | null;
  /** The instant that picks that window; null or absent: the database's clock. */
  windowAt?: Date | null;
}

/**
 * Grants a lease: up to `requestedPico` of reservation capacity (never below RESERVE_PICO) for one
 * (account, key), and with rate limits up to `requestedRequests` requests counted at once in the
 * current windows. Lock order as in `admit`: rate-window rows, the key row, the balance row.
 */
export async function acquireLease(db: LedgerDatabase, logger: Logger, input: LeaseRequest): Promise<LeaseOutcome> {
  const minimumPico = input.minimumPico !== undefined && input.minimumPico > RESERVE_PICO ? input.minimumPico : RESERVE_PICO;
  const requestedPico = input.requestedPico < minimumPico ? minimumPico : input.requestedPico;
  try {
    return await withTransientRetry(() => db.transaction().execute(async (trx) => {
      // Hard-stop budgets first (the lock order of admit_budgeted): no other grant or admission of their
      // scope can hold more between the check below and this grant's hold.
      const hardStops = await lockHardStops(trx, input.accountId, input.keyId);
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
      /** Room left under the key's credit limit (null: no limit). */
      let keyRoom: bigint | null = null;
      let keyHeldPico = 0n;
      if (input.keyId !== '') {
        await sql`insert into key_totals (key_id, account_id) values (${input.keyId}, ${input.accountId}) on conflict (key_id) do nothing`.execute(trx);
        const key = (await sql<{ spent_pico: bigint; reserved_pico: bigint }>`
          select spent_pico, reserved_pico from key_totals where key_id = ${input.keyId} for update`.execute(trx)).rows[0]!;
        keyHeldPico = BigInt(key.reserved_pico);
        if (input.keyLimitPico !== null) {
          // A windowed limit counts the current window's spend, read under the key row lock just taken.
          const spent = input.keyLimitReset ? await windowSpentPico(trx, input.keyId, input.keyLimitReset, input.windowAt ?? null) : BigInt(key.spent_pico);
          const used = spent + BigInt(key.reserved_pico);
          const room = input.keyLimitPico - used;
          if (room < minimumPico) throw new LeaseRefused({ kind: 'key_limit', amountPico: minimumPico, keyUsedPico: used, keyLimitPico: input.keyLimitPico });
          if (room < grant) grant = room;
          keyRoom = room;
        }
      }
      const balance = (await sql<{ balance_pico: bigint; reserved_pico: bigint }>`
        select balance_pico, reserved_pico from balances where account_id = ${input.accountId} for update`.execute(trx)).rows[0];
      const available = balance ? BigInt(balance.balance_pico) - BigInt(balance.reserved_pico) : 0n;
      if (available < minimumPico) throw new LeaseRefused({ kind: 'insufficient', amountPico: minimumPico, availablePico: available });
      // Each hard stop bounds the grant as the key's limit does: its period's spend + its scope's holds
      // (the balance's or the key's reserved, under the row locks taken above) + the grant <= its limit.
      for (const stop of hardStops) {
        const held = stop.keyId === '' ? (balance ? BigInt(balance.reserved_pico) : 0n) : keyHeldPico;
        const { roomPico, usedPico } = await hardStopRoom(trx, input.accountId, stop, held, input.windowAt ?? null);
        if (roomPico < minimumPico) {
          throw new LeaseRefused({ kind: 'budget', amountPico: minimumPico, usedPico, keyId: stop.keyId, period: stop.period, limitPico: stop.limitPico });
        }
        if (roomPico < grant) grant = roomPico;
        if (keyRoom === null || roomPico < keyRoom) keyRoom = roomPico;
      }
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
      const moreAvailable = available - grant >= minimumPico && (keyRoom === null || keyRoom - grant >= minimumPico);
      return { kind: 'granted' as const, leaseId: input.leaseId, grantedPico: grant, expiresAt: lease.expires_at, grantedRequests, requestsValidUntil, moreAvailable };
    }), logger, 'acquire lease');
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
        ) as held`.execute(db)).rows[0]!;
      if (held.held) return { kind: 'recalling', keyId: '' };
    }
    if (input.recallIfHeld && (outcome.kind === 'insufficient' || outcome.kind === 'key_limit' || outcome.kind === 'budget')) {
      // Room the refusal lacked that open leases (not already draining) hold unsettled: worth a recall.
      const keyId = outcome.kind === 'key_limit' ? input.keyId : outcome.kind === 'budget' ? outcome.keyId : '';
      const held = (await sql<{ held: string }>`
        select coalesce(sum(granted_pico - settled_pico), 0)::text as held from leases
        where account_id = ${input.accountId} and closed_at is null and returned_at is null
          and (${keyId} = '' or key_id = ${keyId})`.execute(db)).rows[0]!;
      const room = outcome.kind === 'insufficient' ? outcome.availablePico
        : outcome.kind === 'budget' ? outcome.limitPico - outcome.usedPico
        : outcome.keyLimitPico - outcome.keyUsedPico;
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
export async function returnLease(db: LedgerDatabase, logger: Logger, leaseId: string, unusedRequests = 0, spentPico: bigint | null = null, drainMs = DEFAULT_LEASE_DRAIN_MS): Promise<bigint | null> {
  const keep = spentPico === null ? null : spentPico < 0n ? 0n : spentPico;
  return withTransientRetry(() => db.transaction().execute(async (trx) => {
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
        -- The whole drain from now, even past the lease's renewal deadline: its charges may still come.
        expires_at = now() + make_interval(secs => ${drainMs} / 1000.0),
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
    await giveBack(trx, closed.rows);
    return BigInt(closed.rows[0]!.amount_pico);
  }), logger, 'return lease');
}

/**
 * Moves the deadline of the holder's open, unreturned leases among `leaseIds` to now + lifetimeMs (never
 * earlier than it was). Returns the ids renewed; the others are lost to the holder. Rows are locked in
 * lease-id order, as settle_batch locks them, so the two never deadlock.
 */
export async function renewLeases(db: LedgerDatabase, logger: Logger, holder: string, leaseIds: readonly string[], lifetimeMs: number): Promise<Set<string>> {
  if (leaseIds.length === 0) return new Set();
  const ids = [...leaseIds];
  return withTransientRetry(async () => {
    const renewed = await sql<{ lease_id: string }>`
      with held as (
        select lease_id from leases
        where lease_id = any(${ids}::text[]) and holder = ${holder} and closed_at is null and returned_at is null
        order by lease_id
        for update
      )
      update leases l set expires_at = greatest(l.expires_at, now() + make_interval(secs => ${lifetimeMs} / 1000.0))
      from held h where l.lease_id = h.lease_id
      returning l.lease_id`.execute(db);
    return new Set(renewed.rows.map((row) => row.lease_id));
  }, logger, 'renew leases');
}
