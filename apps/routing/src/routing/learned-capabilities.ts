import type { EventBus, KeyValueBucket, Logger } from '@gateway/platform';
import { learnable } from './learned-parameters.js';

/**
 * The learned capability map (issue 27, item 8): parameters an upstream model refused with a 400 that
 * named them, per provider × upstream model, so later requests to that pair go without them (no failed
 * call). Every routing replica keeps the whole map in memory — the hot path reads only that — and shares
 * it through one key of a key-value bucket on the bus (JetStream; memory under the in-process bus): a
 * replica that learns merges its entry in with compare-and-set, every replica waits for the key to change
 * and takes the new map. Entries expire `ttlMs` after they were learned; the map holds at most
 * `maxEntries` pairs and `maxNamesPerEntry` names each (the oldest pair goes first). The catalog is not
 * touched: `/v1/models` and `supported_parameters` stay the catalog's truth. Clearing the bucket's key
 * (docs/providers.md, "Learned capability map") empties every replica's map.
 */

export interface LearnedCapabilitiesOptions {
  /** The bus whose key-value port shares the map; without one (or without the port) the map is this process's alone. */
  bus?: Pick<EventBus, 'keyValue'>;
  logger: Logger;
  /** How long a learned parameter is remembered. Default 24 h. */
  ttlMs?: number;
  /** Most provider × upstream model pairs. Default 1,000. */
  maxEntries?: number;
  /** Most parameter names per pair. Default 16. */
  maxNamesPerEntry?: number;
  /** Longest wait for a change before the key is read again (a purge sends no message). Default 30 s. */
  watchTimeoutMs?: number;
  now?: () => number;
}

/** The bucket and its one key. */
export const LEARNED_BUCKET = 'ROUTING_LEARNED_PARAMS';
export const LEARNED_KEY = 'map';

interface Entry {
  names: string[];
  expiresAt: number;
}

/** The shared value: one record per pair. */
interface StoredEntry {
  provider: string;
  model: string;
  names: string[];
  expiresAt: number;
}

const NONE: readonly string[] = [];
const WRITE_TRIES = 8;
const RETRY_AFTER_ERROR_MS = 1_000;

export class LearnedCapabilities {
  /** provider id → upstream model → entry; in insertion order of the pairs (for the bound). */
  private readonly byProvider = new Map<string, Map<string, Entry>>();
  private size = 0;
  /** Learned here and not yet in the bucket: kept across a read of an older map. */
  private readonly pending = new Map<string, StoredEntry>();
  private bucket: KeyValueBucket | undefined;
  private stopped = false;
  private writing: Promise<void> = Promise.resolve();
  private readonly ttlMs: number;
  private readonly maxEntries: number;
  private readonly maxNames: number;
  private readonly now: () => number;

  constructor(private readonly options: LearnedCapabilitiesOptions) {
    this.ttlMs = options.ttlMs ?? 24 * 60 * 60_000;
    this.maxEntries = options.maxEntries ?? 1_000;
    this.maxNames = options.maxNamesPerEntry ?? 16;
    this.now = options.now ?? Date.now;
  }

