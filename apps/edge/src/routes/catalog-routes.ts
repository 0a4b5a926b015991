import type { Request, Response } from 'express';
import { parseCredits } from '@gateway/platform';
import type { AnthropicListedModel } from '../catalog-cache.js';
import type { EdgeContext } from '../context.js';
import { requestIdOf } from '../request-id.js';
import { presentedApiKey } from '../inference/credentials.js';
import { echoed } from '../echoed-value.js';
import { edgeErrors } from '../errors.js';
import { sendJson, sendJsonText } from '../http.js';

/** Spec §1: a paid request needs this much available balance. */
const PAID_MINIMUM_PICO = parseCredits('0.05');

/**
 * GET /v1/models (spec §4.11), from the catalog cache. Anonymous: the whole catalog. With a valid API
 * key: what the account may call — only models its tier may use (spec §7's 403 otherwise), and of
 * those what the balance can reach (free models always, paid ones only with >= 0.05 available).
 */
export function listModelsHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const anthropic = speaksAnthropic(request, response);
    // Paging is checked before the key is: a bad query is the caller's mistake whoever calls.
    const page = anthropic ? anthropicPage(request) : undefined;
    const credential = presentedApiKey(request);
    let freeOnly = false;
    let tier: string | undefined;
    if (credential !== undefined) {
      const requestId = requestIdOf(response);
      const key = await context.apiKeys.verify(credential, requestId);
      const balance = await context.ledger.getBalance({ accountId: key.accountId }, { requestId, deadlineMs: 5_000 });
      freeOnly = parseCredits(balance.available || balance.balance || '0') < PAID_MINIMUM_PICO;
      tier = key.tier;
    }
    if (page) sendJsonText(response, 200, anthropicListing(context.catalogCache.anthropicModels(freeOnly, tier), page));
    else sendJsonText(response, 200, context.catalogCache.listingJson(freeOnly, tier));
  };
}

/**
 * Anthropic's clients (the `@anthropic-ai/sdk`, Claude Code's model discovery) send `anthropic-version`
 * on every call and read Anthropic's shapes: such a request gets them, its errors in Anthropic's envelope.
 */
function speaksAnthropic(request: Request, response: Response): boolean {
  if (request.headers['anthropic-version'] === undefined) return false;
  response.locals.dialect = 'messages';
  return true;
}

/** Anthropic's list paging: `limit` 1..1000 (default 20), and at most one of `after_id` / `before_id`. */
interface AnthropicPage {
  limit: number;
  afterId: string | undefined;
  beforeId: string | undefined;
}

const ANTHROPIC_PAGE_DEFAULT = 20;
const ANTHROPIC_PAGE_MAX = 1_000;

function queryText(request: Request, name: string): string | undefined {
  const value = (request.query as Record<string, unknown>)[name];
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw edgeErrors.invalidRequest(`${name}: give it once.`, name);
  return value;
}

function anthropicPage(request: Request): AnthropicPage {
  const limitText = queryText(request, 'limit');
  const limit = limitText === undefined ? ANTHROPIC_PAGE_DEFAULT : Number(limitText);
  if (!Number.isInteger(limit) || limit < 1 || limit > ANTHROPIC_PAGE_MAX || !/^\d+$/.test(limitText ?? '1')) {
    throw edgeErrors.invalidRequest(`limit: must be a whole number from 1 to ${ANTHROPIC_PAGE_MAX}.`, 'limit');
  }
  const afterId = queryText(request, 'after_id');
  const beforeId = queryText(request, 'before_id');
  if (afterId !== undefined && beforeId !== undefined) {
    throw edgeErrors.invalidRequest('after_id, before_id: give at most one of them.', 'before_id');
  }
  return { limit, afterId, beforeId };
}

/**
 * One page of Anthropic's list (`{data, has_more, first_id, last_id}`), newest first like the OpenAI
 * listing. `after_id`: the models after that one, `has_more` saying whether more follow; `before_id`:
 * the `limit` models just before it, `has_more` saying whether more precede (the SDK pages backwards
 * from `first_id` then). A cursor naming no model of this listing is a 400.
 */
