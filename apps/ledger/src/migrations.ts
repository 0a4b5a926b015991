import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

export const LEDGER_SCHEMA = 'ledger';

/** Table shapes as kysely sees them (int8 columns arrive as bigint, see createDatabase). */
export interface LedgerTables {
  balances: { account_id: string; balance_pico: bigint; reserved_pico: bigint; updated_at: Date };
  key_totals: { key_id: string; account_id: string; spent_pico: bigint; reserved_pico: bigint };
  journal: {
    id: bigint; account_id: string; kind: 'topup' | 'charge' | 'adjustment'; amount_pico: bigint;
    request_id: string | null; idempotency_key: string | null; note: string; created_at: Date;
  };
  reservations: {
    request_id: string; account_id: string; key_id: string; amount_pico: bigint; created_at: Date;
    expires_at: Date; closed_at: Date | null; close_reason: 'settled' | 'failed' | 'released' | 'expired' | null;
  };
  charges: {
    request_id: string; account_id: string; key_id: string; model_id: string; provider_id: string; endpoint: string;
    input_tokens: bigint; cached_input_tokens: bigint; output_tokens: bigint; reasoning_tokens: bigint;
    input_audio_tokens: bigint; output_audio_tokens: bigint; input_audio_ms: bigint; output_audio_ms: bigint;
    output_text_tokens: bigint; input_text_characters: bigint; output_text_characters: bigint;
    output_image_tokens: bigint; input_image_tokens: bigint; input_text_tokens: bigint; estimated: boolean;
    cost_pico: bigint; streamed: boolean; occurred_at: Date; created_at: Date;
  };
  rate_windows: { account_id: string; limit_group: string; window_kind: 'minute' | 'day'; window_start: Date; request_count: number };
  leases: {
    lease_id: string; account_id: string; key_id: string; holder: string; limit_group: string; granted_requests: number;
    minute_window: Date | null; day_window: Date | null; granted_pico: bigint; settled_pico: bigint;
    created_at: Date; expires_at: Date; closed_at: Date | null; close_reason: 'returned' | 'expired' | null;
    returned_at: Date | null;
  };
  rejected_events: { id: bigint; msg_id: string; request_id: string; reason: string; payload: Buffer; created_at: Date };
}

/** Usage counters stored on a charge, in proto field order; the settlement and activity code iterate this list. */
export const usageColumns = [
  'input_tokens', 'cached_input_tokens', 'output_tokens', 'reasoning_tokens', 'input_audio_tokens',
  'output_audio_tokens', 'input_audio_ms', 'output_audio_ms', 'output_text_tokens', 'input_text_characters',
  'output_text_characters', 'output_image_tokens', 'input_image_tokens', 'input_text_tokens',
] as const;

