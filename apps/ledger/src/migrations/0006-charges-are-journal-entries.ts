import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/**
 * A charge is its own journal entry. Until now every settled charge wrote a `charges` row and a
 * `journal` row carrying the same amount and request id; the second insert (heap row, sequence,
 * two indexes) was a fifth of settlement's Postgres time. From here the journal is the union of
 * `journal` (top-ups, adjustments: every kind but charge) and `charges` (append-only too, now
 * enforced), read through the `journal_entries` view. Charge rows already in `journal` stay (the
 * journal is append-only) and the view leaves them out: their `charges` rows count instead.
 */
export const chargesAreJournalEntries: Migration = {
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
