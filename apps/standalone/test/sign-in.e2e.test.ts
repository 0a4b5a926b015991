import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from 'pg';
import { actionsOf } from '@gateway/platform';
import { CookieBrowser } from '@gateway/testing';
import { browserJson, LOGIN_COOKIE, SESSION_COOKIE, signIn, signedIn, startSignInStack, type SignInStack } from './sign-in-harness.js';

// Sign-in with a real OpenID provider (oidc-provider, in-process) through a browser-like client: the
// code flow with PKCE, state and nonce; sessions in an HttpOnly SameSite=Lax cookie, stored hashed by the
// auth service; CSRF on writes; logout; and a hostile caller's attempts (forged cookies, tampered state
// and nonce, a replayed code, an expired ID token, groups for no account, escalation, another account).

describe('sign-in with an OpenID provider (e2e)', () => {
  let stack: SignInStack;
  beforeAll(async () => {
    stack = await startSignInStack();
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
  });

  const refusal = (answer: { status: number; body: any; text: string }, status: number, type: string, code?: string) => {
    expect(answer.status, answer.text).toBe(status);
    expect(answer.body?.error?.type, answer.text).toBe(type);
    if (code !== undefined) expect(answer.body.error.code, answer.text).toBe(code);
    expect(typeof answer.body.error.message).toBe('string');
  };

  const sessionRows = async () => {
    const client = new Client({ connectionString: stack.harness.database.url });
    await client.connect();
    try {
      return (await client.query('select token_hash, account_id, role, subject, revoked_at, expires_at from auth.sessions order by created_at')).rows;
    } finally {
      await client.end();
    }
  };

  it('runs the code flow with PKCE, state and nonce and opens a session the account routes accept with the mapped role', async () => {
    const attempt = await signIn(stack, 'alice');
    // The authorization request: code flow, S256 PKCE, state, nonce, the configured scopes and callback.
    const authorize = attempt.authorizeUrl.searchParams;
    expect(authorize.get('response_type')).toBe('code');
    expect(authorize.get('code_challenge_method')).toBe('S256');
    expect(authorize.get('code_challenge')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(authorize.get('state')).toMatch(/^[A-Za-z0-9_-]{20,}$/);
    expect(authorize.get('nonce')).toMatch(/^[A-Za-z0-9_-]{20,}$/);
    expect(authorize.get('scope')).toBe('openid email profile groups');
    expect(authorize.get('redirect_uri')).toBe(`${stack.url}/v1/auth/callback`);
    // The callback: to the console, with an HttpOnly SameSite=Lax session cookie that lives as long as the session.
    expect(attempt.callback.status, attempt.callback.text).toBe(303);
    expect(attempt.callback.headers.get('location')).toBe('/console/');
    const sessionCookie = attempt.callback.headers.getSetCookie().find((line) => line.startsWith(`${SESSION_COOKIE}=`));
    expect(sessionCookie).toBeDefined();
    expect(sessionCookie).toMatch(/; HttpOnly/);
    expect(sessionCookie).toMatch(/; SameSite=Lax/);
    expect(sessionCookie).toMatch(/; Max-Age=3600/);
    // The pending sign-in is used once: its cookie is cleared.
    expect(attempt.browser.cookie(stack.url, LOGIN_COOKIE)).toBeUndefined();

    const session = await browserJson(stack, attempt.browser, 'GET', '/v1/auth/session');
    expect(session.status, session.text).toBe(200);
    expect(session.body).toMatchObject({ account_id: stack.acme.accountId, role: 'owner', subject: 'alice', display_name: 'alice@example.com', actions: actionsOf('owner') });
    const balance = await browserJson(stack, attempt.browser, 'GET', '/v1/account/balance');
    expect(balance.status, balance.text).toBe(200);
    expect(balance.body).toEqual({ balance: '10' });
    const keys = await browserJson(stack, attempt.browser, 'GET', '/v1/account/keys');
    expect(keys.body.data.map((key: { id: string }) => key.id)).toEqual([stack.acmeKeyId]);

    // Stored hashed: the table holds the SHA-256 of the cookie's token, never the token.
    const token = attempt.browser.cookie(stack.url, SESSION_COOKIE)!;
    const rows = await sessionRows();
    expect(rows.some((row) => row.token_hash === token)).toBe(false);
    expect(rows.some((row) => row.token_hash === createHash('sha256').update(token).digest('hex') && row.role === 'owner' && row.account_id === stack.acme.accountId)).toBe(true);
  });

  it('needs the CSRF token from this origin on every write made with the session cookie', async () => {
    const { browser, csrf } = await signedIn(stack, 'erin');
    const before = (await browserJson(stack, browser, 'GET', '/v1/account/keys')).body.data.length as number;
    refusal(await browserJson(stack, browser, 'POST', '/v1/account/keys', { body: { name: 'no-csrf', credit_limit: null } }), 403, 'permission_error', 'csrf_token_invalid');
    refusal(await browserJson(stack, browser, 'POST', '/v1/account/keys', { body: { name: 'bad-csrf', credit_limit: null }, csrf: csrf.slice(0, -2) + 'AA' }), 403, 'permission_error', 'csrf_token_invalid');
    refusal(
      await browserJson(stack, browser, 'POST', '/v1/account/keys', { body: { name: 'cross-site', credit_limit: null }, csrf, origin: 'https://evil.example' }),
      403,
      'permission_error',
      'csrf_token_invalid',
    );
    // Another session's token is not this one's.
    const other = await signedIn(stack, 'alice');
    refusal(await browserJson(stack, browser, 'PATCH', `/v1/account/keys/${stack.acmeKeyId}`, { body: { disabled: true }, csrf: other.csrf }), 403, 'permission_error', 'csrf_token_invalid');
    refusal(await browserJson(stack, browser, 'DELETE', `/v1/account/keys/${stack.acmeKeyId}`), 403, 'permission_error', 'csrf_token_invalid');
    expect((await browserJson(stack, browser, 'GET', '/v1/account/keys')).body.data.length).toBe(before);

    const created = await browserJson(stack, browser, 'POST', '/v1/account/keys', { body: { name: 'with-csrf', credit_limit: null }, csrf, origin: stack.url });
    expect(created.status, created.text).toBe(201);
    expect(created.body.key).toMatch(/^gw-/);
    const deleted = await browserJson(stack, browser, 'DELETE', `/v1/account/keys/${created.body.id}`, { csrf });
    expect(deleted.status, deleted.text).toBe(200);
  });

  it('ends the session on logout (CSRF token required), at once on every route', async () => {
    const { browser, csrf } = await signedIn(stack, 'bob');
    const token = browser.cookie(stack.url, SESSION_COOKIE)!;
    refusal(await browserJson(stack, browser, 'POST', '/v1/auth/logout'), 403, 'permission_error', 'csrf_token_invalid');
    expect((await browserJson(stack, browser, 'GET', '/v1/account/balance')).status).toBe(200);
    const logout = await browserJson(stack, browser, 'POST', '/v1/auth/logout', { csrf });
    expect(logout.status, logout.text).toBe(200);
    expect(logout.headers.getSetCookie().some((line) => line.startsWith(`${SESSION_COOKIE}=;`) && /Max-Age=0/.test(line))).toBe(true);
    // The browser dropped the cookie; a copy of the token kept by anyone is dead too.
    expect(browser.cookie(stack.url, SESSION_COOKIE)).toBeUndefined();
    const replay = new CookieBrowser();
    replay.setCookie(stack.url, SESSION_COOKIE, token);
    refusal(await browserJson(stack, replay, 'GET', '/v1/account/balance'), 401, 'authentication_error', 'invalid_session');
    refusal(await browserJson(stack, replay, 'GET', '/v1/auth/session'), 401, 'authentication_error', 'invalid_session');
    const row = (await sessionRows()).find((candidate) => candidate.token_hash === createHash('sha256').update(token).digest('hex'));
    expect(row?.revoked_at).not.toBeNull();
  });

  it('refuses a callback whose state is not the pending one, and sets no session', async () => {
    const attempt = await signIn(stack, 'alice', {
      beforeCallback: (callback) => {
        const tampered = new URL(callback);
        tampered.searchParams.set('state', randomBytes(32).toString('base64url'));
        return tampered;
      },
    });
    refusal({ ...attempt.callback, body: JSON.parse(attempt.callback.text) }, 401, 'authentication_error', 'sign_in_failed');
    expect(attempt.browser.cookie(stack.url, SESSION_COOKIE)).toBeUndefined();
  });

  it('refuses an ID token whose nonce is not the pending sign-in\'s', async () => {
    const attempt = await signIn(stack, 'alice', {
      beforeCallback: (_callback, browser) => {
        const pending = JSON.parse(Buffer.from(browser.cookie(stack.url, LOGIN_COOKIE)!, 'base64url').toString('utf8'));
        pending.nonce = randomBytes(32).toString('base64url');
        browser.setCookie(stack.url, LOGIN_COOKIE, Buffer.from(JSON.stringify(pending)).toString('base64url'));
      },
    });
    refusal({ ...attempt.callback, body: JSON.parse(attempt.callback.text) }, 401, 'authentication_error', 'sign_in_failed');
    expect(attempt.callback.text, attempt.callback.text).toMatch(/nonce/);
    expect(attempt.browser.cookie(stack.url, SESSION_COOKIE)).toBeUndefined();
  });

  it('refuses a callback with no pending sign-in in the browser (login CSRF), or a wrong PKCE verifier', async () => {
    const withoutPending = await signIn(stack, 'alice', { beforeCallback: (_callback, browser) => browser.deleteCookie(stack.url, LOGIN_COOKIE) });
    refusal({ ...withoutPending.callback, body: JSON.parse(withoutPending.callback.text) }, 401, 'authentication_error', 'sign_in_failed');
    const wrongVerifier = await signIn(stack, 'alice', {
      beforeCallback: (_callback, browser) => {
        const pending = JSON.parse(Buffer.from(browser.cookie(stack.url, LOGIN_COOKIE)!, 'base64url').toString('utf8'));
        pending.verifier = randomBytes(32).toString('base64url');
        browser.setCookie(stack.url, LOGIN_COOKIE, Buffer.from(JSON.stringify(pending)).toString('base64url'));
      },
    });
    refusal({ ...wrongVerifier.callback, body: JSON.parse(wrongVerifier.callback.text) }, 401, 'authentication_error', 'sign_in_failed');
    expect(wrongVerifier.browser.cookie(stack.url, SESSION_COOKIE)).toBeUndefined();
  });

  it('refuses a replayed authorization code', async () => {
    let callbackUrl: URL | undefined;
    let pendingCookie: string | undefined;
    const first = await signIn(stack, 'dave', {
      beforeCallback: (callback, browser) => {
        callbackUrl = callback;
        pendingCookie = browser.cookie(stack.url, LOGIN_COOKIE);
      },
    });
    expect(first.callback.status, first.callback.text).toBe(303);
    // The same code (with the same pending sign-in, as an attacker who copied both would send it).
    const attacker = new CookieBrowser();
    attacker.setCookie(stack.url, LOGIN_COOKIE, pendingCookie!);
    const replay = await attacker.fetch(callbackUrl!.href, { stopBefore: () => true });
    refusal({ ...replay, body: JSON.parse(replay.text) }, 401, 'authentication_error', 'sign_in_failed');
    expect(attacker.cookie(stack.url, SESSION_COOKIE)).toBeUndefined();
    expect(stack.issuer.tokenStatuses.at(-1)).toBe(400);
  });

  it('refuses an expired ID token (judged by the edge\'s clock)', async () => {
    stack.setClockOffsetMs(2 * 60 * 60 * 1000);
    try {
      const attempt = await signIn(stack, 'alice');
      refusal({ ...attempt.callback, body: JSON.parse(attempt.callback.text) }, 401, 'authentication_error', 'sign_in_failed');
      expect(attempt.callback.text, attempt.callback.text).toMatch(/exp/);
      expect(attempt.browser.cookie(stack.url, SESSION_COOKIE)).toBeUndefined();
    } finally {
      stack.setClockOffsetMs(0);
    }
  });

  it('refuses an ID token the same IdP issued to another application (wrong audience), swapped in at the token endpoint', async () => {
    const { issuer, otherClient } = stack.issuer;
    try {
      const attempt = await signIn(stack, 'alice', {
        beforeCallback: async (_callback, browser) => {
          // A genuine, signed ID token for alice from the same issuer, meant for other-app, with the nonce of
          // this browser's pending sign-in: only its audience is wrong.
          const nonce = JSON.parse(Buffer.from(browser.cookie(stack.url, LOGIN_COOKIE)!, 'base64url').toString('utf8')).nonce as string;
          const verifier = randomBytes(32).toString('base64url');
          const authorize = new URL(`${issuer}/auth`);
          for (const [name, value] of Object.entries({
            client_id: otherClient.clientId, redirect_uri: otherClient.redirectUri, response_type: 'code', scope: 'openid email groups',
            state: randomBytes(16).toString('base64url'), nonce, code_challenge: createHash('sha256').update(verifier).digest('base64url'), code_challenge_method: 'S256',
          })) authorize.searchParams.set(name, value);
          const other = new CookieBrowser();
          const form = await other.fetch(authorize.href);
          expect(form.status, form.text).toBe(200);
          const back = await other.fetch(`${issuer}${new URL(form.url).pathname}/login`, {
            method: 'POST',
            headers: { 'content-type': 'application/x-www-form-urlencoded' },
            body: 'login=alice',
            stopBefore: (next) => next.pathname === '/v1/auth/callback',
          });
          const code = new URL(back.visited.at(-1)!).searchParams.get('code')!;
          const token = await fetch(`${issuer}/token`, {
            method: 'POST',
            headers: {
              authorization: `Basic ${Buffer.from(`${otherClient.clientId}:${otherClient.clientSecret}`).toString('base64')}`,
              'content-type': 'application/x-www-form-urlencoded',
            },
            body: new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: otherClient.redirectUri, code_verifier: verifier }).toString(),
          });
          const otherIdToken = ((await token.json()) as { id_token: string }).id_token;
          expect(JSON.parse(Buffer.from(otherIdToken.split('.')[1]!, 'base64url').toString('utf8'))).toMatchObject({ aud: 'other-app', sub: 'alice', nonce });
          stack.issuer.rewriteTokenAnswer = (answer) => ({ ...answer, id_token: otherIdToken });
        },
      });
      refusal({ ...attempt.callback, body: JSON.parse(attempt.callback.text) }, 401, 'authentication_error', 'sign_in_failed');
      expect(attempt.callback.text, attempt.callback.text).toMatch(/aud/);
      expect(attempt.browser.cookie(stack.url, SESSION_COOKIE)).toBeUndefined();
    } finally {
      stack.issuer.rewriteTokenAnswer = undefined;
    }
  });

  it('refuses a person whose groups map to no account, or to an account that does not exist', async () => {
    for (const person of ['mallory', 'ghost']) {
      const attempt = await signIn(stack, person);
      refusal({ ...attempt.callback, body: JSON.parse(attempt.callback.text) }, 403, 'permission_error', 'no_membership');
      expect(attempt.browser.cookie(stack.url, SESSION_COOKIE)).toBeUndefined();
    }
  });

  it('asks a person with several memberships to choose, and opens only one they hold', async () => {
    const ambiguous = await signIn(stack, 'multi');
    refusal({ ...ambiguous.callback, body: JSON.parse(ambiguous.callback.text) }, 400, 'invalid_request_error', 'account_choice_required');
    const asBeta = await signedIn(stack, 'multi', stack.beta.accountId);
    expect(asBeta.session).toMatchObject({ account_id: stack.beta.accountId, role: 'admin' });
    const asAcme = await signedIn(stack, 'multi', stack.acme.accountId);
    expect(asAcme.session).toMatchObject({ account_id: stack.acme.accountId, role: 'viewer' });
    // Escalation by asking: an account or the operator view the groups do not give.
    for (const account of ['operator', 'acc_other']) {
      const refused = await signIn(stack, 'multi', { account });
      refusal({ ...refused.callback, body: JSON.parse(refused.callback.text) }, 403, 'permission_error', 'no_membership');
    }
    const bobAsOperator = await signIn(stack, 'bob', { account: 'operator' });
    expect(bobAsOperator.callback.status).toBe(403);
  });

  it('keeps one account\'s signed-in user out of another account\'s data', async () => {
    const { browser, csrf } = await signedIn(stack, 'carol');
    const keys = await browserJson(stack, browser, 'GET', '/v1/account/keys');
    expect(keys.body.data.map((key: { id: string }) => key.id)).toEqual([stack.betaKeyId]);
    refusal(await browserJson(stack, browser, 'GET', `/v1/account/keys/${stack.acmeKeyId}`), 404, 'not_found_error');
    refusal(await browserJson(stack, browser, 'PATCH', `/v1/account/keys/${stack.acmeKeyId}`, { body: { disabled: true }, csrf }), 404, 'not_found_error');
    refusal(await browserJson(stack, browser, 'DELETE', `/v1/account/keys/${stack.acmeKeyId}`, { csrf }), 404, 'not_found_error');
    const activity = await browserJson(stack, browser, 'GET', `/v1/account/activity?key_id=${stack.acmeKeyId}`);
    expect(activity.body.data).toEqual([]);
    // No parameter names the account: a query or header asking for another one changes nothing.
    const balance = await browserJson(stack, browser, 'GET', `/v1/account/balance?account_id=${stack.acme.accountId}`, { headers: { 'x-account-id': stack.acme.accountId } });
    expect(balance.status === 200 ? balance.body : balance.status).toEqual({ balance: '10' });
    const acmeKey = await stack.harness.call('GET', `/v1/account/keys/${stack.acmeKeyId}`, { bearer: stack.acme.provisioningKey });
    expect(acmeKey.body.disabled).toBe(false);
  });

  it('refuses forged and unknown session cookies with 401, without reaching an account', async () => {
    const forged = [
      'not-a-token',
      `gw-sess-${randomBytes(32).toString('base64url')}`,
      `gw-sess-${'A'.repeat(43)}`,
      createHash('sha256').update('x').digest('hex'),
      `gw-sess-${randomBytes(32).toString('base64url')}'; drop table auth.sessions; --`,
    ];
    for (const value of forged) {
      const browser = new CookieBrowser();
      browser.setCookie(stack.url, SESSION_COOKIE, encodeURIComponent(value));
      refusal(await browserJson(stack, browser, 'GET', '/v1/account/balance'), 401, 'authentication_error', 'invalid_session');
      refusal(await browserJson(stack, browser, 'GET', '/v1/admin/accounts'), 401, 'authentication_error', 'invalid_session');
    }
    // A stored hash presented as the token is not the token.
    const { browser } = await signedIn(stack, 'alice');
    const hash = createHash('sha256').update(browser.cookie(stack.url, SESSION_COOKIE)!).digest('hex');
    const hashAsToken = new CookieBrowser();
    hashAsToken.setCookie(stack.url, SESSION_COOKIE, hash);
    refusal(await browserJson(stack, hashAsToken, 'GET', '/v1/account/balance'), 401, 'authentication_error', 'invalid_session');
  });

  it('lets a signed-in operator use the admin routes (CSRF on the top-up) and no account route', async () => {
    const { browser, csrf, session } = await signedIn(stack, 'oscar');
    expect(session).toMatchObject({ account_id: null, role: 'operator', actions: actionsOf('operator') });
    const accounts = await browserJson(stack, browser, 'GET', '/v1/admin/accounts');
    expect(accounts.status, accounts.text).toBe(200);
    expect(accounts.body.data.map((account: { id: string }) => account.id)).toEqual(expect.arrayContaining([stack.acme.accountId, stack.beta.accountId]));
    refusal(await browserJson(stack, browser, 'POST', `/v1/admin/accounts/${stack.beta.accountId}/credits`, { body: { amount: '1' } }), 403, 'permission_error', 'csrf_token_invalid');
    const topUp = await browserJson(stack, browser, 'POST', `/v1/admin/accounts/${stack.beta.accountId}/credits`, { body: { amount: '1' }, csrf });
    expect(topUp.status, topUp.text).toBe(200);
    expect(topUp.body.balance).toBe('11');
    // The audit log names the person who signed in, not the credential the edge presented for them.
    const audit = await browserJson(stack, browser, 'GET', `/v1/admin/audit?chain=ledger&account_id=${stack.beta.accountId}`);
    expect(audit.status, audit.text).toBe(200);
    const entry = audit.body.data.find((row: { action: string; after: { credits?: string } | null }) => row.action === 'credits.top_up' && row.after?.credits === '1');
    expect(entry, audit.text).toBeDefined();
    expect(entry.actor.type).toBe('user');
    expect(entry.actor.id).toMatch(/#oscar$/);
    refusal(await browserJson(stack, browser, 'GET', '/v1/account/balance'), 403, 'permission_error', 'role_forbidden');
  });

  it('keeps machine credentials as they were: a provisioning key is its account\'s owner, the admin token the operator', async () => {
    const withKey = await stack.harness.call('GET', '/v1/account/balance', { bearer: stack.acme.provisioningKey }, stack.url);
    expect(withKey.status, withKey.text).toBe(200);
    const created = await stack.harness.call('POST', '/v1/account/keys', { bearer: stack.acme.provisioningKey, body: { name: 'machine', credit_limit: null } }, stack.url);
    expect(created.status, created.text).toBe(201);
    const admin = await stack.harness.call('GET', '/v1/admin/accounts', { bearer: stack.harness.internalTokens!.admin }, stack.url);
    expect(admin.status, admin.text).toBe(200);
    // A machine credential is judged alone: a session cookie beside it changes nothing, and a provisioning
    // key still cannot use the admin routes even when an operator's cookie rides along.
    const operator = await signedIn(stack, 'oscar');
    const cookie = `${SESSION_COOKIE}=${operator.browser.cookie(stack.url, SESSION_COOKIE)}`;
    const mixed = await stack.harness.call('GET', '/v1/admin/accounts', { bearer: stack.acme.provisioningKey, headers: { cookie } }, stack.url);
    expect(mixed.status, mixed.text).toBe(401);
    expect(mixed.body.error.code).toBe('invalid_admin_token');
  });

  it('answers /v1/auth/session and /v1/auth/logout 401 without a session, and the edge without sign-in configured 404 on login', async () => {
    const browser = new CookieBrowser();
    refusal(await browserJson(stack, browser, 'GET', '/v1/auth/session'), 401, 'authentication_error', 'invalid_session');
    refusal(await browserJson(stack, browser, 'POST', '/v1/auth/logout'), 401, 'authentication_error', 'invalid_session');
    const unconfigured = await stack.harness.call('GET', '/v1/auth/login');
    expect(unconfigured.status, unconfigured.text).toBe(404);
    expect(unconfigured.body.error.code).toBe('sign_in_not_configured');
    // Sessions are honoured by every edge (the stack's own has no sign-in configured).
    const { browser: alice } = await signedIn(stack, 'alice');
    const cookie = `${SESSION_COOKIE}=${alice.cookie(stack.url, SESSION_COOKIE)}`;
    const elsewhere = await stack.harness.call('GET', '/v1/account/balance', { headers: { cookie } });
    expect(elsewhere.status, elsewhere.text).toBe(200);
  });

  it('never lets a session cookie stand in for an API key on the inference routes', async () => {
    const { browser, csrf } = await signedIn(stack, 'alice');
    const chat = await browserJson(stack, browser, 'POST', '/v1/chat/completions', {
      body: { model: 'chat-small', messages: [{ role: 'user', content: 'hi' }] },
      csrf,
    });
    expect(chat.status, chat.text).toBe(401);
    expect(chat.body.error.code).toBe('invalid_api_key');
    expect((await stack.harness.call('GET', '/v1/account/balance', { bearer: stack.acme.provisioningKey })).body.balance).toBe('10');
  });

  it('refuses a bad login query with 400 before redirecting anywhere', async () => {
    for (const account of ['x'.repeat(101), 'a b', '../admin']) {
      const answer = await new CookieBrowser().fetch(`${stack.url}/v1/auth/login?account=${encodeURIComponent(account)}`, { stopBefore: () => true });
      expect(answer.status, account).toBe(400);
      expect(JSON.parse(answer.text).error.type).toBe('invalid_request_error');
    }
  });
});
