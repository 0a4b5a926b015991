import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, createClient, ErrorReason, GatewayError, GrpcStatus, subjects, type EventBus, type PromiseClient } from '@gateway/platform';
import { CatalogChanged, Provider, CatalogServiceClient, CatalogServiceService } from '@gateway/proto';
import { createTestBus, createTestDatabase, eventually, testLogger, type TestBus, type TestDatabase } from '@gateway/testing';
import { startCatalogService } from '../src/index.js';

const examplePath = fileURLToPath(new URL('../../../deploy/config/gateway.example.yaml', import.meta.url));

const documentWith = (extraModels: string, startups = '  - { id: zeta, display_name: zeta works }\n  - { id: alpha, display_name: Alpha Models, icon_svg: "<svg xmlns=\'http://www.w3.org/2000/svg\'><circle r=\'4\'/></svg>" }\n') => `
startups:
${startups}providers:
  - { id: sim, kind: simulated }
limit_groups:
  - id: default
    tiers: { free: { minute: 20, day: 200 }, tier-1: { minute: 600 } }
models:
  - id: zeta/old
    owned_by: zeta
    created: 100
    aliases: [old]
    supported_parameters: [temperature, logprobs, logit_bias, functions, function_call, web_search_options, prediction, top_p]
    pricing: { per_input_token: 0.0000005, per_output_token: 0.0000015 }
    offers: [{ provider: sim, endpoints: [chat.completions] }]
  - id: alpha/new
    owned_by: alpha
    created: 300
    aliases: [new, newest]
    offers: [{ provider: sim, upstream_model: new-v1, endpoints: [chat.completions, messages] }]
  - id: alpha/middle
    created: 200
    expires_at: 1800000000
    offers: [{ provider: sim, endpoints: [embeddings] }]
${extraModels}`;

