import type { LimitGroup, Model, Pricing, Provider, Startup } from '@gateway/proto';
import type { CatalogData, ModelData, StartupData } from './catalog-data.js';
import type { PriceKey } from '@gateway/platform/catalog-document';
import { placeholderIcon } from './placeholder-icon.js';

/**
 * Parameters the listing never shows (spec 2.6): providers do not get them by these names, whatever the
 * config says. (`logprobs` reaches providers of a model that lists `top_logprobs`: libs/platform PARAMETERS.)
 */
export const HIDDEN_PARAMETERS: ReadonlySet<string> = new Set([
  'web_search_options',
  'functions',
  'function_call',
  'logit_bias',
  'logprobs',
  'prediction',
]);

const PRICE_FIELDS: Record<PriceKey, keyof Pricing> = {
  per_input_token: 'perInputToken',
  per_cached_input_token: 'perCachedInputToken',
  per_output_token: 'perOutputToken',
  per_input_audio_token: 'perInputAudioToken',
  per_output_audio_token: 'perOutputAudioToken',
  per_input_audio_hour: 'perInputAudioHour',
  per_output_audio_hour: 'perOutputAudioHour',
  per_output_text_token: 'perOutputTextToken',
  per_input_text_character: 'perInputTextCharacter',
  per_output_text_character: 'perOutputTextCharacter',
  per_output_image_token: 'perOutputImageToken',
  per_input_text_token: 'perInputTextToken',
  per_input_image_token: 'perInputImageToken',
  per_token: 'perToken',
  per_cache_write_input_token: 'perCacheWriteInputToken',
};

function toPricing(pricing: ModelData['pricing']): Pricing {
  const message: Pricing = {};
  for (const [key, value] of Object.entries(pricing) as [PriceKey, string][]) message[PRICE_FIELDS[key]] = value;
  return message;
}

function toModel(model: ModelData): Model {
  return {
    id: model.id,
    ownedBy: model.ownedBy ?? undefined,
    displayName: model.displayName,
    description: model.description,
    created: BigInt(model.created),
    contextWindow: model.contextWindow,
    maxOutputTokens: model.maxOutputTokens ?? undefined,
    aliases: [...model.aliases],
    inputModalities: [...model.inputModalities],
    outputModalities: [...model.outputModalities],
    supportedParameters: model.supportedParameters.filter((parameter) => !HIDDEN_PARAMETERS.has(parameter)),
    pricing: toPricing(model.pricing),
    batchPricing: model.batchPricing ? toPricing(model.batchPricing) : undefined,
    limitGroup: model.limitGroup,
    maxImages: model.maxImages ?? undefined,
    expiresAt: model.expiresAt === null ? undefined : BigInt(model.expiresAt),
    offers: model.offers.map((offer) => ({ ...offer, endpoints: [...offer.endpoints] })),
    voices: [...model.voices],
    audioFormats: [...(model.audioFormats ?? [])],
    extraParameters: [...model.extraParameters],
    reasoningEfforts: [...model.reasoningEfforts],
  };
}

/**
 * Endpoints whose OpenAI API makes `model` optional: a request without one gets the catalog's default.
 * On `responses` only POST /v1/responses/input_tokens takes a request without one (a count calls no model).
 */
const MODEL_OPTIONAL_ENDPOINTS = ['moderations', 'images.generations', 'images.edits', 'responses'];

const byName = new Intl.Collator('en', { sensitivity: 'base', numeric: true });

/**
 * One catalog version as served: messages built once at load, lookups by id and alias. Immutable;
 * a load swaps the whole snapshot, so a reader never sees half of two versions.
 */
export class CatalogSnapshot {
  readonly models: readonly Model[];
  readonly startups: readonly Startup[];
  readonly providers: readonly Provider[];
  readonly limitGroups: readonly LimitGroup[];
  /** The model that screens image-generation prompts: config `moderation_model`, else the first, by id, served on `moderations`; '' when none. */
  readonly moderationModel: string;
  /**
   * The model of a request that names none, per endpoint whose API makes `model` optional (moderations,
   * images.generations, images.edits; responses, for input_tokens): config `default_models`, else (moderations) the moderation
   * model, else the first model, by id, served there; endpoints with no such model are left out.
   */
  readonly defaultModels: Record<string, string>;
  private readonly modelsByName = new Map<string, Model>();
  private readonly startupData = new Map<string, StartupData>();

