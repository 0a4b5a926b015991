import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/** The sweeper deletes closed reservations past their retention by close time, a batch at a time. */
export const closedReservationIndex: Migration = {
  async up(db: Kysely<any>) {
    await sql`create index reservations_closed on reservations (closed_at) where closed_at is not null`.execute(db);
  },
};
