import { accessSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repositoryRoot } from '@gateway/testing';
import { SESSION_COOKIE, startSignInStack, type SignInStack } from './sign-in-harness.js';

// The console's sign-in with the identity provider, in Debian's Chromium (.ci/run installs it): a real
// OpenID provider in-process (oidc-provider), the signed-in edge serving the built console. A viewer sees
// the account and its budgets read-only and is not offered the audit log (the role table's actions drive
// the buttons; the routes check again, and a refusal is shown in the route's words), an admin creates a key
// and a budget through the page (its CSRF token on the write) and finds the change in the audit log, an
// operator reaches the Operator view and its audit log without an admin token; sign-out ends the session on the server.
// Billing reads the webhook endpoints without write controls; an admin's owner grant is refused in the auth service's words. Each view: axe-core finds no WCAG 2 A/AA
// violation.
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const WCAG_TAGS = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'];

describe('console sign-in with the identity provider, in a real browser', () => {
  let stack: SignInStack;
  let browser: Browser;
  const pageErrors: string[] = [];

  beforeAll(async () => {
    accessSync(CHROMIUM);
    accessSync(join(repositoryRoot, 'apps/console/dist/index.html'));
    stack = await startSignInStack();
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await stack?.stop();
  });

  const accessibilityViolations = async (page: Page): Promise<string[]> => {
    if (!(await page.evaluate<boolean>('typeof window.axe === "object"'))) await page.evaluate(AXE_SOURCE);
    return page.evaluate<string[], string[]>(async (tags) => {
      interface AxeResult { violations: { id: string; help: string; nodes: { target: string[] }[] }[] }
      const axe = (globalThis as unknown as { axe: { run(context: unknown, options: unknown): Promise<AxeResult> } }).axe;
      const result = await axe.run((globalThis as unknown as { document: unknown }).document, { runOnly: { type: 'tag', values: tags }, resultTypes: ['violations'] });
      return result.violations.map((violation) => `${violation.id}: ${violation.help} (${violation.nodes.map((node) => node.target.join(' ')).join(', ')})`);
    }, WCAG_TAGS);
  };

  /** A fresh browser (no IdP session) signed in as `person` through the console's link. */
  const signInThroughConsole = async (person: string, view = ''): Promise<{ context: BrowserContext; page: Page }> => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto(`${stack.url}/console/${view}`);
    await page.getByRole('link', { name: 'Sign in with your identity provider' }).click();
    // The IdP's own login page (the test provider's form).
    await page.locator('input[name="login"]').fill(person);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL((url) => url.pathname === '/console/');
    return { context, page };
  };

  it('signs a viewer in: their account read-only, axe clean, and sign-out ends the session on the server', async () => {
    const { context, page } = await signInThroughConsole('bob');
    await page.getByRole('heading', { name: 'Account', level: 1 }).waitFor();
    await expect.poll(() => page.locator('.top .who').textContent()).toBe('bob@example.com · viewer');
    await expect.poll(() => page.getByTestId('balance').textContent()).toMatch(/^10(\.0+)? credits$/);
    // The session is an HttpOnly SameSite=Lax cookie the page's script cannot read; nothing in storage.
    const cookies = await context.cookies(stack.url);
    const session = cookies.find((cookie) => cookie.name === SESSION_COOKIE);
    expect(session).toMatchObject({ httpOnly: true, sameSite: 'Lax' });
    expect(await page.evaluate<string>('document.cookie')).not.toContain(SESSION_COOKIE);
    expect(await page.evaluate<number[]>('[localStorage.length, sessionStorage.length]')).toEqual([0, 0]);
    expect(await accessibilityViolations(page)).toEqual([]);

    await page.getByRole('link', { name: 'Keys' }).click();
    await page.getByRole('heading', { name: 'Keys', level: 1 }).waitFor();
    const row = page.getByRole('table', { name: 'Keys' }).getByRole('row').filter({ hasText: 'acme-key' });
    await expect.poll(() => row.count()).toBe(1);
    expect(await row.textContent()).toContain('read only');
    expect(await page.getByRole('heading', { name: 'Create key' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: /^(Edit|Disable|Delete) / }).count()).toBe(0);
    expect(await accessibilityViolations(page)).toEqual([]);

    // Budgets: listed for a viewer (budgets.read), with no form and no buttons (no budgets.write).
    const set = await stack.harness.call('PUT', '/v1/account/budgets/account', { bearer: stack.acme.provisioningKey, body: { period: 'monthly', limit: '50', thresholds: [80] } });
    expect(set.status).toBe(200);
    await page.getByRole('link', { name: 'Budgets' }).click();
    const accountBudget = page.getByRole('table', { name: 'Budgets' }).getByRole('row').filter({ hasText: /^Account/ });
    await expect.poll(() => accountBudget.count()).toBe(1);
    expect((await accountBudget.getByRole('cell').allTextContents()).slice(0, 3)).toEqual(['Account', 'monthly', '50']);
    expect(await accountBudget.textContent()).toContain('read only');
    expect(await page.getByRole('heading', { name: 'Set a budget' }).count()).toBe(0);
    expect(await accessibilityViolations(page)).toEqual([]);
    // The audit log is the owners' and admins' (audit.read): the view says so and asks nothing.
    let auditAsked = false;
    page.on('request', (request) => { if (new URL(request.url()).pathname === '/v1/account/audit') auditAsked = true; });
    await page.getByRole('link', { name: 'Audit log' }).click();
    await page.getByText('Your role may not read the audit log; the account\'s owners and admins may.').waitFor();
    expect(await page.getByRole('table', { name: 'Audit log' }).count()).toBe(0);
    expect(auditAsked).toBe(false);
    expect(await accessibilityViolations(page)).toEqual([]);
    // Webhook endpoints and members are not the viewer's either (webhooks.read, members.read): nothing is asked.
    const asked: string[] = [];
    page.on('request', (request) => { const path = new URL(request.url()).pathname; if (/^\/v1\/account\/(webhooks|members)/.test(path)) asked.push(path); });
    await page.getByRole('link', { name: 'Webhooks' }).click();
    await page.getByText('Your role may not read the webhook endpoints; the account\'s owners, admins and billing may.').waitFor();
    expect(await page.getByRole('table', { name: 'Webhook endpoints' }).count()).toBe(0);
    expect(await accessibilityViolations(page)).toEqual([]);
    await page.getByRole('link', { name: 'Members' }).click();
    await page.getByText('Your role may not see the members; the account\'s owners and admins may.').waitFor();
    expect(await page.getByRole('table', { name: 'Members' }).count()).toBe(0);
    expect(await accessibilityViolations(page)).toEqual([]);
    expect(asked).toEqual([]);

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    // The server ended it: the token, replayed, is refused.
    const replay = await fetch(`${stack.url}/v1/account/balance`, { headers: { cookie: `${SESSION_COOKIE}=${session!.value}` } });
    expect(replay.status).toBe(401);
    await context.close();
  });

  it('shows a write the route refuses in the route\'s own words (a viewer whose page was told it may write)', async () => {
    const { context, page } = await signInThroughConsole('bob');
    // The page's copy of the role table made stale: it offers the budget form; the route checks the real one.
    await page.route('**/v1/auth/session', async (route) => {
      const answer = await route.fetch();
      const session = (await answer.json()) as { actions: string[] };
      await route.fulfill({ response: answer, json: { ...session, actions: [...session.actions, 'budgets.write'] } });
    });
    await page.goto(`${stack.url}/console/budgets`);
    await page.getByRole('heading', { name: 'Set a budget' }).waitFor();
    await page.getByLabel('Limit (credits)').fill('12');
    await page.getByRole('button', { name: 'Set budget' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/viewer.*budgets\.write|budgets\.write.*viewer/);
    const listed = await stack.harness.call('GET', '/v1/account/budgets', { bearer: stack.acme.provisioningKey });
    expect(listed.body.data.map((budget: { limit: string }) => budget.limit)).not.toContain('12');
    await context.close();
  });

  it('lets an admin create a key through the page (the CSRF token goes with the write)', async () => {
    const { context, page } = await signInThroughConsole('erin');
    await expect.poll(() => page.locator('.top .who').textContent()).toBe('erin@example.com · admin');
    await page.getByRole('link', { name: 'Keys' }).click();
    await page.getByLabel('Name', { exact: true }).fill('made-in-the-browser');
    await page.getByRole('button', { name: 'Create key' }).click();
    expect(await page.getByTestId('new-key').textContent()).toMatch(/^gw-api-/);
    const listed = await stack.harness.call('GET', '/v1/account/keys', { bearer: stack.acme.provisioningKey });
    expect(listed.body.data.map((key: { name: string }) => key.name)).toContain('made-in-the-browser');
    expect(await accessibilityViolations(page)).toEqual([]);

    // A budget set through the page, and the change in the audit log with the signed-in person as its actor.
    await page.getByRole('link', { name: 'Budgets' }).click();
    await page.getByLabel('Limit (credits)').fill('75');
    await page.getByRole('button', { name: 'Set budget' }).click();
    await expect.poll(() => page.getByRole('status').textContent()).toBe('Saved the monthly budget of Account.');
    await page.getByRole('link', { name: 'Audit log' }).click();
    const change = page.getByRole('table', { name: 'Audit log' }).getByRole('row').filter({ hasText: 'budget.' }).first();
    await expect.poll(async () => (await change.getByRole('cell').allTextContents())[1]).toMatch(/^user/);
    expect(await accessibilityViolations(page)).toEqual([]);
    await context.close();
  });

  it('shows billing the webhook endpoints read-only and no members', async () => {
    const endpoint = await stack.harness.call('POST', '/v1/account/webhooks', {
      bearer: stack.acme.provisioningKey, body: { url: 'https://hooks.example.com/acme-billing', event_types: ['budget.threshold_crossed'] },
    });
    expect(endpoint.status).toBe(201);
    const { context, page } = await signInThroughConsole('dave');
    await expect.poll(() => page.locator('.top .who').textContent()).toBe('dave@example.com · billing');
    await page.getByRole('link', { name: 'Webhooks' }).click();
    const row = page.getByRole('table', { name: 'Webhook endpoints' }).getByRole('row').filter({ hasText: 'https://hooks.example.com/acme-billing' });
    await expect.poll(async () => (await row.getByRole('cell').allTextContents()).slice(0, 3)).toEqual(['https://hooks.example.com/acme-billing', 'budget.threshold_crossed', 'yes']);
    expect(await row.getByRole('button').allTextContents()).toEqual(['Deliveries']);
    expect(await page.getByRole('heading', { name: 'Add an endpoint' }).count()).toBe(0);
    await page.getByText('Read only: the account\'s owners and admins add and change endpoints.').waitFor();
    await row.getByRole('button', { name: 'Deliveries of https://hooks.example.com/acme-billing' }).click();
    await page.getByText(/^No deliveries yet/).waitFor();
    expect(await accessibilityViolations(page)).toEqual([]);
    await page.getByRole('link', { name: 'Members' }).click();
    await page.getByText('Your role may not see the members; the account\'s owners and admins may.').waitFor();
    expect(await accessibilityViolations(page)).toEqual([]);
    const deleted = await stack.harness.call('DELETE', `/v1/account/webhooks/${endpoint.body.id as string}`, { bearer: stack.acme.provisioningKey });
    expect(deleted.status).toBe(200);
    await context.close();
  });

  it('lets an admin invite and change members, and shows the auth service refusing them an owner in its own words', async () => {
    const { context, page } = await signInThroughConsole('erin');
    await page.getByRole('link', { name: 'Members' }).click();
    await page.getByRole('heading', { name: 'Invite by email' }).waitFor();
    await page.getByLabel('Email', { exact: true }).fill('frank@example.com');
    await page.getByRole('combobox', { name: 'Role', exact: true }).selectOption('owner');
    await page.getByRole('button', { name: 'Invite' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toBe('Only an owner grants the owner role.');
    await page.getByRole('combobox', { name: 'Role', exact: true }).selectOption('billing');
    await page.getByRole('button', { name: 'Invite' }).click();
    await expect.poll(() => page.getByRole('status').textContent()).toBe('Invited frank@example.com as billing.');
    const frank = page.getByRole('table', { name: 'Members' }).getByRole('row').filter({ hasText: 'frank@example.com' });
    await expect.poll(async () => (await frank.getByRole('cell').allTextContents()).slice(1, 3)).toEqual(['billing', 'invited']);
    await page.getByRole('button', { name: 'Change role of frank@example.com' }).click();
    await page.getByRole('combobox', { name: 'New role', exact: true }).selectOption('owner');
    await page.getByRole('button', { name: 'Save role' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toBe('Only an owner grants the owner role or changes an owner\'s.');
    expect((await frank.getByRole('cell').allTextContents())[1]).toBe('billing');
    expect(await accessibilityViolations(page)).toEqual([]);
    const listed = await stack.harness.call('GET', '/v1/account/members', { bearer: stack.acme.provisioningKey });
    expect(listed.body.data.map((member: { email: string; role: string }) => [member.email, member.role])).toEqual([['frank@example.com', 'billing']]);
    await page.getByRole('button', { name: 'Remove frank@example.com' }).click();
    await page.getByRole('button', { name: 'Remove member' }).click();
    await expect.poll(() => page.getByRole('table', { name: 'Members' }).getByRole('row').filter({ hasText: 'frank@example.com' }).count()).toBe(0);
    await context.close();
  });

  it('takes a signed-in operator to the Operator view without an admin token', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    await page.goto(`${stack.url}/console/operator`);
    await page.getByRole('link', { name: 'Sign in with your identity provider' }).click();
    await page.locator('input[name="login"]').fill('oscar');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL((url) => url.pathname === '/console/');
    await page.getByRole('link', { name: 'Operator' }).click();
    await page.getByRole('heading', { name: 'Operator', level: 1 }).waitFor();
    const accounts = page.getByRole('table', { name: /accounts/i });
    await expect.poll(() => accounts.getByRole('row').filter({ hasText: stack.acme.accountId }).count()).toBe(1);
    expect(await page.getByLabel('Admin token').count()).toBe(0);
    // The operator's audit log through the session, its links checked on the page.
    await expect.poll(() => page.getByTestId('audit-chain-status').textContent()).toMatch(/Links on this page hold/);
    expect(await accessibilityViolations(page)).toEqual([]);
    await context.close();
    expect(pageErrors).toEqual([]);
  });
});
