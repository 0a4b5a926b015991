import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/**
 * Budgets and their alerts (issue 42 item 3, docs/governance.md).
 *
 * - `budgets`: one per scope: the account (key_id '') or one of its keys; a limit per UTC period
 *   (daily, weekly from Monday, monthly: the windows of migration 0009), alert thresholds in percent,
 *   and whether 100 % is a hard stop.
 * - `account_spend_days`: credits charged per account per UTC day, kept like key_spend_days by a
 *   statement-level trigger on `charges` (one upsert per settled batch, not per request). Unlike keys,
 *   charges without a key count too.
 * - `budget_alerts`: the durable outbox of fired thresholds. A threshold fires when the spend of the
 *   period reaches it; the unique (account, key, period, period start, threshold) makes it fire once
 *   per period per scope however many settlements cross it at once, on however many ledger replicas:
 *   the row is inserted by a trigger on `charges`, in the very settlement transaction whose charges
 *   crossed it (ON CONFLICT DO NOTHING waits for a concurrent insert of the same row and then adds none).
 *   Webhook delivery (item 4) reads the pending rows; until then they are listed by the budget routes.
 * - `admit_budgeted`: `admit` behind the hard stops. It locks the scope's hard-stop budget rows (account
 *   first, then key), refuses when the period's spend + what the scope holds (open reservations and
 *   leases) + this hold would pass the limit, and otherwise calls `admit` in the same statement. Lease
 *   grants take the same rows first (leases.ts), so the two never interleave between check and hold.
 */
