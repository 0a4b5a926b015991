import {
  decodeLearnedMap, encodeLearnedMap, LEARNED_BUCKET, LEARNED_KEY, LEARNED_TTL_MS, learnedBucketOptions,
  type EventBus, type KeyValueBucket, type LearnedEvidence, type LearnedMapEntry, type Logger,
} from '@gateway/platform';
import { learnable } from './learned-parameters.js';

/**
 * The learned capability map (issue 27, item 8): parameters an upstream model refused with a 400 that
 * named them, per provider × upstream model, so later requests to that pair go without them (no failed
 * call). Every routing replica keeps the whole map in memory — the hot path reads only that — and shares
 * it through one key of a key-value bucket on the bus (JetStream; memory under the in-process bus): a
 * replica that learns merges its entry in with compare-and-set, every replica waits for the key to change
 * and takes the new map. The catalog is not touched: `/v1/models` and `supported_parameters` stay the
 * catalog's truth. Clearing the bucket's key (docs/providers.md, "Learned capability map") empties every
 * replica's map.
 *
 * Evidence (issue 35 item 2: tenants are apart, DESIGN §8). A refusal is one account's evidence: the
 * account that was refused goes without the name at once (its own requests only), and every account
 * goes without it only once `quorum` (default 3) DISTINCT accounts were refused it within the TTL. The
 * evidence is kept per (name, account id), the account id from the RequestContext the edge made (never
 * the caller's words); merging two replicas' maps unions those records, so one account refused on every
 * replica is still one record, and a name is confirmed only by counting distinct accounts (also for what
 * the bucket holds: a value naming fewer accounts confirms nothing). Only refusals of a parameter as such
 * reach this map (each `<kind>-error.ts`; a refused value never does).
 *
 * Bounds: confirmed names live `ttlMs` from the last one confirmed (one expiry per pair); at most
 * `maxEntries` pairs (the one that expires first goes) and `maxNamesPerEntry` confirmed names each;
 * evidence records live `ttlMs` too, at most `maxEvidencePerEntry` per pair and `maxEvidencePerAccount`
 * per account and pair (the oldest goes first), so one account cannot crowd honest evidence out; the
 * shared value keeps at most `MAX_SHARED_EVIDENCE` records (the newest).
 */

export interface LearnedCapabilitiesOptions {
  /** The bus whose key-value port shares the map; without one (or without the port) the map is this process's alone. */
  bus?: Pick<EventBus, 'keyValue'>;
  logger: Logger;
  /** How long a learned parameter (and a refusal's evidence) is remembered. Default 24 h. */
  ttlMs?: number;
  /** Most provider × upstream model pairs. Default 1,000. */
  maxEntries?: number;
  /** Most confirmed parameter names per pair. Default 16. */
  maxNamesPerEntry?: number;
  /** Distinct accounts refused a name before every account goes without it. Default 3 (at least 2). */
  quorum?: number;
  /** Most (name, account) evidence records per pair. Default 16. */
  maxEvidencePerEntry?: number;
  /** Most evidence records one account holds per pair. Default 4. */
  maxEvidencePerAccount?: number;
  /** Longest wait for a change before the key is read again (a purge sends no message). Default 30 s. */
  watchTimeoutMs?: number;
  now?: () => number;
}

/** The bucket and its one key (the shared value's layout is libs/platform learned-map.ts). */
export { LEARNED_BUCKET, LEARNED_KEY };

/** One account refused `name` (until `expiresAt`). */
type Evidence = LearnedEvidence;

interface Entry {
  /** Confirmed by the quorum: every account goes without them. */
  names: readonly string[];
  expiresAt: number;
  /** Not (yet) confirmed: each account goes without its own. Oldest first. */
  evidence: readonly Evidence[];
}

/** The shared value: one record per pair. */
type StoredEntry = LearnedMapEntry;