describe('catalog service over gRPC', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let observer: EventBus;
  let service: { address: string; stop(): Promise<void> };
  let client: PromiseClient<CatalogServiceClient>;
  const seenVersions: string[] = [];

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    observer = await testBus.connectAnother();
    observer.subscribe(subjects.catalogChanged, (bytes) => seenVersions.push(CatalogChanged.decode(bytes).version));
    service = await startCatalogService({
      listenAddress: '127.0.0.1:0',
      databaseUrl: database.url,
      bus: testBus.bus,
      logger: testLogger('catalog'),
    });
    client = createClient(CatalogServiceClient, CatalogServiceService, service.address);
  });

  afterAll(async () => {
    client?.close();
    await service?.stop();
    await testBus?.destroy();
    await database?.drop();
  });

  it('serves an empty catalog before anything is loaded', async () => {
    expect((await client.listModels({})).models).toEqual([]);
  });

  it('loads a document, announces it, and serves it', async () => {
    const loaded = await client.loadCatalog({ document: documentWith(''), source: 'test', dryRun: false });
    expect(loaded.problems).toEqual([]);
    expect(loaded.changed).toBe(true);
    expect(loaded.modelCount).toBe(3);
    expect(loaded.version).toMatch(/^[0-9a-f]{64}$/);
    await eventually(() => expect(seenVersions).toContain(loaded.version));

    const { models } = await client.listModels({});
    expect(models.map((model) => model.id)).toEqual(['alpha/new', 'alpha/middle', 'zeta/old']);
    const old = models[2]!;
    expect(old.pricing).toEqual({ perInputToken: '0.0000005', perOutputToken: '0.0000015' });
    expect(old.supportedParameters).toEqual(['temperature', 'top_p']);
    expect(old.created).toBe(100n);
    expect(models[1]!.expiresAt).toBe(1800000000n);
    expect(models[1]!.ownedBy).toBeUndefined();
    expect(models[0]!.offers).toEqual([{ providerId: 'sim', upstreamModel: 'new-v1', endpoints: ['chat.completions', 'messages'] }]);
    expect(models[1]!.offers[0]!.upstreamModel).toBe('alpha/middle');
  });

  it('resolves ids and aliases, and refuses unknown models with MODEL_NOT_FOUND', async () => {
    expect((await client.getModel({ model: 'newest' })).model?.id).toBe('alpha/new');
    expect((await client.getModel({ model: 'old' })).model?.id).toBe('zeta/old');
    expect((await client.getModel({ model: 'zeta/old' })).model?.id).toBe('zeta/old');
    const error = await client.getModel({ model: 'nope' }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(GatewayError);
    expect((error as GatewayError).status).toBe(GrpcStatus.NOT_FOUND);
    expect((error as GatewayError).reason).toBe(ErrorReason.ERROR_REASON_MODEL_NOT_FOUND);
  });

  it('orders startups by display name and serves icons or placeholders', async () => {
    const { startups } = await client.listStartups({});
    expect(startups.map((startup) => startup.id)).toEqual(['alpha', 'zeta']);
    expect(startups[0]!.iconUrl).toBe('/static/startups/alpha.svg');
    // No `created` in the config: the time the startup was first loaded.
    expect(Number(startups[0]!.created)).toBeGreaterThan(Date.now() / 1000 - 600);

    const provided = await client.getStartupIcon({ startupId: 'alpha' });
    expect(provided.provided).toBe(true);
    expect(Buffer.from(provided.svg).toString()).toContain('<circle');

    const placeholder = await client.getStartupIcon({ startupId: 'zeta' });
    expect(placeholder.provided).toBe(false);
    const svg = Buffer.from(placeholder.svg).toString();
    expect(svg).toMatch(/^<svg /);
    expect(svg).toContain('>ZW</text>');
    expect(svg).toMatch(/fill="#[0-9a-f]{6}"/);
    const again = await client.getStartupIcon({ startupId: 'zeta' });
    expect(Buffer.from(again.svg).toString()).toBe(svg);

    const error = (await client.getStartupIcon({ startupId: 'nobody' }).catch((caught: unknown) => caught)) as GatewayError;
    expect(error).toBeInstanceOf(GatewayError);
    expect(error.status).toBe(GrpcStatus.NOT_FOUND);
    expect(error.reason).toBe(ErrorReason.ERROR_REASON_NOT_FOUND);
  });

  it('lists limit groups and answers snapshots by version', async () => {
    const { limitGroups } = await client.listLimitGroups({});
    expect(limitGroups).toEqual([{ id: 'default', tiers: { free: { minute: 20, day: 200 }, 'tier-1': { minute: 600 } } }]);
    const full = await client.getSnapshot({ ifVersionNot: '' });
    expect(full.unchanged).toBe(false);
    expect(full.models).toHaveLength(3);
    expect(full.providers).toEqual([Provider.fromPartial({ id: 'sim', kind: 'simulated' })]);
    const same = await client.getSnapshot({ ifVersionNot: full.version });
    expect(same).toMatchObject({ version: full.version, unchanged: true, models: [] });
  });

  it('loading the same document again changes nothing and announces nothing', async () => {
    const before = await client.getSnapshot({ ifVersionNot: '' });
    const announced = seenVersions.length;
    const again = await client.loadCatalog({ document: `# reformatted\n${documentWith('')}`, source: 'test', dryRun: false });
    expect(again).toMatchObject({ version: before.version, changed: false, problems: [] });
    // A later, different load is seen; the repeat before it must not have been.
    const extra = '  - { id: alpha/extra, created: 50, offers: [{ provider: sim, endpoints: [moderations] }] }\n';
    const next = await client.loadCatalog({ document: documentWith(extra), source: 'test', dryRun: false });
    expect(next.changed).toBe(true);
    await eventually(() => expect(seenVersions.at(-1)).toBe(next.version));
    expect(seenVersions.slice(announced)).toEqual([next.version]);
  });

  it('a bad document lists its problems and leaves the old catalog in force', async () => {
    const before = await client.getSnapshot({ ifVersionNot: '' });
    const bad = documentWith('  - { id: alpha/bad, created: 1, aliases: [old], pricing: { per_input_token: "-1" }, offers: [{ provider: ghost, endpoints: [chat.completions] }] }\n');
    const result = await client.loadCatalog({ document: bad, source: 'test', dryRun: false });
    expect(result.changed).toBe(false);
    expect(result.version).toBe(before.version);
    expect(result.problems).toEqual([
      { path: 'models[3].aliases[0]', reason: 'alias "old" is also an alias of models[0]' },
      { path: 'models[3].offers[0].provider', reason: 'unknown provider "ghost"' },
      { path: 'models[3].pricing.per_input_token', reason: 'must be >= 0' },
    ]);
    const after = await client.getSnapshot({ ifVersionNot: '' });
    expect(after.version).toBe(before.version);
    expect(after.models.map((model) => model.id)).toEqual(before.models.map((model) => model.id));
  });

  it('a dry run validates without changing anything', async () => {
    const before = await client.getSnapshot({ ifVersionNot: '' });
    const dry = await client.loadCatalog({ document: documentWith(''), source: 'test', dryRun: true });
    expect(dry.problems).toEqual([]);
    expect(dry.changed).toBe(false);
    expect(dry.version).not.toBe(before.version);
    expect((await client.getSnapshot({ ifVersionNot: '' })).version).toBe(before.version);
  });

  it('a restarted service serves the stored version without a config file', async () => {
    const before = await client.getSnapshot({ ifVersionNot: '' });
    const second = await startCatalogService({
      listenAddress: '127.0.0.1:0',
      databaseUrl: database.url,
      bus: observer,
      logger: testLogger('catalog-2'),
    });
    const secondClient = createClient(CatalogServiceClient, CatalogServiceService, second.address);
    try {
      const snapshot = await secondClient.getSnapshot({ ifVersionNot: '' });
      expect(snapshot.version).toBe(before.version);
      expect(snapshot.models).toEqual(before.models);
      expect(snapshot.startups).toEqual(before.startups);
      // A load on the first replica reaches the second through catalog.changed.
      const loaded = await client.loadCatalog({ document: documentWith('', '  - { id: zeta, display_name: Zeta }\n  - { id: alpha, display_name: Alpha }\n'), source: 'test', dryRun: false });
      expect(loaded.changed).toBe(true);
      await eventually(async () => expect((await secondClient.getSnapshot({ ifVersionNot: '' })).version).toBe(loaded.version));
    } finally {
      secondClient.close();
      await second.stop();
    }
  });
});

