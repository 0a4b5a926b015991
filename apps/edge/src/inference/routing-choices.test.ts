import { describe, expect, it } from 'vitest';
import type { CatalogServiceClient, ChatRequest, GetSnapshotResponse } from '@gateway/proto';
import type { PromiseClient } from '@gateway/platform';
import { testLogger } from '@gateway/testing';
import { model } from '../../test/fakes.js';
import type { VerifiedApiKey } from './auth-cache.js';
import { CatalogCache, type CatalogModel } from '../catalog-cache.js';
import { sentParameters, unsupportedFields } from '../canonical/parameters.js';
import type { EdgeContext } from '../context.js';
import { newChatRequest } from '../canonical/request.js';
import { chooseModels, hasRoutingChoices, primaryModelFromModels, providerField, routingChoices } from './routing-choices.js';
import { refusalOf as refusal } from '../../test/refusal.js';

// The edge's half of model fallbacks and provider preferences: every named model resolved, the
// preferences it can judge alone applied with exact money, what routing gets.

const snapshot: GetSnapshotResponse = {
  version: 'v1',
  unchanged: false,
  moderationModel: '', defaultModels: {},
  models: [
    // 1 and 2 credits per million tokens.
    model({ id: 'acme/cheap', pricing: { perInputToken: '0.000001', perOutputToken: '0.000002' }, offers: [{ providerId: 'p1', upstreamModel: 'c', endpoints: ['chat.completions'] }] }),
    // 3 and 5 credits per million tokens, on two providers, without top_p.
    model({
      id: 'acme/dear',
      aliases: ['dear'],
      pricing: { perInputToken: '0.000003', perOutputToken: '0.000005' },
      supportedParameters: ['temperature', 'max_completion_tokens'],
      offers: [
        { providerId: 'p1', upstreamModel: 'd', endpoints: ['chat.completions'] },
        { providerId: 'p2', upstreamModel: 'd', endpoints: ['chat.completions'] },
      ],
    }),
    model({ id: 'acme/embed', offers: [{ providerId: 'p1', upstreamModel: 'e', endpoints: ['embeddings'] }] }),
  ],
  providers: [],
  startups: [],
  limitGroups: [{ id: 'default', tiers: {} }],
};

async function edgeContext(): Promise<EdgeContext> {
  const catalog = { getSnapshot: async () => snapshot } as unknown as PromiseClient<CatalogServiceClient>;
  const catalogCache = new CatalogCache({ catalog, logger: testLogger('routing-choices-test'), now: () => 1_800_000_000_000 });
  await catalogCache.refresh();
  return { catalogCache, now: () => 1_800_000_000_000 } as unknown as EdgeContext;
}

const key: VerifiedApiKey = { accountId: 'acct', keyId: 'key', tier: 'tier-1', defaultRoutingStrategy: '' };

function body(fields: Record<string, unknown>) {
  const parsed: Record<string, unknown> = { model: 'acme/cheap', messages: [{ role: 'user', content: 'hi' }], ...fields };
  if (parsed.provider) parsed.provider = providerField.parse(parsed.provider);
  return parsed;
}

const ids = (models: CatalogModel[]) => models.map((one) => one.id);