const init: Migration = {
  async up(db: Kysely<any>) {
    // balances.reserved_pico is the sum of the account's open reservations, kept on the row so Admit
    // reads one row instead of summing a table; VerifyJournal checks it against the reservations.
    await sql`
      create table balances (
        account_id text primary key,
        balance_pico bigint not null default 0,
        reserved_pico bigint not null default 0 check (reserved_pico >= 0),
        updated_at timestamptz not null default now()
      )`.execute(db);
    // Per-key spend and open reservations: the key credit limit is checked against one locked row.
    await sql`
      create table key_totals (
        key_id text primary key,
        account_id text not null,
        spent_pico bigint not null default 0,
        reserved_pico bigint not null default 0 check (reserved_pico >= 0)
      )`.execute(db);
    await sql`
      create table journal (
        id bigserial primary key,
        account_id text not null,
        kind text not null check (kind in ('topup', 'charge', 'adjustment')),
        amount_pico bigint not null,
        request_id text,
        idempotency_key text,
        note text not null default '',
        created_at timestamptz not null default now()
      )`.execute(db);
    await sql`create unique index journal_kind_request_id on journal (kind, request_id) where request_id is not null`.execute(db);
    await sql`create unique index journal_kind_idempotency_key on journal (kind, idempotency_key) where idempotency_key is not null`.execute(db);
    await sql`create index journal_account on journal (account_id)`.execute(db);
    // Append-only: the journal is the audit trail the balances are checked against.
    await sql`
      create function journal_append_only() returns trigger language plpgsql as $$
      begin
        raise exception 'ledger.journal is append-only';
      end $$`.execute(db);
    await sql`
      create trigger journal_no_update_or_delete before update or delete on journal
      for each row execute function journal_append_only()`.execute(db);

    await sql`
      create table reservations (
        request_id text primary key,
        account_id text not null,
        key_id text not null default '',
        amount_pico bigint not null check (amount_pico >= 0),
        created_at timestamptz not null default now(),
        expires_at timestamptz not null,
        closed_at timestamptz,
        close_reason text check (close_reason in ('settled', 'failed', 'released', 'expired')),
        check ((closed_at is null) = (close_reason is null))
      )`.execute(db);
    await sql`create index reservations_open_expiry on reservations (expires_at) where closed_at is null`.execute(db);
    await sql`create index reservations_open_account on reservations (account_id, expires_at) where closed_at is null`.execute(db);

    await sql.raw(`
      create table charges (
        request_id text primary key,
        account_id text not null,
        key_id text not null default '',
        model_id text not null,
        provider_id text not null default '',
        endpoint text not null default '',
        ${usageColumns.map((column) => `${column} bigint not null default 0`).join(',\n        ')},
        estimated boolean not null default false,
        cost_pico bigint not null check (cost_pico >= 0),
        streamed boolean not null default false,
        occurred_at timestamptz not null,
        created_at timestamptz not null default now()
      )`).execute(db);
    await sql`create index charges_account_occurred on charges (account_id, occurred_at)`.execute(db);

    // Events the settler could not read or price: kept, never silently dropped, for an operator to replay.
    await sql`
      create table rejected_events (
        id bigserial primary key,
        msg_id text not null,
        request_id text not null default '',
        reason text not null,
        payload bytea not null,
        created_at timestamptz not null default now()
      )`.execute(db);
    await sql`create unique index rejected_events_message on rejected_events (msg_id, request_id)`.execute(db);

    // Fixed-window request counters per account and limit group (minute and UTC day windows).
    await sql`
      create table rate_windows (
        account_id text not null,
        limit_group text not null,
        window_kind text not null check (window_kind in ('minute', 'day')),
        window_start timestamptz not null,
        request_count integer not null check (request_count >= 0),
        primary key (account_id, limit_group, window_kind, window_start)
      )`.execute(db);
    await sql`create index rate_windows_start on rate_windows (window_start)`.execute(db);

    // Admission in one round trip, in the order the proto gives: rate windows, key credit limit,
    // reservation. Locks the key row, then the balance row (the settler and the sweeper take them in
    // the same order), so concurrent admissions serialise on the account and can never reserve more
    // than balance - reserved. A statement is atomic: a refusal after a counter moved undoes it.
    // Outcome codes are read by Ledger.admit.
    await sql`
      create function admit(
        p_request_id text, p_account_id text, p_key_id text, p_amount bigint,
        p_lifetime_ms bigint, p_key_limit bigint,
        p_limit_group text, p_per_minute integer, p_per_day integer
      ) returns table (outcome text, amount_pico bigint, expires_at timestamptz, available_pico bigint,
                       key_used_pico bigint, retry_after_seconds integer, limit_window text)
      language plpgsql as $$
      #variable_conflict use_column
      declare
        v_existing reservations%rowtype;
        v_spent bigint := 0;
        v_key_reserved bigint := 0;
        v_available bigint;
        v_expires timestamptz := now() + make_interval(secs => p_lifetime_ms / 1000.0);
        v_released bigint;
        v_minute timestamptz := date_trunc('minute', now());
        v_day timestamptz := date_trunc('day', now() at time zone 'UTC') at time zone 'UTC';
        v_counted_minute boolean := false;
        v_rate_limited boolean := (p_per_minute is not null or p_per_day is not null);
      begin
        select * into v_existing from reservations r where r.request_id = p_request_id;
        if found then
          return query select 'existing'::text, v_existing.amount_pico, v_existing.expires_at, null::bigint, null::bigint, null::integer, null::text;
          return;
        end if;

        -- Requests refused later (credits, key limit) still count: they were made, and counting them
        -- keeps a client hammering without credits from costing the ledger a write per attempt forever.
        if p_per_minute is not null then
          insert into rate_windows as w (account_id, limit_group, window_kind, window_start, request_count)
            select p_account_id, p_limit_group, 'minute', v_minute, 1 where p_per_minute > 0
            on conflict (account_id, limit_group, window_kind, window_start)
            do update set request_count = w.request_count + 1 where w.request_count < p_per_minute;
          if not found then
            return query select 'rate_limited'::text, p_amount, null::timestamptz, null::bigint, null::bigint,
              greatest(1, ceil(extract(epoch from (v_minute + interval '1 minute') - clock_timestamp())))::integer, 'minute'::text;
            return;
          end if;
          v_counted_minute := true;
        end if;
        if p_per_day is not null then
          insert into rate_windows as w (account_id, limit_group, window_kind, window_start, request_count)
            select p_account_id, p_limit_group, 'day', v_day, 1 where p_per_day > 0
            on conflict (account_id, limit_group, window_kind, window_start)
            do update set request_count = w.request_count + 1 where w.request_count < p_per_day;
          if not found then
            if v_counted_minute then
              update rate_windows w set request_count = w.request_count - 1
                where w.account_id = p_account_id and w.limit_group = p_limit_group and w.window_kind = 'minute' and w.window_start = v_minute;
            end if;
            return query select 'rate_limited'::text, p_amount, null::timestamptz, null::bigint, null::bigint,
              greatest(1, ceil(extract(epoch from (v_day + interval '1 day') - clock_timestamp())))::integer, 'day'::text;
            return;
          end if;
        end if;

        if p_key_id <> '' and (p_amount > 0 or p_key_limit is not null) then
          insert into key_totals (key_id, account_id) values (p_key_id, p_account_id) on conflict (key_id) do nothing;
          select k.spent_pico, k.reserved_pico into v_spent, v_key_reserved from key_totals k where k.key_id = p_key_id for update;
          if p_key_limit is not null and v_spent + v_key_reserved + p_amount > p_key_limit then
            return query select 'key_limit'::text, p_amount, null::timestamptz, null::bigint, v_spent + v_key_reserved, null::integer, null::text;
            return;
          end if;
        end if;

        if p_amount > 0 then
          update balances b set reserved_pico = b.reserved_pico + p_amount, updated_at = now()
            where b.account_id = p_account_id and b.balance_pico - b.reserved_pico >= p_amount;
          if not found then
            -- Slow path only: reservations past their deadline that the sweeper has not reached yet
            -- still count in reserved_pico; give them back now so the refusal is exact.
            with expired as (
              update reservations r set closed_at = now(), close_reason = 'expired'
                where r.account_id = p_account_id and r.closed_at is null and r.expires_at < now()
                returning r.key_id, r.amount_pico
            ), per_key as (
              update key_totals k set reserved_pico = k.reserved_pico - s.total
                from (select e.key_id, sum(e.amount_pico)::bigint as total from expired e where e.key_id <> '' group by e.key_id) s
                where k.key_id = s.key_id
            )
            select coalesce(sum(e.amount_pico), 0)::bigint into v_released from expired e;
            if v_released > 0 then
              update balances b set reserved_pico = b.reserved_pico - v_released where b.account_id = p_account_id;
              update balances b set reserved_pico = b.reserved_pico + p_amount, updated_at = now()
                where b.account_id = p_account_id and b.balance_pico - b.reserved_pico >= p_amount;
            end if;
            if v_released = 0 or not found then
              select b.balance_pico - b.reserved_pico into v_available from balances b where b.account_id = p_account_id;
              return query select 'insufficient'::text, p_amount, null::timestamptz, coalesce(v_available, 0), null::bigint, null::integer, null::text;
              return;
            end if;
          end if;
          if p_key_id <> '' then
            update key_totals k set reserved_pico = k.reserved_pico + p_amount where k.key_id = p_key_id;
          end if;
        elsif not v_rate_limited then
          -- A free request without rate windows leaves nothing to remember: a repeat answers the same.
          return query select 'admitted'::text, 0::bigint, null::timestamptz, null::bigint, null::bigint, null::integer, null::text;
          return;
        end if;

        -- The row is also the idempotency record: a repeat of this request id must not count twice
        -- in a rate window nor reserve twice. A free request's row holds 0 and is closed like any other.
        insert into reservations (request_id, account_id, key_id, amount_pico, expires_at)
          values (p_request_id, p_account_id, p_key_id, p_amount, v_expires);
        return query select 'admitted'::text, p_amount, v_expires, null::bigint, null::bigint, null::integer, null::text;
      end $$`.execute(db);
  },
};

