import { type Logger, type Registry } from '@gateway/platform';
import { appendAudit, auditedTransaction, auditLogMigration, createDatabase, migrate, readAuditChain, sql, type Kysely } from '@gateway/platform/db';
import type { AuditCallContext } from '@gateway/platform';
import type { ColumnType, Migration } from 'kysely';

export const CATALOG_SCHEMA = 'catalog';
/** Old versions kept for inspection and roll-back by hand; older ones are pruned on each load. */
const VERSIONS_KEPT = 20;

interface CatalogTables {
  catalog_versions: {
    version: string;
    // Canonical JSON text, not jsonb: the stored bytes are exactly what the version hashes.
    document: string;
    source: string;
    model_count: number;
    loaded_at: ColumnType<Date, never, string>;
  };
  catalog_current: { id: number; version: string; activated_at: ColumnType<Date, never, string> };
  startup_first_seen: { startup_id: string; first_seen_at: bigint };
}

const migrations: Record<string, Migration> = {
  '0001_init': {
    up: async (db: Kysely<any>) => {
      await db.schema
        .createTable('catalog_versions')
        .addColumn('version', 'text', (column) => column.primaryKey())
        .addColumn('document', 'text', (column) => column.notNull())
        .addColumn('source', 'text', (column) => column.notNull())
        .addColumn('model_count', 'integer', (column) => column.notNull())
        .addColumn('loaded_at', 'timestamptz', (column) => column.notNull().defaultTo(sql`now()`))
        .execute();
      await db.schema
        .createTable('catalog_current')
        .addColumn('id', 'smallint', (column) => column.primaryKey().check(sql`id = 1`))
        .addColumn('version', 'text', (column) => column.notNull().references('catalog_versions.version'))
        .addColumn('activated_at', 'timestamptz', (column) => column.notNull().defaultTo(sql`now()`))
        .execute();
      await db.schema
        .createTable('startup_first_seen')
        .addColumn('startup_id', 'text', (column) => column.primaryKey())
        .addColumn('first_seen_at', 'bigint', (column) => column.notNull())
        .execute();
    },
  },
  // The audit log's chain (docs/governance.md): one entry per load that changes the catalog in force.
  '0002_audit_log': auditLogMigration('catalog'),
};

/** The chain this service's audit entries form. */
export const CATALOG_AUDIT_CHAIN = 'catalog';

export interface StoredCatalog {
  version: string;
  document: string;
  firstSeen: Map<string, number>;
}

/** Versioned catalog documents and the pointer to the one in force. */
export class CatalogStore {
  private constructor(private readonly db: Kysely<CatalogTables>) {}

  static async open(databaseUrl: string, logger: Logger, metrics?: Registry): Promise<CatalogStore> {
    const db = createDatabase<CatalogTables>(
      { url: databaseUrl, schema: CATALOG_SCHEMA, maxConnections: 4, applicationName: 'catalog', ...(metrics ? { metrics } : {}) },
      logger,
    );
    try {
      await migrate(db, CATALOG_SCHEMA, migrations, logger);
    } catch (error) {
      await db.destroy();
      throw error;
    }
    return new CatalogStore(db);
  }

  async current(): Promise<StoredCatalog | undefined> {
    const row = await this.db
      .selectFrom('catalog_current')
      .innerJoin('catalog_versions', 'catalog_versions.version', 'catalog_current.version')
      .select(['catalog_versions.version', 'catalog_versions.document'])
      .where('catalog_current.id', '=', 1)
      .executeTakeFirst();
    if (!row) return undefined;
    return { version: row.version, document: row.document, firstSeen: await this.firstSeen(this.db) };
  }

  /**
   * Makes `version` the one in force in one transaction. The row lock on the pointer serialises loads
   * from several replicas. Returns whether the version in force changed.
   */
  async activate(options: {
    version: string;
    document: string;
    source: string;
    modelCount: number;
    startupIds: readonly string[];
    audit: AuditCallContext;
  }): Promise<{ changed: boolean; firstSeen: Map<string, number> }> {
    return auditedTransaction(this.db, async (transaction) => {
      // Take the pointer's lock first (creating the row would race, so lock the table for the first load).
      await sql`lock table catalog_current in share row exclusive mode`.execute(transaction);
      const current = await transaction
        .selectFrom('catalog_current')
        .select('version')
        .where('id', '=', 1)
        .executeTakeFirst();
      if (current?.version === options.version) {
        return { changed: false, firstSeen: await this.firstSeen(transaction) };
      }
      await transaction
        .insertInto('catalog_versions')
        .values({ version: options.version, document: options.document, source: options.source, model_count: options.modelCount })
        .onConflict((conflict) => conflict.column('version').doUpdateSet({ loaded_at: sql`now()`, source: options.source }))
        .execute();
      await transaction
        .insertInto('catalog_current')
        .values({ id: 1, version: options.version })
        .onConflict((conflict) => conflict.column('id').doUpdateSet({ version: options.version, activated_at: sql`now()` }))
        .execute();
      if (options.startupIds.length > 0) {
        const now = BigInt(Math.floor(Date.now() / 1000));
        await transaction
          .insertInto('startup_first_seen')
          .values(options.startupIds.map((startupId) => ({ startup_id: startupId, first_seen_at: now })))
          .onConflict((conflict) => conflict.column('startup_id').doNothing())
          .execute();
      }
      await appendAudit(transaction, CATALOG_AUDIT_CHAIN, {
        ...options.audit, accountId: '', action: 'catalog.load', targetType: 'catalog', targetId: options.version,
        before: current ? { version: current.version } : null,
        after: { version: options.version, source: options.source, model_count: options.modelCount },
      });
      await transaction
        .deleteFrom('catalog_versions')
        .where('version', '<>', options.version)
        .where('version', 'not in', (query) =>
          query.selectFrom('catalog_versions').select('version').orderBy('loaded_at', 'desc').limit(VERSIONS_KEPT),
        )
        .execute();
      return { changed: true, firstSeen: await this.firstSeen(transaction) };
    });
  }

  /** The chain, oldest first, with its head (admin). */
  async readAuditChain(request: { afterSeq: bigint; limit: number; accountId: string }) {
    return readAuditChain(this.db, CATALOG_AUDIT_CHAIN, request);
  }

  private async firstSeen(db: Kysely<CatalogTables>): Promise<Map<string, number>> {
    const rows = await db.selectFrom('startup_first_seen').select(['startup_id', 'first_seen_at']).execute();
    return new Map(rows.map((row) => [row.startup_id, Number(row.first_seen_at)]));
  }

  async close(): Promise<void> {
    await this.db.destroy();
  }
}
