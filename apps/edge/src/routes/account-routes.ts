import type { Request, Response } from 'express';
import type { ApiKey, UpdateApiKeyRequest, VerifyProvisioningKeyResponse } from '@gateway/proto';
import { activityEntries, keyRecord, stringifyWithDecimals, type KeySpend } from '../account/account-render.js';
import {
  ACTIVITY_DAYS_DEFAULT,
  activityQuery,
  createKeyBody,
  KEY_ID_MAX_LENGTH,
  LIST_LIMIT_MAX,
  listKeysQuery,
  parseWith,
  updateKeyBody,
} from '../account/account-schemas.js';
import type { Action, AuditActorKind, Role } from '@gateway/platform';
import type { EdgeContext } from '../context.js';
import { hasMachineCredential, sessionFor } from '../sign-in/principal.js';
import { requestIdOf } from '../request-id.js';
import { malformedProvisioningKey, presentedProvisioningKey } from '../inference/credentials.js';
import { edgeErrors } from '../errors.js';
import { readJsonBody, sendJson, sendJsonText } from '../http.js';
import { auditActor } from '../account/audit-actor.js';

/** Account bodies are a few fields; anything near this size is not a key request. */
const ACCOUNT_BODY_MAX_BYTES = 64 * 1024;
const CALL_DEADLINE_MS = 5_000;

/**
 * /v1/account/* take a provisioning key only (spec §5): an API key there is refused by
 * Auth.VerifyProvisioningKey (401, type invalid_request_error per spec §4.14). Not cached: these
 * routes are rare and must see a revoked key at once. Every route checks the credential before it
 * reads or validates anything else.
 */
export async function verifyProvisioningKey(context: EdgeContext, request: Request, response: Response): Promise<VerifyProvisioningKeyResponse> {
  const key = presentedProvisioningKey(request);
  if (key === undefined) throw edgeErrors.missingProvisioningKey();
  if (key === '') throw malformedProvisioningKey();
  return context.auth.verifyProvisioningKey({ key }, { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS });
}

/**
 * The account a route acts on, for a caller allowed `action` by the role table (libs/platform roles.ts).
 * A credential in `Authorization` is a provisioning key, judged exactly as before sign-in existed (it acts
 * as its account's owner, who may take every account action); without one, the signed-in session cookie
 * (CSRF token on writes, then the session's role).
 */
export async function accountFor(context: EdgeContext, request: Request, response: Response, action: Action): Promise<AccountCaller> {
  if (!hasMachineCredential(request)) {
    const session = await sessionFor(context, request, response, action);
    if (session !== undefined) return { accountId: session.accountId, role: session.role, actor: { kind: 'user', id: `${session.issuer}#${session.subject}` } };
  }
  const verified = await verifyProvisioningKey(context, request, response);
  // A provisioning key acts as its account's owner (roles.ts).
  return { accountId: verified.accountId, role: 'owner', actor: { kind: 'provisioning_key', id: verified.provisioningKeyId } };
}

/** The account a route acts on and who asks (the audit log's actor: the provisioning key, or the signed-in person). */
export interface AccountCaller {
  accountId: string;
  /** The role the caller acts with (the role table's; a provisioning key is the owner). */
  role: Role;
  actor: { kind: AuditActorKind; id: string };
}

/** GET /v1/account/balance (spec §4.14): `{balance}` as a decimal string. */
export function balanceHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'balance.read');
    const balance = await context.ledger.getBalance({ accountId: account.accountId }, { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS });
    sendJson(response, 200, { balance: balance.balance });
  };
}

const callOptions = (response: Response) => ({ requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS });
/** A change's call: it names the provisioning key that asked and the caller's address (the audit log's actor). */
export const changeOptions = (request: Request, response: Response, account: AccountCaller) => ({
  ...callOptions(response),
  actor: auditActor(request, account.actor.kind, account.actor.id),
});

const keyNotFound = () => edgeErrors.notFound('No such API key.');

/** `{key_id}` of the path. An id no account could own is answered like any other unknown id. */
function keyIdParam(request: Request): string {
  const keyId = (request.params as Record<string, string | undefined>).keyId ?? '';
  if (keyId === '' || keyId.length > KEY_ID_MAX_LENGTH) throw keyNotFound();
  return keyId;
}

/** A JSON body of an account or admin route: small, so within `maxBytes` as well as the edge's own limit. */
export function readAccountBody(context: EdgeContext, request: Request, maxBytes = ACCOUNT_BODY_MAX_BYTES): Promise<unknown> {
  return readJsonBody(request, { ...context.bodyLimits, maxBytes: Math.min(context.bodyLimits.maxBytes, maxBytes) });
}

/** Credits spent per key (in all, and in the current UTC day, week and month), from the ledger's settled charges. */
async function usageOf(context: EdgeContext, response: Response, accountId: string, keys: readonly ApiKey[]): Promise<Map<string, KeySpend>> {
  if (keys.length === 0) return new Map();
  const answer = await context.ledger.getKeyUsage({ accountId, keyIds: keys.map((key) => key.id) }, callOptions(response));
  return new Map(answer.usage.map((entry) => [entry.keyId, entry]));
}

/** `expires_at` must lie ahead (by this edge's clock); Auth checks again by its own. */
function futureExpiry(context: EdgeContext, expiresAtMs: number): bigint {
  if (expiresAtMs <= context.now()) throw edgeErrors.invalidRequest('body.expires_at: must be in the future', 'body.expires_at');
  return BigInt(expiresAtMs);
}

async function sendKey(context: EdgeContext, response: Response, accountId: string, key: ApiKey | undefined, status = 200, plaintext?: string) {
  if (!key) throw new Error('Auth answered without a key');
  const usage = plaintext === undefined ? ((await usageOf(context, response, accountId, [key])).get(key.id) ?? '0') : '0';
  const record = keyRecord(key, usage);
  sendJsonText(response, status, stringifyWithDecimals(plaintext === undefined ? record : { ...record, key: plaintext }));
}