  /** Opens the shared bucket and reads the map; then follows its changes in the background. */
  async start(): Promise<void> {
    if (!this.options.bus?.keyValue) return;
    try {
      this.bucket = await this.options.bus.keyValue({
        name: LEARNED_BUCKET,
        ttlMs: this.ttlMs,
        maxBytes: 16 * 1024 * 1024,
        maxValueBytes: 768 * 1024,
      });
      const first = await this.bucket.get(LEARNED_KEY);
      this.apply(first?.value);
      void this.watch(first?.revision);
    } catch (error) {
      // The map still works per replica; the bucket is opened again on the next start.
      this.options.logger.warn({ err: error }, 'learned capability map not shared: key-value bucket unavailable');
      this.bucket = undefined;
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.writing;
  }

  /** The names learned for the pair (hot path: one or two Map reads; nothing when the map is empty). */
  droppedFor(providerId: string, upstreamModel: string): readonly string[] {
    if (this.size === 0) return NONE;
    const entry = this.byProvider.get(providerId)?.get(upstreamModel);
    if (entry === undefined) return NONE;
    return entry.expiresAt > this.now() ? entry.names : NONE;
  }

  /** Remembers that the pair refuses `name` (here at once, on every replica once the bucket has it). */
  learn(providerId: string, upstreamModel: string, name: string): void {
    if (!learnable(name)) return;
    const current = this.byProvider.get(providerId)?.get(upstreamModel);
    const live = current !== undefined && current.expiresAt > this.now() ? current.names : NONE;
    if (live.includes(name)) return;
    if (live.length >= this.maxNames) return;
    const stored: StoredEntry = { provider: providerId, model: upstreamModel, names: [...live, name].sort(), expiresAt: this.now() + this.ttlMs };
    this.put(stored);
    this.options.logger.info({ provider: providerId, upstream_model: upstreamModel, parameter: name }, 'learned an unsupported parameter');
    if (this.bucket === undefined) return;
    this.pending.set(pairKey(providerId, upstreamModel), stored);
    this.writing = this.writing.then(() => this.share()).catch((error) => {
      this.options.logger.warn({ err: error }, 'learned parameter not shared with other replicas');
    });
  }

  /** Every learned pair (operators and tests). */
  entries(): { provider: string; model: string; names: readonly string[]; expiresAt: number }[] {
    const now = this.now();
    const out: { provider: string; model: string; names: readonly string[]; expiresAt: number }[] = [];
    for (const [provider, models] of this.byProvider) {
      for (const [model, entry] of models) if (entry.expiresAt > now) out.push({ provider, model, names: entry.names, expiresAt: entry.expiresAt });
    }
    return out;
  }

  /** Forgets everything, here and (through the bucket) on every replica. */
  async clear(): Promise<void> {
    this.pending.clear();
    this.apply(undefined);
    if (this.bucket === undefined) return;
    for (let attempt = 0; attempt < WRITE_TRIES; attempt++) {
      const stored = await this.bucket.get(LEARNED_KEY);
      if (stored === undefined) return;
      if ((await this.bucket.update(LEARNED_KEY, encode([]), stored.revision)) !== undefined) return;
    }
  }

  private put(stored: StoredEntry): void {
    let models = this.byProvider.get(stored.provider);
    if (models === undefined) this.byProvider.set(stored.provider, (models = new Map()));
    if (!models.has(stored.model)) {
      this.size++;
      if (this.size > this.maxEntries) this.evictOldest();
    }
    models.set(stored.model, { names: stored.names, expiresAt: stored.expiresAt });
  }

  /** The pair that expires first goes (they are all learned for the same TTL: the oldest). */
  private evictOldest(): void {
    let oldest: { provider: string; model: string; expiresAt: number } | undefined;
    for (const [provider, models] of this.byProvider) {
      for (const [model, entry] of models) if (oldest === undefined || entry.expiresAt < oldest.expiresAt) oldest = { provider, model, expiresAt: entry.expiresAt };
    }
    if (oldest === undefined) return;
    const models = this.byProvider.get(oldest.provider)!;
    models.delete(oldest.model);
    if (models.size === 0) this.byProvider.delete(oldest.provider);
    this.size--;
  }

  /** The map becomes the bucket's value (plus what this replica learned and has not stored yet). */
  private apply(value: Uint8Array | undefined): void {
    this.byProvider.clear();
    this.size = 0;
    const now = this.now();
    for (const stored of decode(value)) if (stored.expiresAt > now) this.put(stored);
    for (const stored of this.pending.values()) this.put(stored);
  }

  /** Merges the pending entries into the bucket's value with compare-and-set. */
  private async share(): Promise<void> {
    const bucket = this.bucket;
    if (bucket === undefined || this.pending.size === 0) return;
    for (let attempt = 0; attempt < WRITE_TRIES; attempt++) {
      const stored = await bucket.get(LEARNED_KEY);
      const merged = new Map<string, StoredEntry>();
      const now = this.now();
      for (const entry of decode(stored?.value)) if (entry.expiresAt > now) merged.set(pairKey(entry.provider, entry.model), entry);
      const writing = [...this.pending.values()];
      for (const entry of writing) {
        const key = pairKey(entry.provider, entry.model);
        const before = merged.get(key);
        const names = [...new Set([...(before?.names ?? []), ...entry.names])].sort().slice(0, this.maxNames);
        merged.delete(key);
        merged.set(key, { ...entry, names, expiresAt: Math.max(entry.expiresAt, before?.expiresAt ?? 0) });
      }
      const entries = [...merged.values()].slice(-this.maxEntries);
      const revision = stored === undefined
        ? await bucket.create(LEARNED_KEY, encode(entries))
        : await bucket.update(LEARNED_KEY, encode(entries), stored.revision);
      if (revision !== undefined) {
        for (const entry of writing) if (this.pending.get(pairKey(entry.provider, entry.model)) === entry) this.pending.delete(pairKey(entry.provider, entry.model));
        return;
      }
    }
    throw new Error('learned capability map: too many concurrent writers');
  }

  /** Follows the bucket's key: each change (or each `watchTimeoutMs`) replaces the map. */
  private async watch(revision: number | undefined): Promise<void> {
    const bucket = this.bucket!;
    const timeoutMs = this.options.watchTimeoutMs ?? 30_000;
    let seen = revision;
    while (!this.stopped) {
      try {
        await bucket.changed(LEARNED_KEY, seen, timeoutMs);
        if (this.stopped) return;
        const now = await bucket.get(LEARNED_KEY);
        if (now?.revision !== seen) this.apply(now?.value);
        seen = now?.revision;
      } catch (error) {
        if (this.stopped) return;
        this.options.logger.warn({ err: error }, 'learned capability map: watch failed; retrying');
        await new Promise((resolve) => setTimeout(resolve, RETRY_AFTER_ERROR_MS).unref());
      }
    }
  }
}

function pairKey(provider: string, model: string): string {
  return `${provider}\n${model}`;
}

function encode(entries: StoredEntry[]): Uint8Array {
  return Buffer.from(JSON.stringify({ version: 1, entries }), 'utf8');
}

function decode(value: Uint8Array | undefined): StoredEntry[] {
  if (value === undefined || value.byteLength === 0) return [];
  try {
    const parsed = JSON.parse(Buffer.from(value).toString('utf8')) as { entries?: unknown };
    if (!Array.isArray(parsed.entries)) return [];
    return parsed.entries.filter(
      (entry): entry is StoredEntry =>
        typeof entry?.provider === 'string' && typeof entry?.model === 'string' && Array.isArray(entry?.names) &&
        entry.names.every((name: unknown) => typeof name === 'string') && typeof entry?.expiresAt === 'number',
    );
  } catch {
    return [];
  }
}
