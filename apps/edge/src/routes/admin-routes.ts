import { randomUUID } from 'node:crypto';
import type { Request, Response } from 'express';
import { z } from 'zod';
import { GatewayError, GrpcStatus, formatCredits, parseCredits, roleMay, type Action } from '@gateway/platform';
import type { ProviderStat } from '@gateway/proto';
import { creditsPico, parseWith, queryCursor, queryInteger } from '../account/account-schemas.js';
import type { EdgeContext } from '../context.js';
import { EdgeError, edgeErrors, toApiError } from '../errors.js';
import { sendJson } from '../http.js';
import { readAccountBody } from './account-routes.js';
import { presentedProvisioningKey } from '../inference/credentials.js';
import { requestIdOf } from '../request-id.js';
import { hasMachineCredential, sessionFor } from '../sign-in/principal.js';
import { adminActor, auditActor } from '../account/audit-actor.js';

/*
 * The operator's HTTP routes, /v1/admin/* (docs/operations.md "Operator HTTP routes"). The edge holds no
 * admin token: the caller's `Authorization: Bearer <token>` is sent as the internal credential of
 * Auth.VerifyAdmin, which only the admin credential passes, and then of every admin-only RPC the route
 * makes (ListAccounts, GetAccount, TopUp, GetModelLatency). Calls any service may make (GetBalances,
 * GetProviderHealth) carry the edge's own service credential. The credential is judged before the
 * query or body is read. Logs name the route and the outcome, never the token.
 */

const CALL_DEADLINE_MS = 5_000;
/** Top-up bodies are two short fields. */
const ADMIN_BODY_MAX_BYTES = 16 * 1024;
/** The credential check's own bound (internal-auth.ts): a longer token is nobody's. */
const TOKEN_MAX_LENGTH = 512;
/** Printable ASCII only: anything else cannot travel as gRPC metadata, and is no token we issue. */
const TOKEN_PATTERN = /^[\x21-\x7e]+$/;
/** The ledger's bound on identifiers (its idempotency keys included). */
const IDEMPOTENCY_KEY_MAX_LENGTH = 200;
/** Account ids we mint are ~30 characters; a longer one is answered 404 without a lookup. */
const ACCOUNT_ID_MAX_LENGTH = 100;
export const ADMIN_ACCOUNTS_LIMIT_DEFAULT = 50;
export const ADMIN_ACCOUNTS_LIMIT_MAX = 100;
export const ADMIN_LATENCY_DAYS_DEFAULT = 7;
export const ADMIN_LATENCY_DAYS_MAX = 30;
/** The ledger's bound on one top-up. */
const TOP_UP_MAX_PICO = parseCredits('1000000');

export const adminErrors = {
  /** Every 401 of the admin routes: one type and code, whatever was wrong with the credential. */
  invalidAdminToken: (message: string) => new EdgeError({ status: 401, type: 'authentication_error', message, code: 'invalid_admin_token' }),
  notAdmin: () =>
    new EdgeError({ status: 403, type: 'permission_error', message: 'This credential may not use the admin routes: they take the operator\'s admin token.', code: 'admin_token_required' }),
  noInternalAuth: (where: string) =>
    new EdgeError({
      status: 403,
      type: 'permission_error',
      message: `Admin routes need internal authentication, and ${where} runs without it (GATEWAY_INTERNAL_AUTH=off): there is no admin token to check.`,
      code: 'internal_auth_disabled',
    }),
  operatorSessionsOff: () =>
    new EdgeError({
      status: 403,
      type: 'permission_error',
      message: 'This edge holds no operator credential for signed-in operators (EDGE_OPERATOR_SESSION_CREDENTIAL): use the admin token.',
      code: 'operator_sessions_unavailable',
    }),
};

const callOptions = (response: Response, credential?: string) => ({
  requestId: requestIdOf(response),
  deadlineMs: CALL_DEADLINE_MS,
  ...(credential === undefined ? {} : { credential }),
});

/**
 * The caller's admin token, once Auth.VerifyAdmin accepted it as the call's credential. A missing or
 * malformed Bearer is refused without a call; an unknown token (an API key, a provisioning key) is a
 * 401, the service token a 403.
 */
async function verifyAdmin(context: EdgeContext, request: Request, response: Response): Promise<string> {
  if (!context.internalAuthEnabled) throw adminErrors.noInternalAuth('this edge');
  const token = presentedProvisioningKey(request);
  if (token === undefined) throw adminErrors.invalidAdminToken('Missing admin token: send `Authorization: Bearer <ADMIN_TOKEN>`.');
  if (token.length > TOKEN_MAX_LENGTH || !TOKEN_PATTERN.test(token)) throw adminErrors.invalidAdminToken('Invalid admin token.');
  try {
    await context.auth.verifyAdmin({}, callOptions(response, token));
  } catch (error) {
    if (!(error instanceof GatewayError)) throw error;
    if (error.status === GrpcStatus.UNAUTHENTICATED) throw adminErrors.invalidAdminToken('Invalid admin token.');
    if (error.status === GrpcStatus.PERMISSION_DENIED) throw adminErrors.notAdmin();
    if (error.status === GrpcStatus.FAILED_PRECONDITION) throw adminErrors.noInternalAuth('the auth service');
    throw error;
  }
  return token;
}

