import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { CatalogChanged, type GetSnapshotResponse } from '@gateway/proto';
import { subjects } from '@gateway/platform';
import { createTestBus, eventually, testLogger, type TestBus } from '@gateway/testing';
import { startEdge, type RunningEdge } from '../src/index.js';
import { model, startFakeServices, type FakeServices } from './fakes.js';

// Stop times judged by the edge's injected clock: the 410 and the listing flag follow the clock in
// both directions, through the one resolveModel every inference route uses.
const logger = testLogger('edge-expiry-test');
const STOP_SECONDS = 1_800_000_000;

function snapshot(version: string, extra: ReturnType<typeof model>[] = []): GetSnapshotResponse {
  return {
    version,
    unchanged: false,
  moderationModel: '', defaultModels: {},
    models: [
      model({ id: 'acme/sunset', aliases: ['sunset'], created: 1_767_225_600n, expiresAt: BigInt(STOP_SECONDS) }),
      model({ id: 'acme/evergreen', aliases: ['evergreen'], created: 1_767_000_000n }),
      model({
        id: 'acme/sunset-embed',
        created: 1_766_000_000n,
        expiresAt: BigInt(STOP_SECONDS + 3_600),
        offers: [{ providerId: 'acme-cloud', upstreamModel: 'e', endpoints: ['embeddings'] }],
      }),
      ...extra,
    ],
    providers: [],
    startups: [],
    limitGroups: [{ id: 'default', tiers: { free: { minute: 20 } } }],
  };
}

let testBus: TestBus;
let fakes: FakeServices;
let edge: RunningEdge;
let clockMs = (STOP_SECONDS - 60) * 1000;

const client = () => new OpenAI({ baseURL: `${edge.url}/v1`, apiKey: 'sk-good', maxRetries: 0 });

async function listing(): Promise<Map<string, Record<string, unknown>>> {
  const body = (await (await fetch(`${edge.url}/v1/models`)).json()) as { data: Record<string, unknown>[] };
  return new Map(body.data.map((entry) => [entry.id as string, entry]));
}

async function chatStatus(name: string): Promise<number> {
  const answer = await client()
    .chat.completions.create({ model: name, messages: [{ role: 'user', content: 'Hi' }] })
    .then(() => 200)
    .catch((error: unknown) => (error as { status: number }).status);
  return answer;
}

beforeAll(async () => {
  testBus = await createTestBus('nats');
  fakes = await startFakeServices(snapshot('v1'), logger);
  fakes.auth.apiKeys.set('sk-good', { accountId: 'acct_1', keyId: 'key_1', tier: 'free', defaultRoutingStrategy: '' });
  fakes.ledger.available.set('acct_1', '10');
  // The fake ledger answers Admit only (no leases): per-request admission.
  edge = await startEdge({ port: 0, ...fakes.addresses, bus: testBus.bus, logger, catalogRefreshMs: 60_000, now: () => clockMs, admission: 'ledger' });
});

afterAll(async () => {
  await edge?.stop();
  await fakes?.stop();
  await testBus?.destroy();
});

