// `@gateway/platform/db`: Postgres for the services that own tables (auth, catalog, ledger, media).
// Not in the package's main entry, so the edge and routing, which hold no database, never load pg and
// kysely (~13 MB of each process's memory; a test checks their import graphs).
import pg from 'pg';
import { Kysely, Migrator, PostgresDialect, sql, type Migration, type MigrationProvider } from 'kysely';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { observePool } from '../metrics/pool-metrics.js';

// int8 (bigint) columns carry pico-credits and counts: parse them as BigInt, never as a float.
pg.types.setTypeParser(pg.types.builtins.INT8, (value: string) => BigInt(value));

export interface DatabaseOptions {
  url: string;
  /** The service's own schema; every table of the service lives in it. */
  schema: string;
  /** Pool bound: each service holds at most this many connections. */
  maxConnections?: number;
  applicationName?: string;
  /** Where the pool's state is reported (`gateway_db_pool_*`, labelled with the schema). */
  metrics?: Registry;
}

/**
 * A kysely handle whose connections use the service's schema as search_path, so service code writes
 * unqualified table names and two services never share a table.
 */
export function createDatabase<Schema>(options: DatabaseOptions, logger?: Logger): Kysely<Schema> {
  assertIdentifier(options.schema);
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.maxConnections ?? 10,
    application_name: options.applicationName ?? options.schema,
    options: `-c search_path=${options.schema}`,
    idleTimeoutMillis: 30_000,
  });
  // An idle client dropped by the server (restart, pg_terminate_backend) is reported on the pool;
  // without a listener Node treats it as unhandled and the whole service exits. The pool replaces
  // the client on the next checkout, so logging is all there is to do.
  pool.on('error', (error) => logger?.warn({ schema: options.schema, reason: error.message }, 'idle Postgres connection lost'));
  if (options.metrics) observePool(options.metrics, options.schema, pool);
  return new Kysely<Schema>({ dialect: new PostgresDialect({ pool }) });
}

/** Migrations are plain objects in code (no file scanning), applied in key order. */
class InlineMigrations implements MigrationProvider {
  constructor(private readonly migrations: Record<string, Migration>) {}
  async getMigrations(): Promise<Record<string, Migration>> {
    return this.migrations;
  }
}

/**
 * Creates the schema if needed and applies pending migrations; throws with the failing migration's name.
 * `allowUnorderedMigrations`: for a schema whose migrations come in independent named groups (the jobs
 * schema: `jobs-*` and `responses-*`), where a new migration of one group may sort before one of the
 * other group that is already applied.
 */
export async function migrate(
  db: Kysely<any>,
  schema: string,
  migrations: Record<string, Migration>,
  logger: Logger,
  options: { allowUnorderedMigrations?: boolean } = {},
): Promise<void> {
  assertIdentifier(schema);
  // One pinned connection: the advisory lock is per session, and it keeps two replicas starting at
  // once from running the same migration twice.
  await db.connection().execute(async (connection) => {
    await sql`select pg_advisory_lock(hashtext(${`migrate:${schema}`}))`.execute(connection);
    try {
      await sql.raw(`create schema if not exists "${schema}"`).execute(connection);
      const migrator = new Migrator({
        db: connection,
        provider: new InlineMigrations(migrations),
        migrationTableSchema: schema,
        allowUnorderedMigrations: options.allowUnorderedMigrations === true,
      });
      const { error, results } = await migrator.migrateToLatest();
      for (const result of results ?? []) {
        if (result.status === 'Error') logger.error({ migration: result.migrationName, schema }, 'migration failed');
        else if (result.status === 'Success') logger.info({ migration: result.migrationName, schema }, 'migration applied');
      }
      if (error) throw error instanceof Error ? error : new Error(String(error));
    } finally {
      await sql`select pg_advisory_unlock(hashtext(${`migrate:${schema}`}))`.execute(connection);
    }
  });
}

function assertIdentifier(name: string): void {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) throw new Error(`not a safe schema name: ${name}`);
}

export { sql, Kysely } from 'kysely';
export type { QueryExecutorProvider, RawBuilder } from 'kysely';
export { postgresCheck } from './postgres-check.js';
export * from './audit-log.js';
export * from './account-event-outbox.js';
