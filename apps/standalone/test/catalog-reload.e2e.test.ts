import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createTestBus, createTestDatabase, eventually, type TestBus, type TestDatabase } from '@gateway/testing';
import type { RunningEdge, RunningStack } from '../src/index.js';
import { createAccount, gatewayctl, listModels, scratchDirectory, type TestAccount } from './catalog-e2e-helpers.js';
import { startSecondEdge, startTestStack } from './configured-stack.js';

// `gatewayctl catalog load FILE` against a running stack: the new catalog reaches a SECOND edge
// instance (own process state, own NATS connection, same namespace) and the router within 5 s; a bad
// file is refused with every problem listed and changes nothing anywhere.
const RELOAD_BOUND_MS = 5_000;

function config(options: { extraModel?: boolean } = {}): string {
  return `
startups:
  - { id: alpha, display_name: Alpha Models, icon_svg: '<svg xmlns="http://www.w3.org/2000/svg"><title>alpha</title></svg>', created: 1735689600 }
  - { id: beta, display_name: Beta Works, website_url: https://beta.example, created: 1740787200 }
providers:
  - { id: simulated, kind: simulated }
limit_groups:
  - id: default
    tiers: { free: { minute: 100 }, tier-1: { minute: 600 } }
models:
  - id: alpha/chat
    owned_by: alpha
    display_name: Alpha Chat
    created: 1767225600
    aliases: [alpha-chat]
    supported_parameters: [temperature, max_completion_tokens]
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002" }
    offers: [{ provider: simulated, endpoints: [chat.completions] }]
  - id: beta/free
    owned_by: beta
    created: 1764547200
    offers: [{ provider: simulated, endpoints: [chat.completions] }]
${options.extraModel ? `  - id: beta/fresh
    owned_by: beta
    display_name: Beta Fresh
    description: Added by a reload.
    created: 1769904000
    aliases: [fresh]
    pricing: { per_input_token: "0.0000004", per_output_token: "0.0000016" }
    offers: [{ provider: simulated, upstream_model: fresh-v1, endpoints: [chat.completions, responses] }]
` : ''}`;
}

/** Five problems in one file: each must be reported with its path, and the file refused as a whole. */
const BAD_CONFIG = `
startups:
  - { id: alpha, display_name: Alpha Models }
providers:
  - { id: simulated, kind: simulated }
limit_groups:
  - id: default
    tiers: { free: { minute: 100 } }
models:
  - id: alpha/chat
    owned_by: nobody
    created: 1767225600
    aliases: [alpha/other]
    pricing: { per_input_token: "-1" }
    offers: [{ provider: simulated, endpoints: [chat.completions] }]
  - id: alpha/other
    offers: [{ provider: missing-provider, endpoints: [chat.completions] }]
  - id: alpha/broken
    created: 1767225600
    pricing: { per_inptu_token: "0.1" }
    offers: [{ provider: simulated, endpoints: [chat.completions] }]
`;

