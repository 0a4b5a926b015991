import { describe, expect, it } from 'vitest';
import type { CatalogServiceClient, GetSnapshotResponse } from '@gateway/proto';
import type { PromiseClient } from '@gateway/platform';
import { testLogger } from '@gateway/testing';
import { model } from '../../test/fakes.js';
import type { VerifiedApiKey } from './auth-cache.js';
import { CatalogCache, tierMayUse } from '../catalog-cache.js';
import type { EdgeContext } from '../context.js';
import { resolveModel } from './model-resolution.js';
import { refusalOf as refusal } from '../../test/refusal.js';

// Who may use a model (spec §7's 403): the tiers its limit group names, precomputed per snapshot;
// judged in resolveModel, the step every inference route shares, in its place among the other refusals.
const EVERY_TIER = ['free', 'tier-1', 'tier-2', 'tier-3', 'tier-4'];
const NOW_SECONDS = 1_800_000_000;

const snapshot: GetSnapshotResponse = {
  version: 'v1',
  unchanged: false,
  moderationModel: '', defaultModels: {},
  models: [
    model({ id: 'acme/top', aliases: ['top'], limitGroup: 'premium', created: 1_767_000_009n }),
    model({ id: 'acme/top-free', limitGroup: 'premium', pricing: {}, created: 1_767_000_008n }),
    model({
      id: 'acme/top-embed',
      limitGroup: 'premium',
      created: 1_767_000_007n,
      offers: [{ providerId: 'p', upstreamModel: 'e', endpoints: ['embeddings'] }],
    }),
    model({ id: 'acme/top-retired', limitGroup: 'premium', created: 1_767_000_006n, expiresAt: BigInt(NOW_SECONDS - 1) }),
    model({ id: 'acme/mid', limitGroup: 'default', created: 1_767_000_005n }),
    model({ id: 'acme/open', limitGroup: 'open', created: 1_767_000_004n }),
    model({ id: 'acme/orphan', limitGroup: 'not-in-snapshot', pricing: {}, created: 1_767_000_003n }),
  ],
  providers: [],
  startups: [],
  limitGroups: [
    // Written out of order: available_tiers is sorted whatever the wire order.
    { id: 'premium', tiers: { 'tier-4': { minute: 10 }, 'tier-3': { minute: 5 } } },
    { id: 'default', tiers: { free: { minute: 20, day: 200 }, 'tier-1': { minute: 600 } } },
    { id: 'open', tiers: {} },
  ],
};

async function loadedCache(): Promise<CatalogCache> {
  const catalog = { getSnapshot: async () => snapshot } as unknown as PromiseClient<CatalogServiceClient>;
  const cache = new CatalogCache({ catalog, logger: testLogger('model-resolution-test'), now: () => NOW_SECONDS * 1000 });
  await cache.refresh();
  return cache;
}

const key = (tier: string): VerifiedApiKey => ({ accountId: 'acct', keyId: 'key', tier, defaultRoutingStrategy: '' });

