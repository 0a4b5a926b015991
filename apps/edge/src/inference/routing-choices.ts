import { z } from 'zod';
import type { ChatRequest, FallbackModel, RoutingChoices } from '@gateway/proto';
import { parseCredits } from '@gateway/platform';
import type { VerifiedApiKey } from './auth-cache.js';
import type { CatalogModel } from '../catalog-cache.js';
import { modelSupports, sentParameters, unsupportedFields, type Dialect } from '../canonical/parameters.js';
import type { EdgeContext } from '../context.js';
import { EdgeError, edgeErrors } from '../errors.js';
import { resolveModel, type InferenceEndpoint } from './model-resolution.js';

/**
 * Model fallbacks and provider preferences (OpenRouter's `models` and `provider`; docs/dialects.md,
 * "Model fallbacks and provider preferences"). The edge resolves every named model against its catalog
 * snapshot and applies the preferences it can judge alone (price ceiling, required parameters, which
 * providers are allowed at all), so a request nothing can serve is a 400 before admission and the hold
 * covers the dearest model left. Routing then walks model × provider in its one failover loop, ordering
 * each model's offers by the preferences and the strategy. A request with neither field never comes here.
 */

/** OpenRouter's limit on `models`. */
export const MAX_MODELS = 8;
const PROVIDER_LIST_LIMIT = 64;

const providerIds = z.array(z.string().min(1).max(200)).max(PROVIDER_LIST_LIMIT);
/** Credits per million tokens, as a decimal string or a JSON number written without an exponent. */
const pricePerMillion = z.union([z.string(), z.number()]).transform((value, context) => {
  const text = typeof value === 'number' ? String(value) : value;
  try {
    const pico = parseCredits(text);
    if (pico < 0n) throw new Error('negative');
    return pico;
  } catch {
    context.addIssue({ code: 'custom', message: 'must be a non-negative decimal number of credits per million tokens, e.g. "1.5"' });
    return z.NEVER;
  }
});

export const modelsField = z.array(z.string().min(1)).min(1).max(MAX_MODELS, `at most ${MAX_MODELS} models`);

export const providerField = z
  .object({
    order: providerIds.nullish(),
    allow_fallbacks: z.boolean().nullish(),
    only: providerIds.nullish(),
    ignore: providerIds.nullish(),
    sort: z.enum(['price', 'latency', 'throughput']).nullish(),
    require_parameters: z.boolean().nullish(),
    max_price: z.object({ prompt: pricePerMillion.nullish(), completion: pricePerMillion.nullish() }).strict().nullish(),
  })
  .strict();

export type ProviderPreferences = z.infer<typeof providerField>;

/** The fields every chat dialect's schema adds for this feature. */
export const routingChoiceFields = { models: modelsField.nullish(), provider: providerField.nullish() };

interface ChoicesBody {
  model: string;
  models?: readonly string[] | null;
  provider?: ProviderPreferences | null;
}

/** Whether the body asks for fallbacks or provider preferences (two property reads; nothing allocated). */
export function hasRoutingChoices(body: unknown): boolean {
  const choices = body as ChoicesBody;
  return (choices.models !== undefined && choices.models !== null) || (choices.provider !== undefined && choices.provider !== null);
}

/**
 * Before the schema: a body with `models` and no `model` is served by the first of `models`
 * (OpenRouter: `model` is optional then; with both, `model` comes first). Mutates the parsed JSON.
 */
export function primaryModelFromModels(json: unknown): unknown {
  if (json !== null && typeof json === 'object') {
    const body = json as { model?: unknown; models?: unknown };
    if (body.model === undefined && Array.isArray(body.models) && typeof body.models[0] === 'string') body.model = body.models[0];
  }
  return json;
}

const DIALECTS: Record<string, Dialect> = { 'chat.completions': 'chat', messages: 'messages', responses: 'responses' };
const MILLION = 1_000_000n;

/** The models a request may be served by, first to last, and its provider preferences for routing. */
export interface ChosenModels {
  models: CatalogModel[];
  preferences: ProviderPreferences | undefined;
}

