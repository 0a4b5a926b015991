import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '@gateway/testing';
import { signalProcess, waitForExit } from '../src/process-identity.js';

// The web console (apps/console) in Debian's Chromium (.ci/run installs it) against `npm start` as a user
// runs it: `node libs/stack/dist/main.js` with its own data dir, the simulated provider, and the dev
// provisioning key its banner prints. Screenshots of each view at 1280 and 390 px wide go to
// CONSOLE_SCREENSHOT_DIR (default .data/test-output/console/), each checked for horizontal scroll.
const repositoryRoot = fileURLToPath(new URL('../../../', import.meta.url));
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const screenshots = process.env.CONSOLE_SCREENSHOT_DIR ?? join(repositoryRoot, '.data/test-output/console');
const KEY_NAME = 'browser-key';
const RENAMED = 'browser-key-renamed';
/** The first model colour of the spend chart (apps/console/src/views/spend-chart.tsx): #2563eb. */
const BAR = [0x25, 0x63, 0xeb] as const;
/** The little of a canvas element read in the page (this project compiles without the DOM types). */
interface CanvasLike { width: number; height: number; getContext(kind: '2d'): { getImageData(x: number, y: number, w: number, h: number): { data: Uint8ClampedArray } } }

describe('web console in a real browser', () => {
  const root = mkdtempSync(join(tmpdir(), 'console-browser-'));
  chmodSync(root, 0o755); // the embedded Postgres runs as `postgres` when the tests run as root
  const dataDir = join(root, 'data');
  let gateway: ChildProcess;
  let output = '';
  let url = '';
  let provisioningKey = '';
  let browser: Browser;
  let page: Page;
  const cspViolations: string[] = [];
  const pageErrors: string[] = [];

  beforeAll(async () => {
    accessSync(join(repositoryRoot, 'libs/stack/dist/main.js'));
    accessSync(join(repositoryRoot, 'apps/console/dist/index.html'));
    accessSync(CHROMIUM);
    mkdirSync(screenshots, { recursive: true });
    gateway = spawn(process.execPath, ['libs/stack/dist/main.js'], {
      cwd: repositoryRoot,
      env: { PATH: process.env.PATH ?? '', PORT: '0', GATEWAY_DATA_DIR: dataDir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    gateway.stdout!.on('data', (chunk: Buffer) => { output += chunk.toString(); });
    gateway.stderr!.on('data', (chunk: Buffer) => { output += chunk.toString(); });
    const deadline = Date.now() + 90_000;
    while (!/API key: +\S+/.test(output)) {
      if (gateway.exitCode !== null || Date.now() > deadline) throw new Error(`gateway did not start:\n${output}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    url = /listening on (http:\/\/\S+)/.exec(output)![1]!;
    provisioningKey = /Provisioning key: +(\S+)/.exec(output)![1]!;
    expect(output).toContain(`Console:           ${url}/console/`);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('console', (message) => { if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text()); });
    page.on('pageerror', (error) => pageErrors.push(error.message));
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    if (gateway && gateway.exitCode === null) {
      gateway.kill('SIGTERM');
      await new Promise((resolve) => { gateway.once('exit', resolve); setTimeout(resolve, 15_000); });
    }
    // An embedded Postgres left behind by a killed gateway, found by its data dir.
    const leftovers = readdirSync('/proc').filter((name) => /^\d+$/.test(name)).map(Number).filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(dataDir);
      } catch {
        return false;
      }
    });
    for (const pid of leftovers) signalProcess(pid, 'SIGINT');
    for (const pid of leftovers) if (!(await waitForExit(pid, 10_000))) signalProcess(pid, 'SIGKILL');
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

  /** Both widths: a screenshot each, and at 390 px the page must not scroll sideways. */
  const capture = async (view: string) => {
    for (const width of [1280, 390]) {
      await page.setViewportSize({ width, height: 900 });
      await page.waitForTimeout(150); // the chart follows its container's width
      await page.screenshot({ path: join(screenshots, `${view}-${width}.png`), fullPage: true });
      const overflow = await page.evaluate<number>('document.documentElement.scrollWidth - document.documentElement.clientWidth');
      expect(overflow, `${view} at ${width} px scrolls sideways by ${overflow} px`).toBeLessThanOrEqual(0);
    }
    await page.setViewportSize({ width: 1280, height: 900 });
  };

  it('signs in, creates, renames, limits and deletes keys, shows two requests in the chart, table and request list, and disables a key', async () => {
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
    expect(await page.evaluate<string>('document.activeElement.value')).toBe(KEY_NAME);
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
    expect(await page.evaluate<string>('document.activeElement.textContent')).toBe('Cancel');
    await page.keyboard.press('Shift+Tab');
    expect(await page.evaluate<string>('document.activeElement.textContent')).toBe('Delete key');
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
    for (const id of requestIds) {
      await eventually(async () => {
        await page.getByLabel('Request id').fill(id);
        await page.getByRole('button', { name: 'Look up' }).click();
        await page.getByRole('table', { name: 'Requests' }).getByRole('row').filter({ hasText: id }).waitFor({ timeout: 1_000 });
      }, 15_000, 200);
    }
    const listed = await page.getByRole('table', { name: 'Requests' }).getByRole('row').filter({ hasText: 'acme/chat-small' }).count();
    expect(listed).toBe(2);
    expect(await page.getByTestId('balance').textContent()).not.toBe(startBalance);
    await capture('account');

    // Models: prices per 1M tokens, search narrows the list, startups with their icons.
    await page.getByRole('link', { name: 'Models' }).click();
    const models = page.getByRole('table', { name: 'Models' });
    await expect.poll(() => models.getByRole('row').count()).toBeGreaterThan(2);
    expect(await models.getByRole('columnheader').allTextContents()).toContain('Input per 1M tokens');
    await page.getByLabel('Search models').fill('chat-small');
    await expect.poll(() => models.getByRole('row').count()).toBe(2);
    const icons = page.getByRole('img', { name: /logo$/ });
    await expect.poll(() => icons.count()).toBeGreaterThan(0);
    expect(await icons.first().evaluate((image: { complete: boolean; naturalWidth: number }) => image.complete && image.naturalWidth > 0)).toBe(true);
    await page.getByLabel('Search models').fill('');
    await capture('models');

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
  }, 180_000);
});