/**
 * The credential an admin route's admin RPCs carry. `Authorization` (the admin token, the operator of the
 * role table) is judged as before sign-in existed; without it, a signed-in session whose role may take
 * `action` (only the operator's may: libs/platform roles.ts), for which the edge presents the operator
 * credential it was given.
 */
async function adminCredential(context: EdgeContext, request: Request, response: Response, action: Action): Promise<AdminCaller> {
  if (!hasMachineCredential(request)) {
    const session = await sessionFor(context, request, response, action);
    if (session !== undefined) {
      if (!context.internalAuthEnabled) throw adminErrors.noInternalAuth('this edge');
      if (context.operatorSessionCredential === undefined) throw adminErrors.operatorSessionsOff();
      // The audit log names the person, not the credential the edge presents for them.
      return { token: context.operatorSessionCredential, actor: (request) => auditActor(request, 'user', `${session.issuer}#${session.subject}`) };
    }
  }
  const token = await verifyAdmin(context, request, response);
  // The admin token is the operator; the table grants it every admin action (a test holds it to that).
  if (!roleMay('operator', action)) throw adminErrors.notAdmin();
  return { token, actor: (request) => adminActor(request, token) };
}

/** An admin route's caller: the credential its RPCs carry, and who the audit log names for a change it makes. */
interface AdminCaller {
  token: string;
  actor: (request: Request) => ReturnType<typeof auditActor>;
}

type AdminAction = (request: Request, response: Response, token: string, caller: AdminCaller) => Promise<Record<string, unknown> | void>;

/**
 * An admin route: the credential first, then `act`. Every outcome is logged with the route and the
 * status (and what `act` returns to log), never the token.
 */
export function adminRoute(context: EdgeContext, route: string, action: Action, act: AdminAction) {
  return async (request: Request, response: Response): Promise<void> => {
    const requestId = requestIdOf(response);
    let caller: AdminCaller;
    try {
      caller = await adminCredential(context, request, response, action);
    } catch (error) {
      const refused = toApiError(error);
      context.logger.warn({ route, request_id: requestId, status: refused.status, code: refused.code }, 'admin route refused');
      throw error;
    }
    try {
      const logged = await act(request, response, caller.token, caller);
      context.logger.info({ route, request_id: requestId, status: response.statusCode, ...logged }, 'admin route answered');
    } catch (error) {
      const failed = toApiError(error);
      context.logger.warn({ route, request_id: requestId, status: failed.status, code: failed.code }, 'admin route failed');
      throw error;
    }
  };
}

const latencyQuery = z.object({ days: queryInteger(1, ADMIN_LATENCY_DAYS_MAX).optional() });

const accountsQuery = z.object({
  limit: queryInteger(1, ADMIN_ACCOUNTS_LIMIT_MAX).optional(),
  // Opaque (Auth's); Auth refuses one it did not make.
  cursor: queryCursor(200).optional(),
});

/** A positive amount of credits, as a decimal string or a JSON number (the literal the client wrote). */
const topUpAmount = z
  .union([z.string(), z.number()], { error: (issue) => (issue.input === undefined ? 'is required' : 'must be a decimal number of credits') })
  .transform((value, context): string => {
    const pico = creditsPico(value, context);
    if (pico === undefined) return z.NEVER;
    if (pico <= 0n) {
      context.addIssue({ code: 'custom', message: 'must be greater than 0' });
      return z.NEVER;
    }
    if (pico > TOP_UP_MAX_PICO) {
      context.addIssue({ code: 'custom', message: `must be at most ${formatCredits(TOP_UP_MAX_PICO)} per top-up` });
      return z.NEVER;
    }
    return formatCredits(pico);
  });

const topUpBody = z.strictObject(
  {
    amount: topUpAmount,
    idempotency_key: z
      .string({ error: 'must be a string' })
      .min(1, { error: 'must not be empty' })
      .max(IDEMPOTENCY_KEY_MAX_LENGTH, { error: `must be at most ${IDEMPOTENCY_KEY_MAX_LENGTH} characters` })
      // eslint-disable-next-line no-control-regex
      .refine((key) => !/[\u0000-\u001f\u007f]/.test(key), { error: 'must not contain control characters' })
      .optional(),
  },
  { error: 'must be a JSON object' },
);

