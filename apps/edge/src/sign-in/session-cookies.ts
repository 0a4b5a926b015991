import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parse as parseCookies, serialize as serializeCookie } from 'cookie';

/*
 * The cookies of a signed-in browser. With Secure on (the default) their names carry the `__Host-`
 * prefix: the browser then accepts them only from this origin over https, for the whole origin, and no
 * sibling subdomain can plant one. Plain-http loopback development drops Secure and so the prefix.
 *
 * - session: the session token, HttpOnly (no script reads it), SameSite=Lax (sent on a top-level
 *   navigation back from the IdP, never on a cross-site POST or fetch).
 * - csrf: a value derived from the session token, readable by the console's script, which echoes it in
 *   `x-csrf-token` on every write. A page on another origin can neither read it nor compute it.
 * - login: the pending sign-in (state, nonce, PKCE verifier) for ten minutes, HttpOnly.
 */

export const CSRF_HEADER = 'x-csrf-token';
/** A pending sign-in must come back within this time. */
export const LOGIN_COOKIE_MAX_AGE_SECONDS = 600;
/** Longest cookie value looked at; a session token is 51 characters, a pending sign-in ~300. */
const COOKIE_VALUE_MAX_LENGTH = 2048;

export interface CookieNames {
  session: string;
  csrf: string;
  login: string;
}

export function cookieNames(secure: boolean): CookieNames {
  const prefix = secure ? '__Host-' : '';
  return { session: `${prefix}gw_session`, csrf: `${prefix}gw_csrf`, login: `${prefix}gw_login` };
}

/** Both spellings: an edge without sign-in configured still recognises a session cookie its peers set. */
const SESSION_COOKIE_NAMES = [cookieNames(true).session, cookieNames(false).session];

export function readCookie(request: IncomingMessage, name: string): string | undefined {
  const header = request.headers.cookie;
  if (header === undefined || header.length > 16 * 1024) return undefined;
  const value = parseCookies(header)[name];
  return value === undefined || value === '' || value.length > COOKIE_VALUE_MAX_LENGTH ? undefined : value;
}

/** The session token the request carries in a cookie, if any. */
export function presentedSessionToken(request: IncomingMessage): string | undefined {
  for (const name of SESSION_COOKIE_NAMES) {
    const value = readCookie(request, name);
    if (value !== undefined) return value;
  }
  return undefined;
}

/** The CSRF token of a session: a one-way function of its secret token, so only its holder can know it. */
export function csrfTokenOf(sessionToken: string): string {
  return createHash('sha256').update('gateway-csrf\u0000').update(sessionToken).digest('base64url');
}

export function csrfTokenMatches(sessionToken: string, presented: string | undefined): boolean {
  if (presented === undefined || presented.length > 100) return false;
  const expected = Buffer.from(csrfTokenOf(sessionToken));
  const given = Buffer.from(presented);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

interface CookieOptions {
  secure: boolean;
  httpOnly: boolean;
  maxAgeSeconds: number;
}

export function appendCookie(response: ServerResponse, name: string, value: string, options: CookieOptions): void {
  const cookie = serializeCookie(name, value, {
    path: '/',
    httpOnly: options.httpOnly,
    secure: options.secure,
    sameSite: 'lax',
    maxAge: options.maxAgeSeconds,
  });
  const existing = response.getHeader('set-cookie');
  const list = existing === undefined ? [] : Array.isArray(existing) ? existing : [String(existing)];
  response.setHeader('set-cookie', [...list, cookie]);
}

export function clearCookie(response: ServerResponse, name: string, secure: boolean, httpOnly: boolean): void {
  appendCookie(response, name, '', { secure, httpOnly, maxAgeSeconds: 0 });
}
