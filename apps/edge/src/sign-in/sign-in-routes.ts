import type { Request, Response } from 'express';
import * as oidc from 'openid-client';
import { z } from 'zod';
import { ACCOUNT_ROLES, actionsOf, GatewayError, GrpcStatus, isAccountRole, strongerAccountRole, type AccountRole, type Role } from '@gateway/platform';
import type { CreateSessionRequest } from '@gateway/proto';
import type { EdgeContext } from '../context.js';
import { auditActor } from '../account/audit-actor.js';
import { echoed } from '../echoed-value.js';
import { EdgeError, edgeErrors } from '../errors.js';
import { sendJson } from '../http.js';
import { requestIdOf } from '../request-id.js';
import { checkCsrf, signInErrors, verifySessionToken } from './principal.js';
import { type CheckedSignInOptions, GROUP_NAME_MAX_LENGTH, GROUPS_CLAIM_MAX_ENTRIES } from './sign-in-config.js';
import {
  appendCookie,
  clearCookie,
  cookieNames,
  csrfTokenOf,
  LOGIN_COOKIE_MAX_AGE_SECONDS,
  presentedSessionToken,
  readCookie,
} from './session-cookies.js';

/*
 * Sign-in with the configured OpenID provider (docs/governance.md "Sign-in and roles"): the authorization
 * code flow with PKCE, `state` and `nonce`, done by openid-client (discovery, JWKS, ID token signature,
 * issuer, audience, expiry and nonce checks). The person's IdP groups pick an account and a role from the
 * configuration; the auth service then stores a session (hashed) and the browser gets its token in an
 * HttpOnly, SameSite=Lax cookie.
 *
 *   GET  /v1/auth/login[?account=<account_id>|operator]  → 303 to the IdP (pending sign-in in a cookie)
 *   GET  /v1/auth/callback?code&state                    → 303 to the console, session cookie set
 *   GET  /v1/auth/session                                → who is signed in, their actions, the CSRF token
 *   POST /v1/auth/logout                                 → the session ends (CSRF token required)
 */

const CALL_DEADLINE_MS = 5_000;
/** After a failed discovery, the next sign-in tries again no sooner than this. */
const DISCOVERY_RETRY_MS = 5_000;

const pendingSignIn = z.object({
  state: z.string().min(1).max(200),
  nonce: z.string().min(1).max(200),
  verifier: z.string().min(43).max(128),
  account: z.string().min(1).max(100).optional(),
});
type PendingSignIn = z.infer<typeof pendingSignIn>;

const loginQuery = z.object({ account: z.string().min(1).max(100).regex(/^[A-Za-z0-9_-]+$/, 'must be an account id or "operator"').optional() });

export const signInFailures = {
  failed: (why: string) => new EdgeError({ status: 401, type: 'authentication_error', code: 'sign_in_failed', message: `Sign-in failed: ${why}` }),
  noMembership: () =>
    new EdgeError({
      status: 403,
      type: 'permission_error',
      code: 'no_membership',
      message: 'None of your identity provider groups (nor a membership) gives you access here (or not to the account you asked for).',
    }),
  chooseAccount: (choices: readonly string[]) =>
    new EdgeError({
      status: 400,
      type: 'invalid_request_error',
      code: 'account_choice_required',
      param: 'account',
      message: `Your groups give you access to several places: sign in with ?account= one of ${choices.join(', ')}.`,
    }),
  notConfigured: () => new EdgeError({ status: 404, type: 'not_found_error', code: 'sign_in_not_configured', message: 'Sign-in with an identity provider is not configured on this gateway.' }),
  unavailable: () =>
    new EdgeError({ status: 503, type: 'api_error', code: 'identity_provider_unavailable', message: 'The identity provider could not be reached; try again shortly.' }),
};

/** What the person's groups allow: the strongest role per account, and whether they are an operator. */
export function membershipsOf(options: CheckedSignInOptions, groups: readonly string[]): { accounts: Map<string, AccountRole>; operator: boolean } {
  const held = new Set(groups);
  const accounts = new Map<string, AccountRole>();
  for (const membership of options.memberships) {
    if (!held.has(membership.group)) continue;
    const current = accounts.get(membership.accountId);
    if (current === undefined || ACCOUNT_ROLES.indexOf(membership.role) < ACCOUNT_ROLES.indexOf(current)) accounts.set(membership.accountId, membership.role);
  }
  return { accounts, operator: options.operatorGroups.some((group) => held.has(group)) };
}