describe('routing choices at the edge', () => {
  it('costs an ordinary body two property reads: no models, no provider, no choices', () => {
    expect(hasRoutingChoices({ model: 'm' })).toBe(false);
    expect(hasRoutingChoices({ model: 'm', models: null, provider: null })).toBe(false);
    expect(hasRoutingChoices({ model: 'm', models: ['a'] })).toBe(true);
    expect(hasRoutingChoices({ model: 'm', provider: {} })).toBe(true);
  });

  it('takes the first of `models` as the model when `model` is absent, and keeps `model` first when both are given', () => {
    expect(primaryModelFromModels({ models: ['a', 'b'] })).toEqual({ model: 'a', models: ['a', 'b'] });
    expect(primaryModelFromModels({ model: 'x', models: ['a'] })).toEqual({ model: 'x', models: ['a'] });
  });

  it('resolves every named model once (aliases too), in order; an unknown or wrong-endpoint name is a 400 naming it', async () => {
    const context = await edgeContext();
    const cheap = context.catalogCache.resolve('acme/cheap')!;
    expect(ids(chooseModels(context, body({ models: ['acme/cheap', 'dear', 'acme/dear'] }), cheap, 'chat.completions', key).models)).toEqual(['acme/cheap', 'acme/dear']);
    expect(refusal(() => chooseModels(context, body({ models: ['acme/dear', 'acme/none'] }), cheap, 'chat.completions', key))).toMatchObject({ status: 400, code: 'model_not_found', param: 'body.models.1' });
    expect(refusal(() => chooseModels(context, body({ models: ['acme/embed'] }), cheap, 'chat.completions', key))).toMatchObject({ status: 400, code: 'unsupported_endpoint' });
  });

  it('max_price compares exactly per million tokens; none left is 400 no_provider_matches', async () => {
    const context = await edgeContext();
    const cheap = context.catalogCache.resolve('acme/cheap')!;
    const choose = (maxPrice: Record<string, unknown>) => chooseModels(context, body({ models: ['acme/dear'], provider: { max_price: maxPrice } }), cheap, 'chat.completions', key);
    expect(ids(choose({ prompt: '3', completion: 5 }).models)).toEqual(['acme/cheap', 'acme/dear']);
    expect(ids(choose({ prompt: '2.999999999999' }).models)).toEqual(['acme/cheap']);
    expect(ids(choose({ completion: '2' }).models)).toEqual(['acme/cheap']);
    expect(refusal(() => choose({ completion: '1.999999999999' }))).toMatchObject({ status: 400, code: 'no_provider_matches', param: 'body.provider' });
    expect(() => providerField.parse({ max_price: { prompt: 'one' } })).toThrow();
    expect(() => providerField.parse({ max_price: { prompt: '-1' } })).toThrow();
    expect(() => providerField.parse({ max_price: { request: '1' } })).toThrow();
  });

  it('only / ignore / allow_fallbacks: false leave out models without an allowed offer', async () => {
    const context = await edgeContext();
    const cheap = context.catalogCache.resolve('acme/cheap')!;
    const choose = (provider: Record<string, unknown>) => ids(chooseModels(context, body({ models: ['acme/dear'], provider }), cheap, 'chat.completions', key).models);
    expect(choose({ only: ['p2'] })).toEqual(['acme/dear']);
    expect(choose({ ignore: ['p1'] })).toEqual(['acme/dear']);
    expect(choose({ order: ['p2'], allow_fallbacks: false })).toEqual(['acme/dear']);
    expect(choose({ order: ['p2'] })).toEqual(['acme/cheap', 'acme/dear']);
    expect(choose({ ignore: ['unknown-provider'] })).toEqual(['acme/cheap', 'acme/dear']);
    expect(refusal(() => choose({ only: ['nobody'] }))).toMatchObject({ code: 'no_provider_matches' });
  });

  it('require_parameters keeps only models that list every parameter sent', async () => {
    const context = await edgeContext();
    const cheap = context.catalogCache.resolve('acme/cheap')!;
    expect(sentParameters('chat', { top_p: 0.5, temperature: 1, stop: [] })).toEqual(['temperature', 'top_p']);
    const choose = (fields: Record<string, unknown>) => ids(chooseModels(context, body({ models: ['acme/dear'], provider: { require_parameters: true }, ...fields }), cheap, 'chat.completions', key).models);
    expect(choose({ temperature: 1 })).toEqual(['acme/cheap', 'acme/dear']);
    expect(choose({ top_p: 0.5 })).toEqual(['acme/cheap']);
  });

  it('tells routing which fields of the converted request each fallback lacks, and the preferences', async () => {
    const context = await edgeContext();
    const cheap = context.catalogCache.resolve('acme/cheap')!;
    const dear = context.catalogCache.resolve('acme/dear')!;
    const request: ChatRequest = { ...newChatRequest('acme/cheap', 'chat.completions', [], false), temperature: 0.5, topP: 0.5, stop: ['x'] };
    expect(unsupportedFields(request, dear)).toEqual(['topP', 'stop']);
    expect(unsupportedFields(request, cheap)).toEqual([]);
    const chosen = chooseModels(context, body({ models: ['acme/dear'], provider: { order: ['p2'], sort: 'latency' } }), cheap, 'chat.completions', key);
    expect(routingChoices(request, chosen)).toEqual({
      fallbackModels: [{ modelId: 'acme/dear', unsupportedFields: ['topP', 'stop'] }],
      order: ['p2'],
      orderOnly: false,
      only: [],
      ignore: [],
      sort: 'latency',
    });
    // Only p2 allowed: the cheap model (p1 only) is left out, the dear one is the request's model, no fallback left.
    const ordered = chooseModels(context, body({ models: ['acme/dear'], provider: { order: ['p2'], allow_fallbacks: false } }), cheap, 'chat.completions', key);
    expect(ids(ordered.models)).toEqual(['acme/dear']);
    expect(routingChoices(request, ordered)).toMatchObject({ fallbackModels: [], order: ['p2'], orderOnly: true });
  });
});
