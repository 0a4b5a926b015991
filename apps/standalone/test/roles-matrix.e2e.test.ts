import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACTIONS, ROLES, roleMay, type Action, type Role } from '@gateway/platform';
import { eventually, type CookieBrowser } from '@gateway/testing';
import { browserJson, signedIn, startSignInStack, type Person, type SignInStack } from './sign-in-harness.js';

// The role × action table (libs/platform roles.ts), one test per cell and route: every account and admin
// route is called by a signed-in person of each role; where the table allows, the route works (its success
// status), where it refuses, a 403 permission_error (code role_forbidden) in the standard envelope and no
// effect (no credits, keys, budgets, low-balance threshold or members changed). Machine credentials map onto it: a provisioning key as its account's owner, the admin token as
// the operator.

const PERSON_OF_ROLE: Record<Role, Person> = { owner: 'alice', admin: 'erin', billing: 'dave', viewer: 'bob', operator: 'oscar' };

interface RouteCase {
  /** The route as the table of routes names it. */
  route: string;
  action: Action;
  method: string;
  /** The path and body, made fresh per call (a key to delete, an amount to add). */
  request: (stack: SignInStack, fixtures: Fixtures) => Promise<{ path: string; body?: unknown }>;
  success: number;
}

interface Fixtures {
  generationId: string;
  webhookId: string;
}

const freshKey = async (stack: SignInStack) => (await stack.harness.createKey(stack.acme, { name: 'matrix', credit_limit: null })).id;
/** A disabled endpoint at a public address (nothing is sent: it is disabled, and no event is subscribed to by the others). */
const WEBHOOK_BODY = { url: 'https://203.0.114.7/matrix', event_types: ['credits.topped_up'], enabled: false };
const freshWebhook = async (stack: SignInStack) => {
  const created = await stack.harness.call('POST', '/v1/account/webhooks', { bearer: stack.acme.provisioningKey, body: WEBHOOK_BODY });
  expect(created.status, created.text).toBe(201);
  return created.body.id as string;
};
let invitations = 0;
/** A new low-balance threshold per call, so a refused PUT would show as a change. */
let lowBalanceThresholds = 0;
const freshEmail = () => `matrix-${process.pid}-${(invitations += 1)}@example.com`;
/** An invitation made by the owner's machine credential, for a route that changes or removes one. */
const freshMember = async (stack: SignInStack) => {
  const added = await stack.harness.call('POST', '/v1/account/members', { bearer: stack.acme.provisioningKey, body: { email: freshEmail(), role: 'viewer' } });
  expect(added.status, added.text).toBe(201);
  return added.body.id as string;
};