/** The session to open: the one asked for when the groups allow it, else the only one they allow. */
export function chooseMembership(
  options: CheckedSignInOptions,
  groups: readonly string[],
  requested: string | undefined,
  members: ReadonlyMap<string, AccountRole> = new Map(),
): { accountId: string; role: Role } {
  const { accounts: byGroups, operator } = membershipsOf(options, groups);
  // Memberships kept by the auth service count beside the groups; in an account both reach, the stronger role.
  const accounts = new Map(byGroups);
  for (const [accountId, role] of members) {
    const current = accounts.get(accountId);
    accounts.set(accountId, current === undefined ? role : strongerAccountRole(current, role));
  }
  if (requested === 'operator') {
    if (!operator) throw signInFailures.noMembership();
    return { accountId: '', role: 'operator' };
  }
  if (requested !== undefined) {
    const role = accounts.get(requested);
    if (role === undefined) throw signInFailures.noMembership();
    return { accountId: requested, role };
  }
  const choices = [...accounts.keys(), ...(operator ? ['operator'] : [])];
  if (choices.length === 0) throw signInFailures.noMembership();
  if (choices.length > 1) throw signInFailures.chooseAccount(choices);
  return operator ? { accountId: '', role: 'operator' } : { accountId: choices[0] as string, role: accounts.get(choices[0] as string) as AccountRole };
}

/** The groups claim, bounded: only strings, at most GROUPS_CLAIM_MAX_ENTRIES of them, none too long. */
function groupsOf(claims: oidc.IDToken, claim: string): string[] {
  const value = (claims as Record<string, unknown>)[claim];
  const list = Array.isArray(value) ? value : typeof value === 'string' ? [value] : [];
  return list.slice(0, GROUPS_CLAIM_MAX_ENTRIES).filter((group): group is string => typeof group === 'string' && group.length <= GROUP_NAME_MAX_LENGTH);
}

function displayNameOf(claims: oidc.IDToken): string {
  for (const name of ['email', 'preferred_username', 'name']) {
    const value = (claims as Record<string, unknown>)[name];
    if (typeof value === 'string' && value !== '') return value.slice(0, 200);
  }
  return claims.sub.slice(0, 200);
}

/**
 * Why openid-client refused the answer: its message and the check's own (oauth4webapi's fixed texts name
 * the claim, e.g. `unexpected ID Token "nonce" claim value`, never a value).
 */
function refusalReason(error: unknown): string {
  if (!(error instanceof Error)) return 'the identity provider answer was not accepted.';
  const inner = error.cause instanceof Error && error.cause.message !== error.message ? `: ${error.cause.message}` : '';
  return echoed(`${error.message}${inner}.`);
}

/** The sign-in routes of one edge: discovery is fetched on first use and kept. */
export class SignIn {
  private discovered: Promise<oidc.Configuration> | undefined;
  private failedAtMs = 0;
  readonly cookies;

  constructor(
    private readonly context: EdgeContext,
    readonly options: CheckedSignInOptions,
  ) {
    this.cookies = cookieNames(options.secureCookies);
  }

  private configuration(): Promise<oidc.Configuration> {
    if (this.discovered === undefined) {
      if (Date.now() - this.failedAtMs < DISCOVERY_RETRY_MS) throw signInFailures.unavailable();
      const issuer = new URL(this.options.issuer);
      const clientAuth = this.options.clientSecret === undefined ? oidc.None() : oidc.ClientSecretBasic(this.options.clientSecret);
      const found = oidc.discovery(issuer, this.options.clientId, undefined, clientAuth, {
        // checkedSignInOptions allowed http only for a loopback issuer (development and tests).
        ...(issuer.protocol === 'http:' ? { execute: [oidc.allowInsecureRequests] } : {}),
        timeout: CALL_DEADLINE_MS / 1000,
      });
      this.discovered = found;
      found.catch((error: unknown) => {
        this.context.logger.warn({ err: error, issuer: this.options.issuer }, 'OpenID discovery failed');
        this.discovered = undefined;
        this.failedAtMs = Date.now();
      });
    }
    return this.discovered;
  }

