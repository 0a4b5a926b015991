import { ACCOUNT_TIERS, ENDPOINT_NAMES as ENDPOINTS } from '@gateway/platform';
import { isMap, isPair, isScalar, parseDocument, visit, type Scalar } from 'yaml';
import { z } from 'zod';
import { normalizePrice } from './price.js';

/** Endpoint names a provider offer may serve (DESIGN.md §4). */
export { ENDPOINT_NAMES as ENDPOINTS, type EndpointName as Endpoint } from '@gateway/platform';

export const PROVIDER_KINDS = ['openai', 'anthropic', 'gemini', 'vertex', 'bedrock', 'azure-openai', 'simulated'] as const;
/** Tiers a limit group may key its limits by: the account tiers Auth knows. */
export const TIERS = ACCOUNT_TIERS;
export const MODALITIES = ['text', 'image', 'file', 'audio', 'video', 'embeddings'] as const;
/** Lowest first: a model lists the levels it supports in this order. */
export const REASONING_EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh'] as const;

/** Pricing keys, credits per unit. The last four are this catalog's names for the spec's unnamed prices. */
export const PRICE_KEYS = [
  'per_input_token',
  'per_cached_input_token',
  'per_output_token',
  'per_input_audio_token',
  'per_output_audio_token',
  'per_input_audio_hour',
  'per_output_audio_hour',
  'per_output_text_token',
  'per_input_text_character',
  'per_output_text_character',
  'per_output_image_token',
  'per_input_text_token',
  'per_input_image_token',
  'per_token',
  'per_cache_write_input_token',
] as const;
export type PriceKey = (typeof PRICE_KEYS)[number];

// Bounds: a catalog is operator-written configuration; anything far beyond these is a mistake.
export const DOCUMENT_BYTES_MAX = 4 * 1024 * 1024;
const MODELS_MAX = 5_000;
const ENTRIES_MAX = 1_000;
const LIST_MAX = 256;
const NAME_LENGTH_MAX = 200;
const TEXT_LENGTH_MAX = 4_000;
const ICON_BYTES_MAX = 256 * 1024;

const identifier = z
  .string()
  .min(1, 'must not be empty')
  .max(NAME_LENGTH_MAX)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$/, 'letters, digits and . _ : / @ + - only, starting with a letter or digit');
const name = z.string().min(1, 'must not be empty').max(NAME_LENGTH_MAX);
// Number.isInteger as a refinement, not .int(): zod's int check aborts the parse, which would hide
// the cross-reference problems of the same document.
const wholeNumber = (message = 'must be a whole number') => z.number().refine(Number.isInteger, message);
const unixSeconds = wholeNumber('must be whole Unix seconds').min(0).max(32_503_680_000);
const positiveCount = wholeNumber().min(1).max(4_294_967_295);
const nameList = z.array(name).max(LIST_MAX);
const urlOrPath = z
  .string()
  .max(2_048)
  .refine((text) => text.startsWith('/') || URL.canParse(text), 'must be an absolute URL or a path starting with /');

/** Price text arrives as a string: numbers were re-read from their YAML source text before parsing. */
const price = z.string().transform((text, ctx) => {
  const result = normalizePrice(text);
  if ('reason' in result) {
    ctx.addIssue({ code: 'custom', message: result.reason });
    return z.NEVER;
  }
  return result.price;
});

const pricing = z.strictObject(Object.fromEntries(PRICE_KEYS.map((key) => [key, price.optional()])) as Record<
  PriceKey,
  z.ZodOptional<typeof price>
>);

const offer = z.strictObject({
  provider: identifier,
  // Absent: the upstream knows the model by its catalog id.
  upstream_model: name.optional(),
  endpoints: z.array(z.enum(ENDPOINTS)).min(1, 'must list at least one endpoint').max(ENDPOINTS.length),
});