/** Every account and operator route, with the action the table checks it against. */
const ROUTES: readonly RouteCase[] = [
  { route: 'GET /v1/account/balance', action: 'balance.read', method: 'GET', request: async () => ({ path: '/v1/account/balance' }), success: 200 },
  { route: 'GET /v1/account/activity', action: 'activity.read', method: 'GET', request: async () => ({ path: '/v1/account/activity?days=7' }), success: 200 },
  { route: 'GET /v1/account/generations', action: 'generations.read', method: 'GET', request: async () => ({ path: '/v1/account/generations' }), success: 200 },
  { route: 'GET /v1/generation', action: 'generations.read', method: 'GET', request: async (_stack, fixtures) => ({ path: `/v1/generation?id=${fixtures.generationId}` }), success: 200 },
  { route: 'GET /v1/account/keys', action: 'keys.read', method: 'GET', request: async () => ({ path: '/v1/account/keys' }), success: 200 },
  { route: 'GET /v1/account/keys/{key_id}', action: 'keys.read', method: 'GET', request: async (stack) => ({ path: `/v1/account/keys/${stack.acmeKeyId}` }), success: 200 },
  { route: 'POST /v1/account/keys', action: 'keys.write', method: 'POST', request: async () => ({ path: '/v1/account/keys', body: { name: 'by-session', credit_limit: '1' } }), success: 201 },
  { route: 'PATCH /v1/account/keys/{key_id}', action: 'keys.write', method: 'PATCH', request: async (stack) => ({ path: `/v1/account/keys/${await freshKey(stack)}`, body: { disabled: true } }), success: 200 },
  { route: 'DELETE /v1/account/keys/{key_id}', action: 'keys.write', method: 'DELETE', request: async (stack) => ({ path: `/v1/account/keys/${await freshKey(stack)}` }), success: 200 },
  { route: 'GET /v1/account/budgets', action: 'budgets.read', method: 'GET', request: async () => ({ path: '/v1/account/budgets' }), success: 200 },
  { route: 'PUT /v1/account/budgets/account', action: 'budgets.write', method: 'PUT', request: async () => ({ path: '/v1/account/budgets/account', body: { period: 'monthly', limit: '7', thresholds: [50] } }), success: 200 },
  { route: 'GET /v1/account/budgets/low-balance', action: 'budgets.read', method: 'GET', request: async () => ({ path: '/v1/account/budgets/low-balance' }), success: 200 },
  { route: 'PUT /v1/account/budgets/low-balance', action: 'budgets.write', method: 'PUT', request: async () => ({ path: '/v1/account/budgets/low-balance', body: { threshold: `${(lowBalanceThresholds += 1)}` } }), success: 200 },
  { route: 'DELETE /v1/account/budgets/low-balance', action: 'budgets.write', method: 'DELETE', request: async (stack) => {
    await stack.harness.call('PUT', '/v1/account/budgets/low-balance', { bearer: stack.acme.provisioningKey, body: { threshold: '0.5' } });
    return { path: '/v1/account/budgets/low-balance' };
  }, success: 200 },
  { route: 'GET /v1/account/webhooks', action: 'webhooks.read', method: 'GET', request: async () => ({ path: '/v1/account/webhooks' }), success: 200 },
  { route: 'GET /v1/account/webhooks/{id}', action: 'webhooks.read', method: 'GET', request: async (_stack, fixtures) => ({ path: `/v1/account/webhooks/${fixtures.webhookId}` }), success: 200 },
  { route: 'GET /v1/account/webhooks/{id}/deliveries', action: 'webhooks.read', method: 'GET', request: async (_stack, fixtures) => ({ path: `/v1/account/webhooks/${fixtures.webhookId}/deliveries` }), success: 200 },
  { route: 'POST /v1/account/webhooks', action: 'webhooks.write', method: 'POST', request: async () => ({ path: '/v1/account/webhooks', body: WEBHOOK_BODY }), success: 201 },
  { route: 'PATCH /v1/account/webhooks/{id}', action: 'webhooks.write', method: 'PATCH', request: async (_stack, fixtures) => ({ path: `/v1/account/webhooks/${fixtures.webhookId}`, body: { enabled: false } }), success: 200 },
  { route: 'DELETE /v1/account/webhooks/{id}', action: 'webhooks.write', method: 'DELETE', request: async (stack) => ({ path: `/v1/account/webhooks/${await freshWebhook(stack)}` }), success: 200 },
  { route: 'POST /v1/account/webhooks/{id}/rotate-secret', action: 'webhooks.write', method: 'POST', request: async (_stack, fixtures) => ({ path: `/v1/account/webhooks/${fixtures.webhookId}/rotate-secret` }), success: 200 },
  { route: 'GET /v1/account/audit', action: 'audit.read', method: 'GET', request: async () => ({ path: '/v1/account/audit' }), success: 200 },
  { route: 'GET /v1/account/members', action: 'members.read', method: 'GET', request: async () => ({ path: '/v1/account/members' }), success: 200 },
  { route: 'POST /v1/account/members', action: 'members.write', method: 'POST', request: async () => ({ path: '/v1/account/members', body: { email: freshEmail(), role: 'billing' } }), success: 201 },
  { route: 'PATCH /v1/account/members/{member_id}', action: 'members.write', method: 'PATCH', request: async (stack) => ({ path: `/v1/account/members/${await freshMember(stack)}`, body: { role: 'billing' } }), success: 200 },
  { route: 'DELETE /v1/account/members/{member_id}', action: 'members.write', method: 'DELETE', request: async (stack) => ({ path: `/v1/account/members/${await freshMember(stack)}` }), success: 200 },
  { route: 'GET /v1/admin/audit', action: 'admin.audit.read', method: 'GET', request: async () => ({ path: '/v1/admin/audit?chain=auth&limit=5' }), success: 200 },
  { route: 'GET /v1/admin/providers', action: 'admin.providers.read', method: 'GET', request: async () => ({ path: '/v1/admin/providers' }), success: 200 },
  { route: 'GET /v1/admin/models/latency', action: 'admin.latency.read', method: 'GET', request: async () => ({ path: '/v1/admin/models/latency?days=1' }), success: 200 },
  { route: 'GET /v1/admin/accounts', action: 'admin.accounts.read', method: 'GET', request: async () => ({ path: '/v1/admin/accounts' }), success: 200 },
  { route: 'POST /v1/admin/accounts/{account_id}/credits', action: 'admin.credits.write', method: 'POST', request: async (stack) => ({ path: `/v1/admin/accounts/${stack.beta.accountId}/credits`, body: { amount: '0.5' } }), success: 200 },
];

