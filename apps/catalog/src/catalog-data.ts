import { createHash } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { dirname, isAbsolute, resolve } from 'node:path';
import { PRICE_KEYS, validateCatalogText, type CatalogDocument, type CatalogProblem, type PriceKey } from '@gateway/platform/catalog-document';

/**
 * The validated catalog in canonical form: every default applied, icon files read in. Its canonical
 * JSON is what Postgres stores and what the version hashes, so a restart or a second replica serves
 * exactly what was loaded even when the icon files are gone.
 */
export interface CatalogData {
  startups: StartupData[];
  providers: ProviderData[];
  limitGroups: LimitGroupData[];
  models: ModelData[];
  /** Config `moderation_model`; absent (not stored) when the config names none. */
  moderationModel?: string;
  /** Config `default_models` (endpoint → model id); absent (not stored) when the config names none. */
  defaultModels?: Record<string, string>;
}

export interface StartupData {
  id: string;
  displayName: string;
  iconUrl: string;
  /** SVG text of the logo; null: a placeholder is generated. */
  iconSvg: string | null;
  websiteUrl: string | null;
  /** Null: the time the startup first appeared in a loaded catalog. */
  created: number | null;
}

export interface ProviderData {
  id: string;
  kind: string;
  baseUrl: string;
  apiKeyEnv: string;
  // Set only when the config sets them: a catalog without them keeps its canonical JSON (and version).
  project?: string;
  location?: string;
  credentialsFileEnv?: string;
  region?: string;
  accessKeyIdEnv?: string;
  secretAccessKeyEnv?: string;
  sessionTokenEnv?: string;
  apiVersion?: string;
  headers?: Record<string, string>;
  timeoutMs?: number;
}

export interface LimitGroupData {
  id: string;
  tiers: Record<string, { minute: number; day: number | null }>;
}

export interface ModelData {
  id: string;
  ownedBy: string | null;
  displayName: string;
  description: string;
  created: number;
  contextWindow: number;
  maxOutputTokens: number | null;
  aliases: string[];
  inputModalities: string[];
  outputModalities: string[];
  supportedParameters: string[];
  pricing: Partial<Record<PriceKey, string>>;
  /** Only present when the config lists it (so catalogs without it keep their version hash). */
  batchPricing?: Partial<Record<PriceKey, string>>;
  limitGroup: string;
  maxImages: number | null;
  expiresAt: number | null;
  offers: { providerId: string; upstreamModel: string; endpoints: string[] }[];
  voices: string[];
  /** Only present when the config lists it (so catalogs without it keep their version hash). */
  audioFormats?: string[];
  extraParameters: string[];
  reasoningEfforts: string[];
}

export const EMPTY_CATALOG: CatalogData = { startups: [], providers: [], limitGroups: [], models: [] };

/** JSON with object keys sorted at every level: equal catalogs give equal text. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, inner: unknown) => {
    if (inner === null || typeof inner !== 'object' || Array.isArray(inner)) return inner;
    return Object.fromEntries(Object.entries(inner as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  });
}

export function catalogVersion(canonical: string): string {
  return createHash('sha256').update(canonical).digest('hex');
}

const ICON_BYTES_MAX = 256 * 1024;
/** All logos together: they live in memory and in every stored version. */
const ICONS_TOTAL_BYTES_MAX = 8 * 1024 * 1024;

export interface IconSource {
  /** Directory relative icon paths are resolved against (the config file's); absent: only absolute paths and inline SVG. */
  baseDirectory?: string;
}

/** Where a document loaded from `source` (a file path) resolves its relative icon paths. */
export function iconSourceFor(source: string): IconSource {
  return source && isAbsolute(source) ? { baseDirectory: dirname(source) } : {};
}

async function readIcon(reference: string, iconSource: IconSource): Promise<{ svg: string } | { reason: string }> {
  if (reference.trimStart().startsWith('<')) {
    return /<svg[\s>]/.test(reference) ? { svg: reference } : { reason: 'inline icon must be SVG text (<svg ...>)' };
  }
  if (!reference.toLowerCase().endsWith('.svg')) return { reason: 'must name an .svg file' };
  if (!isAbsolute(reference) && !iconSource.baseDirectory) {
    return { reason: 'a relative icon path needs the config file path as the load source' };
  }
  const path = isAbsolute(reference) ? reference : resolve(iconSource.baseDirectory!, reference);
  try {
    const info = await stat(path);
    if (!info.isFile()) return { reason: `${path} is not a file` };
    if (info.size > ICON_BYTES_MAX) return { reason: `${path} is larger than ${ICON_BYTES_MAX} bytes` };
    const svg = await readFile(path, 'utf8');
    return /<svg[\s>]/.test(svg) ? { svg } : { reason: `${path} is not SVG` };
  } catch (error) {
    return { reason: `cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? String(error)}` };
  }
}

export interface ValidatedCatalog {
  data: CatalogData;
  canonical: string;
  version: string;
}