/**
 * A charge's journal row is written only for a row the same statement inserted into `charges`, whose
 * primary key is the request id: uniqueness is already enforced there. The second unique index on
 * every charge cost ~10% of settlement time; it now covers only the other kinds.
 */
const chargeUniquenessOnCharges: Migration = {
  async up(db: Kysely<any>) {
    await sql`create unique index journal_kind_request_id_not_charge on journal (kind, request_id) where request_id is not null and kind <> 'charge'`.execute(db);
    await sql`drop index journal_kind_request_id`.execute(db);
  },
};

/**
 * `admit` v2. Rate limits are bigint: the catalog accepts tier limits up to 4,294,967,295 and an
 * integer parameter made every Admit above 2^31 - 1 fail. Fewer writes per admission:
 * - a free request without rate limits and without a key limit returns before any read (nothing
 *   to remember: a repeat answers the same);
 * - a paid request on a key without a credit limit has nothing to check on the key row, so it
 *   adds its reservation to key_totals in one upsert instead of insert + row lock + update (the
 *   key_totals.reserved_pico invariant stays). The upsert still comes before the balance row
 *   (lock order: keys, then balances) and is taken back if the balance refuses;
 * - a free request with a key limit reads the key row without locking or creating it: it
 *   reserves nothing, so nothing on the row changes.
 */
