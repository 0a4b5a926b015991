import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { LedgerServiceClient, LedgerServiceService, type CatalogServiceClient, type GetSnapshotResponse } from '@gateway/proto';
import { createClient, ErrorReason, GatewayError, GrpcStatus, parseCredits, type PromiseClient } from '@gateway/platform';
import { testLogger } from '@gateway/testing';
import { model, startFakeServices, type FakeServices } from '../../test/fakes.js';
import { LedgerAdmission, type AdmissionRequest } from './admission.js';
import type { VerifiedApiKey } from './auth-cache.js';
import { CatalogCache, type CatalogModel } from '../catalog-cache.js';
import { LeasedAdmission } from './leased-admission.js';

// Issue 36 item 1, the holder's side: every lease a replica holds is renewed in one RenewLeases call
// every few seconds, and a lease is admitted on only within the window the ledger named after the
// call that last granted or renewed it (renew_within_ms) — so a replica cut off from the ledger stops
// admitting before the ledger may close its leases, and one whose leases the ledger lost drops them.

const snapshot: GetSnapshotResponse = {
  version: 'v1', unchanged: false, moderationModel: '', defaultModels: {},
  models: [model({ id: 'acme/paid', pricing: { perInputToken: '0.000001', perOutputToken: '0.000002' }, limitGroup: 'open' })],
  providers: [], startups: [], limitGroups: [{ id: 'open', tiers: {} }],
};
const key: VerifiedApiKey = { accountId: 'acct', keyId: 'key', tier: 'tier-1', defaultRoutingStrategy: '' };
const unavailable = () => new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_INTERNAL, 'ledger restarting');

let paid: CatalogModel;
let services: FakeServices;
let ledger: ReturnType<typeof createClient<LedgerServiceClient>>;
let leased: LeasedAdmission;
let requests = 0;

const request = (): AdmissionRequest => ({ requestId: `req-${++requests}`, key, model: paid, candidates: undefined, paid: true, holdPico: parseCredits('0.05') });

beforeAll(async () => {
  const catalog = { getSnapshot: async () => snapshot } as unknown as PromiseClient<CatalogServiceClient>;
  const cache = new CatalogCache({ catalog, logger: testLogger('lease-renewal-test'), now: () => 1_800_000_000_000 });
  await cache.refresh();
  paid = cache.resolve('acme/paid')!;
  services = await startFakeServices(snapshot, testLogger('lease-renewal-test'));
  ledger = createClient(LedgerServiceClient, LedgerServiceService, services.addresses.ledgerAddress);
});
afterAll(async () => {
  ledger?.close();
  await services?.stop();
});
beforeEach(() => {
  const fake = services.ledger;
  fake.acquisitions.length = 0;
  fake.returns.length = 0;
  fake.renewals.length = 0;
  fake.renewFailure = undefined;
  fake.lostLeases.clear();
  fake.renewWithinMs = 600;
  leased = new LeasedAdmission({ ledger, logger: testLogger('lease-renewal-test'), holder: 'edge-test', fallback: new LedgerAdmission(ledger, testLogger('lease-renewal-test')) });
});
afterEach(async () => { await leased.stop(); });

describe('lease renewal at the holder', () => {
  it('renews every held lease in one call, three times per window, and keeps admitting on it past the window', async () => {
    const first = await leased.admit(request());
    expect(first.leaseId).toBe('lease-1');
    await new Promise((resolve) => setTimeout(resolve, 1_300));
    // Renewed about every 200 ms (a third of the 600 ms window), the one lease per call.
    expect(services.ledger.renewals.length).toBeGreaterThanOrEqual(3);
    expect(services.ledger.renewals.every((renewal) => renewal.holder === 'edge-test' && renewal.leaseIds.join() === 'lease-1')).toBe(true);
    // Past its first window (600 ms), still the same lease: the renewals kept it valid.
    expect((await leased.admit(request())).leaseId).toBe('lease-1');
    expect(services.ledger.acquisitions).toHaveLength(1);
  });

  it('cut off from the ledger: admits nothing more on a lease whose window passed without a renewal', async () => {
    expect((await leased.admit(request())).leaseId).toBe('lease-1');
    services.ledger.renewFailure = unavailable();
    // Within the window of the last renewal it still admits (the ledger keeps the lease a drain time longer).
    expect((await leased.admit(request())).leaseId).toBe('lease-1');
    await new Promise((resolve) => setTimeout(resolve, 900));
    expect(services.ledger.renewals.length).toBeGreaterThanOrEqual(1);
    // The window passed: the next request does not use lease-1, it acquires (here the fake still grants).
    expect((await leased.admit(request())).leaseId).toBe('lease-2');
    expect(services.ledger.acquisitions).toHaveLength(2);
  });

  it('drops a lease the ledger no longer holds open for it (closed or returned), without returning it', async () => {
    expect((await leased.admit(request())).leaseId).toBe('lease-1');
    services.ledger.lostLeases.add('lease-1');
    const renewalsBefore = services.ledger.renewals.length;
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(services.ledger.renewals.length).toBeGreaterThan(renewalsBefore);
    expect((await leased.admit(request())).leaseId).toBe('lease-2');
    await leased.stop();
    // Only lease-2 goes back at stop; lease-1 was the ledger's to close.
    expect(services.ledger.returns.map((entry) => entry.leaseId)).toEqual(['lease-2']);
  });
});
