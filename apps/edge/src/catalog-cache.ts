import type { CatalogServiceClient, GetSnapshotResponse, LimitGroup, Model, Pricing, Startup } from '@gateway/proto';
import { ACCOUNT_TIERS, parseCredits, PRICING_FIELDS, type Logger, type PromiseClient } from '@gateway/platform';

/** One model as the edge uses it on the hot path: lookups precomputed once per snapshot. */
export interface CatalogModel {
  model: Model;
  id: string;
  /** True when any price is non-zero (such a request reserves 0.05 credits). */
  paid: boolean;
  endpoints: ReadonlySet<string>;
  supportedParameters: ReadonlySet<string>;
  inputModalities: ReadonlySet<string>;
  extraParameters: ReadonlySet<string>;
  /** Unix seconds; absent: never. */
  expiresAtSeconds?: number;
  limitGroup?: LimitGroup;
  /**
   * The account tiers that may use the model: the tiers its limit group names. `null` when the model
   * has no limit group or its group names no tier: then every tier may (and none has a rate limit).
   * Built once per snapshot so the per-request check is one Set lookup.
   */
  allowedTiers: ReadonlySet<string> | null;
  /** What the listing shows as `available_tiers` and a 403 names: the allowed tiers, or every tier when open. */
  availableTiers: readonly string[];
}

/**
 * Whether an account of `tier` may use the model (spec §7: 403 otherwise). A tier the model's limit
 * group does not name is refused; a model whose group names no tier (or that has none) is open to all.
 */
export function tierMayUse(model: CatalogModel, tier: string): boolean {
  return model.allowedTiers === null || model.allowedTiers.has(tier);
}

/** Listings held per account tier and clock window: Auth knows five tiers; the bound is for anything else. */
const TIER_LISTINGS_MAX = 16;

/** Spec §2.6: the listing never advertises these, whatever the catalog says. */
const UNLISTED_PARAMETERS = new Set(['web_search_options', 'functions', 'function_call', 'logit_bias', 'logprobs', 'prediction']);

const PRICING_KEYS = PRICING_FIELDS;

const DECIMAL_TEXT = /^-?\d+(\.\d+)?$/;

/** A model's two renderings: which one the listing shows depends on the clock (spec §9: past its stop time it is flagged). */
interface RenderedModel {
  entry: CatalogModel;
  live: string;
  expired: string;
  /** The same model as Anthropic's Models API shows it (a request with `anthropic-version`), live and past its stop time. */
  anthropicLive: string;
  anthropicExpired: string;
}

/** One model of a listing in Anthropic's shape, with its id for paging. */
export interface AnthropicListedModel {
  id: string;
  json: string;
}

/** One listing text and its free-models-only variant. */
interface ListingTexts {
  full: string;
  free: string;
}

/** The listing as of one clock window: valid while no stop time is crossed in either direction. */
interface Listing extends ListingTexts {
  byId: ReadonlyMap<string, string>;
  /** Narrowed to what one account tier may use; filled on first ask (at most TIER_LISTINGS_MAX tiers). */
  byTier: Map<string, ListingTexts>;
  /** Valid for now (Unix seconds) in [fromSeconds, untilSeconds). */
  fromSeconds: number;
  untilSeconds: number;
}

/** Everything served from memory, rebuilt when the catalog version changes. */
class CatalogView {
  readonly byName = new Map<string, CatalogModel>();
  readonly rendered: readonly RenderedModel[];
  readonly renderedById = new Map<string, RenderedModel>();
  readonly startupsJson: string;
  readonly startupIdByIconPath = new Map<string, string>();
  readonly startupIds: ReadonlySet<string>;
  readonly limitGroups: readonly LimitGroup[];
  private listing: Listing | undefined;

