import type { Request, Response } from 'express';
import { GatewayError, GrpcStatus, isRole, roleMay, type Action, type Role } from '@gateway/platform';
import type { EdgeContext } from '../context.js';
import { EdgeError } from '../errors.js';
import { requestIdOf } from '../request-id.js';
import { CSRF_HEADER, csrfTokenMatches, presentedSessionToken } from './session-cookies.js';

/*
 * Who is calling an account or operator route, and whether the role table (libs/platform roles.ts)
 * lets them take the route's action. A machine credential in `Authorization` is judged exactly as before
 * sign-in existed (a provisioning key is its account's owner, the admin token the operator); without one,
 * a session cookie is verified with the auth service on every call (never cached: logout ends it at once).
 */

const CALL_DEADLINE_MS = 5_000;
const UNSAFE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export interface SessionPrincipal {
  kind: 'session';
  role: Role;
  /** Empty for the operator. */
  accountId: string;
  sessionId: string;
  subject: string;
  displayName: string;
  expiresAtMs: bigint;
  token: string;
}

export const signInErrors = {
  invalidSession: () =>
    new EdgeError({ status: 401, type: 'authentication_error', code: 'invalid_session', message: 'Your session is invalid or has ended: sign in again.' }),
  csrf: () =>
    new EdgeError({
      status: 403,
      type: 'permission_error',
      code: 'csrf_token_invalid',
      message: `A change made with a session cookie needs the session's CSRF token in the ${CSRF_HEADER} header, from this gateway's own origin.`,
    }),
  forbidden: (role: Role, action: Action) =>
    new EdgeError({ status: 403, type: 'permission_error', code: 'role_forbidden', message: `The role ${role} may not ${action}.` }),
};

/** Is there a machine credential (`Authorization`, or an API key header where the route takes one)? */
export function hasMachineCredential(request: Request, apiKeyHeaderToo = false): boolean {
  return request.headers.authorization !== undefined || (apiKeyHeaderToo && request.headers['x-api-key'] !== undefined);
}

/** The browser's own origin as this edge knows it: EDGE_PUBLIC_URL, else the Host it was asked on. */
function expectedOrigin(context: EdgeContext, request: Request): string | undefined {
  if (context.publicUrl !== undefined) return new URL(context.publicUrl).origin;
  const host = request.headers.host;
  if (host === undefined) return undefined;
  const secure = (request.socket as { encrypted?: boolean }).encrypted === true;
  return `${secure ? 'https' : 'http'}://${host}`;
}

/**
 * A write made with a session cookie carries the CSRF token and, when the browser names an Origin, comes
 * from this edge's own. Judged before any call: a forged request costs the edge nothing.
 */
export function checkCsrf(context: EdgeContext, request: Request, token: string): void {
  if (!UNSAFE_METHODS.has(request.method)) return;
  const presented = request.headers[CSRF_HEADER];
  if (!csrfTokenMatches(token, typeof presented === 'string' ? presented : undefined)) throw signInErrors.csrf();
  const origin = request.headers.origin;
  if (origin !== undefined && origin !== expectedOrigin(context, request)) throw signInErrors.csrf();
}

/** Verifies the session token with the auth service. */
export async function verifySessionToken(context: EdgeContext, response: Response, token: string): Promise<SessionPrincipal> {
  let verified;
  try {
    verified = await context.auth.verifySession({ sessionToken: token }, { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS });
  } catch (error) {
    if (error instanceof GatewayError && error.status === GrpcStatus.UNAUTHENTICATED) throw signInErrors.invalidSession();
    throw error;
  }
  if (!isRole(verified.role)) throw signInErrors.invalidSession();
  return {
    kind: 'session',
    role: verified.role,
    accountId: verified.accountId,
    sessionId: verified.sessionId,
    subject: verified.subject,
    displayName: verified.displayName,
    expiresAtMs: verified.expiresAtMs,
    token,
  };
}

/**
 * The session the request's cookie names, allowed to take `action` (CSRF checked first on a write), or
 * undefined when the request carries no session cookie.
 */
export async function sessionFor(context: EdgeContext, request: Request, response: Response, action: Action): Promise<SessionPrincipal | undefined> {
  const token = presentedSessionToken(request);
  if (token === undefined) return undefined;
  checkCsrf(context, request, token);
  const session = await verifySessionToken(context, response, token);
  if (!roleMay(session.role, action)) throw signInErrors.forbidden(session.role, action);
  return session;
}