function providerRow(stat: ProviderStat) {
  return {
    provider: stat.providerId,
    // The catalog gives providers no display name (yet): the id is their name.
    provider_name: stat.providerId,
    model: stat.modelId,
    samples: stat.samples,
    error_rate: Math.min(1, Math.max(0, stat.errorRate)),
    ttft_ms: stat.ttftMs,
    output_tokens_per_second: stat.outputTokensPerSecond,
    circuit: stat.circuitOpen ? 'open' : 'closed',
  };
}

/** GET /v1/admin/providers: every (provider, model) offer's health as a routing replica sees it. */
export function adminProvidersHandler(context: EdgeContext) {
  return adminRoute(context, 'GET /v1/admin/providers', 'admin.providers.read', async (_request, response) => {
    const health = await context.router.getProviderHealth({}, callOptions(response));
    sendJson(response, 200, { data: health.stats.map(providerRow) });
    return { rows: health.stats.length };
  });
}

/** GET /v1/admin/models/latency?days=1..30 (default 7): per model and provider, over every account's generations. */
export function adminModelLatencyHandler(context: EdgeContext) {
  return adminRoute(context, 'GET /v1/admin/models/latency', 'admin.latency.read', async (request, response, token) => {
    const days = parseWith(latencyQuery, 'query', request.query).days ?? ADMIN_LATENCY_DAYS_DEFAULT;
    const latency = await context.ledger.getModelLatency({ days }, callOptions(response, token));
    sendJson(response, 200, {
      days,
      data: latency.models.map((row) => ({
        model: row.modelId,
        provider: row.providerId,
        requests: Number(row.requests),
        latency_p50_ms: row.latencyP50Ms,
        latency_p95_ms: row.latencyP95Ms,
        generation_time_p50_ms: row.generationTimeP50Ms,
      })),
    });
    return { days, rows: latency.models.length };
  });
}

/** GET /v1/admin/accounts?limit=1..100 (default 50)&cursor=: newest first, each with its balance. */
export function adminAccountsHandler(context: EdgeContext) {
  return adminRoute(context, 'GET /v1/admin/accounts', 'admin.accounts.read', async (request, response, token) => {
    const query = parseWith(accountsQuery, 'query', request.query);
    const page = await context.auth.listAccounts(
      { limit: query.limit ?? ADMIN_ACCOUNTS_LIMIT_DEFAULT, cursor: query.cursor ?? '' },
      callOptions(response, token),
    );
    const ids = page.accounts.map((account) => account.id);
    const balances = ids.length === 0 ? [] : (await context.ledger.getBalances({ accountIds: ids }, callOptions(response))).balances;
    const byId = new Map(balances.map((balance) => [balance.accountId, balance]));
    sendJson(response, 200, {
      data: page.accounts.map((account) => ({
        id: account.id,
        name: account.name,
        tier: account.tier,
        created_at: Number(account.createdAtMs / 1000n),
        balance: byId.get(account.id)?.balance ?? '0',
        available: byId.get(account.id)?.available ?? '0',
      })),
      next_cursor: page.nextCursor === '' ? null : page.nextCursor,
    });
    return { rows: page.accounts.length };
  });
}

/**
 * POST /v1/admin/accounts/{account_id}/credits {"amount", "idempotency_key"?}: a top-up. Without a key
 * each POST is a new top-up (the edge makes one); with one, a repeat adds nothing and answers the
 * balance, and the same key with another amount or account is a 409. Keys share the ledger's top-up
 * key space with `gatewayctl accounts top-up --idempotency-key`.
 */
export function adminTopUpHandler(context: EdgeContext) {
  return adminRoute(context, 'POST /v1/admin/accounts/{account_id}/credits', 'admin.credits.write', async (request, response, token, caller) => {
    const accountId = (request.params as Record<string, string | undefined>).accountId ?? '';
    const body = parseWith(topUpBody, 'body', await readAccountBody(context, request, ADMIN_BODY_MAX_BYTES));
    if (accountId === '' || accountId.length > ACCOUNT_ID_MAX_LENGTH) throw edgeErrors.notFound('No such account.');
    try {
      await context.auth.getAccount({ accountId }, callOptions(response, token));
    } catch (error) {
      if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) throw edgeErrors.notFound('No such account.');
      throw error;
    }
    const idempotencyKey = body.idempotency_key ?? `admin-top-up-${randomUUID()}`;
    const topUp = await context.ledger.topUp(
      { accountId, credits: body.amount, idempotencyKey, note: 'top-up (POST /v1/admin/accounts/{account_id}/credits)' },
      { ...callOptions(response, token), actor: caller.actor(request) },
    );
    sendJson(response, 200, { account_id: accountId, balance: topUp.balance });
    return { account_id: accountId, credits: body.amount, idempotency_key_given: body.idempotency_key !== undefined };
  });
}
