import { subjects, type AuditCallContext, type EventBus, type Logger, type Subscription } from '@gateway/platform';
import { CatalogChanged } from '@gateway/proto';
import type { CatalogProblem } from '@gateway/platform/catalog-document';
import { buildCatalog, canonicalJson, catalogVersion, EMPTY_CATALOG, type CatalogData, type IconSource } from './catalog-data.js';
import { CatalogSnapshot } from './catalog-snapshot.js';
import type { CatalogStore } from './catalog-store.js';

/** A load at start from GATEWAY_CONFIG: the catalog service itself is the actor. */
const CATALOG_START_AUDIT: AuditCallContext = { actor: { kind: 'service', id: 'catalog', sourceAddress: '' }, requestId: '' };

export interface LoadResult {
  version: string;
  changed: boolean;
  problems: CatalogProblem[];
  modelCount: number;
}

const emptyCanonical = canonicalJson(EMPTY_CATALOG);
/** A broken document can have thousands of problems; the first ones are enough to act on. */
const PROBLEMS_MAX = 500;

function bounded(problems: CatalogProblem[]): CatalogProblem[] {
  if (problems.length <= PROBLEMS_MAX) return problems;
  return [
    ...problems.slice(0, PROBLEMS_MAX),
    { path: '(document)', reason: `${problems.length - PROBLEMS_MAX} more problems not shown` },
  ];
}

/**
 * The catalog in force, served from memory, and the one way to replace it. Loads are serialised in
 * this process (and by a row lock across replicas); CatalogChanged goes out only after the commit.
 */
export class CatalogService {
  private snapshot: CatalogSnapshot;
  private loading: Promise<unknown> = Promise.resolve();
  private subscription?: Subscription;

  private constructor(
    private readonly store: CatalogStore,
    private readonly bus: EventBus,
    private readonly logger: Logger,
  ) {
    this.snapshot = new CatalogSnapshot(catalogVersion(emptyCanonical), EMPTY_CATALOG, new Map());
  }

  /** Serves what Postgres holds as current (an empty catalog when nothing was ever loaded). */
  static async open(store: CatalogStore, bus: EventBus, logger: Logger): Promise<CatalogService> {
    const service = new CatalogService(store, bus, logger);
    await service.refreshFromStore();
    // Another replica's load: pick up the new version from Postgres (the event names it, the store holds it).
    service.subscription = bus.subscribe(subjects.catalogChanged, (bytes) => {
      let version: string;
      try {
        version = CatalogChanged.decode(bytes).version;
      } catch (error) {
        logger.warn({ err: error }, 'undecodable catalog.changed message');
        return;
      }
      if (version === service.snapshot.version) return;
      service.serialised(() => service.refreshFromStore()).catch((error: unknown) =>
        logger.error({ err: error, version }, 'could not refresh the catalog after catalog.changed'),
      );
    });
    return service;
  }

  get current(): CatalogSnapshot {
    return this.snapshot;
  }

  /**
   * Validates `text` and, when it has no problem (and this is not a dry run), makes it the catalog in
   * force. A document with problems changes nothing and comes back with every problem listed.
   */
  load(text: string, source: string, iconSource: IconSource, dryRun = false, audit: AuditCallContext = CATALOG_START_AUDIT): Promise<LoadResult> {
    return this.serialised(async () => {
      const { catalog, problems } = await buildCatalog(text, iconSource);
      if (!catalog) {
        this.logger.warn({ source, problems: problems.length }, 'catalog document refused');
        return { version: this.snapshot.version, changed: false, problems: bounded(problems), modelCount: this.snapshot.models.length };
      }
      const modelCount = catalog.data.models.length;
      if (dryRun) return { version: catalog.version, changed: false, problems: [], modelCount };
      const { changed, firstSeen } = await this.store.activate({
        version: catalog.version,
        document: catalog.canonical,
        source,
        modelCount,
        startupIds: catalog.data.startups.map((startup) => startup.id),
        audit,
      });
      const inMemoryChanged = this.snapshot.version !== catalog.version;
      if (inMemoryChanged) this.snapshot = new CatalogSnapshot(catalog.version, catalog.data, firstSeen);
      if (changed) {
        this.logger.info({ version: catalog.version, source, models: modelCount }, 'catalog loaded');
        this.bus.broadcast(subjects.catalogChanged, CatalogChanged.encode({ version: catalog.version }).finish());
      }
      return { version: catalog.version, changed: changed || inMemoryChanged, problems: [], modelCount };
    });
  }

  /** This service's audit chain (admin: gatewayctl audit verify). */
  readAuditChain(request: { afterSeq: bigint; limit: number; accountId: string }) {
    return this.store.readAuditChain(request);
  }

  private async refreshFromStore(): Promise<void> {
    const stored = await this.store.current();
    if (!stored || stored.version === this.snapshot.version) return;
    const data = JSON.parse(stored.document) as CatalogData;
    this.snapshot = new CatalogSnapshot(stored.version, data, stored.firstSeen);
    this.logger.info({ version: stored.version }, 'catalog version in force');
  }

  private serialised<T>(work: () => Promise<T>): Promise<T> {
    const next = this.loading.then(work, work);
    this.loading = next.catch(() => undefined);
    return next;
  }

  async close(): Promise<void> {
    await this.subscription?.stop();
    await this.loading;
  }
}