describe('catalog service start-up with a config file', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let directory: string;

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('memory');
    directory = await mkdtemp(join(tmpdir(), 'catalog-test-'));
  });

  afterAll(async () => {
    await testBus?.destroy();
    await database?.drop();
    if (directory) await rm(directory, { recursive: true, force: true });
  });

  it('loads the example config with its logos', async () => {
    const service = await startCatalogService({
      listenAddress: '127.0.0.1:0',
      databaseUrl: database.url,
      bus: testBus.bus,
      logger: testLogger('catalog'),
      configPath: examplePath,
    });
    const client = createClient(CatalogServiceClient, CatalogServiceService, service.address);
    try {
      const chatSmall = (await client.getModel({ model: 'chat-small' })).model!;
      expect(chatSmall.id).toBe('acme/chat-small');
      expect(chatSmall.pricing).toEqual({ perInputToken: '0.0000005', perOutputToken: '0.0000015', perCachedInputToken: '0.0000001' });
      const icon = await client.getStartupIcon({ startupId: 'acme' });
      expect(icon.provided).toBe(true);
      const logo = await readFile(fileURLToPath(new URL('../../../deploy/config/startups/acme.svg', import.meta.url)));
      expect(Buffer.from(icon.svg).equals(logo)).toBe(true);
      const { startups } = await client.listStartups({});
      expect(startups.map((startup) => startup.displayName)).toEqual(['Acme AI', 'Nebula Labs', 'Orbit Audio']);
      const { models } = await client.listModels({});
      const created = models.map((model) => model.created);
      expect(created).toEqual([...created].sort((a, b) => (a > b ? -1 : a < b ? 1 : 0)));
    } finally {
      client.close();
      await service.stop();
    }
  });

  it('refuses to start with a bad config file, listing every problem', async () => {
    const path = join(directory, 'bad.yaml');
    await writeFile(path, 'providers:\n  - { id: p, kind: openai }\nmodels:\n  - { id: m, created: -1, offers: [{ provider: q, endpoints: [chat.completions] }] }\n');
    const error = await startCatalogService({
      listenAddress: '127.0.0.1:0',
      databaseUrl: database.url,
      bus: testBus.bus,
      logger: testLogger('catalog'),
      configPath: path,
    }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).problems).toEqual([
      `${path}: models[0].created: Too small: expected number to be >=0`,
      `${path}: models[0].limit_group: required (no limit group named "default" exists)`,
      `${path}: models[0].offers[0].provider: unknown provider "q"`,
      `${path}: providers[0].base_url: required for kind "openai"`,
    ]);
  });
});
