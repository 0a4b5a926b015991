import pg from 'pg';
import { Kysely, PostgresDialect } from 'kysely';
import type { Logger } from '@gateway/platform';
import type { LedgerTables } from './migrations.js';

/**
 * The ledger's pool, shared by kysely and by the Admit hot path, which runs `admit()` as a named
 * (prepared) pg statement: kysely cannot name a statement, and parsing and planning an unnamed
 * statement per request cost ~12% of Postgres' time in the bench. Same settings as the platform's
 * `createDatabase` (search_path = the ledger schema; int8 parsed as BigInt by @gateway/platform).
 */
export function createLedgerDatabase(
  options: { url: string; schema: string; maxConnections: number; applicationName: string },
  logger: Logger,
): { db: Kysely<LedgerTables>; pool: pg.Pool } {
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.maxConnections,
    application_name: options.applicationName,
    options: `-c search_path=${options.schema}`,
    idleTimeoutMillis: 30_000,
  });
  // An idle client dropped by the server is reported on the pool; unhandled, it would end the process.
  pool.on('error', (error) => logger.warn({ schema: options.schema, reason: error.message }, 'idle Postgres connection lost'));
  return { db: new Kysely<LedgerTables>({ dialect: new PostgresDialect({ pool }) }), pool };
}