const model = z.strictObject({
  id: identifier,
  owned_by: identifier.nullish(),
  display_name: name.optional(),
  description: z.string().max(TEXT_LENGTH_MAX).optional(),
  created: unixSeconds,
  context_window: wholeNumber().min(0).max(4_294_967_295).optional(),
  max_output_tokens: wholeNumber().min(1).max(4_294_967_295).nullish(),
  aliases: z.array(identifier).max(32).optional(),
  input_modalities: z.array(z.enum(MODALITIES)).min(1).max(MODALITIES.length).optional(),
  output_modalities: z.array(z.enum(MODALITIES)).min(1).max(MODALITIES.length).optional(),
  supported_parameters: nameList.optional(),
  pricing: pricing.nullish(),
  /** Prices of batch lines (docs/jobs.md): each one given replaces the regular price for batch lines. */
  batch_pricing: pricing.optional(),
  limit_group: identifier.optional(),
  max_images: wholeNumber().min(1).max(128).nullish(),
  expires_at: unixSeconds.nullish(),
  voices: nameList.optional(),
  /** Speech models: the response formats they produce; absent: all six. */
  audio_formats: z.array(z.enum(['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'])).min(1).max(6).optional(),
  extra_parameters: nameList.optional(),
  reasoning_efforts: z.array(z.enum(REASONING_EFFORTS)).max(REASONING_EFFORTS.length).optional(),
  offers: z.array(offer).min(1, 'must list at least one provider offer').max(64),
});

const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name');
const cloudName = z.string().min(1).max(100).regex(/^[a-z0-9][a-z0-9-]*$/, 'lower-case letters, digits and - only');

const provider = z.strictObject({
  id: identifier,
  kind: z.enum(PROVIDER_KINDS),
  base_url: z
    .string()
    .refine((text) => URL.canParse(text) && /^https?:$/.test(new URL(text).protocol), 'must be an http(s) URL')
    .optional(),
  api_key_env: envName.optional(),
  // vertex
  project: z.string().min(1).max(200).regex(/^[a-z0-9][a-z0-9.:-]*$/, 'a Google Cloud project id').optional(),
  location: cloudName.optional(),
  credentials_file_env: envName.optional(),
  // bedrock
  region: cloudName.optional(),
  access_key_id_env: envName.optional(),
  secret_access_key_env: envName.optional(),
  session_token_env: envName.optional(),
  // azure-openai
  api_version: z.string().min(1).max(64).regex(/^[A-Za-z0-9.-]+$/, 'an api-version such as 2025-04-01-preview').optional(),
  headers: z
    .record(
      z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'must be an HTTP header name'),
      z.string().max(4_096).regex(/^[^\r\n\0]*$/, 'must be one line'),
    )
    .refine((headers) => Object.keys(headers).length <= 64, 'at most 64 headers')
    .optional(),
  timeout_ms: wholeNumber().min(1).max(3_600_000).optional(),
});

/** Which fields each provider kind takes beyond id, kind, headers and timeout_ms; `required` ones must be set. */
export const PROVIDER_FIELDS: Record<(typeof PROVIDER_KINDS)[number], { allowed: readonly string[]; required: readonly string[] }> = {
  openai: { allowed: ['base_url', 'api_key_env'], required: ['base_url'] },
  anthropic: { allowed: ['base_url', 'api_key_env'], required: ['base_url'] },
  // base_url absent: https://generativelanguage.googleapis.com/v1beta
  gemini: { allowed: ['base_url', 'api_key_env'], required: [] },
  // base_url absent: https://{location}-aiplatform.googleapis.com
  vertex: { allowed: ['base_url', 'project', 'location', 'credentials_file_env'], required: ['project', 'location'] },
  // base_url absent: https://bedrock-runtime.{region}.amazonaws.com; no *_env: the default AWS credential chain
  bedrock: { allowed: ['base_url', 'region', 'access_key_id_env', 'secret_access_key_env', 'session_token_env'], required: ['region'] },
  'azure-openai': { allowed: ['base_url', 'api_key_env', 'api_version'], required: ['base_url'] },
  simulated: { allowed: ['base_url', 'api_key_env'], required: [] },
};

const tierLimit = z.strictObject({ minute: positiveCount, day: positiveCount.nullish() });

const limitGroup = z.strictObject({
  id: identifier,
  tiers: z.partialRecord(z.enum(TIERS), tierLimit),
});

const startup = z.strictObject({
  id: identifier,
  display_name: name,
  icon_url: urlOrPath.optional(),
  // A path relative to the config file, or inline SVG text.
  icon_svg: z.string().min(1).max(ICON_BYTES_MAX).optional(),
  website_url: urlOrPath.nullish(),
  created: unixSeconds.optional(),
});