  /** `firstSeen`: Unix seconds each startup first appeared, for startups whose config gives no `created`. */
  constructor(
    readonly version: string,
    readonly data: CatalogData,
    firstSeen: ReadonlyMap<string, number>,
  ) {
    this.models = data.models
      .map(toModel)
      .sort((a, b) => (a.created === b.created ? (a.id < b.id ? -1 : 1) : a.created > b.created ? -1 : 1));
    this.moderationModel =
      data.moderationModel ??
      this.models
        .filter((model) => model.offers.some((offer) => offer.endpoints.includes('moderations')))
        .map((model) => model.id)
        .sort()[0] ?? '';
    this.defaultModels = {};
    for (const endpoint of MODEL_OPTIONAL_ENDPOINTS) {
      const chosen =
        data.defaultModels?.[endpoint] ??
        (endpoint === 'moderations' && this.moderationModel !== '' ? this.moderationModel : undefined) ??
        this.models.filter((model) => model.offers.some((offer) => offer.endpoints.includes(endpoint))).map((model) => model.id).sort()[0];
      if (chosen !== undefined) this.defaultModels[endpoint] = chosen;
    }
    // Configured defaults for other endpoints are kept as given (the edge applies them where `model` may be absent).
    for (const [endpoint, model] of Object.entries(data.defaultModels ?? {})) this.defaultModels[endpoint] ??= model;
    for (const model of this.models) {
      this.modelsByName.set(model.id, model);
      for (const alias of model.aliases) this.modelsByName.set(alias, model);
    }
    this.startups = data.startups
      .map((startup) => ({
        id: startup.id,
        displayName: startup.displayName,
        iconUrl: startup.iconUrl,
        websiteUrl: startup.websiteUrl ?? undefined,
        created: BigInt(startup.created ?? firstSeen.get(startup.id) ?? 0),
      }))
      .sort((a, b) => byName.compare(a.displayName, b.displayName) || (a.id < b.id ? -1 : 1));
    for (const startup of data.startups) this.startupData.set(startup.id, startup);
    this.providers = data.providers.map((provider) => ({
      id: provider.id,
      kind: provider.kind,
      baseUrl: provider.baseUrl,
      apiKeyEnv: provider.apiKeyEnv,
      project: provider.project ?? '',
      location: provider.location ?? '',
      credentialsFileEnv: provider.credentialsFileEnv ?? '',
      region: provider.region ?? '',
      accessKeyIdEnv: provider.accessKeyIdEnv ?? '',
      secretAccessKeyEnv: provider.secretAccessKeyEnv ?? '',
      sessionTokenEnv: provider.sessionTokenEnv ?? '',
      apiVersion: provider.apiVersion ?? '',
      headers: { ...provider.headers },
      timeoutMs: provider.timeoutMs ?? 0,
    }));
    this.limitGroups = data.limitGroups.map((group) => ({
      id: group.id,
      tiers: Object.fromEntries(
        Object.entries(group.tiers).map(([tier, limit]) => [tier, { minute: limit.minute, day: limit.day ?? undefined }]),
      ),
    }));
  }

  /** By id or alias. */
  findModel(name: string): Model | undefined {
    return this.modelsByName.get(name);
  }

  /** The startup's own SVG, or a generated placeholder; undefined for an unknown startup. */
  icon(startupId: string): { svg: string; provided: boolean } | undefined {
    const startup = this.startupData.get(startupId);
    if (!startup) return undefined;
    if (startup.iconSvg !== null) return { svg: startup.iconSvg, provided: true };
    return { svg: placeholderIcon(startup.id, startup.displayName), provided: false };
  }
}
