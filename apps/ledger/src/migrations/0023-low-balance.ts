import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/**
 * The `balance.low` webhook event (issue 42 item 4, docs/governance.md "Webhooks").
 *
 * - `balances.low_balance_threshold_pico`: the account's low-balance threshold, null when it has none
 *   (set and cleared by webhooks/low-balance.ts; setting it makes the account's balances row if it has none).
 * - `balances_low_balance`: a row trigger on the balance itself. Its WHEN clause is evaluated on the
 *   row the updating statement already holds (settle_batch, the fallback settlement, a refund, a top-up),
 *   with no query: an account without a threshold costs one null test, and only an update that takes
 *   the balance from at or above the threshold to below it calls the function. The row lock of that
 *   update orders every change of one balance, on however many ledger replicas: each update's OLD is the
 *   previous one's NEW, so exactly one update crosses downwards per descent, and the next crossing needs
 *   the balance back at or above the threshold first (a top-up, a refund). A change of the threshold
 *   alone (not of balance_pico) never fires.
 * - The event is written only for an account with a webhook endpoint (nobody else to tell), in the
 *   crossing transaction: it commits or rolls back with the charge.
 */
export const lowBalance: Migration = {
  async up(db: Kysely<any>) {
    await sql`alter table balances add column low_balance_threshold_pico bigint check (low_balance_threshold_pico >= 0)`.execute(db);
    await sql`
      create function balances_to_low_balance_events() returns trigger language plpgsql as $$
      begin
        insert into webhook_events (event_id, account_id, type, data)
        select 'evt_' || replace(gen_random_uuid()::text, '-', ''), new.account_id, 'balance.low',
          jsonb_build_object(
            'account_id', new.account_id,
            'threshold', trim_scale(new.low_balance_threshold_pico::numeric / 1000000000000)::text,
            'balance', trim_scale(new.balance_pico::numeric / 1000000000000)::text)
        where exists (select 1 from webhook_endpoints w where w.account_id = new.account_id);
        return null;
      end $$`.execute(db);
    await sql`
      create trigger balances_low_balance after update of balance_pico on balances
      for each row
      when (new.low_balance_threshold_pico is not null
            and old.balance_pico >= new.low_balance_threshold_pico
            and new.balance_pico < new.low_balance_threshold_pico)
      execute function balances_to_low_balance_events()`.execute(db);
  },
};