/**
 * The whole config document (DESIGN.md §4). Unknown keys inside a section are problems (a typo in a
 * price name must not silently make a model free); unknown top-level sections are ignored so the file
 * can carry settings of other tools.
 */
export const catalogDocumentSchema = z
  .looseObject({
    startups: z.array(startup).max(ENTRIES_MAX).default([]),
    providers: z.array(provider).max(ENTRIES_MAX).default([]),
    limit_groups: z.array(limitGroup).max(ENTRIES_MAX).default([]),
    models: z.array(model).min(1, 'must list at least one model').max(MODELS_MAX),
    // The model that screens image-generation prompts; absent: the first model, by id, served on moderations.
    moderation_model: z.string().min(1).max(200).optional(),
    // The model a request that names none is served by, per endpoint (OpenAI's APIs make `model`
    // optional on moderations and images); absent for moderations: moderation_model's.
    default_models: z.partialRecord(z.enum(ENDPOINTS), z.string().min(1).max(200)).optional(),
  })
  .superRefine(checkCrossReferences, { when: () => true });

export type CatalogDocument = z.infer<typeof catalogDocumentSchema>;

export interface CatalogProblem {
  path: string;
  reason: string;
}

type Issue = Parameters<Parameters<typeof catalogDocumentSchema.superRefine>[0]>[1];

const asArray = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
const asRecord = (value: unknown): Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
const asString = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);

/**
 * Checks that span entries (references, uniqueness, endpoint needs). Runs even when a field elsewhere
 * failed, so one load reports every problem; hence it reads the input defensively.
 */
