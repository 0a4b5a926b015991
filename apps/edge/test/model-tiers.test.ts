import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import type { GetSnapshotResponse } from '@gateway/proto';
import { createTestBus, testLogger, type TestBus } from '@gateway/testing';
import { startEdge, type RunningEdge } from '../src/index.js';
import { model, startFakeServices, type FakeServices } from './fakes.js';

// Spec §7's 403 "account may not use the model" at the edge, against fake services: a tier its model's
// limit group does not name is refused before admission (no Ledger.Admit, no Router call, nothing to
// release), on a plain and a streamed request alike; the listing with a key leaves such models out.
const logger = testLogger('edge-tiers-test');
const EVERY_TIER = ['free', 'tier-1', 'tier-2', 'tier-3', 'tier-4'];

const snapshot: GetSnapshotResponse = {
  version: 'v1',
  unchanged: false,
  moderationModel: '', defaultModels: {},
  models: [
    model({ id: 'acme/top', aliases: ['top'], limitGroup: 'premium', created: 1_767_000_003n }),
    model({ id: 'acme/chat', limitGroup: 'default', created: 1_767_000_002n }),
    model({ id: 'acme/open', limitGroup: 'open', created: 1_767_000_001n }),
  ],
  providers: [],
  startups: [],
  limitGroups: [
    { id: 'premium', tiers: { 'tier-4': { minute: 100, day: 1_000 } } },
    { id: 'default', tiers: { free: { minute: 20 }, 'tier-1': { minute: 600 }, 'tier-4': { minute: 900 } } },
    { id: 'open', tiers: {} },
  ],
};

let testBus: TestBus;
let fakes: FakeServices;
let edge: RunningEdge;

const client = (apiKey: string) => new OpenAI({ baseURL: `${edge.url}/v1`, apiKey, maxRetries: 0 });
const ask = (apiKey: string, name: string) =>
  client(apiKey).chat.completions.create({ model: name, messages: [{ role: 'user', content: 'Hi' }] }).withResponse();
const askStreamed = (apiKey: string, name: string) =>
  client(apiKey).chat.completions.create({ model: name, messages: [{ role: 'user', content: 'Hi' }], stream: true }).withResponse();

beforeAll(async () => {
  testBus = await createTestBus('nats');
  fakes = await startFakeServices(snapshot, logger);
  fakes.auth.apiKeys.set('sk-tier1', { accountId: 'acct_1', keyId: 'key_1', tier: 'tier-1', defaultRoutingStrategy: '' });
  fakes.auth.apiKeys.set('sk-tier4', { accountId: 'acct_4', keyId: 'key_4', tier: 'tier-4', defaultRoutingStrategy: '' });
  fakes.ledger.available.set('acct_1', '10');
  fakes.ledger.available.set('acct_4', '10');
  // The fake ledger answers Admit only (no leases): per-request admission, so every admission is visible.
  edge = await startEdge({ port: 0, ...fakes.addresses, bus: testBus.bus, logger, catalogRefreshMs: 60_000, admission: 'ledger' });
});

afterAll(async () => {
  await edge?.stop();
  await fakes?.stop();
  await testBus?.destroy();
});

describe('POST /v1/chat/completions for a model the tier may not use', () => {
  it('is 403 in the spec envelope with x-request-id, by id and by alias, plain and streamed, before admission', async () => {
    const admitsBefore = fakes.ledger.admits.length;
    const releasesBefore = fakes.ledger.releases.length;
    const chatsBefore = fakes.router.chats.length;
    for (const [name, stream] of [['acme/top', false], ['top', false], ['acme/top', true]] as const) {
      const failure = await (stream ? askStreamed('sk-tier1', name) : ask('sk-tier1', name)).catch((error: unknown) => error);
      expect(failure, `${name} stream=${stream}`).toBeInstanceOf(OpenAI.PermissionDeniedError);
      const denied = failure as InstanceType<typeof OpenAI.PermissionDeniedError>;
      expect(denied.status).toBe(403);
      expect(denied.error).toEqual({
        type: 'permission_error',
        message: "Your account's tier `tier-1` may not use model `acme/top` (available to: tier-4).",
        code: 'model_not_available_for_tier',
        param: 'body.model',
      });
      expect(denied.headers?.get('x-request-id')).toMatch(/^req_/);
      expect(denied.headers?.get('content-type')).toContain('application/json');
    }
    expect(fakes.ledger.admits.length).toBe(admitsBefore);
    expect(fakes.ledger.releases.length).toBe(releasesBefore);
    expect(fakes.router.chats.length).toBe(chatsBefore);
  });

  it('is served to a tier the group names, admitted with that tier and its limits', async () => {
    const { data, response } = await ask('sk-tier4', 'top');
    expect(data.model).toBe('acme/top');
    expect(response.headers.get('x-request-id')).toBeTruthy();
    expect(fakes.ledger.admits.at(-1)).toMatchObject({ modelId: 'acme/top', tier: 'tier-4', limitGroup: 'premium', requestsPerMinute: 100, requestsPerDay: 1_000 });
  });

  it('a model whose group names no tier is served to every tier', async () => {
    for (const apiKey of ['sk-tier1', 'sk-tier4']) {
      const { data } = await ask(apiKey, 'acme/open');
      expect(data.choices[0]?.message.content).toBe('Hello there.');
    }
  });
});

describe('GET /v1/models with a key', () => {
  const ids = (page: { data: Array<{ id: string }> }) => page.data.map((entry) => entry.id);

  it('leaves out what the tier may not use; anonymous lists all, with available_tiers from the group', async () => {
    expect(ids(await client('sk-tier1').models.list())).toEqual(['acme/chat', 'acme/open']);
    expect(ids(await client('sk-tier4').models.list())).toEqual(['acme/top', 'acme/chat', 'acme/open']);
    const anonymous = (await (await fetch(`${edge.url}/v1/models`)).json()) as { data: Array<{ id: string; available_tiers: string[] }> };
    expect(anonymous.data.map((entry) => [entry.id, entry.available_tiers])).toEqual([
      ['acme/top', ['tier-4']],
      ['acme/chat', ['free', 'tier-1', 'tier-4']],
      ['acme/open', EVERY_TIER],
    ]);
  });

  it('still answers /v1/models/{id} for a model the tier may not use (it names who may)', async () => {
    const entry = (await client('sk-tier1').models.retrieve('top')) as unknown as { id: string; available_tiers: string[] };
    expect(entry).toMatchObject({ id: 'acme/top', available_tiers: ['tier-4'] });
  });
});