describe('catalog cache: the tiers a model is available to', () => {
  it("are its limit group's tiers, sorted; every tier when its group names none or it has no group", async () => {
    const cache = await loadedCache();
    expect(cache.resolve('acme/top')?.availableTiers).toEqual(['tier-3', 'tier-4']);
    expect(cache.resolve('acme/mid')?.availableTiers).toEqual(['free', 'tier-1']);
    expect(cache.resolve('acme/open')?.availableTiers).toEqual(EVERY_TIER);
    expect(cache.resolve('acme/orphan')?.availableTiers).toEqual(EVERY_TIER);
    const listed = new Map(
      (JSON.parse(cache.listingJson(false)) as { data: Array<{ id: string; available_tiers: string[] }> }).data.map((entry) => [entry.id, entry.available_tiers]),
    );
    expect(listed.get('acme/top')).toEqual(['tier-3', 'tier-4']);
    expect(listed.get('acme/open')).toEqual(EVERY_TIER);
    expect(listed.get('acme/orphan')).toEqual(EVERY_TIER);
  });

  it('are a Set built once per snapshot: every lookup, by id or alias, answers the same one', async () => {
    const cache = await loadedCache();
    const byId = cache.resolve('acme/top')!;
    expect(byId.allowedTiers).toBeInstanceOf(Set);
    expect(cache.resolve('top')!.allowedTiers).toBe(byId.allowedTiers);
    expect(cache.resolve('acme/top')!.allowedTiers).toBe(byId.allowedTiers);
    expect(cache.resolve('acme/open')!.allowedTiers).toBeNull();
  });

  it('decide who may use a model: a listed tier yes, any other tier no (an unknown or empty one too), an open model everyone', async () => {
    const cache = await loadedCache();
    const top = cache.resolve('acme/top')!;
    expect(['tier-3', 'tier-4'].map((tier) => tierMayUse(top, tier))).toEqual([true, true]);
    expect(['free', 'tier-1', 'tier-2', 'tier-9', ''].map((tier) => tierMayUse(top, tier))).toEqual([false, false, false, false, false]);
    for (const id of ['acme/open', 'acme/orphan']) {
      for (const tier of [...EVERY_TIER, 'tier-9', '']) expect(tierMayUse(cache.resolve(id)!, tier), `${id} ${tier}`).toBe(true);
    }
  });

  it('narrow the listing to what a tier may use, then by balance, in catalog order', async () => {
    const cache = await loadedCache();
    const ids = (text: string) => (JSON.parse(text) as { data: Array<{ id: string }> }).data.map((entry) => entry.id);
    expect(ids(cache.listingJson(false))).toEqual([
      'acme/top', 'acme/top-free', 'acme/top-embed', 'acme/top-retired', 'acme/mid', 'acme/open', 'acme/orphan',
    ]);
    expect(ids(cache.listingJson(false, 'tier-1'))).toEqual(['acme/mid', 'acme/open', 'acme/orphan']);
    expect(ids(cache.listingJson(true, 'tier-1'))).toEqual(['acme/orphan']);
    expect(ids(cache.listingJson(false, 'tier-4'))).toEqual(['acme/top', 'acme/top-free', 'acme/top-embed', 'acme/top-retired', 'acme/open', 'acme/orphan']);
    expect(ids(cache.listingJson(true, 'tier-4'))).toEqual(['acme/top-free', 'acme/orphan']);
    expect(ids(cache.listingJson(false, 'tier-9'))).toEqual(['acme/open', 'acme/orphan']);
    // A narrowed entry is the same text as the whole listing's (the expired flag included).
    const whole = (JSON.parse(cache.listingJson(false)) as { data: unknown[] }).data[3];
    expect((JSON.parse(cache.listingJson(false, 'tier-3')) as { data: unknown[] }).data[3]).toEqual(whole);
    expect(whole).toMatchObject({ id: 'acme/top-retired', expired: true });
  });

  it('keeps per-tier listings for a bounded number of tiers and still answers any other tier', async () => {
    const cache = await loadedCache();
    for (let index = 0; index < 40; index++) cache.listingJson(false, `tier-x${index}`);
    expect(cache.listingJson(false, 'tier-x39')).toBe(cache.listingJson(false, 'tier-9'));
    expect(JSON.parse(cache.listingJson(false, 'tier-4')).data).toHaveLength(6);
  });
});