function anthropicListing(models: readonly AnthropicListedModel[], page: AnthropicPage): string {
  let start = 0;
  let end = models.length;
  const cursor = page.afterId ?? page.beforeId;
  if (cursor !== undefined) {
    const index = models.findIndex((model) => model.id === cursor);
    const param = page.afterId !== undefined ? 'after_id' : 'before_id';
    if (index < 0) throw edgeErrors.invalidRequest(`${param}: no model \`${echoed(cursor)}\` in this listing.`, param);
    if (page.afterId !== undefined) start = index + 1;
    else end = index;
  }
  let hasMore: boolean;
  if (page.beforeId !== undefined) {
    start = Math.max(0, end - page.limit);
    hasMore = start > 0;
  } else {
    end = Math.min(models.length, start + page.limit);
    hasMore = end < models.length;
  }
  const data = models.slice(start, end);
  const first = data[0]?.id ?? null;
  const last = data.at(-1)?.id ?? null;
  return `{"data":[${data.map((model) => model.json).join(',')}],"has_more":${hasMore},"first_id":${JSON.stringify(first)},"last_id":${JSON.stringify(last)}}`;
}

/**
 * GET /v1/models/{id}: ids contain slashes (`acme/chat-small`); aliases are accepted and the answer
 * names the catalog id. Like the listing, a presented key must be valid (401), but one model is
 * answered whatever the balance and whatever the account's tier: SDKs call this to check a name before
 * a request, the model is public without a key anyway, and its `available_tiers` says who may use it
 * (a 404 would tell a caller of the wrong tier that the model does not exist, which is not so).
 */
export function getModelHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const segments = (request.params as Record<string, string | string[]>).id;
    const name = Array.isArray(segments) ? segments.join('/') : String(segments ?? '');
    const anthropic = speaksAnthropic(request, response);
    const credential = presentedApiKey(request);
    if (credential !== undefined) await context.apiKeys.verify(credential, requestIdOf(response));
    const model = context.catalogCache.resolve(name);
    const json = model ? (anthropic ? context.catalogCache.anthropicModelJson(model.id) : context.catalogCache.modelJson(model.id)) : undefined;
    if (!json) throw edgeErrors.modelListingNotFound(name);
    sendJsonText(response, 200, json);
  };
}

/** GET /v1/startups (spec §4.12): public; a presented key changes nothing. */
export function listStartupsHandler(context: EdgeContext) {
  return async (_request: Request, response: Response): Promise<void> => {
    sendJsonText(response, 200, context.catalogCache.startupsJson());
  };
}

/** GET /v1/limits (spec §4.13): without a key every group and tier; with one, the key's tier in each group. */
export function listLimitsHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const credential = presentedApiKey(request);
    if (credential === undefined) {
      sendJson(response, 200, context.catalogCache.limitGroups());
      return;
    }
    const key = await context.apiKeys.verify(credential, requestIdOf(response));
    sendJson(response, 200, context.catalogCache.limitGroups(key.tier));
  };
}

const MAX_ICON_BYTES = 1024 * 1024;

/** A startup's SVG logo, at /v1/startups/{id}/icon.svg and at the catalog's own icon_url path. */
export async function sendStartupIcon(context: EdgeContext, startupId: string, response: Response): Promise<void> {
  if (!context.catalogCache.hasStartup(startupId)) throw edgeErrors.notFound(`No startup \`${echoed(startupId)}\`.`);
  const icon = await context.catalog.getStartupIcon({ startupId }, { requestId: requestIdOf(response), deadlineMs: 5_000 });
  if (icon.svg.length > MAX_ICON_BYTES) throw new Error(`icon of ${startupId} is larger than ${MAX_ICON_BYTES} bytes`);
  response.statusCode = 200;
  response.setHeader('content-type', 'image/svg+xml');
  // Logos may carry scripts: never let one run in our origin.
  response.setHeader('content-security-policy', "default-src 'none'; style-src 'unsafe-inline'");
  response.setHeader('x-content-type-options', 'nosniff');
  response.setHeader('cache-control', icon.provided ? 'public, max-age=3600' : 'public, max-age=300');
  response.setHeader('content-length', icon.svg.length);
  response.end(Buffer.from(icon.svg));
}

export function startupIconHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    await sendStartupIcon(context, String((request.params as Record<string, string>).id), response);
  };
}
