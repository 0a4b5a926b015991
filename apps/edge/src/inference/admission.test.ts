import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { LedgerServiceClient, LedgerServiceService, type CatalogServiceClient, type GetSnapshotResponse, type Usage } from '@gateway/proto';
import { createClient, ErrorReason, GatewayError, GrpcStatus, parseCredits, type PromiseClient } from '@gateway/platform';
import { testLogger } from '@gateway/testing';
import { model, startFakeServices, type FakeServices } from '../../test/fakes.js';
import { anyPaid, LedgerAdmission, limitedGroups } from './admission.js';
import type { VerifiedApiKey } from './auth-cache.js';
import { CatalogCache, type CatalogModel } from '../catalog-cache.js';
import { dearestEstimatePico, estimateCostPico } from './leased-admission.js';

// Issue 35: admission of a request with model fallbacks covers every model that may serve it — paid
// when any is, the rate window of every limited group among them — not only the model it names.

const FREE_PRICES = { perInputToken: '0', perOutputToken: '0' };
const snapshot: GetSnapshotResponse = {
  version: 'v1',
  unchanged: false,
  moderationModel: '', defaultModels: {},
  models: [
    model({ id: 'acme/free', pricing: FREE_PRICES, limitGroup: 'free' }),
    model({ id: 'acme/free-open', pricing: FREE_PRICES, limitGroup: 'open' }),
    model({ id: 'acme/paid', pricing: { perInputToken: '0.000001', perOutputToken: '0.000002' }, limitGroup: 'default' }),
    model({ id: 'acme/dear', pricing: { perInputToken: '0.000003', perOutputToken: '0.00003' }, limitGroup: 'default' }),
    model({ id: 'acme/scarce', pricing: { perInputToken: '0.000001', perOutputToken: '0.000001' }, limitGroup: 'scarce' }),
  ],
  providers: [],
  startups: [],
  limitGroups: [
    { id: 'free', tiers: { 'tier-1': { minute: 20, day: 200 } } },
    { id: 'default', tiers: { 'tier-1': { minute: 600 } } },
    { id: 'scarce', tiers: { 'tier-1': { minute: 3 }, 'tier-2': { minute: 30 } } },
    { id: 'open', tiers: {} },
  ],
};

const key: VerifiedApiKey = { accountId: 'acct', keyId: 'key', tier: 'tier-1', defaultRoutingStrategy: '' };
let models: Record<string, CatalogModel>;

beforeAll(async () => {
  const catalog = { getSnapshot: async () => snapshot } as unknown as PromiseClient<CatalogServiceClient>;
  const cache = new CatalogCache({ catalog, logger: testLogger('admission-test'), now: () => 1_800_000_000_000 });
  await cache.refresh();
  models = Object.fromEntries(snapshot.models.map((entry) => [entry.id, cache.resolve(entry.id)!]));
});

describe('the candidates of a request with fallbacks', () => {
  it('is paid when any model that may serve is paid', () => {
    expect(anyPaid([models['acme/free']!, models['acme/free-open']!])).toBe(false);
    expect(anyPaid([models['acme/free']!, models['acme/paid']!])).toBe(true);
    expect(anyPaid([models['acme/paid']!, models['acme/free']!])).toBe(true);
  });

  it('is counted in each limited group once, in the order its models come; a group without limits for the tier counts nowhere', () => {
    const ids = (list: CatalogModel[]) => list.map((entry) => entry.id);
    expect(ids(limitedGroups([models['acme/free-open']!, models['acme/paid']!, models['acme/dear']!, models['acme/scarce']!, models['acme/free']!], 'tier-1')))
      .toEqual(['acme/paid', 'acme/scarce', 'acme/free']);
    // tier-2 has limits only in `scarce`.
    expect(ids(limitedGroups([models['acme/free']!, models['acme/paid']!, models['acme/scarce']!], 'tier-2'))).toEqual(['acme/scarce']);
    expect(limitedGroups([models['acme/free-open']!], 'tier-1')).toEqual([]);
  });

  it('settles a leased request at the dearest estimate of its models, whichever served', () => {
    const usage = { inputTokens: 100, outputTokens: 10 } as Usage;
    const candidates = [models['acme/free']!, models['acme/paid']!, models['acme/dear']!];
    const dear = estimateCostPico(usage, models['acme/dear']!.model.pricing);
    // 110 counts × (0.000003 + 0.00003).
    expect(dear).toBe(110n * parseCredits('0.000033'));
    expect(dearestEstimatePico(usage, candidates)).toBe(dear);
    expect(dearestEstimatePico(usage, [models['acme/free']!])).toBe(0n);
  });
});