  constructor(readonly snapshot: GetSnapshotResponse) {
    const groups = new Map(snapshot.limitGroups.map((group) => [group.id, group]));
    this.limitGroups = [...snapshot.limitGroups].sort((a, b) => a.id.localeCompare(b.id));
    const models = [...snapshot.models].sort((a, b) => (a.created === b.created ? a.id.localeCompare(b.id) : a.created > b.created ? -1 : 1));
    const rendered: RenderedModel[] = [];
    for (const model of models) {
      const group = groups.get(model.limitGroup);
      const groupTiers = group ? Object.keys(group.tiers).sort() : [];
      const entry: CatalogModel = {
        model,
        id: model.id,
        paid: isPaid(model.pricing),
        endpoints: new Set(model.offers.flatMap((offer) => offer.endpoints)),
        supportedParameters: new Set(model.supportedParameters),
        inputModalities: new Set(model.inputModalities),
        extraParameters: new Set(model.extraParameters),
        ...(model.expiresAt !== undefined ? { expiresAtSeconds: Number(model.expiresAt) } : {}),
        ...(group ? { limitGroup: group } : {}),
        allowedTiers: groupTiers.length > 0 ? new Set(groupTiers) : null,
        availableTiers: groupTiers.length > 0 ? groupTiers : [...ACCOUNT_TIERS],
      };
      this.byName.set(model.id, entry);
      rendered.push({
        entry,
        live: renderModel(entry, false),
        expired: renderModel(entry, true),
        anthropicLive: renderAnthropicModel(entry, false),
        anthropicExpired: renderAnthropicModel(entry, true),
      });
    }
    this.rendered = rendered;
    for (const model of rendered) this.renderedById.set(model.entry.id, model);
    // Aliases never shadow a real id.
    for (const entry of [...this.byName.values()]) {
      for (const alias of entry.model.aliases) if (!this.byName.has(alias)) this.byName.set(alias, entry);
    }
    const startups = [...snapshot.startups].sort(
      (a, b) => a.displayName.localeCompare(b.displayName) || a.id.localeCompare(b.id),
    );
    this.startupsJson = JSON.stringify({ object: 'list', data: startups.map(renderStartup) });
    this.startupIds = new Set(startups.map((startup) => startup.id));
    for (const startup of startups) {
      if (startup.iconUrl.startsWith('/')) this.startupIdByIconPath.set(startup.iconUrl.split('?')[0] as string, startup.id);
    }
  }

  /**
   * The listing texts for the clock's `nowSeconds`, assembled from the pre-rendered models and kept
   * until the clock crosses the next stop time (or moves back over a past one: tests move clocks).
   */
  listingAt(nowSeconds: number): Listing {
    const held = this.listing;
    if (held && nowSeconds >= held.fromSeconds && nowSeconds < held.untilSeconds) return held;
    const full: string[] = [];
    const free: string[] = [];
    const byId = new Map<string, string>();
    let fromSeconds = -Infinity;
    let untilSeconds = Infinity;
    for (const { entry, live, expired } of this.rendered) {
      const stop = entry.expiresAtSeconds;
      const gone = isExpired(entry, nowSeconds);
      if (stop !== undefined) {
        if (gone) fromSeconds = Math.max(fromSeconds, stop);
        else untilSeconds = Math.min(untilSeconds, stop);
      }
      const json = gone ? expired : live;
      byId.set(entry.id, json);
      full.push(json);
      if (!entry.paid) free.push(json);
    }
    this.listing = {
      full: listText(full),
      free: listText(free),
      byId,
      byTier: new Map(),
      fromSeconds,
      untilSeconds,
    };
    return this.listing;
  }

  /** The listing of `listingAt(nowSeconds)` without the models an account of `tier` may not use. */
  tierListingAt(nowSeconds: number, tier: string): ListingTexts {
    const listing = this.listingAt(nowSeconds);
    const held = listing.byTier.get(tier);
    if (held) return held;
    const full: string[] = [];
    const free: string[] = [];
    for (const { entry } of this.rendered) {
      if (!tierMayUse(entry, tier)) continue;
      const json = listing.byId.get(entry.id) as string;
      full.push(json);
      if (!entry.paid) free.push(json);
    }
    const texts: ListingTexts = { full: listText(full), free: listText(free) };
    if (listing.byTier.size < TIER_LISTINGS_MAX) listing.byTier.set(tier, texts);
    return texts;
  }
}

function listText(entries: readonly string[]): string {
  return `{"object":"list","data":[${entries.join(',')}]}`;
}

/** Spec §9: a model past its stop time answers 410; the stop second itself is past. */
export function isExpired(model: CatalogModel, nowSeconds: number): boolean {
  return model.expiresAtSeconds !== undefined && nowSeconds >= model.expiresAtSeconds;
}

function isPaid(pricing: Pricing | undefined): boolean {
  if (!pricing) return false;
  for (const [field] of PRICING_KEYS) {
    const text = pricing[field];
    if (text === undefined) continue;
    try {
      if (parseCredits(text) !== 0n) return true;
    } catch {
      return true; // An unreadable price is treated as a price: never let it pass as free.
    }
  }
  return false;
}

/**
 * The catalog entry of spec §2.6. Prices are emitted as JSON numbers written from the catalog's
 * decimal text itself, so the listing shows exactly the configured price (no float round trip).
 */