const admitBigintLimits: Migration = {
  async up(db: Kysely<any>) {
    await sql`drop function admit(text, text, text, bigint, bigint, bigint, text, integer, integer)`.execute(db);
    await sql`
      create function admit(
        p_request_id text, p_account_id text, p_key_id text, p_amount bigint,
        p_lifetime_ms bigint, p_key_limit bigint,
        p_limit_group text, p_per_minute bigint, p_per_day bigint
      ) returns table (outcome text, amount_pico bigint, expires_at timestamptz, available_pico bigint,
                       key_used_pico bigint, retry_after_seconds integer, limit_window text)
      language plpgsql as $$
      #variable_conflict use_column
      declare
        v_existing reservations%rowtype;
        v_spent bigint := 0;
        v_key_reserved bigint := 0;
        v_available bigint;
        v_expires timestamptz;
        v_released bigint;
        v_minute timestamptz;
        v_day timestamptz;
        v_counted_minute boolean := false;
        v_rate_limited boolean := (p_per_minute is not null or p_per_day is not null);
        v_key_checked boolean := (p_key_id <> '' and p_key_limit is not null);
        v_key_upserted boolean := false;
      begin
        if p_amount = 0 and not v_rate_limited and not v_key_checked then
          return query select 'admitted'::text, 0::bigint, null::timestamptz, null::bigint, null::bigint, null::integer, null::text;
          return;
        end if;

        select * into v_existing from reservations r where r.request_id = p_request_id;
        if found then
          return query select 'existing'::text, v_existing.amount_pico, v_existing.expires_at, null::bigint, null::bigint, null::integer, null::text;
          return;
        end if;

        -- Requests refused later (credits, key limit) still count: they were made, and counting them
        -- keeps a client hammering without credits from costing the ledger a write per attempt forever.
        if p_per_minute is not null then
          v_minute := date_trunc('minute', now());
          insert into rate_windows as w (account_id, limit_group, window_kind, window_start, request_count)
            select p_account_id, p_limit_group, 'minute', v_minute, 1 where p_per_minute > 0
            on conflict (account_id, limit_group, window_kind, window_start)
            do update set request_count = w.request_count + 1 where w.request_count < p_per_minute;
          if not found then
            return query select 'rate_limited'::text, p_amount, null::timestamptz, null::bigint, null::bigint,
              greatest(1, ceil(extract(epoch from (v_minute + interval '1 minute') - clock_timestamp())))::integer, 'minute'::text;
            return;
          end if;
          v_counted_minute := true;
        end if;
        if p_per_day is not null then
          v_day := date_trunc('day', now() at time zone 'UTC') at time zone 'UTC';
          insert into rate_windows as w (account_id, limit_group, window_kind, window_start, request_count)
            select p_account_id, p_limit_group, 'day', v_day, 1 where p_per_day > 0
            on conflict (account_id, limit_group, window_kind, window_start)
            do update set request_count = w.request_count + 1 where w.request_count < p_per_day;
          if not found then
            if v_counted_minute then
              update rate_windows w set request_count = w.request_count - 1
                where w.account_id = p_account_id and w.limit_group = p_limit_group and w.window_kind = 'minute' and w.window_start = v_minute;
            end if;
            return query select 'rate_limited'::text, p_amount, null::timestamptz, null::bigint, null::bigint,
              greatest(1, ceil(extract(epoch from (v_day + interval '1 day') - clock_timestamp())))::integer, 'day'::text;
            return;
          end if;
        end if;

        if v_key_checked then
          if p_amount > 0 then
            insert into key_totals (key_id, account_id) values (p_key_id, p_account_id) on conflict (key_id) do nothing;
            select k.spent_pico, k.reserved_pico into v_spent, v_key_reserved from key_totals k where k.key_id = p_key_id for update;
          else
            select k.spent_pico, k.reserved_pico into v_spent, v_key_reserved from key_totals k where k.key_id = p_key_id;
            v_spent := coalesce(v_spent, 0);
            v_key_reserved := coalesce(v_key_reserved, 0);
          end if;
          if v_spent + v_key_reserved + p_amount > p_key_limit then
            return query select 'key_limit'::text, p_amount, null::timestamptz, null::bigint, v_spent + v_key_reserved, null::integer, null::text;
            return;
          end if;
        elsif p_key_id <> '' and p_amount > 0 then
          insert into key_totals as k (key_id, account_id, reserved_pico) values (p_key_id, p_account_id, p_amount)
            on conflict (key_id) do update set reserved_pico = k.reserved_pico + excluded.reserved_pico;
          v_key_upserted := true;
        end if;

        if p_amount > 0 then
          update balances b set reserved_pico = b.reserved_pico + p_amount, updated_at = now()
            where b.account_id = p_account_id and b.balance_pico - b.reserved_pico >= p_amount;
          if not found then
            -- Slow path only: reservations past their deadline that the sweeper has not reached yet
            -- still count in reserved_pico; give them back now so the refusal is exact.
            with expired as (
              update reservations r set closed_at = now(), close_reason = 'expired'
                where r.account_id = p_account_id and r.closed_at is null and r.expires_at < now()
                returning r.key_id, r.amount_pico
            ), per_key as (
              update key_totals k set reserved_pico = k.reserved_pico - s.total
                from (select e.key_id, sum(e.amount_pico)::bigint as total from expired e where e.key_id <> '' group by e.key_id) s
                where k.key_id = s.key_id
            )
            select coalesce(sum(e.amount_pico), 0)::bigint into v_released from expired e;
            if v_released > 0 then
              update balances b set reserved_pico = b.reserved_pico - v_released where b.account_id = p_account_id;
              update balances b set reserved_pico = b.reserved_pico + p_amount, updated_at = now()
                where b.account_id = p_account_id and b.balance_pico - b.reserved_pico >= p_amount;
            end if;
            if v_released = 0 or not found then
              if v_key_upserted then
                update key_totals k set reserved_pico = k.reserved_pico - p_amount where k.key_id = p_key_id;
              end if;
              select b.balance_pico - b.reserved_pico into v_available from balances b where b.account_id = p_account_id;
              return query select 'insufficient'::text, p_amount, null::timestamptz, coalesce(v_available, 0), null::bigint, null::integer, null::text;
              return;
            end if;
          end if;
          if v_key_checked then
            update key_totals k set reserved_pico = k.reserved_pico + p_amount where k.key_id = p_key_id;
          end if;
        elsif not v_rate_limited then
          -- A free request without rate windows leaves nothing to remember: a repeat answers the same.
          return query select 'admitted'::text, 0::bigint, null::timestamptz, null::bigint, null::bigint, null::integer, null::text;
          return;
        end if;

        -- The row is also the idempotency record: a repeat of this request id must not count twice
        -- in a rate window nor reserve twice. A free request's row holds 0 and is closed like any other.
        v_expires := now() + make_interval(secs => p_lifetime_ms / 1000.0);
        insert into reservations (request_id, account_id, key_id, amount_pico, expires_at)
          values (p_request_id, p_account_id, p_key_id, p_amount, v_expires);
        return query select 'admitted'::text, p_amount, v_expires, null::bigint, null::bigint, null::integer, null::text;
      end $$`.execute(db);
  },
};