  /**
   * The client configuration for one sign-in step: the discovered server metadata, with the edge's clock
   * (tests move it) as the one ID token times are judged by. Built per step: it costs no request.
   */
  private async configured(): Promise<oidc.Configuration> {
    let discovered: oidc.Configuration;
    try {
      discovered = await this.configuration();
    } catch (error) {
      if (error instanceof EdgeError) throw error;
      throw signInFailures.unavailable();
    }
    const skewSeconds = Math.round((this.context.now() - Date.now()) / 1000);
    const clientAuth = this.options.clientSecret === undefined ? oidc.None() : oidc.ClientSecretBasic(this.options.clientSecret);
    const configuration = new oidc.Configuration(discovered.serverMetadata(), this.options.clientId, { [oidc.clockSkew]: skewSeconds }, clientAuth);
    if (new URL(this.options.issuer).protocol === 'http:') oidc.allowInsecureRequests(configuration);
    configuration.timeout = CALL_DEADLINE_MS / 1000;
    return configuration;
  }

  login() {
    return async (request: Request, response: Response): Promise<void> => {
      const parsed = loginQuery.safeParse(request.query);
      if (!parsed.success) throw edgeErrors.invalidRequest(`query.account: ${parsed.error.issues[0]?.message ?? 'invalid'}`, 'account');
      const configuration = await this.configured();
      const pending: PendingSignIn = {
        state: oidc.randomState(),
        nonce: oidc.randomNonce(),
        verifier: oidc.randomPKCECodeVerifier(),
        ...(parsed.data.account === undefined ? {} : { account: parsed.data.account }),
      };
      const target = oidc.buildAuthorizationUrl(configuration, {
        redirect_uri: this.options.redirectUri,
        scope: this.options.scopes,
        response_type: 'code',
        code_challenge: await oidc.calculatePKCECodeChallenge(pending.verifier),
        code_challenge_method: 'S256',
        state: pending.state,
        nonce: pending.nonce,
      });
      appendCookie(response, this.cookies.login, Buffer.from(JSON.stringify(pending)).toString('base64url'), {
        secure: this.options.secureCookies,
        httpOnly: true,
        maxAgeSeconds: LOGIN_COOKIE_MAX_AGE_SECONDS,
      });
      response.setHeader('cache-control', 'no-store');
      response.redirect(303, target.href);
    };
  }

  private pendingOf(request: Request): PendingSignIn {
    const raw = readCookie(request, this.cookies.login);
    if (raw === undefined) throw signInFailures.failed('no sign-in is pending in this browser (it expires after 10 minutes); start again.');
    try {
      return pendingSignIn.parse(JSON.parse(Buffer.from(raw, 'base64url').toString('utf8')));
    } catch {
      throw signInFailures.failed('the pending sign-in is unreadable; start again.');
    }
  }

