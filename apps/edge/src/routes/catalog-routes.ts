import type { Request, Response } from 'express';
import { parseCredits } from '@gateway/platform';
import { verifyApiKey, type EdgeContext } from '../context.js';
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
    const credential = presentedApiKey(request);
    if (credential === undefined) {
      sendJsonText(response, 200, context.catalogCache.listingJson(false));
      return;
    }
    const requestId = requestIdOf(response);
    const key = await verifyApiKey(context, credential, requestId);
    const balance = await context.ledger.getBalance({ accountId: key.accountId }, { requestId, deadlineMs: 5_000 });
    const freeOnly = parseCredits(balance.available || balance.balance || '0') < PAID_MINIMUM_PICO;
    sendJsonText(response, 200, context.catalogCache.listingJson(freeOnly, key.tier));
  };
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
    const credential = presentedApiKey(request);
    if (credential !== undefined) await verifyApiKey(context, credential, requestIdOf(response));
    const model = context.catalogCache.resolve(name);
    const json = model ? context.catalogCache.modelJson(model.id) : undefined;
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
    const key = await verifyApiKey(context, credential, requestIdOf(response));
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
