import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createTestBus, createTestDatabase, type TestBus, type TestDatabase } from '@gateway/testing';
import type { RunningEdge, RunningStack } from '../src/index.js';
import { createAccount, listModels, scratchDirectory, type ListedModel, type TestAccount } from './catalog-e2e-helpers.js';
import { startSecondEdge, startTestStack } from './configured-stack.js';

// Stop times (expires_at) and aliases over the whole stack: a model past its stop time answers 410 on
// every inference route, by id and by alias, and is flagged in the listing; aliases resolve on every
// inference route and answers report the catalog id. A second edge with an injected clock moves time
// past a stop time. Routes the edge does not serve yet are reported as skipped, not passed.
const PAST_SECONDS = 1_700_000_000;
const nowSeconds = Math.floor(Date.now() / 1000);
const SOON_SECONDS = nowSeconds + 3_600;

interface ModelPair {
  kind: string;
  endpoints: string[];
  extra?: string;
  /** Beyond the token prices every model has: the price of each unit the kind's endpoints meter (catalog rule). */
  prices?: string;
}

const PAIRS: ModelPair[] = [
  { kind: 'chat', endpoints: ['chat.completions', 'messages', 'responses'] },
  { kind: 'embed', endpoints: ['embeddings'], extra: 'output_modalities: [embeddings]' },
  { kind: 'moderation', endpoints: ['moderations'] },
  { kind: 'image', endpoints: ['images.generations', 'images.edits'], extra: 'max_images: 2\n    input_modalities: [text, image]\n    output_modalities: [image]', prices: 'per_output_image_token: "0.00001", per_input_image_token: "0.000001"' },
  { kind: 'speech', endpoints: ['audio.speech'], extra: 'voices: [alloy]\n    output_modalities: [audio]', prices: 'per_input_text_character: "0.000015"' },
  { kind: 'transcribe', endpoints: ['audio.transcriptions', 'audio.translations'], extra: 'input_modalities: [audio]', prices: 'per_input_audio_hour: "0.36"' },
];

/** For each kind: `live/<kind>` (alias `<kind>-live`) and `gone/<kind>` (alias `<kind>-gone`, past its stop time). */
function config(): string {
  const models = PAIRS.flatMap((pair, index) =>
    (['live', 'gone'] as const).map(
      (state) => `
  - id: ${state}/${pair.kind}
    created: ${1_760_000_000 + index * 10 + (state === 'live' ? 1 : 0)}
    aliases: [${pair.kind}-${state}]
    ${state === 'gone' ? `expires_at: ${PAST_SECONDS}` : 'expires_at: null'}
    ${pair.extra ?? ''}
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002"${pair.prices ? `, ${pair.prices}` : ''} }
    offers: [{ provider: simulated, endpoints: [${pair.endpoints.join(', ')}] }]`,
    ),
  );
  return `
providers:
  - { id: simulated, kind: simulated }
limit_groups:
  - id: default
    tiers: { free: { minute: 1000 } }
models:
  - id: soon/chat
    created: 1770000000
    aliases: [soon-chat]
    expires_at: ${SOON_SECONDS}
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002" }
    offers: [{ provider: simulated, endpoints: [chat.completions] }]
${models.join('\n')}
`;
}

/** 1x1 PNG and 0.1 s of 8 kHz mono silence: the smallest valid media the routes accept. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==', 'base64');
function wav(): Buffer {
  const samples = 800;
  const buffer = Buffer.alloc(44 + samples * 2);
  buffer.write('RIFF', 0);
  buffer.writeUInt32LE(36 + samples * 2, 4);
  buffer.write('WAVEfmt ', 8);
  buffer.writeUInt32LE(16, 16);
  buffer.writeUInt16LE(1, 20);
  buffer.writeUInt16LE(1, 22);
  buffer.writeUInt32LE(8_000, 24);
  buffer.writeUInt32LE(16_000, 28);
  buffer.writeUInt16LE(2, 32);
  buffer.writeUInt16LE(16, 34);
  buffer.write('data', 36);
  buffer.writeUInt32LE(samples * 2, 40);
  return buffer;
}

interface InferenceRoute {
  path: string;
  kind: string;
  /** The answer names the model (spec: the catalog id, after alias resolution). */
  reportsModel: boolean;
  body(model: string): { body: string | FormData; contentType?: string };
}

const json = (value: unknown) => ({ body: JSON.stringify(value), contentType: 'application/json' });
const form = (fields: Record<string, string | Blob>, fileName: string) => {
  const data = new FormData();
  for (const [name, value] of Object.entries(fields)) {
    if (typeof value === 'string') data.append(name, value);
    else data.append(name, value, fileName);
  }
  return { body: data };
};

