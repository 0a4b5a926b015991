import { CatalogChanged, Provider, type GetSnapshotRequest, type GetSnapshotResponse, type Model } from '@gateway/proto';
import { subjects, type EventBus, type Logger, type Subscription } from '@gateway/platform';
import { createAdapter, providerEnvNames } from '../providers/create-adapter.js';
import type { ProviderAdapter } from '../providers/provider-adapter.js';

export type SnapshotSource = (request: GetSnapshotRequest) => Promise<GetSnapshotResponse>;

export interface CatalogCacheOptions {
  getSnapshot: SnapshotSource;
  bus: EventBus;
  logger: Logger;
  /** Secrets by env-var name (the catalog names the variable, never the secret). */
  secretFor: (envName: string) => string | undefined;
  /** Fallback refresh when a CatalogChanged broadcast was missed (core NATS is best effort). */
  refreshIntervalMs?: number;
}

interface ProviderEntry {
  provider: Provider;
  adapter: ProviderAdapter | undefined;
  fingerprint: string;
}

/**
 * Read-through copy of the catalog: the whole snapshot is small (models x offers), so routing reads it
 * from memory and never pays a hop per request. Adapters live here because they follow the providers.
 */
export class CatalogCache {
  private version = '';
  private moderation = '';
  private models = new Map<string, Model>();
  private providers = new Map<string, ProviderEntry>();
  private refreshing: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private subscription: Subscription | undefined;

  constructor(private readonly options: CatalogCacheOptions) {}

  async start(): Promise<void> {
    await this.refresh();
    this.subscription = this.options.bus.subscribe(subjects.catalogChanged, (data) => {
      const changed = CatalogChanged.decode(data);
      if (changed.version !== this.version) this.refreshSoon();
    });
    this.timer = setInterval(() => this.refreshSoon(), this.options.refreshIntervalMs ?? 30_000);
    this.timer.unref();
  }

  get currentVersion(): string {
    return this.version;
  }

  /** The catalog's screening model for image prompts ('' when none). */
  get moderationModel(): string {
    return this.moderation;
  }

  model(id: string): Model | undefined {
    return this.models.get(id);
  }

  /** Every (provider, model) pair some model's offers name, in catalog order (a pair once). */
  offerPairs(): Array<{ providerId: string; modelId: string }> {
    const pairs = new Map<string, { providerId: string; modelId: string }>();
    for (const model of this.models.values()) {
      for (const offer of model.offers) pairs.set(`${offer.providerId}\0${model.id}`, { providerId: offer.providerId, modelId: model.id });
    }
    return [...pairs.values()];
  }

  provider(id: string): { provider: Provider; adapter: ProviderAdapter | undefined } | undefined {
    return this.providers.get(id);
  }

  private refreshSoon(): void {
    this.refresh().catch((error: unknown) => this.options.logger.warn({ err: error }, 'catalog refresh failed; keeping the cached catalog'));
  }

  /** One refresh at a time; callers during a refresh share it. */
  refresh(): Promise<void> {
    this.refreshing ??= this.load().finally(() => { this.refreshing = undefined; });
    return this.refreshing;
  }

  private async load(): Promise<void> {
    const snapshot = await this.options.getSnapshot({ ifVersionNot: this.version });
    if (snapshot.unchanged) return;
    this.moderation = snapshot.moderationModel;
    const models = new Map(snapshot.models.map((model) => [model.id, model]));
    const providers = new Map<string, ProviderEntry>();
    const retired: ProviderAdapter[] = [];
    for (const provider of snapshot.providers) {
      // The whole provider entry and the values of the variables it names: any change rebuilds the adapter.
      const fingerprint = JSON.stringify([Provider.toJSON(provider), providerEnvNames(provider).map((name) => this.options.secretFor(name) ?? null)]);
      const existing = this.providers.get(provider.id);
      if (existing && existing.fingerprint === fingerprint) {
        providers.set(provider.id, { ...existing, provider });
        continue;
      }
      if (existing?.adapter) retired.push(existing.adapter);
      const adapter = createAdapter(provider, this.options.secretFor);
      if (!adapter) this.options.logger.warn({ provider: provider.id, kind: provider.kind }, 'no adapter for this provider kind; its offers are skipped');
      providers.set(provider.id, { provider, adapter, fingerprint });
    }
    for (const [id, entry] of this.providers) if (!providers.has(id) && entry.adapter) retired.push(entry.adapter);
    this.models = models;
    this.providers = providers;
    this.version = snapshot.version;
    this.options.logger.info({ version: snapshot.version, models: models.size, providers: providers.size }, 'catalog loaded');
    // Requests in flight keep their adapter object; closing waits for their connections to finish.
    for (const adapter of retired) void adapter.close();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.subscription?.stop();
    await Promise.allSettled([...this.providers.values()].map((entry) => entry.adapter?.close()));
  }
}
