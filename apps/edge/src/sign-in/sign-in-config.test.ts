import { ServerResponse, IncomingMessage } from 'node:http';
import { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { checkedSignInOptions, parseGroupRoles, signInFromEnvironment, type OidcSignInOptions } from './sign-in-config.js';
import { appendCookie, cookieNames, csrfTokenMatches, csrfTokenOf } from './session-cookies.js';
import { chooseMembership } from './sign-in-routes.js';

const base: OidcSignInOptions = {
  issuer: 'https://idp.example.com',
  clientId: 'gateway',
  redirectUri: 'https://gateway.example.com/v1/auth/callback',
  memberships: [
    { group: 'eng', accountId: 'acc_a', role: 'viewer' },
    { group: 'eng-leads', accountId: 'acc_a', role: 'admin' },
    { group: 'finance', accountId: 'acc_b', role: 'billing' },
  ],
  operatorGroups: ['ops'],
};

describe('sign-in configuration', () => {
  it('parses EDGE_OIDC_GROUP_ROLES and refuses what is not group=account:role with a role of the table', () => {
    expect(parseGroupRoles(' eng=acc_a:viewer, finance=acc_b:billing ,')).toEqual([
      { group: 'eng', accountId: 'acc_a', role: 'viewer' },
      { group: 'finance', accountId: 'acc_b', role: 'billing' },
    ]);
    expect(parseGroupRoles('')).toEqual([]);
    for (const bad of ['eng=acc_a', 'eng:viewer', 'eng=acc_a:operator', 'eng=acc_a:root', '=acc_a:viewer']) {
      expect(() => parseGroupRoles(bad), bad).toThrow(/EDGE_OIDC_GROUP_ROLES/);
    }
  });

  it('defaults to Secure cookies, an hour-long session and the console, and refuses unsafe settings at start', () => {
    expect(checkedSignInOptions(base)).toMatchObject({ secureCookies: true, sessionTtlSeconds: 3600, postLoginPath: '/console/', groupsClaim: 'groups' });
    const refusals: [Partial<OidcSignInOptions>, RegExp][] = [
      [{ issuer: 'http://idp.example.com' }, /loopback only/],
      [{ secureCookies: false }, /loopback redirect URI/],
      [{ postLoginPath: '//evil.example/' }, /postLoginPath/],
      [{ postLoginPath: 'https://evil.example/' }, /postLoginPath/],
      [{ redirectUri: 'https://gateway.example.com/cb?x=1' }, /redirectUri/],
      [{ scopes: 'email profile' }, /openid/],
      [{ sessionTtlSeconds: 10 }, /sessionTtlSeconds/],
      [{ memberships: [...base.memberships, { group: 'eng', accountId: 'acc_a', role: 'owner' }] }, /twice/],
    ];
    for (const [overrides, message] of refusals) expect(() => checkedSignInOptions({ ...base, ...overrides }), JSON.stringify(overrides)).toThrow(message);
    // Plain-http development on loopback only.
    expect(
      checkedSignInOptions({ ...base, issuer: 'http://127.0.0.1:9999', redirectUri: 'http://127.0.0.1:8080/v1/auth/callback', secureCookies: false }).secureCookies,
    ).toBe(false);
  });
});

describe('sign-in from the environment', () => {
  it('is off without EDGE_OIDC_ISSUER, and reads every variable when on', () => {
    expect(signInFromEnvironment({})).toBeUndefined();
    expect(
      signInFromEnvironment({
        EDGE_OIDC_ISSUER: 'https://idp.example.com',
        EDGE_OIDC_CLIENT_ID: 'gateway',
        EDGE_OIDC_CLIENT_SECRET: 'secret',
        EDGE_OIDC_REDIRECT_URI: 'https://gateway.example.com/v1/auth/callback',
        EDGE_OIDC_GROUP_ROLES: 'eng=acc_a:viewer',
        EDGE_OIDC_OPERATOR_GROUPS: 'ops, sre',
        EDGE_SESSION_TTL_SECONDS: '900',
      }),
    ).toEqual({
      issuer: 'https://idp.example.com',
      clientId: 'gateway',
      clientSecret: 'secret',
      redirectUri: 'https://gateway.example.com/v1/auth/callback',
      memberships: [{ group: 'eng', accountId: 'acc_a', role: 'viewer' }],
      operatorGroups: ['ops', 'sre'],
      sessionTtlSeconds: 900,
      secureCookies: true,
    });
  });

  it('refuses an issuer without its client or callback, and a bad lifetime', () => {
    expect(() => signInFromEnvironment({ EDGE_OIDC_ISSUER: 'https://idp.example.com' })).toThrow(/EDGE_OIDC_CLIENT_ID/);
    expect(() => signInFromEnvironment({ EDGE_SESSION_TTL_SECONDS: '5' })).toThrow(/EDGE_SESSION_TTL_SECONDS/);
  });
});

describe('group → account and role', () => {
  const options = checkedSignInOptions(base);

  it('gives the strongest role a person\'s groups hold in an account', () => {
    expect(chooseMembership(options, ['eng', 'eng-leads'], undefined)).toEqual({ accountId: 'acc_a', role: 'admin' });
    expect(chooseMembership(options, ['finance', 'unrelated'], undefined)).toEqual({ accountId: 'acc_b', role: 'billing' });
    expect(chooseMembership(options, ['ops'], undefined)).toEqual({ accountId: '', role: 'operator' });
  });

  it('refuses groups that map to nothing (names match exactly), and an account or the operator view not held', () => {
    for (const groups of [[], ['ENG'], ['eng '], ['en']]) expect(() => chooseMembership(options, groups, undefined), JSON.stringify(groups)).toThrow(/None of your identity provider groups/);
    expect(() => chooseMembership(options, ['eng'], 'acc_b')).toThrow(/None of your/);
    expect(() => chooseMembership(options, ['eng'], 'operator')).toThrow(/None of your/);
  });

  it('asks a person with several places to choose one', () => {
    expect(() => chooseMembership(options, ['eng', 'finance', 'ops'], undefined)).toThrow(/acc_a, acc_b, operator/);
    expect(chooseMembership(options, ['eng', 'finance', 'ops'], 'acc_b')).toEqual({ accountId: 'acc_b', role: 'billing' });
    expect(chooseMembership(options, ['eng', 'finance', 'ops'], 'operator')).toEqual({ accountId: '', role: 'operator' });
  });

  it('counts memberships beside the groups: the stronger role where both reach an account', () => {
    const members = new Map([['acc_a', 'billing'], ['acc_m', 'viewer']] as const);
    // Groups give admin in acc_a; the weaker membership does not lower it. A membership alone is a place.
    expect(chooseMembership(options, ['eng', 'eng-leads'], 'acc_a', members)).toEqual({ accountId: 'acc_a', role: 'admin' });
    expect(chooseMembership(options, [], 'acc_m', members)).toEqual({ accountId: 'acc_m', role: 'viewer' });
    expect(chooseMembership(options, ['finance'], 'acc_a', new Map([['acc_a', 'owner']]))).toEqual({ accountId: 'acc_a', role: 'owner' });
    expect(chooseMembership(options, [], undefined, new Map([['acc_m', 'admin']]))).toEqual({ accountId: 'acc_m', role: 'admin' });
    expect(() => chooseMembership(options, ['eng'], undefined, members)).toThrow(/acc_a, acc_m/);
    expect(() => chooseMembership(options, [], 'acc_b', members)).toThrow(/None of your/);
  });
});

describe('session cookies', () => {
  it('carries __Host- names, Secure, HttpOnly and SameSite=Lax by default', () => {
    const response = new ServerResponse(new IncomingMessage(new Socket()));
    const names = cookieNames(true);
    appendCookie(response, names.session, 'gw-sess-token', { secure: true, httpOnly: true, maxAgeSeconds: 3600 });
    expect(response.getHeader('set-cookie')).toEqual(['__Host-gw_session=gw-sess-token; Max-Age=3600; Path=/; HttpOnly; Secure; SameSite=Lax']);
    expect(cookieNames(false).session).toBe('gw_session');
  });

  it('derives a CSRF token only the session\'s holder can know, compared exactly', () => {
    const token = 'gw-sess-' + 'a'.repeat(43);
    const csrf = csrfTokenOf(token);
    expect(csrf).not.toContain(token);
    expect(csrfTokenMatches(token, csrf)).toBe(true);
    expect(csrfTokenMatches(token, csrfTokenOf('gw-sess-' + 'b'.repeat(43)))).toBe(false);
    for (const presented of [undefined, '', csrf.slice(1), `${csrf} `, csrf.toUpperCase(), 'x'.repeat(1000)]) expect(csrfTokenMatches(token, presented)).toBe(false);
  });
});