describe('role × action table, one test per cell (e2e)', () => {
  let stack: SignInStack;
  const sessions = new Map<Role, { browser: CookieBrowser; csrf: string }>();
  const fixtures: Fixtures = { generationId: '', webhookId: '' };

  beforeAll(async () => {
    stack = await startSignInStack();
    for (const role of ROLES) {
      const session = await signedIn(stack, PERSON_OF_ROLE[role]);
      expect(session.session.role).toBe(role);
      sessions.set(role, session);
    }
    // A settled generation of acme's, for GET /v1/generation.
    const apiKey = (await stack.harness.createKey(stack.acme, { name: 'chat', credit_limit: null })).key;
    const chat = await stack.harness.chat(apiKey);
    expect(chat.status, chat.text).toBe(200);
    fixtures.generationId = chat.headers.get('x-gateway-request-id')!;
    fixtures.webhookId = await freshWebhook(stack);
    await eventually(async () => {
      const found = await stack.harness.call('GET', `/v1/generation?id=${fixtures.generationId}`, { bearer: stack.acme.provisioningKey });
      expect(found.status, found.text).toBe(200);
    });
  }, 180_000);

  afterAll(async () => {
    await stack?.stop();
  });

  it('names a route for every action of the table', () => {
    expect(new Set(ROUTES.map((route) => route.action))).toEqual(new Set(ACTIONS));
  });

  const cells = ROLES.flatMap((role) => ROUTES.map((route) => ({ role, route, allowed: roleMay(role, route.action) })));

  it.each(cells.map((cell) => [cell.role, cell.route.route, cell.route.action, cell.allowed ? 'allowed' : 'refused', cell] as const))(
    '%s: %s (%s) is %s',
    async (role, _route, _action, _verdict, cell) => {
      const method = cell.route.method;
      const session = sessions.get(role)!;
      const { path, body } = await cell.route.request(stack, fixtures);
      const balanceBefore = (await stack.harness.call('GET', '/v1/account/balance', { bearer: stack.beta.provisioningKey })).body.balance;
      const keysBefore = (await stack.harness.call('GET', '/v1/account/keys?include_disabled=true', { bearer: stack.acme.provisioningKey })).body.data;
      const budgetsBefore = (await stack.harness.call('GET', '/v1/account/budgets', { bearer: stack.acme.provisioningKey })).body.data;
      const webhooksBefore = (await stack.harness.call('GET', '/v1/account/webhooks', { bearer: stack.acme.provisioningKey })).body.data;
      const membersBefore = (await stack.harness.call('GET', '/v1/account/members', { bearer: stack.acme.provisioningKey })).body.data;
      const lowBalanceBefore = (await stack.harness.call('GET', '/v1/account/budgets/low-balance', { bearer: stack.acme.provisioningKey })).body;
      const answer = await browserJson(stack, session.browser, method, path, { ...(body === undefined ? {} : { body }), csrf: session.csrf });
      if (cell.allowed) {
        expect(answer.status, answer.text).toBe(cell.route.success);
        return;
      }
      expect(answer.status, answer.text).toBe(403);
      expect(answer.body).toEqual({ error: { type: 'permission_error', code: 'role_forbidden', message: `The role ${role} may not ${cell.route.action}.` } });
      // Refused means no effect: no credits moved, no key created, changed or deleted.
      expect((await stack.harness.call('GET', '/v1/account/balance', { bearer: stack.beta.provisioningKey })).body.balance).toBe(balanceBefore);
      expect((await stack.harness.call('GET', '/v1/account/keys?include_disabled=true', { bearer: stack.acme.provisioningKey })).body.data).toEqual(keysBefore);
      expect((await stack.harness.call('GET', '/v1/account/budgets', { bearer: stack.acme.provisioningKey })).body.data).toEqual(budgetsBefore);
      expect((await stack.harness.call('GET', '/v1/account/webhooks', { bearer: stack.acme.provisioningKey })).body.data).toEqual(webhooksBefore);
      expect((await stack.harness.call('GET', '/v1/account/members', { bearer: stack.acme.provisioningKey })).body.data).toEqual(membersBefore);
      expect((await stack.harness.call('GET', '/v1/account/budgets/low-balance', { bearer: stack.acme.provisioningKey })).body).toEqual(lowBalanceBefore);
    },
  );

  it.each(ROUTES.map((route) => [route.route, route.action, route] as const))(
    'machine credentials: %s (%s) works with the credential of the role the table allows',
    async (_route, action, route) => {
      const method = route.method;
      const { path, body } = await route.request(stack, fixtures);
      // A provisioning key acts as its account's owner; the admin token as the operator.
      const bearer = roleMay('owner', action) ? stack.acme.provisioningKey : stack.harness.internalTokens!.admin;
      expect(roleMay('owner', action) || roleMay('operator', action)).toBe(true);
      const answer = await stack.harness.call(method, path, { bearer, ...(body === undefined ? {} : { body }) }, stack.url);
      expect(answer.status, answer.text).toBe(route.success);
      // The other machine credential is refused there as it always was (401: not the credential the route takes).
      const other = roleMay('owner', action) ? stack.harness.internalTokens!.admin : stack.acme.provisioningKey;
      const refused = await stack.harness.call(method, path, { bearer: other, ...(body === undefined ? {} : { body }) }, stack.url);
      expect(refused.status, refused.text).toBe(401);
    },
  );
});