const NONE: readonly string[] = [];
const NO_EVIDENCE: readonly Evidence[] = [];
const WRITE_TRIES = 8;
const RETRY_AFTER_ERROR_MS = 1_000;
/** Evidence records in the shared value overall (the newest kept): keeps the one key under its size bound. */
const MAX_SHARED_EVIDENCE = 4_096;

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
  private readonly quorum: number;
  private readonly maxEvidence: number;
  private readonly maxEvidencePerAccount: number;
  private readonly now: () => number;

  constructor(private readonly options: LearnedCapabilitiesOptions) {
    this.ttlMs = options.ttlMs ?? LEARNED_TTL_MS;
    this.maxEntries = options.maxEntries ?? 1_000;
    this.maxNames = options.maxNamesPerEntry ?? 16;
    // One account is never enough, whatever the configuration says.
    this.quorum = Math.max(2, options.quorum ?? 3);
    this.maxEvidence = options.maxEvidencePerEntry ?? 16;
    this.maxEvidencePerAccount = options.maxEvidencePerAccount ?? 4;
    this.now = options.now ?? Date.now;
  }

  /** Opens the shared bucket and reads the map; then follows its changes in the background. */
  async start(): Promise<void> {
    if (!this.options.bus?.keyValue) return;
    try {
      this.bucket = await this.options.bus.keyValue(learnedBucketOptions(this.ttlMs));
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

  /**
   * The names a request of `accountId` goes without on the pair: the confirmed ones, and the ones this
   * account itself was refused (hot path: one or two Map reads; nothing when the map is empty; the
   * evidence, at most maxEvidencePerEntry records, is read only when the pair has some).
   */
  droppedFor(providerId: string, upstreamModel: string, accountId: string): readonly string[] {
    if (this.size === 0) return NONE;
    const entry = this.byProvider.get(providerId)?.get(upstreamModel);
    if (entry === undefined) return NONE;
    const now = this.now();
    const names = entry.expiresAt > now ? entry.names : NONE;
    if (entry.evidence.length === 0) return names;
    let own: string[] | undefined;
    for (const record of entry.evidence) {
      if (record.account !== accountId || record.expiresAt <= now || names.includes(record.name) || own?.includes(record.name)) continue;
      (own ??= [...names]).push(record.name);
    }
    return own === undefined ? names : own.sort();
  }

  /**
   * `accountId` was refused `name` by the pair: its own requests go without it at once (here at once, on
   * every replica once the bucket has it); every account's do once the quorum of accounts was refused it.
   */
  learn(providerId: string, upstreamModel: string, name: string, accountId: string): void {
    if (!learnable(name)) return;
    if (this.droppedFor(providerId, upstreamModel, accountId).includes(name)) return;
    const now = this.now();
    const current = this.byProvider.get(providerId)?.get(upstreamModel);
    const refusal: Entry = { names: NONE, expiresAt: 0, evidence: [{ name, account: accountId, expiresAt: now + this.ttlMs }] };
    const next = this.merge(current, refusal, now);
    const stored: StoredEntry = { provider: providerId, model: upstreamModel, names: next.names, expiresAt: next.expiresAt, evidence: next.evidence };
    this.put(stored);
    const confirmed = next.names.includes(name) && next.expiresAt > now;
    this.options.logger.info(
      { provider: providerId, upstream_model: upstreamModel, parameter: name, account_id: accountId, confirmed },
      confirmed ? 'learned an unsupported parameter for every account' : 'learned an unsupported parameter for one account',
    );
    if (this.bucket === undefined) return;
    const key = pairKey(providerId, upstreamModel);
    const waiting = this.pending.get(key);
    this.pending.set(key, waiting === undefined ? stored : { ...stored, ...this.merge(waiting, stored, now) });
    this.writing = this.writing.then(() => this.share()).catch((error) => {
      this.options.logger.warn({ err: error }, 'learned parameter not shared with other replicas');
    });
  }

  /** Every pair with confirmed names (operators and tests). */
  entries(): { provider: string; model: string; names: readonly string[]; expiresAt: number }[] {
    const now = this.now();
    const out: { provider: string; model: string; names: readonly string[]; expiresAt: number }[] = [];
    for (const [provider, models] of this.byProvider) {
      for (const [model, entry] of models) if (entry.expiresAt > now && entry.names.length > 0) out.push({ provider, model, names: entry.names, expiresAt: entry.expiresAt });
    }
    return out;
  }

  /** The unconfirmed evidence records the pair holds (tests of the bounds). */
  evidenceCount(providerId: string, upstreamModel: string): number {
    return this.byProvider.get(providerId)?.get(upstreamModel)?.evidence.length ?? 0;
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

  /**
   * Two views of a pair as one, under the evidence rule: live confirmed names united; evidence united
   * per (name, account) (the later expiry kept), expired records and those of confirmed names gone; a
   * name refused to `quorum` distinct accounts confirmed; then the bounds (an account's oldest records
   * first, then the pair's oldest). Pure: replicas merging the same records in any order agree.
   */
  private merge(a: Entry | undefined, b: Entry, now: number): Entry {
    const aLive = a !== undefined && a.expiresAt > now;
    const bLive = b.expiresAt > now;
    let names: string[] = aLive ? [...a.names] : [];
    if (bLive) for (const name of b.names) if (!names.includes(name)) names.push(name);
    let expiresAt = Math.max(aLive ? a.expiresAt : 0, bLive ? b.expiresAt : 0);
    const byKey = new Map<string, Evidence>();
    for (const record of [...(a?.evidence ?? NO_EVIDENCE), ...b.evidence]) {
      if (record.expiresAt <= now) continue;
      const key = `${record.name}\n${record.account}`;
      const seen = byKey.get(key);
      if (seen === undefined || seen.expiresAt < record.expiresAt) byKey.set(key, record);
    }
    let evidence = [...byKey.values()];
    // Confirm what enough distinct accounts were refused (records are one per account and name).
    const accounts = new Map<string, number>();
    for (const record of evidence) accounts.set(record.name, (accounts.get(record.name) ?? 0) + 1);
    for (const [name, count] of accounts) {
      if (count < this.quorum || names.includes(name) || names.length >= this.maxNames) continue;
      names.push(name);
      expiresAt = now + this.ttlMs;
    }
    names = names.sort();
    evidence = evidence.filter((record) => !names.includes(record.name)).sort((x, y) => x.expiresAt - y.expiresAt);
    // Newest first when bounding, so each account and the pair keep their latest refusals.
    const perAccount = new Map<string, number>();
    const kept: Evidence[] = [];
    for (let index = evidence.length - 1; index >= 0 && kept.length < this.maxEvidence; index--) {
      const record = evidence[index]!;
      const held = perAccount.get(record.account) ?? 0;
      if (held >= this.maxEvidencePerAccount) continue;
      perAccount.set(record.account, held + 1);
      kept.push(record);
    }
    return { names: expiresAt > now ? names : NONE, expiresAt, evidence: kept.length === 0 ? NO_EVIDENCE : kept.reverse() };
  }

  private put(stored: StoredEntry): void {
    let models = this.byProvider.get(stored.provider);
    if (models === undefined) this.byProvider.set(stored.provider, (models = new Map()));
    if (!models.has(stored.model)) {
      this.size++;
      if (this.size > this.maxEntries) this.evictOldest();
      // The eviction may have taken this provider's last pair (and its Map) with it.
      if (!this.byProvider.has(stored.provider)) this.byProvider.set(stored.provider, models);
    }
    models.set(stored.model, { names: stored.names, expiresAt: stored.expiresAt, evidence: stored.evidence });
  }

  /** The pair whose last record expires first goes (they are all learned for the same TTL: the oldest). */
  private evictOldest(): void {
    let oldest: { provider: string; model: string; until: number } | undefined;
    for (const [provider, models] of this.byProvider) {
      for (const [model, entry] of models) {
        const until = Math.max(entry.expiresAt, entry.evidence.at(-1)?.expiresAt ?? 0);
        if (oldest === undefined || until < oldest.until) oldest = { provider, model, until };
      }
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
    // The rule is applied to what the bucket holds too: a stored name is kept only as it was stored
    // confirmed by a replica, and evidence counts again by distinct accounts.
    for (const stored of decode(value)) this.putMerged(stored, undefined, now);
    for (const stored of this.pending.values()) this.putMerged(stored, this.byProvider.get(stored.provider)?.get(stored.model), now);
  }

  private putMerged(stored: StoredEntry, current: Entry | undefined, now: number): void {
    const merged = this.merge(current, stored, now);
    if (merged.expiresAt <= now && merged.evidence.length === 0) return;
    this.put({ provider: stored.provider, model: stored.model, ...merged });
  }

  /** Merges the pending entries into the bucket's value with compare-and-set. */
  private async share(): Promise<void> {
    const bucket = this.bucket;
    if (bucket === undefined || this.pending.size === 0) return;
    for (let attempt = 0; attempt < WRITE_TRIES; attempt++) {
      const stored = await bucket.get(LEARNED_KEY);
      const merged = new Map<string, StoredEntry>();
      const now = this.now();
      for (const entry of decode(stored?.value)) merged.set(pairKey(entry.provider, entry.model), entry);
      const writing = [...this.pending.values()];
      for (const entry of writing) {
        const key = pairKey(entry.provider, entry.model);
        const before = merged.get(key);
        merged.delete(key);
        merged.set(key, { provider: entry.provider, model: entry.model, ...this.merge(before, entry, now) });
      }
      const entries = boundShared([...merged.values()].filter((entry) => entry.expiresAt > now || entry.evidence.length > 0).slice(-this.maxEntries));
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

/** The newest MAX_SHARED_EVIDENCE evidence records of the whole value; older ones are left out. */
function boundShared(entries: StoredEntry[]): StoredEntry[] {
  let total = 0;
  for (const entry of entries) total += entry.evidence.length;
  if (total <= MAX_SHARED_EVIDENCE) return entries;
  const expiries = entries.flatMap((entry) => entry.evidence.map((record) => record.expiresAt)).sort((x, y) => y - x);
  const cutoff = expiries[MAX_SHARED_EVIDENCE - 1]!;
  return entries.map((entry) => ({ ...entry, evidence: entry.evidence.filter((record) => record.expiresAt >= cutoff) }));
}

/** The shared value's layout (libs/platform learned-map.ts); only learnable names are read back. */
const encode = encodeLearnedMap;
const decode = (value: Uint8Array | undefined): StoredEntry[] => decodeLearnedMap(value, learnable);