function renderModel(entry: CatalogModel, expired: boolean): string {
  const model = entry.model;
  const rawNumbers: string[] = [];
  const pricing: Record<string, string> = {};
  for (const [field, name] of PRICING_KEYS) {
    const text = model.pricing?.[field];
    if (text === undefined || !DECIMAL_TEXT.test(text.trim())) continue;
    pricing[name] = `\u0000raw${rawNumbers.length}\u0000`;
    rawNumbers.push(text.trim());
  }
  const body: Record<string, unknown> = {
    id: model.id,
    object: 'model',
    created: Number(model.created),
    owned_by: model.ownedBy ?? null,
    display_name: model.displayName,
    description: model.description,
    context_window: model.contextWindow,
    supported_endpoints: [...entry.endpoints],
    pricing,
    architecture: { input_modalities: model.inputModalities, output_modalities: model.outputModalities },
    supported_parameters: model.supportedParameters.filter((name) => !UNLISTED_PARAMETERS.has(name)),
    available_tiers: entry.availableTiers,
    // Catalog fields beyond spec §2.6 (names documented in docs/catalog.md "Catalog").
    aliases: model.aliases,
    limit_group: model.limitGroup,
    extra_parameters: model.extraParameters,
    expires_at: model.expiresAt === undefined ? null : Number(model.expiresAt),
    expired,
  };
  if (model.maxImages !== undefined) body.max_images = model.maxImages;
  if (model.maxOutputTokens !== undefined) body.max_output_tokens = model.maxOutputTokens;
  if (model.voices.length > 0) body.voices = model.voices;
  if (model.audioFormats.length > 0) body.audio_formats = model.audioFormats;
  return JSON.stringify(body).replace(/"\\u0000raw(\d+)\\u0000"/g, (_match, index: string) => rawNumbers[Number(index)] as string);
}