function checkCrossReferences(input: unknown, ctx: Issue): void {
  const document = asRecord(input);
  const problem = (path: (string | number)[], message: string) => ctx.addIssue({ code: 'custom', message, path });

  const idsOf = (section: string) => {
    const seen = new Map<string, number>();
    asArray(document[section]).forEach((entry, index) => {
      const id = asString(asRecord(entry).id);
      if (id === undefined) return;
      const first = seen.get(id);
      if (first !== undefined) problem([section, index, 'id'], `duplicate id "${id}" (also ${section}[${first}])`);
      else seen.set(id, index);
    });
    return seen;
  };
  const startupIds = idsOf('startups');
  const providerIds = idsOf('providers');
  const limitGroupIds = idsOf('limit_groups');
  const modelIds = idsOf('models');

  asArray(document.providers).forEach((entry, index) => {
    const record = asRecord(entry);
    const kind = record.kind as (typeof PROVIDER_KINDS)[number];
    if (!PROVIDER_KINDS.includes(kind)) return;
    const fields = PROVIDER_FIELDS[kind];
    for (const field of fields.required) {
      if (record[field] === undefined) problem(['providers', index, field], `required for kind "${kind}"`);
    }
    for (const field of Object.keys(record)) {
      if (['id', 'kind', 'headers', 'timeout_ms'].includes(field) || fields.allowed.includes(field)) continue;
      if (Object.values(PROVIDER_FIELDS).some((other) => other.allowed.includes(field))) {
        problem(['providers', index, field], `not a field of kind "${kind}" (it takes ${fields.allowed.join(', ')}, headers, timeout_ms)`);
      }
    }
    if (kind === 'bedrock' && (record.access_key_id_env === undefined) !== (record.secret_access_key_env === undefined)) {
      problem(['providers', index, record.access_key_id_env === undefined ? 'access_key_id_env' : 'secret_access_key_env'],
        'access_key_id_env and secret_access_key_env go together (neither: the default AWS credential chain)');
    }
  });

  const moderationModel = asString(document.moderation_model);
  if (moderationModel !== undefined) {
    const index = modelIds.get(moderationModel);
    const served = index !== undefined && asArray(asRecord(asArray(document.models)[index]).offers)
      .some((offer) => asArray(asRecord(offer).endpoints).includes('moderations'));
    if (index === undefined) problem(['moderation_model'], `unknown model "${moderationModel}" (give a model id, not an alias)`);
    else if (!served) problem(['moderation_model'], `models[${index}] ("${moderationModel}") is not served on the moderations endpoint`);
  }

  for (const [endpoint, modelId] of Object.entries(asRecord(document.default_models))) {
    if (typeof modelId !== 'string') continue;
    const index = modelIds.get(modelId);
    const served = index !== undefined && asArray(asRecord(asArray(document.models)[index]).offers)
      .some((offer) => asArray(asRecord(offer).endpoints).includes(endpoint));
    if (index === undefined) problem(['default_models', endpoint], `unknown model "${modelId}" (give a model id, not an alias)`);
    else if (!served) problem(['default_models', endpoint], `models[${index}] ("${modelId}") is not served on the ${endpoint} endpoint`);
  }

  const aliasOwner = new Map<string, number>();
  asArray(document.models).forEach((entry, index) => {
    const model = asRecord(entry);
    const owner = asString(model.owned_by);
    if (owner !== undefined && !startupIds.has(owner)) {
      problem(['models', index, 'owned_by'], `unknown startup "${owner}"`);
    }
    const group = asString(model.limit_group) ?? 'default';
    if (!limitGroupIds.has(group)) {
      problem(['models', index, 'limit_group'], model.limit_group === undefined
        ? 'required (no limit group named "default" exists)'
        : `unknown limit group "${group}"`);
    }
    asArray(model.aliases).forEach((alias, aliasIndex) => {
      if (typeof alias !== 'string') return;
      const path = ['models', index, 'aliases', aliasIndex];
      if (modelIds.has(alias)) {
        problem(path, `alias "${alias}" is the id of models[${modelIds.get(alias)}]`);
        return;
      }
      const first = aliasOwner.get(alias);
      if (first !== undefined) {
        problem(path, first === index ? `alias "${alias}" is listed twice` : `alias "${alias}" is also an alias of models[${first}]`);
        return;
      }
      aliasOwner.set(alias, index);
    });
    const endpoints = new Set<string>();
    asArray(model.offers).forEach((offerEntry, offerIndex) => {
      const offer = asRecord(offerEntry);
      const providerId = asString(offer.provider);
      if (providerId !== undefined && !providerIds.has(providerId)) {
        problem(['models', index, 'offers', offerIndex, 'provider'], `unknown provider "${providerId}"`);
      }
      for (const endpoint of asArray(offer.endpoints)) if (typeof endpoint === 'string') endpoints.add(endpoint);
    });
    const servesImages = endpoints.has('images.generations') || endpoints.has('images.edits');
    if (servesImages && model.max_images == null) {
      problem(['models', index, 'max_images'], 'required for a model served on an images endpoint');
    }
    if (endpoints.has('audio.speech') && asArray(model.voices).length === 0) {
      problem(['models', index, 'voices'], 'a model served on audio.speech must list its voices');
    }
    checkServedUnitsPriced(model, endpoints, (field, message) => problem(['models', index, 'pricing', field], message));
    const efforts = asArray(model.reasoning_efforts);
    const ranks = efforts.map((effort) => REASONING_EFFORTS.indexOf(effort as (typeof REASONING_EFFORTS)[number]));
    if (ranks.every((rank) => rank >= 0) && ranks.some((rank, position) => position > 0 && rank <= ranks[position - 1]!)) {
      problem(['models', index, 'reasoning_efforts'], `must be distinct and lowest first (${REASONING_EFFORTS.join(', ')})`);
    }
  });
}

/**
 * The unit each endpoint family always meters, and the prices that charge it (any one of them). A paid
 * model served on a family must price that family's unit, or requests there would be metered and
 * charged nothing (issue 29: an image model priced per input/output token answered images for free).
 * A free model (no price above zero) is free on every family, on purpose.
 */
const METERED_UNITS: ReadonlyArray<{ endpoints: readonly string[]; unit: string; prices: readonly PriceKey[] }> = [
  { endpoints: ['chat.completions', 'messages', 'responses', 'embeddings', 'moderations'], unit: 'input tokens', prices: ['per_input_token', 'per_token'] },
  { endpoints: ['chat.completions', 'messages', 'responses'], unit: 'output tokens', prices: ['per_output_token', 'per_token'] },
  { endpoints: ['images.generations', 'images.edits'], unit: 'generated image tokens', prices: ['per_output_image_token'] },
  { endpoints: ['images.edits'], unit: 'input image tokens', prices: ['per_input_image_token'] },
  { endpoints: ['audio.speech'], unit: 'input characters', prices: ['per_input_text_character'] },
  { endpoints: ['audio.transcriptions', 'audio.translations'], unit: 'input audio duration', prices: ['per_input_audio_hour'] },
];

