import { accessSync, chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatCredits, parseCredits } from '@gateway/platform';
import { eventually, npmStartBanner, repositoryRoot, startNpmStart, type NpmStart } from '@gateway/testing';

/** The event types the webhook form ticks besides budget.threshold_crossed and credits.topped_up. */
const OTHER_EVENT_TYPES = ['balance.low', 'api_key.created', 'api_key.disabled', 'api_key.deleted', 'api_key.expired', 'batch.completed'] as const;
import { stopProcessesMentioning } from './leftover-processes.js';

// The web console (apps/console) in Debian's Chromium (.ci/run installs it) against `npm start` as a user
// runs it: `node apps/standalone/dist/main.js` with its own data dir, the simulated provider, and the dev
// provisioning key its banner prints, and the admin token it keeps in its data dir. Screenshots of each
// view at 1280 and 390 px wide go to CONSOLE_SCREENSHOT_DIR (default .data/test-output/console/), each
// checked for horizontal scroll and by axe-core against the WCAG 2 A/AA rules (contrast, labels, names).
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const screenshots = process.env.CONSOLE_SCREENSHOT_DIR ?? join(repositoryRoot, '.data/test-output/console');
const KEY_NAME = 'browser-key';
const RENAMED = 'browser-key-renamed';
/** The first model colour of the spend chart (apps/console/src/views/spend-chart.tsx): #2563eb. */
const BAR = [0x25, 0x63, 0xeb] as const;
/** The little of a canvas element read in the page (this project compiles without the DOM types). */
interface CanvasLike { width: number; height: number; getContext(kind: '2d'): { getImageData(x: number, y: number, w: number, h: number): { data: Uint8ClampedArray } } }
/** axe-core's source, injected through the DevTools protocol (the page's CSP admits no other script). */
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
/** The rules axe runs: every WCAG 2.0/2.1 A and AA rule (colour contrast, labels, button and link names, ARIA). */
const WCAG_TAGS = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'];
describe('web console in a real browser', () => {
  const root = mkdtempSync(join(tmpdir(), 'console-browser-'));
  chmodSync(root, 0o755); // the embedded Postgres runs as `postgres` when the tests run as root
  const dataDir = join(root, 'data');
  let gateway: NpmStart;
  let url = '';
  let provisioningKey = '';
  let browser: Browser;
  let page: Page;
  const cspViolations: string[] = [];
  const pageErrors: string[] = [];

  beforeAll(async () => {
    accessSync(join(repositoryRoot, 'apps/standalone/dist/main.js'));
    accessSync(join(repositoryRoot, 'apps/console/dist/index.html'));
    accessSync(CHROMIUM);
    mkdirSync(screenshots, { recursive: true });
    // Webhooks to this test's loopback receivers; one failed attempt dead-letters a delivery (the Webhooks view's dead letter).
    gateway = startNpmStart({ GATEWAY_DATA_DIR: dataDir, GATEWAY_WEBHOOKS_ALLOW_PRIVATE: '1', WEBHOOK_MAX_ATTEMPTS: '1', WEBHOOK_TIMEOUT_MS: '5000' });
    ({ url, provisioningKey } = await npmStartBanner(gateway));
    const output = gateway.output();
    expect(output).toContain(`Console:           ${url}/console/`);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('console', (message) => { if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text()); });
    page.on('pageerror', (error) => pageErrors.push(error.message));
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    if (gateway && gateway.child.exitCode === null) {
      gateway.child.kill('SIGTERM');
      await Promise.race([gateway.exited, new Promise((resolve) => setTimeout(resolve, 15_000))]);
    }
    // An embedded Postgres left behind by a killed gateway, found by its data dir.
    await stopProcessesMentioning(dataDir);
    rmSync(root, { recursive: true, force: true });
  }, 60_000);

  const chat = (apiKey: string) => fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'chat-small', messages: [{ role: 'user', content: 'Hello from the console test' }] }),
  });

  /** Pixels of the chart's canvas in the first bar colour. */
  const barPixels = () => page.locator('.chart canvas').first().evaluate((canvas: CanvasLike, colour) => {
    const { data } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
    let count = 0;
    for (let index = 0; index < data.length; index += 4) {
      if (data[index + 3]! > 200 && Math.abs(data[index]! - colour[0]) < 12 && Math.abs(data[index + 1]! - colour[1]) < 12 && Math.abs(data[index + 2]! - colour[2]) < 12) count++;
    }
    return count;
  }, BAR);

  /** axe-core's WCAG 2 A/AA violations on the page as it is, one line per rule with the elements it names. */
  const accessibilityViolations = async (): Promise<string[]> => {
    if (!(await page.evaluate<boolean>('typeof window.axe === "object"'))) await page.evaluate(AXE_SOURCE);
    return page.evaluate<string[], string[]>(async (tags) => {
      interface AxeResult { violations: { id: string; impact: string; help: string; nodes: { target: string[]; failureSummary: string }[] }[] }
      const axe = (globalThis as unknown as { axe: { run(context: unknown, options: unknown): Promise<AxeResult> } }).axe;
      const result = await axe.run((globalThis as unknown as { document: unknown }).document, { runOnly: { type: 'tag', values: tags }, resultTypes: ['violations'] });
      return result.violations.map((violation) => `${violation.id} (${violation.impact}): ${violation.help}\n${violation.nodes
        .map((node) => `    ${node.target.join(' ')}: ${node.failureSummary.replace(/\s+/g, ' ')}`).join('\n')}`);
    }, WCAG_TAGS);
  };

  /**
   * Tab round the whole page (past its end it starts again at the top) until a control comes round a second
   * time: every visible control (links, buttons, fields, scrollable tables) must be reached, and each must
   * show a focus outline. Answers what was missed or unmarked.
   */
  const keyboardWalk = async (): Promise<string[]> => {
    const problems: string[] = [];
    let outside = 0;
    for (let step = 0; step < 300 && outside < 3; step++) {
      await page.keyboard.press('Tab');
      const reached = await page.evaluate<{ done: boolean; outside?: boolean; name: string; outline: boolean }>(`(() => {
        const element = document.activeElement;
        if (!element || element === document.body) return { done: false, outside: true, name: '', outline: true };
        if (element.hasAttribute('data-tab-reached')) return { done: true, name: '', outline: true };
        element.setAttribute('data-tab-reached', '');
        const style = getComputedStyle(element);
        const name = element.tagName.toLowerCase() + ' "' + (element.getAttribute('aria-label') || element.textContent || element.id || '').trim().slice(0, 40) + '"';
        return { done: false, name, outline: style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) >= 2 };
      })()`);
      if (reached.done) break;
      if (reached.outside) {
        outside++;
        continue;
      }
      outside = 0;
      if (!reached.outline) problems.push(`no visible focus: ${reached.name}`);
    }
    const missed = await page.evaluate<string[]>(`[...document.querySelectorAll('a[href], button:not([disabled]), input:not([disabled]), select:not([disabled]), textarea, [tabindex]:not([tabindex="-1"])')]
      .filter((element) => element.getClientRects().length > 0 && !element.hasAttribute('data-tab-reached'))
      .map((element) => 'not reached by Tab: ' + element.tagName.toLowerCase() + ' "' + (element.getAttribute('aria-label') || element.textContent || element.id || '').trim().slice(0, 40) + '"')`);
    await page.evaluate(`document.querySelectorAll('[data-tab-reached]').forEach((element) => element.removeAttribute('data-tab-reached')); document.activeElement && document.activeElement.blur()`);
    return [...problems, ...missed];
  };

  /** Both widths: a screenshot each, no sideways scroll, and no WCAG 2 A/AA violation axe-core finds; at 1280 px, a walk with Tab. */
  const capture = async (view: string) => {
    for (const width of [1280, 390]) {
      await page.setViewportSize({ width, height: 900 });
      await page.waitForTimeout(150); // the chart follows its container's width
      await page.screenshot({ path: join(screenshots, `${view}-${width}.png`), fullPage: true });
      const overflow = await page.evaluate<number>('document.documentElement.scrollWidth - document.documentElement.clientWidth');
      expect(overflow, `${view} at ${width} px scrolls sideways by ${overflow} px`).toBeLessThanOrEqual(0);
      const violations = await accessibilityViolations();
      expect(violations, `${view} at ${width} px:\n${violations.join('\n')}`).toEqual([]);
    }
    const keyboard = await keyboardWalk();
    expect(keyboard, `${view}, keyboard:\n${keyboard.join('\n')}`).toEqual([]);
    await page.setViewportSize({ width: 1280, height: 900 });
  };

  /** The account's balance through the API, as its exact decimal string. */
  const apiBalance = async (): Promise<string> => {
    const answer = await fetch(`${url}/v1/account/balance`, { headers: { authorization: `Bearer ${provisioningKey}` } });
    expect(answer.status).toBe(200);
    return ((await answer.json()) as { balance: string }).balance;
  };

  it('signs in, creates, renames, limits and deletes keys, shows two requests in the chart, table and paged request list, operates providers and accounts, and disables a key', async () => {
    await page.goto(`${url}/console/`);
    await expect.poll(() => page.getByRole('heading', { name: 'Sign in' }).count()).toBe(1);
    await capture('sign-in');
    // A wrong key is refused in words and not kept.
    await page.getByLabel('Provisioning key').fill('gw-prov-not-a-real-key');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').waitFor();
    expect(await page.getByRole('alert').textContent()).toMatch(/provisioning key/i);
    await page.getByLabel('Provisioning key').fill(provisioningKey);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Account', level: 1 }).waitFor();
    await expect.poll(() => page.getByTestId('balance').textContent()).toMatch(/^10(\.0+)? credits$/);
    const startBalance = await page.getByTestId('balance').textContent();
    // The key stays in memory: no cookie, nothing in either storage.
    expect(await page.context().cookies()).toEqual([]);
    expect(await page.evaluate<number[]>('[localStorage.length, sessionStorage.length]')).toEqual([0, 0]);
    await page.locator('.chart canvas').first().waitFor();
    expect(await barPixels()).toBe(0);

    // Keys: create one, its plaintext shown once, then in the table.
    await page.getByRole('link', { name: 'Keys' }).click();
    await page.getByRole('heading', { name: 'Keys', level: 1 }).waitFor();
    expect(new URL(page.url()).pathname).toBe('/console/keys');
    await page.getByLabel('Name', { exact: true }).fill(KEY_NAME);
    await page.getByLabel('Credit limit', { exact: true }).fill('2.5');
    await page.getByRole('button', { name: 'Create key' }).click();
    const apiKey = (await page.getByTestId('new-key').textContent())!;
    expect(apiKey).toMatch(/^gw-api-/);
    const row = page.getByRole('table', { name: 'Keys' }).getByRole('row').filter({ hasText: KEY_NAME });
    await expect.poll(() => row.count()).toBe(1);
    expect(await row.textContent()).toContain('2.5');
    expect(await row.textContent()).toContain(`${apiKey.slice(0, 10)}...${apiKey.slice(-3)}`);
    await page.getByRole('button', { name: 'Done' }).click();
    expect(await page.getByTestId('new-key').count()).toBe(0);
    await capture('keys');

    // The API's refusal in words.
    await page.getByLabel('Name', { exact: true }).fill('refused-key');
    await page.getByLabel('Credit limit', { exact: true }).fill('-1');
    await page.getByRole('button', { name: 'Create key' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/credit_limit.*negative/i);
    expect(await page.getByRole('table', { name: 'Keys' }).getByRole('row').filter({ hasText: 'refused-key' }).count()).toBe(0);
    await page.getByLabel('Credit limit', { exact: true }).fill('');

    // Rename and change the limit.
    await page.getByRole('button', { name: `Edit ${KEY_NAME}` }).click();
    // Focus moves when the edit form renders (a frame later on a loaded machine): polled.
    await expect.poll(() => page.evaluate<string>('document.activeElement.value')).toBe(KEY_NAME);
    await page.getByLabel('New name').fill(RENAMED);
    await page.getByLabel('New credit limit').fill('3');
    await page.getByRole('button', { name: 'Save' }).click();
    const renamed = page.getByRole('table', { name: 'Keys' }).getByRole('row').filter({ hasText: RENAMED });
    await expect.poll(() => renamed.count()).toBe(1);
    expect((await renamed.getByRole('cell').allTextContents())[2]).toBe('3');

    // Delete, with the keyboard: the confirmation takes the focus on its safe choice.
    await page.getByLabel('Name', { exact: true }).fill('short-lived');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByTestId('new-key').waitFor();
    await page.getByRole('button', { name: 'Done' }).click();
    await page.getByRole('button', { name: 'Delete short-lived' }).click();
    await page.getByRole('alertdialog').waitFor();
    await expect.poll(() => page.evaluate<string>('document.activeElement.textContent')).toBe('Cancel');
    await page.keyboard.press('Shift+Tab');
    await expect.poll(() => page.evaluate<string>('document.activeElement.textContent')).toBe('Delete key');
    await page.keyboard.press('Enter');
    await expect.poll(() => page.getByRole('table', { name: 'Keys' }).getByRole('row').filter({ hasText: 'short-lived' }).count()).toBe(0);
    expect(await page.getByRole('alertdialog').count()).toBe(0);

    // Two chat requests with the new key.
    const requestIds: string[] = [];
    for (let index = 0; index < 2; index++) {
      const answer = await chat(apiKey);
      expect(answer.status).toBe(200);
      requestIds.push(answer.headers.get('x-gateway-request-id')!);
      await answer.json();
    }

    // Account: the chart's bars and the activity table show both; the request list shows each.
    await page.getByRole('link', { name: 'Account' }).click();
    const activity = page.getByRole('table', { name: 'Activity' });
    await eventually(async () => {
      await page.getByRole('button', { name: 'Refresh' }).click();
      const cells = await activity.getByRole('row').filter({ hasText: 'acme/chat-small' }).getByRole('cell').allTextContents();
      expect(cells[2]).toBe('2');
    }, 15_000, 200);
    await expect.poll(barPixels).toBeGreaterThan(50);
    // Narrowed to one key: the new key's two requests; the dev key spent nothing.
    await page.getByLabel('Key', { exact: true }).selectOption({ label: RENAMED });
    await expect.poll(async () => (await activity.getByRole('row').filter({ hasText: 'acme/chat-small' }).getByRole('cell').allTextContents())[2]).toBe('2');
    await page.getByLabel('Key', { exact: true }).selectOption({ label: 'dev' });
    await expect.poll(() => activity.getByRole('row').filter({ hasText: 'acme/chat-small' }).count()).toBe(0);
    await page.getByText('No spend in these days.').waitFor();
    await page.getByLabel('Key', { exact: true }).selectOption({ label: 'all keys' });
    await expect.poll(barPixels).toBeGreaterThan(50);
    expect(await page.getByTestId('balance').textContent()).not.toBe(startBalance);
    await capture('account');

    // Requests: the paged list shows both with the ledger's model, provider, tokens and cost.
    await page.getByRole('link', { name: 'Requests' }).click();
    await page.getByRole('heading', { name: 'Requests', level: 1 }).waitFor();
    expect(new URL(page.url()).pathname).toBe('/console/requests');
    const recent = page.getByRole('table', { name: 'Recent requests' });
    const chatRows = recent.getByRole('row').filter({ hasText: 'acme/chat-small' });
    await eventually(async () => {
      await page.getByRole('button', { name: 'Refresh' }).click();
      expect(await chatRows.count()).toBe(2);
    }, 15_000, 200);
    for (const id of requestIds) {
      const answer = await fetch(`${url}/v1/generation?id=${encodeURIComponent(id)}`, { headers: { authorization: `Bearer ${provisioningKey}` } });
      expect(answer.status).toBe(200);
      const record = ((await answer.json()) as { data: { model: string; provider_name: string; tokens_prompt: number; tokens_completion: number; total_cost: string } }).data;
      expect(parseCredits(record.total_cost)).toBeGreaterThan(0n);
      const cells = await recent.getByRole('row').filter({ hasText: id }).getByRole('cell').allTextContents();
      expect(cells.slice(0, 6)).toEqual([id, expect.stringMatching(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/), record.model, record.provider_name,
        `${record.tokens_prompt} / ${record.tokens_completion}`, record.total_cost]);
    }
    // One request per page: Older and Newer walk the keyset pages; the focus stays on a live button.
    await page.getByLabel('Per page').fill('1');
    await page.getByLabel('Per page').press('Tab');
    await expect.poll(() => chatRows.count()).toBe(1);
    const firstId = (await chatRows.getByRole('cell').allTextContents())[0]!;
    expect(await page.getByRole('button', { name: 'Newer' }).isDisabled()).toBe(true);
    await page.getByRole('button', { name: 'Older' }).click();
    await page.getByText('Page 2', { exact: true }).waitFor();
    await expect.poll(async () => (await chatRows.getByRole('cell').allTextContents())[0]).not.toBe(firstId);
    expect(await chatRows.count()).toBe(1);
    const secondId = (await chatRows.getByRole('cell').allTextContents())[0]!;
    expect([firstId, secondId].sort()).toEqual([...requestIds].sort());
    await page.getByRole('button', { name: 'Newer' }).focus();
    await page.keyboard.press('Enter');
    await page.getByText('Page 1', { exact: true }).waitFor();
    await expect.poll(async () => (await chatRows.getByRole('cell').allTextContents())[0]).toBe(firstId);
    await expect.poll(() => page.evaluate<string>('document.activeElement.textContent')).toBe('Older');
    await page.getByLabel('Per page').fill('20');
    await page.getByLabel('Per page').press('Tab');
    await expect.poll(() => chatRows.count()).toBe(2);
    // Narrowed to one key: the dev key made none of them.
    await page.getByLabel('Key', { exact: true }).selectOption({ label: 'dev' });
    await page.getByText('No requests yet.').waitFor();
    await page.getByLabel('Key', { exact: true }).selectOption({ label: RENAMED });
    await expect.poll(() => chatRows.count()).toBe(2);
    await page.getByLabel('Key', { exact: true }).selectOption({ label: 'all keys' });
    // And each looked up by its id.
    for (const id of requestIds) {
      await eventually(async () => {
        await page.getByLabel('Request id').fill(id);
        await page.getByRole('button', { name: 'Look up' }).click();
        await page.getByRole('table', { name: 'Looked-up requests' }).getByRole('row').filter({ hasText: id }).waitFor({ timeout: 1_000 });
      }, 15_000, 200);
    }
    const listed = await page.getByRole('table', { name: 'Looked-up requests' }).getByRole('row').filter({ hasText: 'acme/chat-small' }).count();
    expect(listed).toBe(2);
    await capture('requests');

    // Models: prices per 1M tokens, search narrows the list, startups with their icons.
    await page.getByRole('link', { name: 'Models' }).click();
    const models = page.getByRole('table', { name: 'Models' });
    await expect.poll(() => models.getByRole('row').count()).toBeGreaterThan(2);
    expect(await models.getByRole('columnheader').allTextContents()).toContain('Input per 1M tokens');
    await page.getByLabel('Search models').fill('chat-small');
    await expect.poll(() => models.getByRole('row').count()).toBe(2);
    const icons = page.getByRole('img', { name: /logo$/ });
    await expect.poll(() => icons.count()).toBeGreaterThan(0);
    // The icon loads after the list renders: polled (on a loaded machine it came a moment late).
    await expect.poll(() => icons.first().evaluate((image: { complete: boolean; naturalWidth: number }) => image.complete && image.naturalWidth > 0)).toBe(true);
    await page.getByLabel('Search models').fill('');
    await capture('models');

    // Operator: its own sign-in with the admin token npm start keeps in its data dir; a wrong one refused in words.
    await page.getByRole('link', { name: 'Operator' }).click();
    await page.getByRole('heading', { name: 'Operator sign in' }).waitFor();
    expect(new URL(page.url()).pathname).toBe('/console/operator');
    await capture('operator-sign-in');
    await page.getByLabel('Admin token').fill('not-the-admin-token-0123456789abcdef');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/admin token/i);
    const adminTokenText = readFileSync(join(dataDir, 'admin-token'), 'utf8').trim();
    await page.getByLabel('Admin token').fill(adminTokenText);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Operator', level: 1, exact: true }).waitFor();
    expect(await page.context().cookies()).toEqual([]);
    expect(await page.evaluate<number[]>('[localStorage.length, sessionStorage.length]')).toEqual([0, 0]);

    // Providers: the simulated provider has served the two requests; latency per model lists the chat model.
    const providers = page.getByRole('table', { name: 'Providers' });
    const latency = page.getByRole('table', { name: 'Latency per model' });
    await eventually(async () => {
      await page.getByRole('button', { name: 'Refresh' }).click();
      const samples = await Promise.all((await providers.getByRole('row').filter({ hasText: /simulated/i }).all())
        .map(async (row) => Number((await row.getByRole('cell').allTextContents())[4])));
      expect(samples.some((count) => count > 0)).toBe(true);
      const cells = await latency.getByRole('row').filter({ hasText: 'chat-small' }).first().getByRole('cell').allTextContents();
      expect(Number(cells[2])).toBeGreaterThanOrEqual(2);
    }, 15_000, 200);

    // Accounts: the dev account's balance as the API has it; a top-up of 5 raises it by exactly 5.
    const accounts = page.getByRole('table', { name: 'Accounts' });
    const devRow = accounts.getByRole('row').filter({ has: page.getByRole('button', { name: 'Top up dev', exact: true }) });
    const before = await apiBalance();
    // Every top-up's idempotency key as the page sent it; the second top-up's first answer is lost on the way back.
    const topUpKeys: { amount: string; key: string }[] = [];
    let loseNextAnswer = false;
    await page.route('**/v1/admin/accounts/*/credits', async (route) => {
      const body = route.request().postDataJSON() as { amount: string; idempotency_key: string };
      topUpKeys.push({ amount: body.amount, key: body.idempotency_key });
      if (!loseNextAnswer) return route.continue();
      loseNextAnswer = false;
      await route.fetch(); // the gateway credits it; the page never hears so
      return route.abort('connectionreset');
    });
    await expect.poll(async () => (await devRow.getByRole('cell').allTextContents())[2]).toBeDefined();
    expect(parseCredits((await devRow.getByRole('cell').allTextContents())[2]!)).toBe(parseCredits(before));
    await page.getByRole('button', { name: 'Top up dev', exact: true }).click();
    await expect.poll(() => page.evaluate<string>('document.activeElement.id')).toBe('top-up-amount');
    await page.getByLabel('Amount (credits)').fill('-1');
    await page.getByRole('button', { name: 'Review top-up' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/positive amount of credits/);
    await page.getByLabel('Amount (credits)').fill('5');
    await page.getByRole('button', { name: 'Review top-up' }).click();
    await page.getByRole('alertdialog').waitFor();
    expect(await page.getByRole('alertdialog').textContent()).toContain('Add 5 credits to dev?');
    await expect.poll(() => page.evaluate<string>('document.activeElement.textContent')).toBe('Cancel');
    await page.getByRole('button', { name: 'Confirm top-up' }).click();
    await expect.poll(() => page.getByTestId('top-up-result').textContent()).toMatch(/^Added 5 credits to dev\. The balance is now \S+ credits\.$/);
    const after = await apiBalance();
    expect(parseCredits(after) - parseCredits(before)).toBe(5n * 10n ** 12n);
    const shown = /now (\S+) credits/.exec((await page.getByTestId('top-up-result').textContent())!)![1]!;
    expect(parseCredits(shown)).toBe(parseCredits(after));
    await expect.poll(async () => parseCredits((await devRow.getByRole('cell').allTextContents())[2]!)).toBe(parseCredits(after));
    // A lost answer: "Try again" resends the same submission with the same idempotency key, credited once.
    loseNextAnswer = true;
    await page.getByLabel('Amount (credits)').fill('2.5');
    await page.getByRole('button', { name: 'Review top-up' }).click();
    await page.getByRole('button', { name: 'Confirm top-up' }).click();
    await expect.poll(() => page.getByTestId('top-up-result').textContent()).toMatch(/^The top-up of 2\.5 credits to dev failed: The gateway could not be reached\.$/);
    expect(parseCredits(await apiBalance()) - parseCredits(after)).toBe(2_500_000_000_000n);
    await page.getByRole('button', { name: 'Try again' }).click();
    await expect.poll(() => page.getByTestId('top-up-result').textContent()).toMatch(/^Added 2\.5 credits to dev\./);
    await page.unroute('**/v1/admin/accounts/*/credits');
    const afterRetry = await apiBalance();
    expect(parseCredits(afterRetry) - parseCredits(after)).toBe(2_500_000_000_000n);
    expect(topUpKeys.map((entry) => entry.amount)).toEqual(['5', '2.5', '2.5']);
    expect(topUpKeys[2]!.key).toBe(topUpKeys[1]!.key);
    expect(topUpKeys[1]!.key).not.toBe(topUpKeys[0]!.key);
    for (const { key } of topUpKeys) expect(key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    await expect.poll(async () => parseCredits((await devRow.getByRole('cell').allTextContents())[2]!)).toBe(parseCredits(afterRetry));
    await capture('operator');

    // Signing out of the Operator view forgets the token; "Remember in this tab" keeps it in sessionStorage only, under its own name.
    await page.getByRole('button', { name: 'Sign out of Operator' }).click();
    await page.getByRole('heading', { name: 'Operator sign in' }).waitFor();
    await page.getByLabel('Admin token').fill(adminTokenText);
    await page.getByLabel('Remember in this tab').check();
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Operator', level: 1, exact: true }).waitFor();
    expect(await page.evaluate<unknown>('[localStorage.length, Object.keys(sessionStorage)]')).toEqual([0, ['gateway-console-admin-token']]);
    await page.getByRole('button', { name: 'Sign out of Operator' }).click();
    await page.getByRole('heading', { name: 'Operator sign in' }).waitFor();
    expect(await page.evaluate<number[]>('[localStorage.length, sessionStorage.length]')).toEqual([0, 0]);
    expect(await page.context().cookies()).toEqual([]);

    // Disable the key: the table says so and the key is refused.
    await page.getByRole('link', { name: 'Keys' }).click();
    await page.getByRole('button', { name: `Disable ${RENAMED}` }).click();
    await page.getByRole('button', { name: `Enable ${RENAMED}` }).waitFor();
    await eventually(async () => {
      expect([401, 403]).toContain((await chat(apiKey)).status);
    }, 10_000, 200);

    // A reload forgets the key (it was kept in memory only).
    await page.reload();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    expect(cspViolations).toEqual([]);
    expect(pageErrors).toEqual([]);
  }, 300_000);
  it('sets, changes and deletes budgets and shows a threshold a request crossed, reads the audit log (the operator\'s with its links checked), lists files with their content, a finished batch with its output and cost, and cancels a running one', async () => {
    const { apiKey: devApiKey } = await npmStartBanner(gateway);
    const account = { authorization: `Bearer ${provisioningKey}`, 'content-type': 'application/json' };
    const created = await fetch(`${url}/v1/account/keys`, { method: 'POST', headers: account, body: JSON.stringify({ name: 'budget-key', credit_limit: null }) });
    expect(created.status).toBe(201);
    const budgetKey = (await created.json()) as { id: string; key: string };
    /** A chat answer's charge, once the ledger has settled it (its generation record exists). */
    const settledCost = async (answer: Response): Promise<bigint> => {
      expect(answer.status).toBe(200);
      const id = answer.headers.get('x-gateway-request-id')!;
      await answer.json();
      let cost = 0n;
      await eventually(async () => {
        const record = await fetch(`${url}/v1/generation?id=${encodeURIComponent(id)}`, { headers: { authorization: `Bearer ${provisioningKey}` } });
        expect(record.status).toBe(200);
        cost = parseCredits(((await record.json()) as { data: { total_cost: string } }).data.total_cost);
      }, 15_000, 200);
      return cost;
    };
    // The simulated provider answers the same prompt with the same words: every such request costs the same.
    const cost = await settledCost(await chat(budgetKey.key));
    expect(cost).toBeGreaterThan(0n);
    const today = new Date().toISOString().slice(0, 10);

    // Budgets: sign in on the view's own address; a limit of three requests' cost with thresholds at 50 and 90 %.
    await page.goto(`${url}/console/budgets`);
    await page.getByLabel('Provisioning key').fill(provisioningKey);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Budgets', level: 1 }).waitFor();
    await page.getByText('No budgets yet.').waitFor();
    await page.getByText('No threshold has fired.').waitFor();
    await page.getByLabel('Scope').selectOption({ label: 'Key budget-key' });
    await page.getByLabel('Period').selectOption('daily');
    await page.getByLabel('Limit (credits)').fill('0');
    await page.getByRole('button', { name: 'Set budget' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/^The limit is an amount of credits above 0/);
    await page.getByLabel('Limit (credits)').fill(formatCredits(3n * cost));
    // No hard stop here: a request's hold (its worst case) is far above one request's cost, so it would refuse the second.
    await page.getByLabel('Thresholds (%)').fill('90, 50');
    await page.getByRole('button', { name: 'Set budget' }).click();
    await expect.poll(() => page.getByRole('status').textContent()).toBe('Saved the daily budget of Key budget-key.');
    const budgets = page.getByRole('table', { name: 'Budgets' });
    const keyBudget = budgets.getByRole('row').filter({ hasText: 'Key budget-key' });
    const keyBudgetCells = () => keyBudget.getByRole('cell').allTextContents();
    await expect.poll(async () => (await keyBudgetCells()).length).toBe(9);
    let cells = await keyBudgetCells();
    expect([cells[0], cells[1], cells[4], cells[5], cells[6], cells[7]]).toEqual(['Key budget-key', 'daily', '33 %', '50 %90 %', 'no', today]);
    expect(parseCredits(cells[2]!)).toBe(3n * cost);
    expect(parseCredits(cells[3]!)).toBe(cost);
    // A second request crosses 50 % (two thirds of the limit): that threshold is marked fired, 90 % is not.
    expect(await settledCost(await chat(budgetKey.key))).toBe(cost);
    await eventually(async () => {
      await page.getByRole('button', { name: 'Refresh' }).click();
      cells = await keyBudgetCells();
      expect(cells[5]).toBe('50 % ✓ fired90 %');
    }, 15_000, 200);
    expect(cells[4]).toBe('66 %');
    expect(parseCredits(cells[3]!)).toBe(2n * cost);
    const alert = page.getByRole('table', { name: 'Budget alerts' }).getByRole('row').filter({ hasText: 'Key budget-key' });
    expect(await alert.count()).toBe(1);
    const alertCells = await alert.getByRole('cell').allTextContents();
    expect(alertCells.slice(1, 4)).toEqual(['Key budget-key', `daily from ${today}`, '50 %']);
    expect(parseCredits(alertCells[4]!)).toBe(2n * cost);
    // The account's own budget, then the key's changed to four requests' cost (50 % stays fired this period).
    await page.getByLabel('Scope').selectOption({ label: 'The whole account' });
    await page.getByLabel('Limit (credits)').fill('100');
    await page.getByLabel('Hard stop at the limit').check();
    await page.getByRole('button', { name: 'Set budget' }).click();
    await expect.poll(() => page.getByRole('status').textContent()).toBe('Saved the monthly budget of Account.');
    const accountBudget = budgets.getByRole('row').filter({ hasText: /^Account/ });
    await expect.poll(async () => (await accountBudget.getByRole('cell').allTextContents()).slice(0, 3)).toEqual(['Account', 'monthly', '100']);
    expect((await accountBudget.getByRole('cell').allTextContents()).slice(5, 7)).toEqual(['50 %80 %100 %', 'yes']);
    await page.getByRole('button', { name: 'Change the budget of Key budget-key' }).click();
    await page.getByRole('heading', { name: 'Change budget' }).waitFor();
    expect(await page.getByLabel('Scope').isDisabled()).toBe(true);
    expect(parseCredits(await page.getByLabel('Limit (credits)').inputValue())).toBe(3n * cost);
    await page.getByLabel('Limit (credits)').fill(formatCredits(4n * cost));
    await page.getByRole('button', { name: 'Save budget' }).click();
    await expect.poll(async () => parseCredits((await keyBudgetCells())[2] ?? '0')).toBe(4n * cost);
    expect((await keyBudgetCells()).slice(4, 6)).toEqual(['50 %', '50 % ✓ fired90 %']);
    // Delete the account's budget after the confirmation.
    await page.getByRole('button', { name: 'Delete the budget of Account' }).click();
    await page.getByRole('alertdialog').waitFor();
    await expect.poll(() => page.evaluate<string>('document.activeElement.textContent')).toBe('Cancel');
    await page.getByRole('button', { name: 'Delete budget' }).click();
    await expect.poll(() => accountBudget.count()).toBe(0);
    expect(await keyBudget.count()).toBe(1);
    // The low-balance threshold: a refused value in the route's words, then set and cleared.
    await page.getByLabel('Low-balance threshold (credits)').fill('-1');
    await page.getByRole('button', { name: 'Save threshold' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/threshold/);
    await page.getByLabel('Low-balance threshold (credits)').fill('0.25');
    await page.getByRole('button', { name: 'Save threshold' }).click();
    await expect.poll(() => page.getByRole('status').textContent()).toBe('Saved the low-balance threshold of 0.25 credits.');
    await expect.poll(() => page.getByTestId('low-balance').textContent()).toMatch(/^Threshold 0\.25 credits; balance \d/);
    await page.getByRole('button', { name: 'Clear threshold' }).click();
    await expect.poll(() => page.getByTestId('low-balance').textContent()).toBe('No low-balance threshold.');
    await capture('budgets');

    // Audit log: newest first, the budget changes with who made them; before and after open on request.
    await page.getByRole('link', { name: 'Audit log' }).click();
    await page.getByRole('heading', { name: 'Audit log', level: 1 }).waitFor();
    expect(new URL(page.url()).pathname).toBe('/console/audit');
    const audit = page.getByRole('table', { name: 'Audit log' });
    await expect.poll(async () => (await audit.getByRole('row').nth(1).getByRole('cell').allTextContents())[2]).toBe('low_balance.clear');
    const actions = await audit.getByRole('row').evaluateAll((rows) => rows.slice(1).map((row) => (row as unknown as { cells: { textContent: string }[] }).cells[2]!.textContent));
    expect(actions.slice(0, 6)).toEqual(['low_balance.clear', 'low_balance.set', 'budget.delete', 'budget.update', 'budget.create', 'budget.create']);
    expect(actions).toContain('api_key.create');
    const update = audit.getByRole('row').filter({ hasText: 'budget.update' });
    const updateCells = await update.getByRole('cell').allTextContents();
    expect(updateCells[0]).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
    expect(updateCells[1]).toMatch(/^provisioning_key/);
    expect(updateCells[3]).toBe(`key_budget${budgetKey.id}`);
    expect(await update.locator('pre').first().isVisible()).toBe(false);
    await update.getByText('After', { exact: true }).click();
    await update.getByText('Before', { exact: true }).click();
    const [before, after] = await update.locator('pre').allTextContents();
    expect(JSON.parse(before!)).toEqual({ period: 'daily', limit: formatCredits(3n * cost), thresholds: [50, 90], hard_stop: false });
    expect(JSON.parse(after!)).toEqual({ period: 'daily', limit: formatCredits(4n * cost), thresholds: [50, 90], hard_stop: false });
    expect(await page.getByRole('button', { name: 'Older' }).isDisabled()).toBe(true);
    await capture('audit');

    // Files: an upload and a small batch through the API, with the dev account's own API key.
    const form = new FormData();
    form.set('purpose', 'user_data');
    form.set('file', new Blob(['hello from the console test\n']), 'notes.txt');
    const uploaded = await fetch(`${url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${devApiKey}` }, body: form });
    expect(uploaded.status).toBe(200);
    const jobsCall = async <T,>(method: string, path: string, body?: unknown): Promise<T> => {
      const answer = await fetch(`${url}${path}`, {
        method, headers: { authorization: `Bearer ${devApiKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      expect(answer.status, await answer.clone().text()).toBe(200);
      return (await answer.json()) as T;
    };
    const batchFile = async (lines: number, name: string) => {
      const text = Array.from({ length: lines }, (_, index) => JSON.stringify({
        custom_id: `line-${index + 1}`, method: 'POST', url: '/v1/chat/completions',
        body: { model: 'chat-small', messages: [{ role: 'user', content: `Batch line ${index + 1}` }], max_completion_tokens: 16 },
      })).join('\n');
      const upload = new FormData();
      upload.set('purpose', 'batch');
      upload.set('file', new Blob([`${text}\n`]), name);
      const answer = await fetch(`${url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${devApiKey}` }, body: upload });
      expect(answer.status).toBe(200);
      return ((await answer.json()) as { id: string }).id;
    };
    interface BatchAnswer { id: string; status: string; output_file_id: string | null; request_counts: { total: number; completed: number; failed: number }; usage: { cost: string } }
    const small = await jobsCall<BatchAnswer>('POST', '/v1/batches', { input_file_id: await batchFile(2, 'small.jsonl'), endpoint: '/v1/chat/completions', completion_window: '24h' });
    let finished = small;
    await eventually(async () => {
      finished = await jobsCall<BatchAnswer>('GET', `/v1/batches/${small.id}`);
      expect(finished.status).toBe('completed');
    }, 60_000, 250);
    expect(finished.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
    expect(parseCredits(finished.usage.cost)).toBeGreaterThan(0n);

    await page.getByRole('link', { name: 'Files' }).click();
    await page.getByRole('heading', { name: 'Files and batches sign in' }).waitFor();
    await capture('files-sign-in');
    await page.getByLabel('API key').fill(provisioningKey);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/api key/i);
    await page.getByLabel('API key').fill(devApiKey);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Files', level: 1 }).waitFor();
    const files = page.getByRole('table', { name: 'Files' });
    const fileRow = (name: string) => files.getByRole('row').filter({ hasText: name });
    await expect.poll(() => fileRow('notes.txt').count()).toBe(1);
    const noteCells = await fileRow('notes.txt').getByRole('cell').allTextContents();
    expect(noteCells.slice(1, 4)).toEqual(['notes.txt', 'user_data', '28 B']);
    expect(noteCells[4]).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
    expect(noteCells[5]).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/); // 30 days by default
    expect((await fileRow('small.jsonl').getByRole('cell').allTextContents())[2]).toBe('batch');
    expect((await fileRow(finished.output_file_id!).getByRole('cell').allTextContents())[2]).toBe('batch_output');
    await page.getByRole('button', { name: 'Show notes.txt' }).click();
    await expect.poll(() => page.getByTestId('file-content').textContent()).toBe('hello from the console test\n');
    await capture('files');

    // Batches: the finished one with its counts, cost and output; a large one cancelled while it runs.
    await page.getByRole('link', { name: 'Batches' }).click();
    await page.getByRole('heading', { name: 'Batches', level: 1 }).waitFor();
    const batches = page.getByRole('table', { name: 'Batches' });
    const smallRow = batches.getByRole('row').filter({ hasText: small.id });
    await expect.poll(() => smallRow.count()).toBe(1);
    const smallCells = await smallRow.getByRole('cell').allTextContents();
    expect(smallCells.slice(1, 5)).toEqual(['/v1/chat/completions', 'completed', '2 / 0 / 2', finished.usage.cost]);
    expect(smallCells[6]).toMatch(/UTC$/);
    expect(smallCells[8]).toBe('—');
    await page.getByRole('button', { name: `Output of ${small.id}` }).click();
    await expect.poll(async () => ((await page.getByTestId('file-content').textContent()) ?? '').split('\n').filter(Boolean).length).toBe(2);
    const output = (await page.getByTestId('file-content').textContent())!.trim().split('\n').map((line) => JSON.parse(line) as { custom_id: string; response: { status_code: number; body: { usage: { cost: string } } } });
    expect(output.map((line) => line.custom_id)).toEqual(['line-1', 'line-2']);
    expect(output.every((line) => line.response.status_code === 200)).toBe(true);
    expect(output.reduce((total, line) => total + parseCredits(line.response.body.usage.cost), 0n)).toBe(parseCredits(finished.usage.cost));
    await page.getByRole('button', { name: 'Close' }).click();
    // Large enough to be still running when its Cancel is pressed (lines run at most 4 at a time per account).
    const large = await jobsCall<BatchAnswer>('POST', '/v1/batches', { input_file_id: await batchFile(3000, 'large.jsonl'), endpoint: '/v1/chat/completions', completion_window: '24h' });
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.getByRole('button', { name: `Cancel ${large.id}` }).click();
    const largeRow = batches.getByRole('row').filter({ hasText: large.id });
    await expect.poll(async () => (await largeRow.getByRole('cell').allTextContents())[2], { timeout: 5_000 }).toMatch(/^cancell(ing|ed)$/);
    expect(await page.getByRole('button', { name: `Cancel ${large.id}` }).count()).toBe(0);
    let cancelled = large;
    await eventually(async () => {
      cancelled = await jobsCall<BatchAnswer>('GET', `/v1/batches/${large.id}`);
      expect(cancelled.status).toBe('cancelled');
    }, 60_000, 250);
    expect(cancelled.request_counts.completed).toBeLessThan(3000);
    await page.getByRole('button', { name: 'Refresh' }).click();
    await expect.poll(async () => (await largeRow.getByRole('cell').allTextContents())[2]).toBe('cancelled');
    await capture('batches');

    // The operator's audit log: the ledger's chain with the budget changes, its links checked on the page.
    await page.getByRole('link', { name: 'Operator' }).click();
    await page.getByLabel('Admin token').fill(readFileSync(join(dataDir, 'admin-token'), 'utf8').trim());
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Operator', level: 1, exact: true }).waitFor();
    const status = page.getByTestId('audit-chain-status');
    await expect.poll(() => status.textContent()).toMatch(/^Head: seq \d+, .*Links on this page hold \(\d+ entries: seqs follow, each names the hash before it, the newest is the head\)\./);
    await page.getByLabel('Chain').selectOption('ledger');
    const adminAudit = page.getByRole('table', { name: 'Operator audit log' });
    await expect.poll(() => adminAudit.getByRole('row').filter({ hasText: 'budget.delete' }).count()).toBe(1);
    expect(await adminAudit.getByRole('row').filter({ hasText: 'credits.top_up' }).count()).toBeGreaterThanOrEqual(1);
    const ledgerStatus = (await status.textContent())!;
    const headSeq = Number(/^Head: seq (\d+)/.exec(ledgerStatus)![1]);
    expect(ledgerStatus).toContain(`Links on this page hold (${headSeq} entries`);
    const { accountId } = await npmStartBanner(gateway);
    await page.getByLabel('Account id').fill(accountId);
    await page.getByRole('button', { name: 'Show' }).click();
    await expect.poll(() => status.textContent()).toContain('Links are not checked on a page filtered by account.');
    await capture('operator-audit');
    expect(cspViolations).toEqual([]);
    expect(pageErrors).toEqual([]);
  }, 300_000);
  it('creates webhook endpoints (the secret shown once), shows a top-up delivered to one and dead-lettered at the other, redelivers it, disables and deletes; invites, changes and removes members with the auth service\'s refusals in its words', async () => {
    const { accountId } = await npmStartBanner(gateway);
    // Two receivers on loopback: one answers 204; the other 500 until told otherwise.
    type Received = { headers: IncomingHttpHeaders; body: string };
    const received = { ok: [] as Received[], failing: [] as Received[] };
    let failingStatus = 500;
    const receiver = (into: Received[], status: () => number): Promise<{ server: Server; url: string }> => new Promise((resolve) => {
      const server = createServer((request, response) => {
        const chunks: Buffer[] = [];
        request.on('data', (chunk: Buffer) => chunks.push(chunk));
        request.on('end', () => {
          into.push({ headers: request.headers, body: Buffer.concat(chunks).toString('utf8') });
          response.writeHead(status()).end(status() >= 400 ? 'receiver says no' : undefined);
        });
      });
      server.listen(0, '127.0.0.1', () => resolve({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }));
    });
    const ok = await receiver(received.ok, () => 204);
    const failing = await receiver(received.failing, () => failingStatus);
    const okUrl = `${ok.url}/hooks/ok`;
    const failingUrl = `${failing.url}/hooks/failing`;
    const account = { authorization: `Bearer ${provisioningKey}`, 'content-type': 'application/json' };
    try {
      await page.goto(`${url}/console/webhooks`);
      await page.getByLabel('Provisioning key').fill(provisioningKey);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: 'Webhooks', level: 1 }).waitFor();
      await page.getByText('No endpoints yet.').waitFor();
      // No event type ticked: the page says so and sends nothing; a receiver with credentials: the route's refusal.
      /** Unticks event types in the new endpoint's form (every type is ticked when the form opens). */
      const untick = async (types: readonly string[]) => {
        for (const type of types) await page.getByLabel(type).uncheck();
      };
      await page.getByLabel('URL').fill(okUrl);
      await page.getByLabel('budget.threshold_crossed').uncheck();
      await page.getByLabel('credits.topped_up').uncheck();
      await untick(OTHER_EVENT_TYPES);
      await page.getByRole('button', { name: 'Create endpoint' }).click();
      await expect.poll(() => page.getByRole('alert').textContent()).toBe('Choose at least one event type.');
      await page.getByLabel('credits.topped_up').check();
      await page.getByLabel('URL').fill(`http://someone:secret@127.0.0.1:${new URL(ok.url).port}/x`);
      await page.getByRole('button', { name: 'Create endpoint' }).click();
      await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/credentials/);
      // Both event types to the good receiver: the secret is shown once, with the copy button focused.
      await page.getByLabel('URL').fill(okUrl);
      await page.getByLabel('budget.threshold_crossed').check();
      await page.getByRole('button', { name: 'Create endpoint' }).click();
      const okSecret = (await page.getByTestId('webhook-secret').textContent())!;
      expect(okSecret).toMatch(/^whsec_[A-Za-z0-9+/=]{20,}$/);
      await expect.poll(() => page.evaluate<string>('document.activeElement.textContent')).toBe('Copy secret');
      await page.getByRole('button', { name: 'Done' }).click();
      expect(await page.getByTestId('webhook-secret').count()).toBe(0);
      const endpoints = page.getByRole('table', { name: 'Webhook endpoints' });
      const okRow = endpoints.getByRole('row').filter({ hasText: okUrl });
      await expect.poll(async () => (await okRow.getByRole('cell').allTextContents()).slice(0, 3)).toEqual([okUrl, 'budget.threshold_crossedcredits.topped_up', 'yes']);
      expect((await okRow.getByRole('cell').allTextContents())[3]).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
      // The list over the API has both endpoints' settings and never the secret.
      await page.getByLabel('URL').fill(failingUrl);
      await page.getByLabel('budget.threshold_crossed').uncheck();
      await untick(OTHER_EVENT_TYPES);
      await page.getByRole('button', { name: 'Create endpoint' }).click();
      const failingSecret = (await page.getByTestId('webhook-secret').textContent())!;
      expect(failingSecret).not.toBe(okSecret);
      await page.getByRole('button', { name: 'Done' }).click();
      const listed = await fetch(`${url}/v1/account/webhooks`, { headers: account });
      const listedText = await listed.text();
      expect(listedText).not.toContain('whsec_');
      const byUrl = new Map((JSON.parse(listedText) as { data: { id: string; url: string; event_types: string[] }[] }).data.map((endpoint) => [endpoint.url, endpoint]));
      expect(byUrl.get(failingUrl)?.event_types).toEqual(['credits.topped_up']);
      await capture('webhooks-endpoints');

      // A top-up of the account: one credits.topped_up event, to both endpoints.
      const adminTokenText = readFileSync(join(dataDir, 'admin-token'), 'utf8').trim();
      const topUp = await fetch(`${url}/v1/admin/accounts/${accountId}/credits`, {
        method: 'POST', headers: { authorization: `Bearer ${adminTokenText}`, 'content-type': 'application/json' },
        body: JSON.stringify({ amount: '1.25', idempotency_key: `console-webhooks-${Date.now()}` }),
      });
      expect(topUp.status).toBe(200);
      await eventually(async () => { expect(received.ok).toHaveLength(1); expect(received.failing).toHaveLength(1); }, 20_000, 100);
      const event = new Webhook(okSecret).verify(received.ok[0]!.body, {
        'webhook-id': String(received.ok[0]!.headers['webhook-id']), 'webhook-timestamp': String(received.ok[0]!.headers['webhook-timestamp']),
        'webhook-signature': String(received.ok[0]!.headers['webhook-signature']),
      }) as { type: string; account_id: string; data: { credits: string } };
      expect(event).toMatchObject({ type: 'credits.topped_up', account_id: accountId, data: { credits: '1.25' } });

      // The good endpoint's delivery: delivered, one attempt, 204.
      await page.getByRole('button', { name: `Deliveries of ${okUrl}` }).click();
      await expect.poll(() => page.evaluate<string>('document.activeElement.id')).toBe('deliveries-title');
      const deliveries = page.getByRole('table', { name: 'Webhook deliveries' });
      const deliveryCells = async () => deliveries.getByRole('row').nth(1).getByRole('cell').allTextContents();
      await eventually(async () => {
        await page.getByRole('button', { name: 'Refresh' }).click();
        expect((await deliveryCells())[1]).toBe('delivered');
      }, 15_000, 200);
      let cells = await deliveryCells();
      expect(cells[0]).toBe(`credits.topped_up${String(received.ok[0]!.headers['webhook-id'])}`);
      expect(cells.slice(3, 6)).toEqual(['1', '204', '—']);
      expect(cells[9]).toMatch(/UTC$/);
      expect(cells[2]).toBe('—');
      expect(await deliveries.getByRole('row').count()).toBe(2);

      // The failing one's: dead-lettered after its one attempt, the receiver's 500 and words shown, with Redeliver.
      await page.getByRole('button', { name: `Deliveries of ${failingUrl}` }).click();
      await page.getByRole('heading', { name: `Deliveries to ${failingUrl}` }).waitFor();
      await eventually(async () => {
        await page.getByRole('button', { name: 'Refresh' }).click();
        expect((await deliveryCells())[1]).toBe('✗ dead-lettered');
      }, 15_000, 200);
      cells = await deliveryCells();
      expect(cells.slice(3, 5)).toEqual(['1', '500']);
      expect(cells[5]).toBe('receiver answered 500');
      expect(await deliveries.getByRole('row').nth(1).getAttribute('class')).toBe('dead');
      const redeliver = deliveries.getByRole('button', { name: /^Redeliver / });
      expect(await redeliver.count()).toBe(1);
      await capture('webhooks-dead-letter');
      // The receiver mends; Redeliver sends the same event (same webhook-id) again, and it is delivered.
      failingStatus = 200;
      await redeliver.click();
      await expect.poll(() => page.getByRole('status').textContent()).toMatch(/is pending again/);
      await eventually(async () => {
        await page.getByRole('button', { name: 'Refresh' }).click();
        expect((await deliveryCells())[1]).toBe('delivered');
      }, 15_000, 200);
      expect((await deliveryCells())[4]).toBe('200');
      expect(received.failing).toHaveLength(2);
      expect(received.failing[1]!.headers['webhook-id']).toBe(received.failing[0]!.headers['webhook-id']);
      expect(await deliveries.getByRole('button', { name: /^Redeliver / }).count()).toBe(0);
      // Redelivering a delivered one over the API: the route refuses it (nothing on the page offers it).
      const deliveryList = await fetch(`${url}/v1/account/webhooks/${byUrl.get(failingUrl)!.id}/deliveries`, { headers: account });
      const deliveryId = ((await deliveryList.json()) as { data: { id: string }[] }).data[0]!.id;
      const again = await fetch(`${url}/v1/account/webhooks/${byUrl.get(failingUrl)!.id}/deliveries/${deliveryId}/redeliver`, { method: 'POST', headers: account });
      expect(again.status).toBe(400);

      // Rotate the good endpoint's secret: confirmed, the new one shown once; the next delivery verifies with either secret.
      await page.getByRole('button', { name: `Rotate secret of ${okUrl}` }).click();
      await page.getByRole('alertdialog').waitFor();
      await page.getByRole('alertdialog').getByRole('button', { name: 'Rotate secret' }).click();
      const newSecret = (await page.getByTestId('webhook-secret').textContent())!;
      expect(newSecret).toMatch(/^whsec_[A-Za-z0-9+/=]{20,}$/);
      expect(newSecret).not.toBe(okSecret);
      await expect.poll(() => page.evaluate<string>('document.activeElement.textContent')).toBe('Copy secret');
      await page.getByRole('button', { name: 'Done' }).click();
      expect(await page.getByTestId('webhook-secret').count()).toBe(0);
      const secondTopUp = await fetch(`${url}/v1/admin/accounts/${accountId}/credits`, {
        method: 'POST', headers: { authorization: `Bearer ${adminTokenText}`, 'content-type': 'application/json' },
        body: JSON.stringify({ amount: '0.5', idempotency_key: `console-webhooks-rotated-${Date.now()}` }),
      });
      expect(secondTopUp.status).toBe(200);
      await eventually(async () => expect(received.ok).toHaveLength(2), 20_000, 100);
      const afterRotation = { 'webhook-id': String(received.ok[1]!.headers['webhook-id']), 'webhook-timestamp': String(received.ok[1]!.headers['webhook-timestamp']),
        'webhook-signature': String(received.ok[1]!.headers['webhook-signature']) };
      for (const secret of [newSecret, okSecret]) expect(new Webhook(secret).verify(received.ok[1]!.body, afterRotation)).toMatchObject({ data: { credits: '0.5' } });

      // Disable the good endpoint; delete the other after the confirmation.
      await page.getByRole('button', { name: `Disable ${okUrl}` }).click();
      await page.getByRole('button', { name: `Enable ${okUrl}` }).waitFor();
      expect((await okRow.getByRole('cell').allTextContents())[2]).toBe('no');
      await page.getByRole('button', { name: `Delete ${failingUrl}` }).click();
      await page.getByRole('alertdialog').waitFor();
      await expect.poll(() => page.evaluate<string>('document.activeElement.textContent')).toBe('Cancel');
      await page.getByRole('button', { name: 'Delete endpoint' }).click();
      await expect.poll(() => endpoints.getByRole('row').filter({ hasText: failingUrl }).count()).toBe(0);
      expect(await page.getByRole('heading', { name: `Deliveries to ${failingUrl}` }).count()).toBe(0);
      const remaining = (await (await fetch(`${url}/v1/account/webhooks`, { headers: account })).json()) as { data: { url: string; enabled: boolean }[] };
      expect(remaining.data.map((endpoint) => [endpoint.url, endpoint.enabled])).toEqual([[okUrl, false]]);
    } finally {
      for (const { server } of [ok, failing]) { server.closeAllConnections(); await new Promise<void>((resolve) => server.close(() => resolve())); }
    }

    // Members: invite by email, change the role, remove; the auth service's refusals in its own words.
    await page.getByRole('link', { name: 'Members' }).click();
    await page.getByRole('heading', { name: 'Members', level: 1 }).waitFor();
    expect(new URL(page.url()).pathname).toBe('/console/members');
    await page.getByText(/^No members yet/).waitFor();
    const members = page.getByRole('table', { name: 'Members' });
    const memberCells = (email: string) => members.getByRole('row').filter({ hasText: email }).getByRole('cell').allTextContents();
    await page.getByLabel('Email', { exact: true }).fill('dana@example.com');
    await page.getByRole('combobox', { name: 'Role', exact: true }).selectOption('admin');
    await page.getByRole('button', { name: 'Invite' }).click();
    await expect.poll(() => page.getByRole('status').textContent()).toBe('Invited dana@example.com as admin.');
    await expect.poll(async () => (await memberCells('dana@example.com')).slice(0, 3)).toEqual(['dana@example.com', 'admin', 'invited']);
    expect((await memberCells('dana@example.com'))[3]).toMatch(/^invited \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
    expect(await page.getByLabel('Email', { exact: true }).inputValue()).toBe('');
    // The same person twice: the route's 409 in its words, and what was typed stays.
    await page.getByLabel('Email', { exact: true }).fill('DANA@example.com');
    await page.getByRole('button', { name: 'Invite' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toBe('This person is already a member of the account.');
    expect(await page.getByLabel('Email', { exact: true }).inputValue()).toBe('DANA@example.com');
    // An owner, then the last owner refused a demotion.
    await page.getByLabel('Email', { exact: true }).fill('olga@example.com');
    await page.getByRole('combobox', { name: 'Role', exact: true }).selectOption('owner');
    await page.getByRole('button', { name: 'Invite' }).click();
    await expect.poll(async () => (await memberCells('olga@example.com')).slice(1, 3)).toEqual(['owner', 'invited']);
    await page.getByRole('button', { name: 'Change role of olga@example.com' }).click();
    await expect.poll(() => page.evaluate<string>('document.activeElement.id')).toBe('change-role');
    await page.getByRole('combobox', { name: 'New role', exact: true }).selectOption('viewer');
    await page.getByRole('button', { name: 'Save role' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toBe('This is the account\'s last owner: make another member owner first.');
    expect((await memberCells('olga@example.com'))[1]).toBe('owner');
    // Dana to viewer.
    await page.getByRole('button', { name: 'Change role of dana@example.com' }).click();
    await page.getByRole('combobox', { name: 'New role', exact: true }).selectOption('viewer');
    await page.getByRole('button', { name: 'Save role' }).click();
    await expect.poll(() => page.getByRole('status').textContent()).toBe('dana@example.com is now viewer.');
    await expect.poll(async () => (await memberCells('dana@example.com'))[1]).toBe('viewer');
    await capture('members');
    // Remove Dana after the confirmation (its safe choice focused).
    await page.getByRole('button', { name: 'Remove dana@example.com' }).click();
    await page.getByRole('alertdialog').waitFor();
    await expect.poll(() => page.evaluate<string>('document.activeElement.textContent')).toBe('Cancel');
    await page.getByRole('button', { name: 'Remove member' }).click();
    await expect.poll(() => members.getByRole('row').filter({ hasText: 'dana@example.com' }).count()).toBe(0);
    expect(await page.getByRole('status').textContent()).toBe('Removed dana@example.com.');
    const left = (await (await fetch(`${url}/v1/account/members`, { headers: account })).json()) as { data: { email: string; role: string }[] };
    expect(left.data.map((member) => [member.email, member.role])).toEqual([['olga@example.com', 'owner']]);
    expect(cspViolations).toEqual([]);
    expect(pageErrors).toEqual([]);
  }, 300_000);
});