  /** A group mapped to an account that does not exist (a configuration slip) gives no access, like no group. */
  private async createSession(request: CreateSessionRequest, response: Response) {
    try {
      return await this.context.auth.createSession(request, { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS });
    } catch (error) {
      if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) {
        this.context.logger.warn({ request_id: requestIdOf(response), account_id: request.accountId }, 'sign-in group maps to an account that does not exist');
        throw signInFailures.noMembership();
      }
      throw error;
    }
  }

  /**
   * The accounts the person is a member of (the auth service binds their email invitations first, when
   * the provider verified the email): account → role.
   */
  private async membershipsOf(request: Request, response: Response, claims: oidc.IDToken): Promise<Map<string, AccountRole>> {
    const email = (claims as Record<string, unknown>).email;
    const verified = (claims as Record<string, unknown>).email_verified === true;
    const resolved = await this.context.auth.resolveMemberships(
      { issuer: claims.iss, subject: claims.sub, email: typeof email === 'string' ? email.slice(0, 320) : '', emailVerified: verified },
      { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS, actor: auditActor(request, 'user', `${claims.iss}#${claims.sub}`) },
    );
    const members = new Map<string, AccountRole>();
    for (const membership of resolved.memberships) if (isAccountRole(membership.role)) members.set(membership.accountId, membership.role);
    return members;
  }

  callback() {
    return async (request: Request, response: Response): Promise<void> => {
      const pending = this.pendingOf(request);
      // The pending sign-in is used once, whatever happens next.
      clearCookie(response, this.cookies.login, this.options.secureCookies, true);
      response.setHeader('cache-control', 'no-store');
      const query = request.originalUrl.indexOf('?');
      const current = new URL(this.options.redirectUri);
      current.search = query < 0 ? '' : request.originalUrl.slice(query);
      const configuration = await this.configured();
      let tokens: Awaited<ReturnType<typeof oidc.authorizationCodeGrant>>;
      try {
        tokens = await oidc.authorizationCodeGrant(configuration, current, {
          pkceCodeVerifier: pending.verifier,
          expectedState: pending.state,
          expectedNonce: pending.nonce,
          idTokenExpected: true,
        });
      } catch (error) {
        this.context.logger.warn({ err: error, request_id: requestIdOf(response) }, 'sign-in refused');
        throw signInFailures.failed(refusalReason(error));
      }
      const claims = tokens.claims();
      if (claims === undefined) throw signInFailures.failed('the identity provider sent no ID token.');
      const groups = groupsOf(claims, this.options.groupsClaim);
      const members = await this.membershipsOf(request, response, claims);
      const chosen = chooseMembership(this.options, groups, pending.account, members);
      // Through a membership, the auth service reads it again in the session's transaction (a member
      // removed meanwhile gets no session) and adds what the groups give in that account.
      const viaMembership = members.has(chosen.accountId);
      const created = await this.createSession(
        {
          accountId: chosen.accountId,
          role: viaMembership ? (membershipsOf(this.options, groups).accounts.get(chosen.accountId) ?? '') : chosen.role,
          issuer: claims.iss,
          subject: claims.sub,
          displayName: displayNameOf(claims),
          ttlSeconds: this.options.sessionTtlSeconds,
          viaMembership,
        },
        response,
      );
      appendCookie(response, this.cookies.session, created.sessionToken, {
        secure: this.options.secureCookies,
        httpOnly: true,
        maxAgeSeconds: this.options.sessionTtlSeconds,
      });
      this.context.logger.info(
        { request_id: requestIdOf(response), session_id: created.sessionId, subject: claims.sub, account_id: chosen.accountId, role: created.role },
        'signed in',
      );
      response.redirect(303, this.options.postLoginPath);
    };
  }
}

/** GET /v1/auth/session: the signed-in person, their role's actions (from the one table) and the CSRF token. */
export function sessionHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const token = presentedSessionToken(request);
    if (token === undefined) throw signInErrors.invalidSession();
    const session = await verifySessionToken(context, response, token);
    response.setHeader('cache-control', 'no-store');
    sendJson(response, 200, {
      account_id: session.accountId === '' ? null : session.accountId,
      role: session.role,
      subject: session.subject,
      display_name: session.displayName,
      expires_at: Number(session.expiresAtMs / 1000n),
      actions: actionsOf(session.role),
      csrf_token: csrfTokenOf(token),
    });
  };
}

/** POST /v1/auth/logout: ends the session (CSRF token required) and clears the cookie. */
export function logoutHandler(context: EdgeContext, secureCookies: boolean | undefined) {
  return async (request: Request, response: Response): Promise<void> => {
    const token = presentedSessionToken(request);
    if (token === undefined) throw signInErrors.invalidSession();
    checkCsrf(context, request, token);
    await context.auth.revokeSession({ sessionToken: token }, { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS });
    for (const secure of secureCookies === undefined ? [true, false] : [secureCookies]) clearCookie(response, cookieNames(secure).session, secure, true);
    sendJson(response, 200, { signed_out: true });
  };
}

export function notConfiguredHandler() {
  return async (): Promise<void> => {
    throw signInFailures.notConfigured();
  };
}
