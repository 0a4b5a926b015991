import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/**
 * A charge's journal row is written only for a row the same statement inserted into `charges`, whose
 * primary key is the request id: uniqueness is already enforced there. The second unique index on
 * every charge cost ~10% of settlement time; it now covers only the other kinds.
 */
export const chargeUniquenessOnCharges: Migration = {
  async up(db: Kysely<any>) {
    await sql`create unique index journal_kind_request_id_not_charge on journal (kind, request_id) where request_id is not null and kind <> 'charge'`.execute(db);
    await sql`drop index journal_kind_request_id`.execute(db);
  },
};