describe('resolveModel: the tier check among the other refusals', () => {
  const context = async () => {
    const catalogCache = await loadedCache();
    return { catalogCache, now: () => NOW_SECONDS * 1000 } as unknown as EdgeContext;
  };

  it('answers a model to a tier its group names, by id and by alias', async () => {
    const edge = await context();
    expect(resolveModel(edge, 'acme/top', 'chat.completions', key('tier-4')).id).toBe('acme/top');
    expect(resolveModel(edge, 'top', 'chat.completions', key('tier-3')).id).toBe('acme/top');
    expect(resolveModel(edge, 'acme/mid', 'chat.completions', key('free')).id).toBe('acme/mid');
  });

  it('refuses any other tier with 403 model_not_available_for_tier naming the tier, the catalog id and who may', async () => {
    const edge = await context();
    for (const [name, tier] of [['acme/top', 'tier-1'], ['top', 'tier-2'], ['acme/top', 'free'], ['acme/top', 'tier-9'], ['acme/mid', 'tier-4']] as const) {
      const apiError = refusal(() => resolveModel(edge, name, 'chat.completions', key(tier)));
      expect(apiError, `${name} ${tier}`).toMatchObject({ status: 403, type: 'permission_error', code: 'model_not_available_for_tier', param: 'body.model' });
    }
    expect(refusal(() => resolveModel(edge, 'top', 'chat.completions', key('tier-1'))).message).toBe(
      "Your account's tier `tier-1` may not use model `acme/top` (available to: tier-3, tier-4).",
    );
  });

  it('lets every tier use a model whose group names no tier, or that has no group', async () => {
    const edge = await context();
    for (const tier of [...EVERY_TIER, 'tier-9']) {
      expect(resolveModel(edge, 'acme/open', 'chat.completions', key(tier)).id).toBe('acme/open');
      expect(resolveModel(edge, 'acme/orphan', 'chat.completions', key(tier)).id).toBe('acme/orphan');
    }
  });

  it('comes after unknown (400) and retired (410), before the endpoint check (400)', async () => {
    const edge = await context();
    expect(refusal(() => resolveModel(edge, 'acme/nothing', 'chat.completions', key('tier-1')))).toMatchObject({ status: 400, code: 'model_not_found' });
    expect(refusal(() => resolveModel(edge, 'acme/top-retired', 'chat.completions', key('tier-1')))).toMatchObject({ status: 410, code: 'model_gone' });
    expect(refusal(() => resolveModel(edge, 'acme/top-embed', 'chat.completions', key('tier-1')))).toMatchObject({ status: 403 });
    expect(refusal(() => resolveModel(edge, 'acme/top-embed', 'chat.completions', key('tier-4')))).toMatchObject({
      status: 400,
      code: 'unsupported_endpoint',
    });
    expect(resolveModel(edge, 'acme/top-embed', 'embeddings', key('tier-4')).id).toBe('acme/top-embed');
  });
});

describe('resolveModel: a request that names no model (issue 37: moderations and images)', () => {
  it("gets the catalog's default for its endpoint, judged like a named one; without a default, 400 at body.model", async () => {
    const defaults: GetSnapshotResponse = { ...snapshot, defaultModels: { embeddings: 'acme/top-embed', moderations: 'acme/top-retired' } };
    const catalog = { getSnapshot: async () => defaults } as unknown as PromiseClient<CatalogServiceClient>;
    const catalogCache = new CatalogCache({ catalog, logger: testLogger('model-resolution-test'), now: () => NOW_SECONDS * 1000 });
    await catalogCache.refresh();
    const edge = { catalogCache, now: () => NOW_SECONDS * 1000 } as unknown as EdgeContext;
    expect(resolveModel(edge, '', 'embeddings', key('tier-4')).id).toBe('acme/top-embed');
    // The default is checked like any model: this tier may not use it.
    expect(refusal(() => resolveModel(edge, '', 'embeddings', key('free')))).toMatchObject({ status: 403 });
    expect(refusal(() => resolveModel(edge, '', 'moderations', key('tier-4')))).toMatchObject({ status: 410 });
    expect(refusal(() => resolveModel(edge, '', 'images.generations', key('tier-4')))).toEqual(
      expect.objectContaining({ status: 400, param: 'body.model', message: 'body.model: is required: this gateway has no default model for images.generations.' }),
    );
  });
});
