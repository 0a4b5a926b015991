import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/**
 * A lease its holder returned while charges of its finished requests may still be on the bus
 * (ReturnLease with spent_credits): it stays open, shrunk to what those charges may still need, so the
 * settler moves them out of it; `returned_at` keeps it out of recalls and further returns.
 */
export const leaseDraining: Migration = {
  async up(db: Kysely<any>) {
    await sql`alter table leases add column returned_at timestamptz`.execute(db);
  },
};
