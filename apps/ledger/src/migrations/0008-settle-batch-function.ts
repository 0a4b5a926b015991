import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';
import { usageColumns } from '../schema.js';

/**
 * Settlement of one batch as ONE call of `settle_batch` (a named statement on the ledger's pool): the
 * same work as the former three statements in a BEGIN/COMMIT (charges, reservation closes and lease
 * moves; then key totals; then balances, in `admit`'s lock order), in one round trip instead of five,
 * with plpgsql's cached plans instead of parsing and planning the statements per batch. Usage arrays
 * that are null (zero for the whole batch) read as 0: `unnest` pads them with nulls.
 */
export const settleBatchFunction: Migration = {
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
