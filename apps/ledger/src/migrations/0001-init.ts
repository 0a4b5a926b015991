import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';
import { usageColumns } from '../schema.js';

export const init: Migration = {
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
