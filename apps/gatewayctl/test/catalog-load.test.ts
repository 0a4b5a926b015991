import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, type PromiseClient } from '@gateway/platform';
import { CatalogServiceClient, CatalogServiceService } from '@gateway/proto';
import { createTestBus, createTestDatabase, natsUrl, type TestBus, type TestDatabase, TEST_ADMIN_TOKEN, TEST_INTERNAL_TOKEN, testInternalAuthEnv } from '@gateway/testing';
import { cli } from './run-cli.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const examplePath = join(root, 'deploy/config/gateway.example.yaml');
const catalogMain = join(root, 'apps/catalog/dist/main.js');

/**
 * The real catalog service, run as its own process from its built main.js (gatewayctl may not import
 * another app; this also exercises the service's env handling).
 */
async function startCatalogProcess(env: NodeJS.ProcessEnv): Promise<{ address: string; child: ChildProcess }> {
  await promisify(execFile)(join(root, 'node_modules/.bin/tsc'), ['-b', join(root, 'apps/catalog/tsconfig.json')]);
  const child = spawn(process.execPath, [catalogMain], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  const address = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`catalog did not start: ${stderr}`)), 30_000);
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`catalog exited with ${code}: ${stderr}`)); });
    createInterface({ input: child.stdout! }).on('line', (line) => {
      try {
        const entry = JSON.parse(line) as { msg?: string; address?: string };
        if (entry.msg === 'gRPC server listening' && entry.address) {
          clearTimeout(timer);
          resolve(entry.address);
        }
      } catch {
        // not a log line
      }
    });
  });
  return { address, child };
}