/**
 * Every model the request names (`model`, then `models`, duplicates once), each checked as the request's
 * model is (400 unknown, 410 gone, 403 tier, 400 endpoint): an invalid name fails the request before any
 * upstream call. Then the preferences the edge judges: `max_price`, `require_parameters`, and whether a
 * model has any offer on this endpoint that `only` / `ignore` / `allow_fallbacks: false` allow. None
 * left: 400 `no_provider_matches`.
 */
export function chooseModels(context: EdgeContext, body: unknown, primary: CatalogModel, endpoint: InferenceEndpoint, key: VerifiedApiKey): ChosenModels {
  const { models, provider } = body as ChoicesBody;
  const named: CatalogModel[] = [primary];
  if (models) {
    for (let index = 0; index < models.length; index++) {
      let model: CatalogModel;
      try {
        model = resolveModel(context, models[index]!, endpoint, key);
      } catch (error) {
        throw withModelsParam(error, index);
      }
      if (!named.includes(model)) named.push(model);
    }
  }
  const preferences = provider ?? undefined;
  if (!preferences) return { models: named, preferences };
  const sent = preferences.require_parameters ? sentParameters(DIALECTS[endpoint] ?? 'chat', body as object) : undefined;
  const eligible = named.filter((model) => fitsPrice(model, preferences) && hasAllowedOffer(model, endpoint, preferences) && (!sent || sent.every((parameter) => modelSupports(model, parameter))));
  if (eligible.length === 0) {
    throw edgeErrors.invalidRequest(
      `body.provider: no provider of ${named.map((model) => `\`${model.id}\``).join(', ')} matches the request's provider preferences (max_price, require_parameters, only, ignore, order with allow_fallbacks: false).`,
      'body.provider',
      'no_provider_matches',
    );
  }
  return { models: eligible, preferences };
}

/** A resolution error of `models[index]`, naming that field rather than `model`. */
function withModelsParam(error: unknown, index: number): unknown {
  if (!(error instanceof EdgeError) || error.apiError.param !== 'body.model') return error;
  return new EdgeError({ ...error.apiError, param: `body.models.${index}`, message: error.apiError.message.replace('body.model:', `body.models.${index}:`) });
}

/** Both ceilings hold at the model's token prices (exact: pico-credits per token × 1,000,000 against the ceiling). */
function fitsPrice(model: CatalogModel, preferences: ProviderPreferences): boolean {
  const ceiling = preferences.max_price;
  if (!ceiling) return true;
  const pricing = model.model.pricing;
  if (ceiling.prompt !== undefined && ceiling.prompt !== null && perMillion(pricing?.perInputToken ?? pricing?.perToken) > ceiling.prompt) return false;
  if (ceiling.completion !== undefined && ceiling.completion !== null && perMillion(pricing?.perOutputToken ?? pricing?.perToken) > ceiling.completion) return false;
  return true;
}

function perMillion(price: string | undefined): bigint {
  if (price === undefined || price === '') return 0n;
  return parseCredits(price) * MILLION;
}

function hasAllowedOffer(model: CatalogModel, endpoint: string, preferences: ProviderPreferences): boolean {
  const orderOnly = preferences.allow_fallbacks === false && (preferences.order?.length ?? 0) > 0;
  for (const offer of model.model.offers) {
    if (!offer.endpoints.includes(endpoint)) continue;
    const providerId = offer.providerId;
    if (preferences.only && preferences.only.length > 0 && !preferences.only.includes(providerId)) continue;
    if (preferences.ignore?.includes(providerId)) continue;
    if (orderOnly && !preferences.order!.includes(providerId)) continue;
    return true;
  }
  return false;
}

/** What routing gets: the fallbacks (each with the request's fields it lacks) and the provider preferences. */
export function routingChoices(request: ChatRequest, chosen: ChosenModels): RoutingChoices {
  const fallbackModels: FallbackModel[] = [];
  for (let index = 1; index < chosen.models.length; index++) {
    const model = chosen.models[index]!;
    fallbackModels.push({ modelId: model.id, unsupportedFields: unsupportedFields(request, model) });
  }
  const preferences = chosen.preferences;
  return {
    fallbackModels,
    order: preferences?.order ?? [],
    orderOnly: preferences?.allow_fallbacks === false,
    only: preferences?.only ?? [],
    ignore: preferences?.ignore ?? [],
    sort: preferences?.sort ?? '',
  };
}
