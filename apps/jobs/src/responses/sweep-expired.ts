import type { Logger } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';

/** Rows one delete of a sweep removes at most: each statement stays short however many expired at once. */
const SWEEP_BATCH = 500;

/** A table whose rows expire: keyed by the account and the object's id, with an `expires_at` column. */
export interface ExpiringTable {
  table: 'stored_responses' | 'conversations';
  idColumn: 'response_id' | 'conversation_id';
  /** What the log calls its rows ("stored responses"). */
  what: string;
}

/**
 * Deletes a table's rows past `expires_at` in bounded statements until one deletes fewer than its bound, and
 * answers how many went. The stored responses and the conversations expire the same way, so one loop serves
 * both and a fix to it reaches both. A failure is logged and ends this sweep (it answers what went until
 * then): the next interval takes up what is left.
 */
export async function sweepExpired(db: Kysely<any>, logger: Logger, expiring: ExpiringTable, now: () => number): Promise<number> {
  const table = sql.table(expiring.table);
  const id = sql.ref(expiring.idColumn);
  let total = 0;
  try {
    for (;;) {
      const result = await sql`
        delete from ${table} where (account_id, ${id}) in (
          select account_id, ${id} from ${table} where expires_at <= ${new Date(now())} order by expires_at limit ${SWEEP_BATCH})`.execute(db);
      const deleted = Number(result.numAffectedRows ?? 0n);
      total += deleted;
      if (deleted < SWEEP_BATCH) break;
    }
  } catch (error) {
    logger.warn({ err: error }, `sweep of expired ${expiring.what} failed; retrying at the next interval`);
  }
  return total;
}
