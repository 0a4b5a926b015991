import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { ENDPOINT_NAMES } from '@gateway/platform';
import { createTestBus, createTestDatabase, type TestBus, type TestDatabase } from '@gateway/testing';
import type { RunningStack } from '../src/index.js';
import { createAccount, listModels, MODEL_FIELDS, UNLISTED_PARAMETERS, type ListedModel, type TestAccount } from './catalog-e2e-helpers.js';
import { startTestStack } from './configured-stack.js';

// GET /v1/models, /v1/models/{id}, /v1/startups and /v1/limits over the whole stack (real catalog,
// auth, ledger, Postgres, NATS) with the example config, accounts made by gatewayctl.
const configPath = fileURLToPath(new URL('../../../deploy/config/gateway.example.yaml', import.meta.url));
const ALL_ENDPOINTS = [...ENDPOINT_NAMES];

describe('GET /v1/models over the whole stack', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let stack: RunningStack;
  /** Balance (credits) -> account; '0' was never topped up. */
  const accounts = new Map<string, TestAccount>();
  let anonymous: ListedModel[] = [];

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    stack = await startTestStack(database, testBus, { configPath, keyHashSecret: 'models-list-secret-models-list-secret-0' });
    for (const [balance, tier] of [['0', 'free'], ['0.04', 'free'], ['0.05', 'tier-1'], ['10', 'tier-2']] as const) {
      accounts.set(balance, await createAccount(stack, `balance-${balance}`, { ...(balance === '0' ? {} : { credits: balance }), tier }));
    }
    const listing = await listModels(stack.url);
    expect(listing.status).toBe(200);
    anonymous = listing.data;
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
    await testBus?.destroy();
    await database?.drop();
  });

  const isFree = (model: ListedModel) => Object.values(model.pricing).every((price) => price === 0);

  it('without a key lists the whole catalog, newest first by created', () => {
    expect(anonymous.length).toBeGreaterThanOrEqual(6);
    const created = anonymous.map((model) => model.created);
    expect(created).toEqual([...created].sort((a, b) => b - a));
    expect(new Set(created).size).toBe(created.length);
    expect(anonymous[0]?.id).toBe('nebula/reasoner');
    expect(anonymous.map((model) => model.id)).toEqual(expect.arrayContaining(['acme/chat-small', 'nebula/free-chat', 'orbit/speech-1']));
  });

  it('every model carries every spec 2.6 field with the right types', () => {
    for (const model of anonymous) {
      for (const field of MODEL_FIELDS) expect(model, `${model.id}.${field}`).toHaveProperty(field);
      expect(model.object).toBe('model');
      expect(Number.isInteger(model.created)).toBe(true);
      expect(model.owned_by === null || typeof model.owned_by === 'string').toBe(true);
      expect(typeof model.display_name).toBe('string');
      expect(typeof model.description).toBe('string');
      expect(Number.isInteger(model.context_window)).toBe(true);
      expect(model.supported_endpoints.length, model.id).toBeGreaterThan(0);
      for (const endpoint of model.supported_endpoints) expect(ALL_ENDPOINTS).toContain(endpoint);
      expect(model.architecture.input_modalities.length).toBeGreaterThan(0);
      expect(model.architecture.output_modalities.length).toBeGreaterThan(0);
      for (const price of Object.values(model.pricing)) expect(typeof price).toBe('number');
      for (const hidden of UNLISTED_PARAMETERS) expect(model.supported_parameters).not.toContain(hidden);
      expect(model.available_tiers.length).toBeGreaterThan(0);
      expect(model.expired).toBe(false);
    }
  });

  it('pricing has only the keys a model prices, as exact numbers; endpoints come from the offers', () => {
    const byId = new Map(anonymous.map((model) => [model.id, model]));
    expect(byId.get('acme/chat-small')?.pricing).toEqual({ per_input_token: 0.0000005, per_output_token: 0.0000015, per_cached_input_token: 0.0000001 });
    expect(byId.get('nebula/image-1')?.pricing).toEqual({
      per_input_text_token: 0.000005,
      per_input_image_token: 0.00001,
      per_output_image_token: 0.00004,
    });
    expect(byId.get('nebula/free-chat')?.pricing).toEqual({});
    expect(byId.get('orbit/transcribe-1')?.supported_endpoints.sort()).toEqual(['audio.transcriptions', 'audio.translations']);
    expect(byId.get('nebula/image-1')).toMatchObject({ max_images: 4, aliases: ['image-1'], limit_group: 'media' });
    expect(byId.get('orbit/speech-1')?.available_tiers.sort()).toEqual(['free', 'tier-1', 'tier-2', 'tier-3', 'tier-4']);
    // The example config covers every endpoint kind and at least 3 publishers.
    expect(new Set(anonymous.flatMap((model) => model.supported_endpoints))).toEqual(new Set(ALL_ENDPOINTS));
    expect(new Set(anonymous.map((model) => model.owned_by)).size).toBeGreaterThanOrEqual(3);
  });

  it.each([
    ['0', false],
    ['0.04', false],
    ['0.05', true],
    ['10', true],
  ])('with a key of an account holding %s credits, lists paid models: %s', async (balance, paidListed) => {
    const listing = await listModels(stack.url, accounts.get(balance)!.apiKey);
    expect(listing.status).toBe(200);
    const expected = paidListed ? anonymous : anonymous.filter(isFree);
    // Same entries, same order (newest first), whole.
    expect(listing.data).toEqual(expected);
    expect(listing.data.some(isFree)).toBe(true);
    expect(listing.data.some((model) => !isFree(model))).toBe(paidListed);
  });

  it('the openai client lists through x-api-key too; an invalid key is 401', async () => {
    const response = await fetch(`${stack.url}/v1/models`, { headers: { 'x-api-key': accounts.get('0.04')!.apiKey } });
    expect(((await response.json()) as { data: ListedModel[] }).data.map((model) => model.id)).toEqual(anonymous.filter(isFree).map((model) => model.id));
    const page = await new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: accounts.get('10')!.apiKey, maxRetries: 0 }).models.list();
    expect(page.data.map((model) => model.id)).toEqual(anonymous.map((model) => model.id));
    const wrong = await new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: 'gw-api-not-a-real-key', maxRetries: 0 }).models.list().catch((error: unknown) => error);
    expect(wrong).toBeInstanceOf(OpenAI.AuthenticationError);
    const listing = await listModels(stack.url, 'gw-api-not-a-real-key');
    expect(listing.status).toBe(401);
    expect(listing.headers.get('x-request-id')).toBeTruthy();
  });

  it('GET /v1/models/{id} answers one model by id or alias (reporting the catalog id), 404 otherwise', async () => {
    const client = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: accounts.get('0')!.apiKey, maxRetries: 0 });
    const byId = await client.models.retrieve('acme/chat-small');
    expect(byId).toEqual(anonymous.find((model) => model.id === 'acme/chat-small'));
    const byAlias = await client.models.retrieve('chat-small');
    expect(byAlias.id).toBe('acme/chat-small');
    const anonymousAlias = await fetch(`${stack.url}/v1/models/embed-small`);
    expect(((await anonymousAlias.json()) as ListedModel).id).toBe('acme/embed-small');
    const missing = await client.models.retrieve('nobody/nothing').catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    const missingRaw = await fetch(`${stack.url}/v1/models/nobody/nothing`);
    expect(missingRaw.status).toBe(404);
    expect(missingRaw.headers.get('x-request-id')).toBeTruthy();
    expect(((await missingRaw.json()) as { error: { code: string } }).error.code).toBe('model_not_found');
  });

  it('GET /v1/startups is public, ordered by name, and every icon_url serves SVG', async () => {
    const anonymousStartups = await fetch(`${stack.url}/v1/startups`);
    const withKey = await fetch(`${stack.url}/v1/startups`, { headers: { authorization: 'Bearer gw-api-not-a-real-key' } });
    expect(withKey.status).toBe(200);
    const body = (await anonymousStartups.json()) as { object: string; data: Record<string, unknown>[] };
    expect(await withKey.json()).toEqual(body);
    expect(body.object).toBe('list');
    const names = body.data.map((startup) => startup.display_name as string);
    expect(names).toEqual([...names].sort((a, b) => a.localeCompare(b)));
    expect(body.data.map((startup) => startup.id)).toEqual(['acme', 'nebula', 'orbit']);
    for (const startup of body.data) {
      expect(startup).toMatchObject({ object: 'startup' });
      expect(Number.isInteger(startup.created)).toBe(true);
      expect(typeof startup.website_url === 'string' || startup.website_url === null).toBe(true);
      const icon = await fetch(`${stack.url}${startup.icon_url as string}`);
      expect(icon.status).toBe(200);
      expect(icon.headers.get('content-type')).toBe('image/svg+xml');
      expect(await icon.text()).toMatch(/<svg[\s>]/);
    }
    // Every model's owner is a listed startup.
    const ids = new Set(body.data.map((startup) => startup.id));
    for (const model of anonymous) if (model.owned_by !== null) expect(ids).toContain(model.owned_by);
  });

  it('GET /v1/limits: every group and tier without a key; the account tier values with one', async () => {
    const general = (await (await fetch(`${stack.url}/v1/limits`)).json()) as {
      object: string;
      data: { id: string; object: string; tiers: Record<string, { minute: number; day?: number }> }[];
    };
    expect(general.object).toBe('list');
    expect(general.data.map((group) => group.id).sort()).toEqual(['default', 'media']);
    const media = general.data.find((group) => group.id === 'media')!;
    expect(media.object).toBe('limit_group');
    expect(media.tiers.free).toEqual({ minute: 5, day: 50 });
    expect(Object.keys(media.tiers).sort()).toEqual(['free', 'tier-1', 'tier-2', 'tier-3', 'tier-4']);

    const mine = (await (
      await fetch(`${stack.url}/v1/limits`, { headers: { authorization: `Bearer ${accounts.get('10')!.apiKey}` } })
    ).json()) as typeof general;
    expect(mine.data).toEqual([
      { id: 'default', object: 'limit_group', tiers: { 'tier-2': { minute: 1500 } } },
      { id: 'media', object: 'limit_group', tiers: { 'tier-2': { minute: 120 } } },
    ]);
    const wrong = await fetch(`${stack.url}/v1/limits`, { headers: { authorization: 'Bearer gw-api-not-a-real-key' } });
    expect(wrong.status).toBe(401);
  });
});