function checkServedUnitsPriced(model: Record<string, unknown>, endpoints: ReadonlySet<string>, problem: (field: string, message: string) => void): void {
  const prices = asRecord(model.pricing);
  const paid = PRICE_KEYS.some((key) => {
    const text = prices[key];
    return (typeof text === 'string' || typeof text === 'number') && !/^0*\.?0*$/.test(String(text));
  });
  if (!paid) return;
  for (const { endpoints: families, unit, prices: keys } of METERED_UNITS) {
    const served = families.filter((family) => endpoints.has(family));
    if (served.length === 0 || keys.some((key) => prices[key] !== undefined && prices[key] !== null)) continue;
    problem(keys[0]!, `required: the model is paid and served on ${served.join(', ')}, which meters ${unit} (${keys.join(' or ')}; "0" to serve them free)`);
  }
}

/** `models[2].pricing.per_input_token` from zod's ['models', 2, 'pricing', 'per_input_token']. */
export function formatPath(path: readonly PropertyKey[]): string {
  let text = '';
  for (const segment of path) {
    if (typeof segment === 'number') text += `[${segment}]`;
    else text += text ? `.${String(segment)}` : String(segment);
  }
  return text || '(document)';
}

/**
 * Parses YAML with every number inside a `pricing` (or `batch_pricing`) map kept as its source text, so `0.0000005`
 * written unquoted arrives as exactly "0.0000005" and never passes through a float.
 */
export function parseYaml(text: string): { value?: unknown; problems: CatalogProblem[] } {
  const document = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (document.errors.length > 0) {
    return {
      problems: document.errors.map((error) => ({
        path: error.linePos ? `(line ${error.linePos[0].line}, column ${error.linePos[0].col})` : '(document)',
        reason: (error.message.split('\n')[0] ?? error.message).replace(/ at line \d+, column \d+:?$/, ''),
      })),
    };
  }
  visit(document, {
    Scalar(key, node: Scalar, path) {
      if (key !== 'value' || typeof node.value !== 'number') return;
      const pricingPair = path[path.length - 3];
      const pricingMap = path[path.length - 2];
      if (isPair(pricingPair) && isMap(pricingMap) && isScalar(pricingPair.key) && (pricingPair.key.value === 'pricing' || pricingPair.key.value === 'batch_pricing')) {
        node.value = node.source ?? String(node.value);
      }
    },
  });
  return { value: document.toJS({ maxAliasCount: 1_000 }), problems: [] };
}

/** Validates a config document's text; every problem is reported with its path. */
export function validateCatalogText(text: string): { document?: CatalogDocument; raw?: Record<string, unknown>; problems: CatalogProblem[] } {
  if (Buffer.byteLength(text) > DOCUMENT_BYTES_MAX) {
    return { problems: [{ path: '(document)', reason: `larger than ${DOCUMENT_BYTES_MAX} bytes` }] };
  }
  const parsed = parseYaml(text);
  if (parsed.problems.length > 0) return { problems: parsed.problems };
  const root = parsed.value ?? {};
  if (root === null || typeof root !== 'object' || Array.isArray(root)) {
    return { problems: [{ path: '(document)', reason: 'expected a mapping with startups, providers, limit_groups and models' }] };
  }
  const raw = root as Record<string, unknown>;
  const result = catalogDocumentSchema.safeParse(root);
  if (result.success) return { document: result.data, raw, problems: [] };
  const problems: CatalogProblem[] = [];
  for (const issue of result.error.issues) {
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) problems.push({ path: formatPath([...issue.path, key]), reason: 'unknown field' });
    } else {
      const missing = issue.code === 'invalid_type' && issue.message.endsWith('received undefined');
      problems.push({ path: formatPath(issue.path), reason: missing ? 'required' : issue.message });
    }
  }
  return { raw, problems };
}