describe('a model past its stop time', () => {
  it('is served and listed as live before it, by id and by alias', async () => {
    clockMs = (STOP_SECONDS - 1) * 1000;
    expect(await chatStatus('acme/sunset')).toBe(200);
    expect(await chatStatus('sunset')).toBe(200);
    expect(fakes.router.chats.at(-1)?.modelId).toBe('acme/sunset');
    const entry = (await listing()).get('acme/sunset');
    expect(entry).toMatchObject({ expires_at: STOP_SECONDS, expired: false, aliases: ['sunset'] });
    expect((await listing()).get('acme/evergreen')).toMatchObject({ expires_at: null, expired: false });
  });

  it('answers 410 model_gone from its stop second on, by id and by alias, without reaching admission or the router', async () => {
    clockMs = STOP_SECONDS * 1000;
    const admitsBefore = fakes.ledger.admits.length;
    const chatsBefore = fakes.router.chats.length;
    for (const name of ['acme/sunset', 'sunset']) {
      const error = (await client()
        .chat.completions.create({ model: name, messages: [{ role: 'user', content: 'Hi' }] })
        .catch((caught: unknown) => caught)) as InstanceType<typeof OpenAI.APIError>;
      expect(error.status, name).toBe(410);
      expect(error.code).toBe('model_gone');
      // The answer names the catalog id, whichever name was sent.
      expect(error.message).toContain('acme/sunset');
      expect(error.headers?.get('x-request-id')).toMatch(/^req_/);
    }
    expect(fakes.ledger.admits.length).toBe(admitsBefore);
    expect(fakes.router.chats.length).toBe(chatsBefore);
    // A model with a later stop time and one without are unaffected.
    expect(await chatStatus('evergreen')).toBe(200);
  });

  it('is flagged in the listing and in /v1/models/{id} (by alias too), and stays listed', async () => {
    clockMs = STOP_SECONDS * 1000 + 1;
    const entries = await listing();
    expect(entries.get('acme/sunset')).toMatchObject({ expired: true, expires_at: STOP_SECONDS });
    expect(entries.get('acme/sunset-embed')).toMatchObject({ expired: false });
    const one = await client().models.retrieve('sunset');
    expect(one).toMatchObject({ id: 'acme/sunset', expired: true });
  });

  it('a retired model answers 410 even on a route it was never served on; unknown names stay 400', async () => {
    clockMs = (STOP_SECONDS + 7_200) * 1000;
    const embedAsChat = (await client()
      .chat.completions.create({ model: 'acme/sunset-embed', messages: [{ role: 'user', content: 'Hi' }] })
      .catch((caught: unknown) => caught)) as InstanceType<typeof OpenAI.APIError>;
    expect(embedAsChat.status).toBe(410);
    expect(await chatStatus('acme/never-was')).toBe(400);
    expect((await listing()).get('acme/sunset-embed')).toMatchObject({ expired: true });
  });

  it('follows the clock back (the listing is re-rendered for the window the clock is in)', async () => {
    clockMs = (STOP_SECONDS - 5) * 1000;
    expect((await listing()).get('acme/sunset')).toMatchObject({ expired: false });
    expect(await chatStatus('sunset')).toBe(200);
  });
});

describe('catalog.changed naming a version the catalog replica does not serve yet', () => {
  it('keeps asking until the replica serves it, without another event', async () => {
    const before = fakes.catalog.snapshotCalls;
    // The event arrives before the replica behind CATALOG_ADDR has reloaded (it still answers v1).
    testBus.bus.broadcast(subjects.catalogChanged, CatalogChanged.encode({ version: 'v2' }).finish());
    await eventually(() => expect(fakes.catalog.snapshotCalls).toBeGreaterThan(before + 1), 5_000);
    expect((await listing()).has('acme/late')).toBe(false);
    fakes.catalog.snapshot = snapshot('v2', [model({ id: 'acme/late', created: 1_768_000_000n })]);
    await eventually(async () => expect((await listing()).has('acme/late')).toBe(true), 5_000);
    // Once served, the polling stops.
    const settled = fakes.catalog.snapshotCalls;
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    expect(fakes.catalog.snapshotCalls).toBe(settled);
  });
});

describe('GET /v1/models/{id} with a key', () => {
  it('answers whatever the balance for a valid key, 401 for an invalid one', async () => {
    fakes.auth.apiKeys.set('sk-broke', { accountId: 'acct_broke', keyId: 'key_b', tier: 'free', defaultRoutingStrategy: '' });
    const broke = await fetch(`${edge.url}/v1/models/evergreen`, { headers: { authorization: 'Bearer sk-broke' } });
    expect(broke.status).toBe(200);
    expect(((await broke.json()) as { id: string }).id).toBe('acme/evergreen');
    const wrong = await fetch(`${edge.url}/v1/models/evergreen`, { headers: { authorization: 'Bearer sk-wrong' } });
    expect(wrong.status).toBe(401);
    expect(((await wrong.json()) as { error: { type: string } }).error.type).toBe('invalid_api_key');
  });
});
