import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/**
 * A request whose answer reached nobody is not charged (issue 36's chaos test: a routing replica killed
 * after it stored a non-streamed answer's usage and before the answer reached the edge; the caller got a
 * 503 and, before this, paid for it). The edge voids such a request (LedgerService.VoidCharge):
 *
 * - No charge yet: a void row takes the request id in `charges` (cost 0, `voided`). The charge that is
 *   still on the bus, or replayed from routing's outbox after a restart, meets the primary key and is not
 *   applied — the same `on conflict (request_id) do nothing` that makes redelivery harmless. A void and a
 *   settlement racing for one request id are ordered by that key's unique index: whichever inserts second
 *   waits for the first to commit, then sees its row.
 * - Charged already: a `refund` journal entry gives the cost back (balance and the key's spent total);
 *   one refund per request id (the journal's unique (kind, request_id)).
 * - The void of another account's request changes nothing.
 */
export const voidCharges: Migration = {
  async up(db: Kysely<any>) {
    await sql`alter table charges add column voided boolean not null default false`.execute(db);
    await sql`alter table journal drop constraint journal_kind_check`.execute(db);
    await sql`alter table journal add constraint journal_kind_check check (kind in ('topup', 'charge', 'adjustment', 'refund'))`.execute(db);
    await sql`
      create function void_charge(p_request_id text, p_account_id text, p_key_id text)
      returns table (outcome text, refunded_pico bigint)
      language plpgsql
      as $fn$
      declare
        v_charge record;
      begin
        insert into charges (request_id, account_id, key_id, model_id, cost_pico, occurred_at, voided)
        values (p_request_id, p_account_id, p_key_id, '', 0, now(), true)
        on conflict (request_id) do nothing;
        if found then
          return query select 'voided'::text, 0::bigint;
          return;
        end if;
        select c.account_id, c.key_id, c.cost_pico, c.voided into v_charge from charges c where c.request_id = p_request_id;
        if v_charge.account_id <> p_account_id then
          return query select 'not_owned'::text, 0::bigint;
          return;
        end if;
        if v_charge.voided or v_charge.cost_pico = 0 then
          return query select 'already_void'::text, 0::bigint;
          return;
        end if;
        insert into journal (account_id, kind, amount_pico, request_id, note)
        values (v_charge.account_id, 'refund', v_charge.cost_pico, p_request_id, 'answer not delivered')
        on conflict (kind, request_id) where request_id is not null and kind <> 'charge' do nothing;
        if not found then
          return query select 'already_void'::text, 0::bigint;
          return;
        end if;
        -- The key's total, then the balance: the rows and the order admit() and settle_batch() lock them in.
        if v_charge.key_id <> '' then
          update key_totals set spent_pico = spent_pico - v_charge.cost_pico where key_id = v_charge.key_id;
        end if;
        update balances set balance_pico = balance_pico + v_charge.cost_pico, updated_at = now()
        where account_id = v_charge.account_id;
        return query select 'refunded'::text, v_charge.cost_pico;
      end $fn$`.execute(db);
  },
};
