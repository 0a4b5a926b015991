import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/**
 * Keys that reset (OpenRouter's `limit_reset`): a key's credit limit may apply to its spend in the
 * current UTC day, week (Monday 00:00 UTC) or month instead of its lifetime spend.
 *
 * - `key_spend_days`: credits charged per key per UTC day (of the charge's `occurred_at`). A week is
 *   at most 7 rows, a month at most 31, read by primary key range. Kept by a statement-level trigger on
 *   `charges` (every settlement path inserts there, whatever function does it), one upsert per settled
 *   batch in key order; it runs before settlement touches key_totals and balances, and admissions never
 *   lock these rows, so the lock order of `admit` (key row, then balance) is unchanged.
 * - `key_window_spent`: the spend of the window holding an instant.
 * - `admit` with two more arguments: the window (null: lifetime, as before) and the instant that picks
 *   the window (null: the database's clock). The key check becomes: window spend + the key's open holds
 *   + this hold <= limit, read under the same key row lock as before, so it is as exact as the lifetime
 *   limit. The nine-argument `admit` stays for replicas still running the previous release.
 * - The table is filled from the charges already settled (the last 62 days: more than any window).
 */
export const keySpendWindows: Migration = {
  async up(db: Kysely<any>) {
    await sql`
      create table key_spend_days (
        key_id text not null,
        day date not null,
        spent_pico bigint not null default 0 check (spent_pico >= 0),
        primary key (key_id, day)
      )`.execute(db);
    await sql`create index key_spend_days_day on key_spend_days (day)`.execute(db);
    await sql`
      create function charges_to_key_spend_days() returns trigger language plpgsql as $$
      begin
        insert into key_spend_days as d (key_id, day, spent_pico)
        select c.key_id, (c.occurred_at at time zone 'UTC')::date, sum(c.cost_pico)::bigint
        from inserted_charges c
        where c.key_id <> '' and c.cost_pico > 0
        group by 1, 2
        order by 1, 2
        on conflict (key_id, day) do update set spent_pico = d.spent_pico + excluded.spent_pico;
        return null;
      end $$`.execute(db);
    // Locks charges against concurrent settlement until this migration commits, so the backfill below
    // and the trigger together count every charge exactly once.
    await sql`
      create trigger charges_key_spend_days after insert on charges
      referencing new table as inserted_charges
      for each statement execute function charges_to_key_spend_days()`.execute(db);
    await sql`
      insert into key_spend_days (key_id, day, spent_pico)
      select key_id, (occurred_at at time zone 'UTC')::date, sum(cost_pico)::bigint
      from charges
      where key_id <> '' and cost_pico > 0 and occurred_at >= now() - interval '62 days'
      group by 1, 2`.execute(db);
    await sql`
      create function key_window_start(p_reset text, p_at timestamptz) returns date
      language sql immutable strict as $$
        select case p_reset
          when 'daily' then (p_at at time zone 'UTC')::date
          when 'weekly' then date_trunc('week', p_at at time zone 'UTC')::date
          when 'monthly' then date_trunc('month', p_at at time zone 'UTC')::date
        end
      $$`.execute(db);
    await sql`
      create function key_window_spent(p_key_id text, p_reset text, p_at timestamptz) returns bigint
      language sql stable as $$
        select coalesce(sum(d.spent_pico), 0)::bigint from key_spend_days d
        where d.key_id = p_key_id
          and d.day >= key_window_start(p_reset, p_at)
          and d.day <= (p_at at time zone 'UTC')::date
      $$`.execute(db);
    await sql`
      create function admit(
        p_request_id text, p_account_id text, p_key_id text, p_amount bigint,
        p_lifetime_ms bigint, p_key_limit bigint,
        p_limit_group text, p_per_minute bigint, p_per_day bigint,
        p_key_limit_reset text, p_window_at timestamptz
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
          -- A windowed limit counts the spend of the current window only; holds count whatever their age
          -- (read after the key row lock, so a settlement cannot slip between the two reads).
          if p_key_limit_reset is not null then
            v_spent := key_window_spent(p_key_id, p_key_limit_reset, coalesce(p_window_at, now()));
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