/** The sweeper deletes closed reservations past their retention by close time, a batch at a time. */
const closedReservationIndex: Migration = {
  async up(db: Kysely<any>) {
    await sql`create index reservations_closed on reservations (closed_at) where closed_at is not null`.execute(db);
  },
};

/**
 * Leased budgets (DESIGN §2): a block of reservation capacity one edge replica holds for one
 * (account, key). Its open rest (granted − settled) counts in balances.reserved_pico and
 * key_totals.reserved_pico exactly like an open reservation; a settled charge naming the lease moves
 * min(cost, rest) from reserved to settled, so the charge is not counted twice.
 */
const leases: Migration = {
  async up(db: Kysely<any>) {
    await sql`
      create table leases (
        lease_id text primary key,
        account_id text not null,
        key_id text not null default '',
        holder text not null default '',
        -- Requests counted in the rate windows for this lease; unused ones are taken back on return.
        limit_group text not null default '',
        granted_requests integer not null default 0,
        minute_window timestamptz,
        day_window timestamptz,
        granted_pico bigint not null check (granted_pico >= 0),
        settled_pico bigint not null default 0,
        created_at timestamptz not null default now(),
        expires_at timestamptz not null,
        closed_at timestamptz,
        close_reason text check (close_reason in ('returned', 'expired')),
        check (settled_pico >= 0 and settled_pico <= granted_pico),
        check ((closed_at is null) = (close_reason is null))
      )`.execute(db);
    await sql`create index leases_open_expiry on leases (expires_at) where closed_at is null`.execute(db);
    await sql`create index leases_open_account on leases (account_id) where closed_at is null`.execute(db);
  },
};

