import { createServer } from 'node:net';
import { expect } from 'vitest';
import { startEdge, type RunningEdge } from '@gateway/edge';
import { CookieBrowser, startOidcIssuer, testLogger, type TestOidcIssuer } from '@gateway/testing';
import { startAccountStack, type Account, type AccountStack } from './account-harness.js';

/*
 * Sign-in end-to-end set-up: a whole stack with internal authentication (as deployed), two accounts with
 * a key each, a real OpenID provider in-process (libs/testing oidc-issuer.ts), and an edge replica
 * configured to sign people in with it. Its people and their groups are below; the edge maps the groups.
 */

export const PEOPLE = {
  alice: ['acme-owners'],
  erin: ['acme-admins'],
  dave: ['finance'],
  bob: ['acme-viewers'],
  carol: ['beta-admins'],
  oscar: ['ops'],
  mallory: ['acme-owners-x', 'ACME-OWNERS', 'unknown'],
  ghost: ['ghost-team'],
  multi: ['acme-viewers', 'beta-admins'],
} as const satisfies Record<string, readonly string[]>;
export type Person = keyof typeof PEOPLE;

export interface SignInStack {
  harness: AccountStack;
  acme: Account;
  beta: Account;
  acmeKeyId: string;
  betaKeyId: string;
  issuer: TestOidcIssuer;
  edge: RunningEdge;
  /** The signed-in edge's base URL. */
  url: string;
  /** Moves the signed-in edge's clock (ID token times are judged by it). */
  setClockOffsetMs(offsetMs: number): void;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export async function startSignInStack(): Promise<SignInStack> {
  const harness = await startAccountStack({ internalAuth: true });
  const acme = await harness.newAccount('acme', '10');
  const beta = await harness.newAccount('beta', '10');
  const acmeKeyId = (await harness.createKey(acme, { name: 'acme-key', credit_limit: null })).id;
  const betaKeyId = (await harness.createKey(beta, { name: 'beta-key', credit_limit: null })).id;
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const issuer = await startOidcIssuer({ redirectUri: `${url}/v1/auth/callback` });
  for (const [id, groups] of Object.entries(PEOPLE)) issuer.addPerson({ id, email: `${id}@example.com`, groups });
  let clockOffsetMs = 0;
  const { addresses } = harness.stack;
  const tokens = harness.internalTokens!;
  const edge = await startEdge({
    port,
    authAddress: addresses.auth,
    catalogAddress: addresses.catalog,
    ledgerAddress: addresses.ledger,
    routerAddress: addresses.routing,
    mediaAddress: addresses.media,
    bus: await harness.testBus.connectAnother(),
    logger: testLogger('signed-in-edge'),
    internalAuth: { accepted: { service: [tokens.service], admin: [tokens.admin] }, credential: tokens.service },
    operatorSessionCredential: tokens.admin,
    now: () => Date.now() + clockOffsetMs,
    signIn: {
      issuer: issuer.issuer,
      clientId: issuer.client.clientId,
      clientSecret: issuer.client.clientSecret,
      redirectUri: `${url}/v1/auth/callback`,
      // Plain-http loopback: the only place cookies may go without Secure.
      secureCookies: false,
      memberships: [
        { group: 'acme-owners', accountId: acme.accountId, role: 'owner' },
        { group: 'acme-admins', accountId: acme.accountId, role: 'admin' },
        { group: 'finance', accountId: acme.accountId, role: 'billing' },
        { group: 'acme-viewers', accountId: acme.accountId, role: 'viewer' },
        { group: 'beta-admins', accountId: beta.accountId, role: 'admin' },
        // A slip in the configuration: the account does not exist.
        { group: 'ghost-team', accountId: 'acc_doesnotexist', role: 'owner' },
      ],
      operatorGroups: ['ops'],
    },
  });
  return {
    harness,
    acme,
    beta,
    acmeKeyId,
    betaKeyId,
    issuer,
    edge,
    url,
    setClockOffsetMs: (offsetMs) => {
      clockOffsetMs = offsetMs;
    },
    async stop() {
      await edge.stop();
      await issuer.stop();
      await harness.stop();
    },
  };
}

export interface SignInAttempt {
  browser: CookieBrowser;
  /** The edge's answer to the callback (its Set-Cookie included). */
  callback: { status: number; headers: Headers; text: string; url: string };
  /** The authorization request the edge sent the browser to. */
  authorizeUrl: URL;
}

/**
 * A person signs in with a browser: the edge's login redirects to the IdP, whose login form the browser
 * posts; the IdP redirects back to the edge's callback. `beforeCallback` may change the callback URL or
 * the browser's cookies first (hostile cases); the callback's own answer is returned, not followed.
 */
export async function signIn(
  stack: SignInStack,
  person: Person | string,
  options: { account?: string; browser?: CookieBrowser; beforeCallback?: (callbackUrl: URL, browser: CookieBrowser) => URL | void | Promise<URL | void> } = {},
): Promise<SignInAttempt> {
  const browser = options.browser ?? new CookieBrowser();
  const login = await browser.fetch(`${stack.url}/v1/auth/login${options.account ? `?account=${options.account}` : ''}`);
  expect(login.status, login.text).toBe(200);
  const authorizeUrl = new URL(login.visited.find((visited) => visited.startsWith(`${stack.issuer.issuer}/auth`))!);
  const interaction = new URL(login.url);
  const atCallback = await browser.fetch(`${stack.issuer.issuer}${interaction.pathname}/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ login: person }).toString(),
    stopBefore: (next) => next.href.startsWith(`${stack.url}/v1/auth/callback`),
  });
  const callbackUrl = new URL(atCallback.visited.at(-1)!);
  expect(callbackUrl.pathname).toBe('/v1/auth/callback');
  const target = (await options.beforeCallback?.(callbackUrl, browser)) ?? callbackUrl;
  const callback = await browser.fetch(target.href, { stopBefore: () => true });
  return { browser, callback: { status: callback.status, headers: callback.headers, text: callback.text, url: callback.url }, authorizeUrl };
}

/** A browser signed in as `person` (expects success), with its CSRF token. */
export async function signedIn(stack: SignInStack, person: Person, account?: string): Promise<{ browser: CookieBrowser; csrf: string; session: any }> {
  const attempt = await signIn(stack, person, account === undefined ? {} : { account });
  expect(attempt.callback.status, attempt.callback.text).toBe(303);
  const session = await browserJson(stack, attempt.browser, 'GET', '/v1/auth/session');
  expect(session.status, session.text).toBe(200);
  return { browser: attempt.browser, csrf: session.body.csrf_token as string, session: session.body };
}

/** A JSON call from a signed-in browser; `csrf` is sent in x-csrf-token, `origin` as Origin. */
export async function browserJson(
  stack: SignInStack,
  browser: CookieBrowser,
  method: string,
  path: string,
  options: { body?: unknown; csrf?: string; origin?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: any; text: string; headers: Headers }> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  if (options.csrf !== undefined) headers['x-csrf-token'] = options.csrf;
  if (options.origin !== undefined) headers.origin = options.origin;
  const answer = await browser.fetch(`${stack.url}${path}`, {
    method,
    headers,
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    stopBefore: () => true,
  });
  let body: unknown;
  try {
    body = answer.text === '' ? undefined : JSON.parse(answer.text);
  } catch {
    body = undefined;
  }
  return { status: answer.status, body, text: answer.text, headers: answer.headers };
}

export const SESSION_COOKIE = 'gw_session';
export const LOGIN_COOKIE = 'gw_login';
