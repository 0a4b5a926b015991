import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/**
 * One statement trigger on `charges` instead of three (issue 42's 2 % CPU bound, docs/performance.md).
 *
 * Since migration 0021 every settlement transaction fired three statement triggers on its insert into
 * `charges`: the key spend days (0009), the account spend days and the budget alerts (0021). Each firing
 * is a PL/pgSQL call and an executor start-up of its statement over the transition table, and the alert
 * statement (an aggregate, a join, two lateral calls) ran whether or not the batch's accounts had a budget:
 * together about 7 % of the settlement's Postgres time per batch, for accounts with no budget at all.
 *
 * The one function below does the same work in one call, in the same order: the account spend days, then
 * the key spend days (the lock order of the two triggers before, which fired in name order), then the alert
 * insert, which still reads the batch's own spend. The alert insert now runs only when one of the batch's
 * accounts has a budget (an index probe of `budgets` per account). That test is the alert insert's own join
 * in a statement of its own: a budget committed by another ledger replica (or the API) before the test is
 * seen exactly as the insert would have seen it, and one committed after the test is a budget made after
 * this settlement, which the insert would not have seen a moment later either. No cache, so nothing to
 * invalidate across replicas; the once-per-period uniqueness of `budget_alerts` is unchanged.
 *
 * Dropping the old triggers locks `charges` until this migration commits, so no settlement runs under
 * neither or both.
 */
export const oneSettlementTrigger: Migration = {
  async up(db: Kysely<any>) {
    await sql`
      create function charges_to_spend_days_and_budget_alerts() returns trigger language plpgsql as $$
      begin
        insert into account_spend_days as d (account_id, day, spent_pico)
        select c.account_id, (c.occurred_at at time zone 'UTC')::date, sum(c.cost_pico)::bigint
        from inserted_charges c
        where c.cost_pico > 0
        group by 1, 2
        order by 1, 2
        on conflict (account_id, day) do update set spent_pico = d.spent_pico + excluded.spent_pico;

        insert into key_spend_days as d (key_id, day, spent_pico)
        select c.key_id, (c.occurred_at at time zone 'UTC')::date, sum(c.cost_pico)::bigint
        from inserted_charges c
        where c.key_id <> '' and c.cost_pico > 0
        group by 1, 2
        order by 1, 2
        on conflict (key_id, day) do update set spent_pico = d.spent_pico + excluded.spent_pico;

        -- A batch of budget-less accounts has no threshold to cross.
        if not exists (
          select 1 from budgets b
          where b.account_id in (select c.account_id from inserted_charges c where c.cost_pico > 0)
        ) then
          return null;
        end if;
        -- Only scopes the batch charged are looked at, each in the period of its newest charge in the batch.
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
    await sql`drop trigger charges_account_spend_days on charges`.execute(db);
    await sql`drop trigger charges_key_spend_days on charges`.execute(db);
    await sql`drop trigger charges_zz_budget_alerts on charges`.execute(db);
    await sql`
      create trigger charges_spend_days_and_budget_alerts after insert on charges
      referencing new table as inserted_charges
      for each statement execute function charges_to_spend_days_and_budget_alerts()`.execute(db);
    await sql`drop function charges_to_account_spend_days()`.execute(db);
    await sql`drop function charges_to_key_spend_days()`.execute(db);
    await sql`drop function charges_to_budget_alerts()`.execute(db);
  },
};