/**
 * A charge is its own journal entry. Until now every settled charge wrote a `charges` row and a
 * `journal` row carrying the same amount and request id; the second insert (heap row, sequence,
 * two indexes) was a fifth of settlement's Postgres time. From here the journal is the union of
 * `journal` (top-ups, adjustments: every kind but charge) and `charges` (append-only too, now
 * enforced), read through the `journal_entries` view. Charge rows already in `journal` stay (the
 * journal is append-only) and the view leaves them out: their `charges` rows count instead.
 */
const chargesAreJournalEntries: Migration = {
  async up(db: Kysely<any>) {
    await sql`
      create function charges_append_only() returns trigger language plpgsql as $$
      begin
        raise exception 'ledger.charges is append-only';
      end $$`.execute(db);
    await sql`
      create trigger charges_no_update_or_delete before update or delete on charges
      for each row execute function charges_append_only()`.execute(db);
    await sql`
      create view journal_entries as
        select account_id, kind, amount_pico, request_id, idempotency_key, note, created_at
        from journal where kind <> 'charge'
        union all
        select account_id, 'charge', -cost_pico, request_id, null, '', created_at
        from charges where cost_pico > 0`.execute(db);
  },
};

/**
 * A lease its holder returned while charges of its finished requests may still be on the bus
 * (ReturnLease with spent_credits): it stays open, shrunk to what those charges may still need, so the
 * settler moves them out of it; `returned_at` keeps it out of recalls and further returns.
 */