describe('gatewayctl catalog load against the real catalog service', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let catalog: { address: string; child: ChildProcess };
  let client: PromiseClient<CatalogServiceClient>;
  let directory: string;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    directory = await mkdtemp(join(tmpdir(), 'gatewayctl-test-'));
    catalog = await startCatalogProcess({
      GRPC_LISTEN: '127.0.0.1:0',
      DATABASE_URL: database.url,
      NATS_URL: natsUrl,
      NATS_NAMESPACE: testBus.namespace,
      LOG_LEVEL: 'info',
      GATEWAY_CONFIG: '',
      ...testInternalAuthEnv,
    });
    client = createClient(CatalogServiceClient, CatalogServiceService, catalog.address, { credential: TEST_INTERNAL_TOKEN });
    env = { CATALOG_ADDR: catalog.address, GATEWAY_ADMIN_TOKEN: TEST_ADMIN_TOKEN };
  }, 120_000);

  afterAll(async () => {
    client?.close();
    if (catalog?.child.exitCode === null) {
      const exited = new Promise((resolve) => catalog.child.once('exit', resolve));
      catalog.child.kill('SIGTERM');
      await exited;
    }
    await testBus?.destroy();
    await database?.drop();
    if (directory) await rm(directory, { recursive: true, force: true });
  });

  it('loads the example config, then reports the same file as unchanged', async () => {
    const first = await cli(['catalog', 'load', examplePath, '--json'], env);
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    const result = JSON.parse(first.stdout) as { version: string; changed: boolean; model_count: number; problems: unknown[] };
    expect(result).toMatchObject({ changed: true, model_count: 8, problems: [] });
    const chatSmall = (await client.getModel({ model: 'chat-small' })).model!;
    expect(chatSmall.pricing?.perInputToken).toBe('0.0000005');
    // Icons named relative to the file were found because gatewayctl sends the absolute path.
    expect((await client.getStartupIcon({ startupId: 'acme' })).provided).toBe(true);

    const again = await cli(['catalog', 'load', examplePath], env);
    expect(again.code).toBe(0);
    expect(again.stdout).toBe(`${examplePath}: unchanged (already in force); version ${result.version}, 8 models\n`);
  });

  it('catalog show: every model with exact prices and offers; one model by alias; --json in the HTTP API field names', async () => {
    const listed = await cli(['catalog', 'show', '--json'], env);
    expect(listed.code).toBe(0);
    const models = (JSON.parse(listed.stdout) as { models: { id: string; pricing: Record<string, number>; offers: { provider: string; endpoints: string[] }[]; supported_endpoints: string[] }[] }).models;
    expect(models).toHaveLength(8);
    const chatSmall = models.find((model) => model.id === 'acme/chat-small')!;
    // The decimal as configured, as a JSON number (the raw text, no float round trip).
    expect(listed.stdout).toContain('"per_input_token":0.0000005');
    expect(chatSmall.offers).toEqual([{ provider: 'simulated', upstream_model: 'chat-small-v2', endpoints: ['chat.completions', 'messages', 'responses'] }]);
    expect(chatSmall.supported_endpoints).toEqual(['chat.completions', 'messages', 'responses']);

    const one = await cli(['catalog', 'show', 'chat-small'], env);
    expect(one.code).toBe(0);
    expect(one.stdout.split('\n')[0]).toMatch(/^acme\/chat-small  .*  context \d+/);
    expect(one.stdout).toContain('  prices: per_input_token 0.0000005');
    expect(one.stdout).toContain('  offers: simulated:chat-small-v2 [chat.completions, messages, responses]');
    const missing = await cli(['catalog', 'show', 'no-such-model'], env);
    expect(missing.code).toBe(1);
  });

  it('prints every problem of a bad file as `path: reason`, exits 1, and leaves the catalog in force', async () => {
    const before = await client.getSnapshot({ ifVersionNot: '' });
    const path = join(directory, 'bad.yaml');
    await writeFile(
      path,
      [
        'providers: [{ id: sim, kind: simulated }]',
        'limit_groups: [{ id: default, tiers: { free: { minute: 1 } } }]',
        'models:',
        '  - { id: a, created: 1, pricing: { per_input_token: "-1" }, offers: [{ provider: sim, endpoints: [chat.completions] }] }',
        '  - { id: b, created: 2, aliases: [a], offers: [{ provider: ghost, endpoints: [speech] }] }',
        '',
      ].join('\n'),
    );
    const result = await cli(['catalog', 'load', path], env);
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    const lines = result.stderr.trimEnd().split('\n');
    expect(lines[0]).toBe(`${path}: 4 problems; the catalog in force is unchanged`);
    expect(lines.slice(1)).toEqual([
      'models[0].pricing.per_input_token: must be >= 0',
      'models[1].aliases[0]: alias "a" is the id of models[0]',
      expect.stringMatching(/^models\[1\]\.offers\[0\]\.endpoints\[0\]: Invalid option: expected one of "chat\.completions"/),
      'models[1].offers[0].provider: unknown provider "ghost"',
    ]);
    const after = await client.getSnapshot({ ifVersionNot: '' });
    expect(after.version).toBe(before.version);

    const json = await cli(['catalog', 'load', path, '--json'], env);
    expect(json.code).toBe(1);
    expect((JSON.parse(json.stdout) as { problems: unknown[] }).problems).toHaveLength(4);
  });

  it('validates without loading on --dry-run', async () => {
    const before = await client.getSnapshot({ ifVersionNot: '' });
    const path = join(directory, 'small.yaml');
    await writeFile(path, 'providers: [{ id: sim, kind: simulated }]\nlimit_groups: [{ id: default, tiers: {} }]\nmodels: [{ id: only, created: 1, offers: [{ provider: sim, endpoints: [embeddings] }] }]\n');
    const result = await cli(['catalog', 'load', path, '--dry-run', '--catalog', catalog.address], { GATEWAY_ADMIN_TOKEN: TEST_ADMIN_TOKEN });
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/is valid \(dry run, nothing changed\); version [0-9a-f]{64}, 1 models/);
    expect((await client.getSnapshot({ ifVersionNot: '' })).version).toBe(before.version);
  });

  it('refuses bad arguments before calling anything', async () => {
    const missing = await cli(['catalog', 'load'], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^gatewayctl catalog load: missing FILE\n\nusage: gatewayctl catalog load FILE/);

    const extra = await cli(['catalog', 'load', examplePath, 'second.yaml'], env);
    expect(extra).toMatchObject({ code: 1, stdout: '' });
    expect(extra.stderr).toContain('unexpected argument "second.yaml"');

    const unknownOption = await cli(['catalog', 'load', examplePath, '--force'], env);
    expect(unknownOption.code).toBe(1);
    expect(unknownOption.stderr).toContain("Unknown option '--force'");

    const noFile = await cli(['catalog', 'load', join(directory, 'absent.yaml')], env);
    expect(noFile.code).toBe(1);
    expect(noFile.stderr).toContain('cannot read');
    expect(noFile.stderr).toContain('ENOENT');

    const badAddress = await cli(['catalog', 'load', examplePath, '--catalog', 'not-an-address']);
    expect(badAddress.code).toBe(1);
    expect(badAddress.stderr).toContain('--catalog: expected host:port, got "not-an-address"');

    const badEnv = await cli(['catalog', 'load', examplePath], { CATALOG_ADDR: 'nowhere' });
    expect(badEnv.stderr).toContain('CATALOG_ADDR: expected host:port');

    const unknownCommand = await cli(['catalog', 'unload'], env);
    expect(unknownCommand.code).toBe(1);
    expect(unknownCommand.stderr).toContain('unknown command "catalog unload"');

    const unknownGroup = await cli(['models', 'list'], env);
    expect(unknownGroup.code).toBe(1);
    expect(unknownGroup.stderr).toContain('unknown command group "models"');

    const nothing = await cli([], env);
    expect(nothing.code).toBe(1);
    expect(nothing.stderr).toMatch(/^usage: gatewayctl/);
  });

  it('answers --help for every command on stdout', async () => {
    for (const argv of [['--help'], ['catalog', '--help'], ['catalog', 'load', '--help'], ['accounts', 'create', '--help'],
      ['accounts', 'top-up', '--help'], ['accounts', 'show', '--help'], ['keys', 'create', '--help'], ['keys', 'list', '--help'],
      ['keys', 'disable', '--help'], ['ledger', 'verify', '--help']]) {
      const result = await cli(argv, env);
      expect(result.code, argv.join(' ')).toBe(0);
      expect(result.stderr).toBe('');
      expect(result.stdout).toMatch(/^usage: gatewayctl /);
    }
    expect((await cli(['catalog', 'load', '--help'])).stdout).toContain('--dry-run');
  });

  it('names the service it cannot reach', async () => {
    const result = await cli(['catalog', 'load', examplePath, '--catalog', '127.0.0.1:1']);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^gatewayctl catalog load: cannot reach catalog at 127\.0\.0\.1:1: /);
  });
});