describe('LedgerAdmission of a request with fallbacks (a fake ledger over gRPC)', () => {
  let services: FakeServices;
  let admission: LedgerAdmission;
  let ledger: ReturnType<typeof createClient<LedgerServiceClient>>;

  beforeAll(async () => {
    services = await startFakeServices(snapshot, testLogger('admission-test'));
    ledger = createClient(LedgerServiceClient, LedgerServiceService, services.addresses.ledgerAddress);
    admission = new LedgerAdmission(ledger, testLogger('admission-test'));
  });
  afterAll(async () => {
    ledger?.close();
    await services?.stop();
  });
  beforeEach(() => {
    services.ledger.admits.length = 0;
    services.ledger.releases.length = 0;
    services.ledger.admitError = undefined;
    services.ledger.refuseAdmit = undefined;
  });

  const hold = parseCredits('0.2');

  it('a free first model with a paid fallback is admitted as paid, with the hold, counted in the free model’s window and the paid one’s', async () => {
    const candidates = [models['acme/free']!, models['acme/scarce']!];
    await admission.admit({ requestId: 'req-1', key: { ...key, creditLimit: '0.1' }, model: candidates[0]!, candidates, paid: true, holdPico: hold });
    const [own, other] = services.ledger.admits;
    expect(own).toMatchObject({ context: { requestId: 'req-1' }, paid: true, reserveCredits: '0.2', keyCreditLimit: '0.1', limitGroup: 'free', requestsPerMinute: 20, requestsPerDay: 200 });
    // The other group's window: a free Admit under a request id of its own, released at once.
    expect(other).toMatchObject({ context: { requestId: 'req-1/rate/1' }, paid: false, limitGroup: 'scarce', requestsPerMinute: 3 });
    expect(other!.reserveCredits).toBeUndefined();
    expect(other!.keyCreditLimit).toBeUndefined();
    expect(services.ledger.admits).toHaveLength(2);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(services.ledger.releases.map((release) => release.context?.requestId)).toEqual(['req-1/rate/1']);
  });

  it('models in one limited group are counted once, in that group', async () => {
    const candidates = [models['acme/free-open']!, models['acme/paid']!, models['acme/dear']!];
    await admission.admit({ requestId: 'req-2', key, model: candidates[0]!, candidates, paid: true, holdPico: hold });
    expect(services.ledger.admits).toHaveLength(1);
    // The first model's group has no limits: the request is counted in its fallbacks' group.
    expect(services.ledger.admits[0]).toMatchObject({ paid: true, limitGroup: 'default', requestsPerMinute: 600 });
  });

  it('a full window in another group refuses the request and gives back what it was admitted with', async () => {
    const candidates = [models['acme/free']!, models['acme/scarce']!];
    // The fake ledger finds the `scarce` window full.
    services.ledger.refuseAdmit = (request) =>
      request.limitGroup === 'scarce' ? new GatewayError(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_RATE_LIMITED, 'Rate limit reached.', { retryAfterSeconds: 30 }) : undefined;
    await expect(admission.admit({ requestId: 'req-3', key, model: candidates[0]!, candidates, paid: true, holdPico: hold })).rejects.toMatchObject({ status: GrpcStatus.RESOURCE_EXHAUSTED });
    const admitted = services.ledger.admits;
    expect(admitted.map((request) => request.context?.requestId)).toEqual(['req-3', 'req-3/rate/1']);
    expect(services.ledger.releases.map((release) => release.context?.requestId)).toEqual(['req-3']);
  });

  it('a request without fallbacks is admitted as before: its model, its group, one Admit', async () => {
    const paid = models['acme/paid']!;
    await admission.admit({ requestId: 'req-4', key, model: paid, candidates: undefined, paid: true, holdPico: hold });
    expect(services.ledger.admits).toHaveLength(1);
    expect(services.ledger.admits[0]).toMatchObject({ modelId: 'acme/paid', paid: true, limitGroup: 'default', requestsPerMinute: 600, reserveCredits: '0.2' });
  });
});