/** Validates a document's text and builds the canonical catalog, or lists every problem. */
export async function buildCatalog(
  text: string,
  iconSource: IconSource,
): Promise<{ catalog?: ValidatedCatalog; problems: CatalogProblem[] }> {
  const { document, raw, problems } = validateCatalogText(text);
  if (!raw) return { problems };
  // Icons are checked even when other fields failed, so one load reports every problem.
  const startups = Array.isArray(raw.startups) ? (raw.startups as unknown[]) : [];
  const icons = await Promise.all(
    startups.slice(0, 1_000).map((startup) => {
      const reference = (startup as { icon_svg?: unknown } | null)?.icon_svg;
      return typeof reference === 'string' && reference.length > 0 ? readIcon(reference, iconSource) : null;
    }),
  );
  const iconProblems: CatalogProblem[] = [];
  icons.forEach((icon, index) => {
    if (icon && 'reason' in icon) iconProblems.push({ path: `startups[${index}].icon_svg`, reason: icon.reason });
  });
  const iconBytes = icons.reduce((total, icon) => total + (icon && 'svg' in icon ? Buffer.byteLength(icon.svg) : 0), 0);
  if (iconBytes > ICONS_TOTAL_BYTES_MAX) {
    iconProblems.push({ path: 'startups', reason: `icons total ${iconBytes} bytes; at most ${ICONS_TOTAL_BYTES_MAX} are allowed` });
  }
  if (!document || iconProblems.length > 0) return { problems: sortProblems([...problems, ...iconProblems]) };
  const data = toCatalogData(document, icons.map((icon) => (icon && 'svg' in icon ? icon.svg : null)));
  const canonical = canonicalJson(data);
  return { catalog: { data, canonical, version: catalogVersion(canonical) }, problems: [] };
}

function toCatalogData(document: CatalogDocument, iconSvgs: (string | null)[]): CatalogData {
  return {
    // Only when set: a catalog without it keeps the canonical JSON (and version) it had before the field existed.
    ...(document.moderation_model !== undefined ? { moderationModel: document.moderation_model } : {}),
    ...(document.default_models !== undefined ? { defaultModels: { ...document.default_models } as Record<string, string> } : {}),
    startups: document.startups.map((startup, index) => ({
      id: startup.id,
      displayName: startup.display_name,
      iconUrl: startup.icon_url ?? `/static/startups/${encodeURIComponent(startup.id)}.svg`,
      iconSvg: iconSvgs[index] ?? null,
      websiteUrl: startup.website_url ?? null,
      created: startup.created ?? null,
    })),
    providers: document.providers.map((provider) => ({
      id: provider.id,
      kind: provider.kind,
      baseUrl: provider.base_url ?? '',
      apiKeyEnv: provider.api_key_env ?? '',
      ...(provider.project !== undefined ? { project: provider.project } : {}),
      ...(provider.location !== undefined ? { location: provider.location } : {}),
      ...(provider.credentials_file_env !== undefined ? { credentialsFileEnv: provider.credentials_file_env } : {}),
      ...(provider.region !== undefined ? { region: provider.region } : {}),
      ...(provider.access_key_id_env !== undefined ? { accessKeyIdEnv: provider.access_key_id_env } : {}),
      ...(provider.secret_access_key_env !== undefined ? { secretAccessKeyEnv: provider.secret_access_key_env } : {}),
      ...(provider.session_token_env !== undefined ? { sessionTokenEnv: provider.session_token_env } : {}),
      ...(provider.api_version !== undefined ? { apiVersion: provider.api_version } : {}),
      ...(provider.headers !== undefined ? { headers: { ...provider.headers } } : {}),
      ...(provider.timeout_ms !== undefined ? { timeoutMs: provider.timeout_ms } : {}),
    })),
    limitGroups: document.limit_groups.map((group) => ({
      id: group.id,
      tiers: Object.fromEntries(
        Object.entries(group.tiers).map(([tier, limit]) => [tier, { minute: limit!.minute, day: limit!.day ?? null }]),
      ),
    })),
    models: document.models.map((model) => ({
      id: model.id,
      ownedBy: model.owned_by ?? null,
      displayName: model.display_name ?? model.id,
      description: model.description ?? '',
      created: model.created,
      contextWindow: model.context_window ?? 0,
      maxOutputTokens: model.max_output_tokens ?? null,
      aliases: model.aliases ?? [],
      inputModalities: model.input_modalities ?? ['text'],
      outputModalities: model.output_modalities ?? ['text'],
      supportedParameters: model.supported_parameters ?? [],
      pricing: Object.fromEntries(
        PRICE_KEYS.flatMap((key) => (model.pricing?.[key] === undefined ? [] : [[key, model.pricing[key]]])),
      ),
      ...(model.batch_pricing
        ? { batchPricing: Object.fromEntries(PRICE_KEYS.flatMap((key) => (model.batch_pricing?.[key] === undefined ? [] : [[key, model.batch_pricing[key]]]))) }
        : {}),
      limitGroup: model.limit_group ?? 'default',
      maxImages: model.max_images ?? null,
      expiresAt: model.expires_at ?? null,
      offers: model.offers.map((offer) => ({
        providerId: offer.provider,
        upstreamModel: offer.upstream_model ?? model.id,
        endpoints: offer.endpoints,
      })),
      voices: model.voices ?? [],
      ...(model.audio_formats ? { audioFormats: [...new Set(model.audio_formats)] } : {}),
      extraParameters: model.extra_parameters ?? [],
      reasoningEfforts: model.reasoning_efforts ?? [],
    })),
  };
}

/** Document order (models[2] before models[10]), so a long list reads top to bottom. */
function sortProblems(problems: CatalogProblem[]): CatalogProblem[] {
  return [...problems].sort((a, b) => a.path.localeCompare(b.path, 'en', { numeric: true }));
}