const leaseDraining: Migration = {
  async up(db: Kysely<any>) {
    await sql`alter table leases add column returned_at timestamptz`.execute(db);
  },
};

/**
 * Settlement of one batch as ONE call of `settle_batch` (a named statement on the ledger's pool): the
 * same work as the former three statements in a BEGIN/COMMIT (charges, reservation closes and lease
 * moves; then key totals; then balances, in `admit`'s lock order), in one round trip instead of five,
 * with plpgsql's cached plans instead of parsing and planning the statements per batch. Usage arrays
 * that are null (zero for the whole batch) read as 0: `unnest` pads them with nulls.
 */
const settleBatchFunction: Migration = {
  async up(db: Kysely<any>) {
    await sql.raw(`
      create function settle_batch(
        p_request_ids text[], p_account_ids text[], p_key_ids text[], p_model_ids text[], p_provider_ids text[], p_endpoints text[],
        ${usageColumns.map((column) => `p_${column} bigint[]`).join(', ')},
        p_estimated boolean[], p_costs bigint[], p_streamed boolean[], p_occurred_ms bigint[],
        p_close_request_ids text[], p_close_served boolean[],
        p_lease_request_ids text[], p_lease_ids text[])
      returns table (charged_count integer, closed_count integer)
      language plpgsql
      set plan_cache_mode = force_custom_plan
      as $fn$
      declare
        v_charged integer;
        v_closed integer;
        v_keys text[]; v_key_accounts text[]; v_key_spent bigint[]; v_key_released bigint[];
        v_accounts text[]; v_account_spent bigint[]; v_account_released bigint[];
      begin
        with incoming as (
          select * from unnest(p_request_ids, p_account_ids, p_key_ids, p_model_ids, p_provider_ids, p_endpoints,
                               ${usageColumns.map((column) => `p_${column}`).join(', ')},
                               p_estimated, p_costs, p_streamed, p_occurred_ms)
            as t(request_id, account_id, key_id, model_id, provider_id, endpoint,
                 ${usageColumns.join(', ')},
                 estimated, cost_pico, streamed, occurred_ms)
          where request_id is not null
        ), inserted as (
          insert into charges (request_id, account_id, key_id, model_id, provider_id, endpoint,
                               ${usageColumns.join(', ')}, estimated, cost_pico, streamed, occurred_at)
          select request_id, account_id, key_id, model_id, provider_id, endpoint,
                 ${usageColumns.map((column) => `coalesce(${column}, 0)`).join(', ')}, estimated, cost_pico, streamed,
                 case when occurred_ms > 0 then to_timestamp(occurred_ms / 1000.0) else now() end
          from incoming
          on conflict (request_id) do nothing
          returning request_id, account_id, key_id, cost_pico
        ), closing as (
          update reservations r
          set closed_at = now(), close_reason = case when f.served then 'settled' else 'failed' end
          from unnest(p_close_request_ids, p_close_served) as f(request_id, served)
          where r.request_id = f.request_id and r.closed_at is null
          returning r.account_id, r.key_id, r.amount_pico
        ), lease_costs as (
          select f.lease_id, sum(i.cost_pico)::bigint as cost
          from inserted i
          join unnest(p_lease_request_ids, p_lease_ids) as f(request_id, lease_id) on f.request_id = i.request_id
          group by f.lease_id
        ), lease_locked as (
          select l.lease_id, l.account_id, l.key_id, least(c.cost, l.granted_pico - l.settled_pico) as moved
          from leases l join lease_costs c on c.lease_id = l.lease_id
          where l.closed_at is null
          order by l.lease_id
          for update of l
        ), leased as (
          update leases l set settled_pico = l.settled_pico + m.moved
          from lease_locked m where l.lease_id = m.lease_id and m.moved > 0
          returning m.account_id, m.key_id, m.moved
        ), moves as (
          select account_id, key_id, cost_pico as spent, 0::bigint as released, 1 as charged, 0 as closed from inserted
          union all
          select account_id, key_id, 0::bigint, amount_pico, 0, 1 from closing
          union all
          select account_id, key_id, 0::bigint, moved, 0, 0 from leased
        ), per_key as (
          select account_id, key_id, sum(spent)::bigint as spent, sum(released)::bigint as released,
                 sum(charged)::integer as charged, sum(closed)::integer as closed
          from moves group by account_id, key_id
        ), per_account as (
          select account_id, sum(spent)::bigint as spent, sum(released)::bigint as released
          from per_key group by account_id having sum(spent) <> 0 or sum(released) <> 0
        ), key_moves as (
          -- A key id names one key (of one account); grouped by it alone, one row per key_totals row.
          select key_id, min(account_id) as account_id, sum(spent)::bigint as spent, sum(released)::bigint as released
          from per_key where key_id <> '' group by key_id having sum(spent) <> 0 or sum(released) <> 0
        )
        select (select coalesce(sum(k.charged), 0)::integer from per_key k),
               (select coalesce(sum(k.closed), 0)::integer from per_key k),
               (select array_agg(k.key_id order by k.key_id) from key_moves k),
               (select array_agg(k.account_id order by k.key_id) from key_moves k),
               (select array_agg(k.spent order by k.key_id) from key_moves k),
               (select array_agg(k.released order by k.key_id) from key_moves k),
               (select array_agg(a.account_id order by a.account_id) from per_account a),
               (select array_agg(a.spent order by a.account_id) from per_account a),
               (select array_agg(a.released order by a.account_id) from per_account a)
        into v_charged, v_closed, v_keys, v_key_accounts, v_key_spent, v_key_released, v_accounts, v_account_spent, v_account_released;

        -- Key totals, then balances, each in key order: the rows and the order admit() locks them in.
        -- A key without a row has no open hold, so a new row only ever carries spend.
        if v_keys is not null then
          insert into key_totals as kt (key_id, account_id, spent_pico, reserved_pico)
          select d.key_id, d.account_id, d.spent, 0 from unnest(v_keys, v_key_accounts, v_key_spent, v_key_released)
            as d(key_id, account_id, spent, released)
          order by d.key_id
          on conflict (key_id) do update set
            spent_pico = kt.spent_pico + excluded.spent_pico,
            reserved_pico = kt.reserved_pico - v_key_released[array_position(v_keys, excluded.key_id)];
        end if;
        if v_accounts is not null then
          insert into balances as b (account_id, balance_pico)
          select d.account_id, -d.spent from unnest(v_accounts, v_account_spent) as d(account_id, spent)
          order by d.account_id
          on conflict (account_id) do update set
            balance_pico = b.balance_pico + excluded.balance_pico,
            reserved_pico = b.reserved_pico - v_account_released[array_position(v_accounts, excluded.account_id)],
            updated_at = now();
        end if;
        return query select v_charged, v_closed;
      end $fn$`).execute(db);
  },
};

export const ledgerMigrations: Record<string, Migration> = {
  '0001_init': init,
  '0002_charge_uniqueness_on_charges': chargeUniquenessOnCharges,
  '0003_admit_bigint_limits_fewer_writes': admitBigintLimits,
  '0004_closed_reservation_index': closedReservationIndex,
  '0005_leases': leases,
  '0006_charges_are_journal_entries': chargesAreJournalEntries,
  '0007_lease_draining': leaseDraining,
  '0008_settle_batch_function': settleBatchFunction,
};