/** POST /v1/account/keys (spec §4.15): 201 with the key record and the plaintext `key`, shown this once. */
export function createKeyHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'keys.write');
    const body = parseWith(createKeyBody, 'body', await readAccountBody(context, request));
    const created = await context.auth.createApiKey(
      {
        accountId: account.accountId,
        name: body.name,
        ...(body.credit_limit === null ? {} : { creditLimit: body.credit_limit }),
        defaultRoutingStrategy: body.default_routing_strategy ?? '',
        ...(body.limit_reset ? { limitReset: body.limit_reset } : {}),
        ...(typeof body.expires_at === 'number' ? { expiresAtMs: futureExpiry(context, body.expires_at) } : {}),
      },
      changeOptions(request, response, account),
    );
    // A new key has spent nothing: no ledger call.
    await sendKey(context, response, account.accountId, created.key, 201, created.plaintext);
  };
}

/**
 * GET /v1/account/keys: newest first, `limit` (1..100, default 100) with an opaque `cursor` or an
 * `offset`; disabled keys only with `include_disabled=true` (as OpenRouter's key list). An offset is
 * walked with Auth's cursor in pages that end exactly at it, so `next_cursor` is exact either way.
 */
export function listKeysHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'keys.read');
    const query = parseWith(listKeysQuery, 'query', request.query);
    const limit = query.limit ?? LIST_LIMIT_MAX;
    const includeDisabled = query.include_disabled ?? false;
    const page = (pageLimit: number, cursor: string) =>
      context.auth.listApiKeys({ accountId: account.accountId, limit: pageLimit, cursor, includeDisabled }, callOptions(response));

    let cursor = query.cursor ?? '';
    let exhausted = false;
    for (let toSkip = query.offset ?? 0; toSkip > 0 && !exhausted; ) {
      const skipped = await page(Math.min(LIST_LIMIT_MAX, toSkip), cursor);
      toSkip -= skipped.keys.length;
      cursor = skipped.nextCursor;
      exhausted = cursor === '' || skipped.keys.length === 0;
    }
    const listed = exhausted ? { keys: [], nextCursor: '' } : await page(limit, cursor);
    const usage = await usageOf(context, response, account.accountId, listed.keys);
    sendJsonText(
      response,
      200,
      stringifyWithDecimals({
        object: 'list',
        data: listed.keys.map((key) => keyRecord(key, usage.get(key.id) ?? '0')),
        has_more: listed.nextCursor !== '',
        next_cursor: listed.nextCursor === '' ? null : listed.nextCursor,
      }),
    );
  };
}

/** GET /v1/account/keys/{key_id}: another account's key is a 404 like a missing one (Auth scopes by account). */
export function getKeyHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'keys.read');
    const keyId = keyIdParam(request);
    const found = await context.auth.getApiKey({ accountId: account.accountId, keyId }, callOptions(response));
    await sendKey(context, response, account.accountId, found.key);
  };
}

/**
 * PATCH /v1/account/keys/{key_id}: rename, disable/enable, change or remove the limit, its window
 * (`limit_reset`, null: lifetime), the expiry (`expires_at`, null: never) and the default strategy.
 */
export function updateKeyHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'keys.write');
    const keyId = keyIdParam(request);
    const body = parseWith(updateKeyBody, 'body', await readAccountBody(context, request));
    const update: UpdateApiKeyRequest = { accountId: account.accountId, keyId, clearCreditLimit: body.credit_limit === null };
    if (body.name !== undefined) update.name = body.name;
    if (body.disabled !== undefined) update.disabled = body.disabled;
    if (typeof body.credit_limit === 'string') update.creditLimit = body.credit_limit;
    if (body.default_routing_strategy !== undefined) update.defaultRoutingStrategy = body.default_routing_strategy ?? '';
    if (body.limit_reset !== undefined) update.limitReset = body.limit_reset ?? '';
    if (body.expires_at === null) update.clearExpiresAt = true;
    else if (body.expires_at !== undefined) update.expiresAtMs = futureExpiry(context, body.expires_at);
    // Auth publishes KeysChanged after commit: every edge drops its cached verification of this key.
    // This edge drops it at once too, so its own caller never sees the old key state after the answer.
    const updated = await context.auth.updateApiKey(update, changeOptions(request, response, account));
    context.apiKeys.invalidate(account.accountId, [keyId]);
    await sendKey(context, response, account.accountId, updated.key);
  };
}

/** DELETE /v1/account/keys/{key_id}: permanent; a second delete is a 404. */
export function deleteKeyHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'keys.write');
    const keyId = keyIdParam(request);
    await context.auth.deleteApiKey({ accountId: account.accountId, keyId }, changeOptions(request, response, account));
    context.apiKeys.invalidate(account.accountId, [keyId]);
    sendJson(response, 200, { deleted: true });
  };
}

/**
 * GET /v1/account/activity?days=N[&key_id=...] (spec §4.16): per UTC day and model, the requests,
 * tokens and credits of the account's settled charges. A `key_id` of another account matches no
 * charge of this one, so it answers an empty list and reveals nothing.
 */
export function activityHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'activity.read');
    const query = parseWith(activityQuery, 'query', request.query);
    const days = query.days ?? ACTIVITY_DAYS_DEFAULT;
    const activity = await context.ledger.getActivity({ accountId: account.accountId, days, keyId: query.key_id ?? '' }, callOptions(response));
    sendJson(response, 200, { object: 'list', days, key_id: query.key_id ?? null, data: activityEntries(activity.rows) });
  };
}