export const budgets: Migration = {
  async up(db: Kysely<any>) {
    await sql`
      create table budgets (
        account_id text not null,
        key_id text not null default '',
        period text not null check (period in ('daily', 'weekly', 'monthly')),
        limit_pico bigint not null check (limit_pico > 0),
        thresholds smallint[] not null check (cardinality(thresholds) <= 10 and 1 <= all(thresholds) and 100 >= all(thresholds)),
        hard_stop boolean not null default false,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now(),
        primary key (account_id, key_id)
      )`.execute(db);
    await sql`
      create table account_spend_days (
        account_id text not null,
        day date not null,
        spent_pico bigint not null default 0 check (spent_pico >= 0),
        primary key (account_id, day)
      )`.execute(db);
    await sql`create index account_spend_days_day on account_spend_days (day)`.execute(db);
    await sql`
      create function charges_to_account_spend_days() returns trigger language plpgsql as $$
      begin
        insert into account_spend_days as d (account_id, day, spent_pico)
        select c.account_id, (c.occurred_at at time zone 'UTC')::date, sum(c.cost_pico)::bigint
        from inserted_charges c
        where c.cost_pico > 0
        group by 1, 2
        order by 1, 2
        on conflict (account_id, day) do update set spent_pico = d.spent_pico + excluded.spent_pico;
        return null;
      end $$`.execute(db);
    // Triggers of one event fire in name order: both spend-day triggers run before
    // charges_zz_budget_alerts, so the alert check reads the batch's own spend.
    await sql`
      create trigger charges_account_spend_days after insert on charges
      referencing new table as inserted_charges
      for each statement execute function charges_to_account_spend_days()`.execute(db);
    await sql`
      insert into account_spend_days (account_id, day, spent_pico)
      select account_id, (occurred_at at time zone 'UTC')::date, sum(cost_pico)::bigint
      from charges
      where cost_pico > 0 and occurred_at >= now() - interval '62 days'
      group by 1, 2`.execute(db);
    await sql`
      create function account_window_spent(p_account_id text, p_reset text, p_at timestamptz) returns bigint
      language sql stable as $$
        select coalesce(sum(d.spent_pico), 0)::bigint from account_spend_days d
        where d.account_id = p_account_id
          and d.day >= key_window_start(p_reset, p_at)
          and d.day <= (p_at at time zone 'UTC')::date
      $$`.execute(db);
    // The spend of a budget's scope in the period holding p_at.
    await sql`
      create function budget_spent(p_account_id text, p_key_id text, p_period text, p_at timestamptz) returns bigint
      language sql stable as $$
        select case when p_key_id = '' then account_window_spent(p_account_id, p_period, p_at)
                    else key_window_spent(p_key_id, p_period, p_at) end
      $$`.execute(db);

    await sql`
      create table budget_alerts (
        id bigint generated always as identity primary key,
        event_id text not null unique default ('evt_' || replace(gen_random_uuid()::text, '-', '')),
        account_id text not null,
        key_id text not null,
        period text not null,
        period_start date not null,
        threshold_percent smallint not null,
        limit_pico bigint not null,
        spent_pico bigint not null,
        fired_at timestamptz not null default now(),
        -- Outbox state for webhook delivery (issue 42 item 4): pending until delivered or dead.
        delivery_state text not null default 'pending' check (delivery_state in ('pending', 'delivered', 'dead')),
        unique (account_id, key_id, period, period_start, threshold_percent)
      )`.execute(db);
    await sql`create index budget_alerts_account on budget_alerts (account_id, id desc)`.execute(db);
    await sql`create index budget_alerts_pending on budget_alerts (id) where delivery_state = 'pending'`.execute(db);
    // Runs after both spend-day triggers (name order). Only scopes the batch charged are looked at, each
    // in the period of its newest charge in the batch; a budget-less account costs one index probe.
    await sql`
      create function charges_to_budget_alerts() returns trigger language plpgsql as $$
      begin
        insert into budget_alerts (account_id, key_id, period, period_start, threshold_percent, limit_pico, spent_pico)
        select b.account_id, b.key_id, b.period, key_window_start(b.period, s.at), t.percent, b.limit_pico, s.spent
        from (
          select c.account_id, c.key_id, max(c.occurred_at) as at
          from inserted_charges c where c.cost_pico > 0 group by 1, 2
        ) c
        join budgets b on b.account_id = c.account_id and (b.key_id = '' or b.key_id = c.key_id)
        cross join lateral (select budget_spent(b.account_id, b.key_id, b.period, c.at) as spent, c.at) s
        cross join lateral unnest(b.thresholds) as t(percent)
        where s.spent::numeric * 100 >= b.limit_pico::numeric * t.percent
        order by b.account_id, b.key_id, t.percent
        on conflict (account_id, key_id, period, period_start, threshold_percent) do nothing;
        return null;
      end $$`.execute(db);
    await sql`
      create trigger charges_zz_budget_alerts after insert on charges
      referencing new table as inserted_charges
      for each statement execute function charges_to_budget_alerts()`.execute(db);

    await sql`
      create function admit_budgeted(
        p_request_id text, p_account_id text, p_key_id text, p_amount bigint,
        p_lifetime_ms bigint, p_key_limit bigint,
        p_limit_group text, p_per_minute bigint, p_per_day bigint,
        p_key_limit_reset text, p_window_at timestamptz
      ) returns table (outcome text, amount_pico bigint, expires_at timestamptz, available_pico bigint,
                       key_used_pico bigint, retry_after_seconds integer, limit_window text,
                       budget_key_id text, budget_period text, budget_limit_pico bigint)
      language plpgsql as $$
      #variable_conflict use_column
      declare
        v_budget record;
        v_used bigint;
      begin
        if p_amount > 0 and not exists (select 1 from reservations r where r.request_id = p_request_id) then
          -- Account budget before key budget: the one lock order of every path that takes them.
          for v_budget in
            select b.key_id, b.period, b.limit_pico from budgets b
            where b.account_id = p_account_id and b.hard_stop and (b.key_id = '' or (p_key_id <> '' and b.key_id = p_key_id))
            order by b.key_id
            for update
          loop
            v_used := budget_spent(p_account_id, v_budget.key_id, v_budget.period, coalesce(p_window_at, now()))
              + coalesce(case when v_budget.key_id = ''
                  then (select bal.reserved_pico from balances bal where bal.account_id = p_account_id)
                  else (select k.reserved_pico from key_totals k where k.key_id = v_budget.key_id) end, 0);
            if v_used + p_amount > v_budget.limit_pico then
              return query select 'budget'::text, p_amount, null::timestamptz, null::bigint, v_used, null::integer, null::text,
                v_budget.key_id, v_budget.period, v_budget.limit_pico;
              return;
            end if;
          end loop;
        end if;
        return query select a.outcome, a.amount_pico, a.expires_at, a.available_pico, a.key_used_pico, a.retry_after_seconds, a.limit_window,
          null::text, null::text, null::bigint
          from admit(p_request_id, p_account_id, p_key_id, p_amount, p_lifetime_ms, p_key_limit, p_limit_group,
                     p_per_minute, p_per_day, p_key_limit_reset, p_window_at) a;
      end $$`.execute(db);
  },
};