/** Unix seconds as RFC 3339 (Anthropic's `created_at`), whole seconds. */
function rfc3339(seconds: number): string {
  return new Date(seconds * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/**
 * The model as Anthropic's Models API answers it (the `@anthropic-ai/sdk` type `ModelInfo`): what the
 * catalog knows fills `created_at`, the token limits and the lifecycle (a model past its stop time is
 * `retired`, its stop time both `deprecated_at` and `retires_at`; before it, `active` with the scheduled
 * `retires_at`); Anthropic's capability map and model line have no catalog source and are null.
 */
function renderAnthropicModel(entry: CatalogModel, expired: boolean): string {
  const model = entry.model;
  const stop = model.expiresAt === undefined ? null : rfc3339(Number(model.expiresAt));
  return JSON.stringify({
    type: 'model',
    id: model.id,
    display_name: model.displayName,
    created_at: rfc3339(Number(model.created)),
    capabilities: null,
    deprecated_at: expired ? stop : null,
    lifecycle: expired ? 'retired' : 'active',
    line: null,
    max_input_tokens: model.contextWindow > 0 ? model.contextWindow : null,
    max_tokens: model.maxOutputTokens ?? null,
    retires_at: stop,
  });
}

function renderStartup(startup: Startup) {
  return {
    id: startup.id,
    object: 'startup',
    display_name: startup.displayName,
    icon_url: startup.iconUrl,
    website_url: startup.websiteUrl ?? null,
    created: Number(startup.created),
  };
}

export interface CatalogCacheOptions {
  catalog: PromiseClient<CatalogServiceClient>;
  logger: Logger;
  /** Milliseconds since the epoch; tests move it to cross a model's stop time. Default Date.now. */
  now?: () => number;
}

/**
 * Read-through copy of Catalog.GetSnapshot (DESIGN §2: catalog answers never cost a hop per request).
 * Refreshed on `catalog.changed` and on a timer, asking only for a version other than the one held.
 */
export class CatalogCache {
  private view: CatalogView | undefined;
  private refreshing: Promise<void> | undefined;

  private readonly now: () => number;
  /** The newest version a catalog.changed named; a wait for an older one gives up. */
  private awaitedVersion = '';

  constructor(private readonly options: CatalogCacheOptions) {
    this.now = options.now ?? Date.now;
  }

  /** The clock, in Unix seconds (fractional). */
  nowSeconds(): number {
    return this.now() / 1000;
  }

  get version(): string {
    return this.view?.snapshot.version ?? '';
  }

  get ready(): boolean {
    return this.view !== undefined;
  }

  /** Single-flight: concurrent triggers share one GetSnapshot call. */
  refresh(): Promise<void> {
    this.refreshing ??= this.fetch().finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  /**
   * A catalog.changed named `version`. The catalog replica that answers GetSnapshot may not serve it
   * yet (it reloads from Postgres on the same event), so ask again, briefly backing off, until it does,
   * a newer event takes over, or `timeoutMs` passes (the periodic refresh remains the backstop).
   */
  async refreshTo(version: string, timeoutMs = 10_000): Promise<void> {
    this.awaitedVersion = version;
    const deadline = Date.now() + timeoutMs;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.refresh();
      } catch (error) {
        if (Date.now() >= deadline) throw error;
      }
      if (version === '' || this.version === version || this.awaitedVersion !== version || Date.now() >= deadline) return;
      await new Promise((resolve) => setTimeout(resolve, Math.min(1_000, 50 * attempt)));
    }
  }

  /** Start-up: retry until the catalog answers or the time is up. */
  async loadInitial(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.refresh();
        return;
      } catch (error) {
        if (Date.now() >= deadline) throw error;
        this.options.logger.warn({ err: error, attempt }, 'catalog not reachable yet; retrying');
        await new Promise((resolve) => setTimeout(resolve, Math.min(2_000, 100 * attempt)));
      }
    }
  }

  private async fetch(): Promise<void> {
    const response = await this.options.catalog.getSnapshot({ ifVersionNot: this.version }, { deadlineMs: 10_000 });
    if (response.unchanged && this.view) return;
    this.view = new CatalogView(response);
    this.options.logger.info({ version: response.version, models: response.models.length }, 'catalog snapshot loaded');
  }

  private current(): CatalogView {
    if (!this.view) throw new Error('catalog not loaded');
    return this.view;
  }

  /** Id or alias. */
  resolve(name: string): CatalogModel | undefined {
    return this.current().byName.get(name);
  }

  /** The listing; with `tier`, only the models an account of that tier may use. */
  listingJson(freeOnly: boolean, tier?: string): string {
    const view = this.current();
    const listing = tier === undefined ? view.listingAt(this.nowSeconds()) : view.tierListingAt(this.nowSeconds(), tier);
    return freeOnly ? listing.free : listing.full;
  }

  modelJson(id: string): string | undefined {
    return this.current().listingAt(this.nowSeconds()).byId.get(id);
  }

  /**
   * The models `listingJson(freeOnly, tier)` lists, in its order, each as Anthropic's model object
   * (rendered once per snapshot; which of its two renderings depends on the clock, as in the listing).
   */
  anthropicModels(freeOnly: boolean, tier?: string): AnthropicListedModel[] {
    const nowSeconds = this.nowSeconds();
    const models: AnthropicListedModel[] = [];
    for (const { entry, anthropicLive, anthropicExpired } of this.current().rendered) {
      if (tier !== undefined && !tierMayUse(entry, tier)) continue;
      if (freeOnly && entry.paid) continue;
      models.push({ id: entry.id, json: isExpired(entry, nowSeconds) ? anthropicExpired : anthropicLive });
    }
    return models;
  }

  /** One model in Anthropic's shape, as `modelJson` answers it in OpenAI's. */
  anthropicModelJson(id: string): string | undefined {
    const rendered = this.current().renderedById.get(id);
    if (!rendered) return undefined;
    return isExpired(rendered.entry, this.nowSeconds()) ? rendered.anthropicExpired : rendered.anthropicLive;
  }

  /** The catalog's model for a request of `endpoint` that names none (GetSnapshotResponse.default_models). */
  defaultModel(endpoint: string): string | undefined {
    return this.current().snapshot.defaultModels[endpoint];
  }

  startupsJson(): string {
    return this.current().startupsJson;
  }

  hasStartup(id: string): boolean {
    return this.current().startupIds.has(id);
  }

  startupIdForIconPath(path: string): string | undefined {
    return this.view?.startupIdByIconPath.get(path);
  }

  /** Spec §2.8; with a tier, each group shows that tier's values only (groups without it are left out). */
  limitGroups(tier?: string): unknown {
    const data = [];
    for (const group of this.current().limitGroups) {
      const names = tier === undefined ? Object.keys(group.tiers).sort() : tier in group.tiers ? [tier] : [];
      if (names.length === 0) continue;
      const tiers: Record<string, { minute: number; day?: number }> = {};
      for (const name of names) {
        const limit = group.tiers[name];
        if (!limit) continue;
        tiers[name] = limit.day === undefined ? { minute: limit.minute } : { minute: limit.minute, day: limit.day };
      }
      data.push({ id: group.id, object: 'limit_group', tiers });
    }
    return { object: 'list', data };
  }
}