describe('catalog reload seen by a second edge instance', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let stack: RunningStack;
  let secondEdge: RunningEdge;
  let scratch: Awaited<ReturnType<typeof scratchDirectory>>;
  let account: TestAccount;

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    scratch = await scratchDirectory('catalog-reload');
    const initial = await scratch.write('gateway.yaml', config());
    stack = await startTestStack(database, testBus, { configPath: initial, keyHashSecret: 'catalog-reload-secret-catalog-reload-01' });
    // Another replica of the edge: its own catalog cache, its own NATS connection, the same namespace.
    // The periodic refresh must not be what makes the test pass.
    secondEdge = await startSecondEdge(stack, testBus, { name: 'second-edge', catalogRefreshMs: 10 * 60_000 });
    account = await createAccount(stack, 'reload', { credits: '5' });
  }, 120_000);

  afterAll(async () => {
    await secondEdge?.stop();
    await stack?.stop();
    await testBus?.destroy();
    await database?.drop();
    await scratch?.remove();
  });

  it('both edges serve the catalog loaded at start', async () => {
    for (const url of [stack.url, secondEdge.url]) {
      const listing = await listModels(url);
      expect(listing.data.map((model) => model.id)).toEqual(['alpha/chat', 'beta/free']);
    }
  });

  it('a startup without a logo gets a generated placeholder SVG at its icon_url, never a 404', async () => {
    const startups = (await (await fetch(`${secondEdge.url}/v1/startups`)).json()) as { data: { id: string; icon_url: string }[] };
    const beta = startups.data.find((startup) => startup.id === 'beta')!;
    expect(beta.icon_url).toBe('/static/startups/beta.svg');
    const icon = await fetch(`${secondEdge.url}${beta.icon_url}`);
    expect(icon.status).toBe(200);
    expect(icon.headers.get('content-type')).toBe('image/svg+xml');
    const svg = await icon.text();
    expect(svg).toMatch(/^<svg[\s>]/);
    expect(svg).toContain('>BW<'); // initials of "Beta Works"
    const alpha = await fetch(`${secondEdge.url}/static/startups/alpha.svg`);
    expect(await alpha.text()).toContain('<title>alpha</title>');
  });

  it('gatewayctl catalog load of a changed file reaches the second edge and the router within 5 s', async () => {
    const changed = await scratch.write('gateway-v2.yaml', config({ extraModel: true }));
    const started = Date.now();
    const loaded = await gatewayctl(stack, 'catalog', 'load', changed, '--json');
    expect(loaded.code, loaded.stderr).toBe(0);
    const result = JSON.parse(loaded.stdout) as { changed: boolean; model_count: number; problems: unknown[] };
    expect(result).toMatchObject({ changed: true, model_count: 3, problems: [] });

    await eventually(async () => {
      const listing = await listModels(secondEdge.url);
      expect(listing.data[0]).toMatchObject({ id: 'beta/fresh', aliases: ['fresh'], supported_endpoints: ['chat.completions', 'responses'] });
    }, RELOAD_BOUND_MS);
    expect(Date.now() - started).toBeLessThan(RELOAD_BOUND_MS);
    // The new model answers through the second edge by its alias (the router's catalog cache has it too).
    const client = new OpenAI({ baseURL: `${secondEdge.url}/v1`, apiKey: account.apiKey, maxRetries: 0 });
    await eventually(async () => {
      const completion = await client.chat.completions.create({ model: 'fresh', messages: [{ role: 'user', content: 'hello' }] });
      expect(completion.model).toBe('beta/fresh');
    }, Math.max(1, RELOAD_BOUND_MS - (Date.now() - started)));
    expect((await listModels(stack.url)).data.map((model) => model.id)).toEqual(['beta/fresh', 'alpha/chat', 'beta/free']);
  });

  it('a bad file is refused with every problem listed (path and reason); the old catalog stays in force', async () => {
    const before = await listModels(secondEdge.url);
    const bad = await scratch.write('gateway-bad.yaml', BAD_CONFIG);
    const refused = await gatewayctl(stack, 'catalog', 'load', bad, '--json');
    expect(refused.code).toBe(1);
    const result = JSON.parse(refused.stdout) as { changed: boolean; model_count: number; problems: { path: string; reason: string }[] };
    expect(result.changed).toBe(false);
    expect(result.model_count).toBe(3); // the catalog still in force
    const paths = result.problems.map((problem) => problem.path);
    expect(paths).toEqual(
      expect.arrayContaining([
        'models[0].owned_by',
        'models[0].aliases[0]',
        'models[0].pricing.per_input_token',
        'models[1].created',
        'models[1].offers[0].provider',
        'models[2].pricing.per_inptu_token',
      ]),
    );
    for (const problem of result.problems) expect(problem.reason.length, problem.path).toBeGreaterThan(0);
    expect(result.problems.find((problem) => problem.path === 'models[1].offers[0].provider')?.reason).toContain('missing-provider');
    // The human form on stderr lists every problem too.
    for (const path of paths) expect(refused.stderr).toContain(`${path}:`);
    expect(refused.stderr).toContain('the catalog in force is unchanged');

    // Nothing changed anywhere: old models listed and served on both edges.
    for (const url of [stack.url, secondEdge.url]) expect((await listModels(url)).data).toEqual(before.data);
    const client = new OpenAI({ baseURL: `${secondEdge.url}/v1`, apiKey: account.apiKey, maxRetries: 0 });
    const completion = await client.chat.completions.create({ model: 'alpha-chat', messages: [{ role: 'user', content: 'still there?' }] });
    expect(completion.model).toBe('alpha/chat');
  });

  it('loading the same file again changes nothing', async () => {
    const again = await gatewayctl(stack, 'catalog', 'load', `${scratch.path}/gateway-v2.yaml`, '--json');
    expect(again.code, again.stderr).toBe(0);
    expect((JSON.parse(again.stdout) as { changed: boolean }).changed).toBe(false);
  });
});