const ROUTES: InferenceRoute[] = [
  { path: '/v1/chat/completions', kind: 'chat', reportsModel: true, body: (model) => json({ model, messages: [{ role: 'user', content: 'hi' }] }) },
  { path: '/v1/responses', kind: 'chat', reportsModel: true, body: (model) => json({ model, input: 'hi' }) },
  { path: '/v1/messages', kind: 'chat', reportsModel: true, body: (model) => json({ model, max_tokens: 32, messages: [{ role: 'user', content: 'hi' }] }) },
  { path: '/v1/embeddings', kind: 'embed', reportsModel: true, body: (model) => json({ model, input: 'hi' }) },
  { path: '/v1/moderations', kind: 'moderation', reportsModel: true, body: (model) => json({ model, input: 'hi' }) },
  { path: '/v1/images/generations', kind: 'image', reportsModel: false, body: (model) => json({ model, prompt: 'a red dot', n: 1 }) },
  {
    path: '/v1/images/edits',
    kind: 'image',
    reportsModel: false,
    body: (model) => form({ model, prompt: 'make it blue', image: new Blob([PNG], { type: 'image/png' }) }, 'dot.png'),
  },
  { path: '/v1/audio/speech', kind: 'speech', reportsModel: false, body: (model) => json({ model, input: 'hello', voice: 'alloy' }) },
  {
    path: '/v1/audio/transcriptions',
    kind: 'transcribe',
    reportsModel: false,
    body: (model) => form({ model, file: new Blob([wav()], { type: 'audio/wav' }) }, 'silence.wav'),
  },
  {
    path: '/v1/audio/translations',
    kind: 'transcribe',
    reportsModel: false,
    body: (model) => form({ model, file: new Blob([wav()], { type: 'audio/wav' }) }, 'silence.wav'),
  },
];

describe('model stop times and aliases over the whole stack', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let stack: RunningStack;
  let clockedEdge: RunningEdge;
  let clockMs = Date.now();
  let scratch: Awaited<ReturnType<typeof scratchDirectory>>;
  let account: TestAccount;
  /** Routes this edge serves (a route not built yet answers 404 unknown_url). */
  const served = new Set<string>();

  const post = async (baseUrl: string, route: InferenceRoute, model: string, headers: Record<string, string> = {}) => {
    const { body, contentType } = route.body(model);
    return fetch(`${baseUrl}${route.path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${account.apiKey}`, ...(contentType ? { 'content-type': contentType } : {}), ...headers },
      body,
    });
  };

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    scratch = await scratchDirectory('model-expiry');
    stack = await startTestStack(database, testBus, {
      configPath: await scratch.write('gateway.yaml', config()),
      keyHashSecret: 'model-expiry-secret-model-expiry-secret',
    });
    clockedEdge = await startSecondEdge(stack, testBus, { name: 'clocked-edge', now: () => clockMs });
    account = await createAccount(stack, 'expiry', { credits: '5' });
    for (const route of ROUTES) {
      const probe = await fetch(`${stack.url}${route.path}`, { method: 'POST' });
      const body = (await probe.json().catch(() => ({}))) as { error?: { code?: string } };
      if (!(probe.status === 404 && body.error?.code === 'unknown_url')) served.add(route.path);
    }
  }, 120_000);

  afterAll(async () => {
    await clockedEdge?.stop();
    await stack?.stop();
    await testBus?.destroy();
    await database?.drop();
    await scratch?.remove();
  });

  it('chat completions is served (the other routes join this file as they are built)', () => {
    expect(served).toContain('/v1/chat/completions');
  });

  for (const route of ROUTES) {
    it(`POST ${route.path}: an alias resolves to the catalog id; a model past its stop time is 410 by id and by alias`, async () => {
      // Every route is built: one that answers unknown_url fails here instead of skipping itself.
      expect(served, `${route.path} answered 404 unknown_url`).toContain(route.path);
      const live = await post(stack.url, route, `${route.kind}-live`);
      const liveText = Buffer.from(await live.arrayBuffer());
      expect(live.status, liveText.toString('utf8').slice(0, 500)).toBe(200);
      expect(live.headers.get('x-request-id')).toBeTruthy();
      if (route.reportsModel) expect((JSON.parse(liveText.toString('utf8')) as { model: string }).model).toBe(`live/${route.kind}`);

      for (const name of [`gone/${route.kind}`, `${route.kind}-gone`]) {
        const gone = await post(stack.url, route, name);
        const text = await gone.text();
        expect(gone.status, `${name}: ${text.slice(0, 500)}`).toBe(410);
        expect(gone.headers.get('x-request-id')).toBeTruthy();
        // Whatever the dialect's envelope, the message names the catalog id.
        expect(text).toContain(`gone/${route.kind}`);
      }
    });
  }

  it('flags an expired model in the listing and in /v1/models/{id}, still listed, with its stop time', async () => {
    const listing = await listModels(stack.url);
    const byId = new Map(listing.data.map((model) => [model.id, model]));
    for (const pair of PAIRS) {
      expect(byId.get(`gone/${pair.kind}`)).toMatchObject({ expired: true, expires_at: PAST_SECONDS, aliases: [`${pair.kind}-gone`] });
      expect(byId.get(`live/${pair.kind}`)).toMatchObject({ expired: false, expires_at: null });
    }
    expect(byId.get('soon/chat')).toMatchObject({ expired: false, expires_at: SOON_SECONDS });
    const one = (await (await fetch(`${stack.url}/v1/models/chat-gone`)).json()) as ListedModel;
    expect(one).toMatchObject({ id: 'gone/chat', expired: true });
  });

  it('moving the clock past a stop time: 410 by id and alias, flagged in the listing; moving it back serves again', async () => {
    const client = new OpenAI({ baseURL: `${clockedEdge.url}/v1`, apiKey: account.apiKey, maxRetries: 0 });
    const ask = (model: string) =>
      client.chat.completions
        .create({ model, messages: [{ role: 'user', content: 'hi' }] })
        .then((completion) => ({ status: 200, model: completion.model }))
        .catch((error: unknown) => ({ status: (error as { status: number }).status, model: '' }));

    clockMs = (SOON_SECONDS - 1) * 1000;
    expect(await ask('soon-chat')).toEqual({ status: 200, model: 'soon/chat' });
    expect((await listModels(clockedEdge.url)).data.find((model) => model.id === 'soon/chat')?.expired).toBe(false);

    clockMs = SOON_SECONDS * 1000;
    expect(await ask('soon/chat')).toEqual({ status: 410, model: '' });
    expect(await ask('soon-chat')).toEqual({ status: 410, model: '' });
    expect((await listModels(clockedEdge.url)).data.find((model) => model.id === 'soon/chat')).toMatchObject({
      expired: true,
      expires_at: SOON_SECONDS,
    });
    // The stack's own edge, on the real clock, still serves it.
    const realClock = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: account.apiKey, maxRetries: 0 });
    expect((await realClock.chat.completions.create({ model: 'soon-chat', messages: [{ role: 'user', content: 'hi' }] })).model).toBe('soon/chat');

    clockMs = Date.now();
    expect(await ask('soon-chat')).toEqual({ status: 200, model: 'soon/chat' });
  });

  it('x-request-id on success and on error answers; a caller-supplied valid id is honoured, an invalid one replaced', async () => {
    const chat = ROUTES[0]!;
    const ok = await post(stack.url, chat, 'chat-live', { 'x-request-id': 'e2e-expiry-ok-0001' });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('x-request-id')).toBe('e2e-expiry-ok-0001');
    expect(ok.headers.get('x-gateway-api-version')).toBe('2026-03-31');
    expect(((await ok.json()) as { model: string }).model).toBe('live/chat');

    const gone = await post(stack.url, chat, 'chat-gone', { 'x-request-id': 'e2e-expiry-gone-0001' });
    expect(gone.status).toBe(410);
    expect(gone.headers.get('x-request-id')).toBe('e2e-expiry-gone-0001');
    expect(gone.headers.get('x-gateway-api-version')).toBe('2026-03-31');
    expect(((await gone.json()) as { error: { code: string } }).error.code).toBe('model_gone');

    for (const [path, init] of [
      ['/v1/models', {}],
      ['/v1/startups', {}],
      ['/v1/limits', {}],
      ['/v1/nowhere', {}],
      ['/v1/models', { headers: { authorization: 'Bearer gw-api-not-a-real-key' } }],
      ['/v1/chat/completions', { method: 'POST', body: '{' }],
    ] as [string, RequestInit][]) {
      const answer = await fetch(`${stack.url}${path}`, init);
      expect(answer.headers.get('x-request-id'), path).toMatch(/^req_[0-9a-f]{32}$/);
      expect(answer.headers.get('x-gateway-api-version'), path).toBe('2026-03-31');
    }
    const replaced = await fetch(`${stack.url}/v1/models`, { headers: { 'x-request-id': 'no spaces allowed' } });
    expect(replaced.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{32}$/);
  });
});
