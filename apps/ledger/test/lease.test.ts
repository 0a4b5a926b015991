import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ErrorReason, GatewayError, GrpcStatus, parseCredits, subjects } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { LeaseRecall, UsageEvent, type AcquireLeaseRequest } from '@gateway/proto';
import { eventually, uniqueName } from '@gateway/testing';
import { createLedgerHarness, fundedAccount, type LedgerClient, type LedgerHarness, rejection, usageEvent } from './harness.js';

// usageEvent()'s default usage at CHAT_PRICES: 600 × 0.0000005 + 400 × 0.0000001 + 200 × 0.0000015
const CHAT_COST = '0.00064';

let harness: LedgerHarness;
beforeEach(async () => { harness = await createLedgerHarness(); });
afterEach(async () => { await harness?.close(); });

function acquire(client: LedgerClient, fields: Partial<AcquireLeaseRequest> & { accountId: string; requestedCredits: string }) {
  return client.acquireLease({ keyId: 'key_a', holder: 'edge-test', limitGroup: '', requestedRequests: 0, recallIfHeld: false, ...fields });
}

async function keyReserved(keyId: string): Promise<bigint> {
  const row = await harness.db.selectFrom('key_totals').select('reserved_pico').where('key_id', '=', keyId).executeTakeFirst();
  return row?.reserved_pico ?? 0n;
}

async function cleanJournal(client: LedgerClient, accountId: string): Promise<void> {
  expect((await client.verifyJournal({ accountId })).mismatches).toEqual([]);
  // VerifyJournal logs reserved drift only: check the same invariant here, leases included.
  const open = await sql<{ total: string | null }>`
    select (coalesce((select sum(amount_pico) from ledger.reservations where account_id = ${accountId} and closed_at is null), 0)
          + coalesce((select sum(granted_pico - settled_pico) from ledger.leases where account_id = ${accountId} and closed_at is null), 0))::text as total`
    .execute(harness.db);
  expect((await client.getBalance({ accountId })).reserved).toBe(formatPico(BigInt(open.rows[0]!.total ?? '0')));
}

function formatPico(pico: bigint): string {
  const whole = pico / 1_000_000_000_000n;
  const fraction = (pico % 1_000_000_000_000n).toString().padStart(12, '0').replace(/0+$/, '');
  return fraction ? `${whole}.${fraction}` : `${whole}`;
}

describe('leases', () => {
  it('grants min(requested, available) — at most half of a small balance — within the key credit limit, and refuses below 0.05', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client, '1');
    const first = await acquire(client, { accountId, requestedCredits: '0.4' });
    expect(first.grantedCredits).toBe('0.4');
    expect(await client.getBalance({ accountId })).toEqual({ balance: '1', available: '0.6', reserved: '0.4' });
    // 0.6 available is less than twice 0.7: half of it, the rest left for another holder.
    const second = await acquire(client, { accountId, requestedCredits: '0.7' });
    expect(second.grantedCredits).toBe('0.3');
    // Half of 0.3 in whole holds (0.05 each): 0.15; then half of 0.15 rounds down to one hold.
    expect((await acquire(client, { accountId, requestedCredits: '0.2' })).grantedCredits).toBe('0.15');
    expect((await acquire(client, { accountId, requestedCredits: '0.1' })).grantedCredits).toBe('0.05');
    // 0.1 left: half is one hold; then the last hold whole.
    // The split grant leaves a hold for another replica (more_available); the last grant takes the rest.
    expect(await acquire(client, { accountId, requestedCredits: '1' })).toMatchObject({ grantedCredits: '0.05', moreAvailable: true });
    expect(await acquire(client, { accountId, requestedCredits: '1' })).toMatchObject({ grantedCredits: '0.05', moreAvailable: false });
    const refused = await rejection(acquire(client, { accountId, requestedCredits: '0.05' }));
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA);
    expect(await keyReserved('key_a')).toBe(parseCredits('1'));

    const limited = await fundedAccount(client, '10');
    const keyId = uniqueName('key');
    const underLimit = await acquire(client, { accountId: limited, keyId, requestedCredits: '1', keyCreditLimit: '0.12' });
    expect(underLimit).toMatchObject({ grantedCredits: '0.12', moreAvailable: false });
    const overLimit = await rejection(acquire(client, { accountId: limited, keyId, requestedCredits: '1', keyCreditLimit: '0.12' }));
    expect(overLimit.reason).toBe(ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED);
    await cleanJournal(client, accountId);
    await cleanJournal(client, limited);
  });

  it('refuses a key credit limit that is negative or comes without its key', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client, '1');
    const negative = await rejection(acquire(client, { accountId, requestedCredits: '0.4', keyCreditLimit: '-1' }));
    expect([negative.status, negative.param]).toEqual([GrpcStatus.INVALID_ARGUMENT, 'key_credit_limit']);
    const keyless = await rejection(acquire(client, { accountId, requestedCredits: '0.4', keyCreditLimit: '1', keyId: '' }));
    expect([keyless.status, keyless.param]).toEqual([GrpcStatus.INVALID_ARGUMENT, 'key_id']);
    expect(await client.getBalance({ accountId })).toEqual({ balance: '1', available: '1', reserved: '0' });
  });

  it('minimum_credits: never grants less than the hold that asked, in the split and at the key limit; refuses below it', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client, '1');
    // Half of 1 would be 0.5; the asking request holds 0.6, so it gets 0.6.
    expect((await acquire(client, { accountId, requestedCredits: '0.8', minimumCredits: '0.6' })).grantedCredits).toBe('0.6');
    const refused = await rejection(acquire(client, { accountId, requestedCredits: '0.5', minimumCredits: '0.5' }));
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA);
    expect(refused.message).toContain('0.5');
    // Below 0.05 counts as 0.05: the last 0.4 is still grantable as ordinary holds.
    expect((await acquire(client, { accountId, requestedCredits: '0.4', minimumCredits: '0.01' })).grantedCredits).toBe('0.2');

    const limited = await fundedAccount(client, '10');
    const keyId = uniqueName('key');
    const overLimit = await rejection(acquire(client, { accountId: limited, keyId, requestedCredits: '1', minimumCredits: '0.2', keyCreditLimit: '0.15' }));
    expect(overLimit.reason).toBe(ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED);
    expect((await acquire(client, { accountId: limited, keyId, requestedCredits: '1', minimumCredits: '0.1', keyCreditLimit: '0.15' })).grantedCredits).toBe('0.15');
    const invalid = await rejection(acquire(client, { accountId: limited, requestedCredits: '0.1', minimumCredits: '0.2' }));
    expect(invalid.reason).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
    await cleanJournal(client, accountId);
    await cleanJournal(client, limited);
  });

  it('never over-grants under 500 concurrent acquisitions', async () => {
    const { client } = await harness.start({ maxConnections: 10 });
    const accountId = await fundedAccount(client, '5'); // 100 × 0.05
    const outcomes = await Promise.allSettled(
      Array.from({ length: 500 }, () => acquire(client, { accountId, keyId: uniqueName('key'), requestedCredits: '0.05' })),
    );
    const granted = outcomes.filter((outcome) => outcome.status === 'fulfilled');
    const refused = outcomes.filter((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected');
    expect(granted).toHaveLength(100);
    for (const outcome of refused) expect((outcome.reason as GatewayError).reason).toBe(ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA);
    expect(await client.getBalance({ accountId })).toEqual({ balance: '5', available: '0', reserved: '5' });
    await cleanJournal(client, accountId);
  }, 60_000);

  it('counts granted requests in the rate windows in bulk and refuses when the window is full', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client, '10');
    const limits = { limitGroup: 'group-a', requestsPerMinute: 30, requestsPerDay: 1_000 };
    const first = await acquire(client, { accountId, requestedCredits: '1', requestedRequests: 20, ...limits });
    expect(first.grantedRequests).toBe(20);
    expect(Number(first.requestsValidUntilMs)).toBeGreaterThan(Date.now());
    const second = await acquire(client, { accountId, requestedCredits: '1', requestedRequests: 20, ...limits });
    expect(second.grantedRequests).toBeLessThanOrEqual(10);
    const counts = await harness.db.selectFrom('rate_windows').select(['window_kind', 'request_count']).where('account_id', '=', accountId).execute();
    const minute = counts.find((row) => row.window_kind === 'minute')!.request_count;
    const day = counts.find((row) => row.window_kind === 'day')!.request_count;
    expect(minute).toBe(first.grantedRequests + second.grantedRequests);
    expect(day).toBe(minute);
    if (minute === 30) {
      const refused = await rejection(acquire(client, { accountId, requestedCredits: '1', requestedRequests: 1, ...limits }));
      expect(refused.reason).toBe(ErrorReason.ERROR_REASON_RATE_LIMITED);
      // The open leases counted in this window may not have used their requests: a recall is worth it.
      expect((await acquire(client, { accountId, requestedCredits: '1', requestedRequests: 1, recallIfHeld: true, ...limits })).recalling).toBe(true);
    }
    // Unused requests go back to the windows on return (never more than the lease was granted).
    expect((await client.returnLease({ leaseId: first.leaseId, unusedRequests: 1_000 })).returned).toBe(true);
    const after = await harness.db.selectFrom('rate_windows').select(['window_kind', 'request_count']).where('account_id', '=', accountId).execute();
    for (const row of after) expect(row.request_count).toBe(minute - first.grantedRequests);
    await cleanJournal(client, accountId);
  });

  it('settles a leased charge once, shrinking the lease instead of reserving twice; return gives back the rest', async () => {
    const { client } = await harness.start();
    const accountId = await fundedAccount(client, '1');
    const keyId = uniqueName('key');
    const lease = await acquire(client, { accountId, keyId, requestedCredits: '0.5' });
    const requestId = uniqueName('req');
    const event = usageEvent({ requestId, accountId, keyId, leaseId: lease.leaseId });
    const publish = (msgId: string) => harness.testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(event).finish(), msgId);
    await publish(requestId);
    await publish(`${requestId}-again`); // a duplicate with another msg-id: charged and moved once
    const afterCharge = formatPico(parseCredits('1') - parseCredits(CHAT_COST));
    const leaseRest = formatPico(parseCredits('0.5') - parseCredits(CHAT_COST));
    await eventually(async () => expect(await client.getBalance({ accountId })).toEqual({
      balance: afterCharge, available: formatPico(parseCredits(afterCharge) - parseCredits(leaseRest)), reserved: leaseRest,
    }));
    // A sentinel after the duplicate: once it is charged, the duplicate was handled too.
    const sentinel = uniqueName('sentinel');
    await harness.testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(usageEvent({ requestId: sentinel, accountId: uniqueName('other') })).finish(), sentinel);
    await eventually(async () => expect(await harness.db.selectFrom('charges').select('request_id').where('request_id', '=', sentinel).execute()).toHaveLength(1));
    const row = await harness.db.selectFrom('leases').selectAll().where('lease_id', '=', lease.leaseId).executeTakeFirstOrThrow();
    expect(row.settled_pico).toBe(parseCredits(CHAT_COST));
    expect(await keyReserved(keyId)).toBe(parseCredits(leaseRest));
    expect((await client.getKeyUsage({ accountId, keyIds: [keyId] })).usage[0]!.credits).toBe(CHAT_COST);
    await cleanJournal(client, accountId);

    const returned = await client.returnLease({ leaseId: lease.leaseId, unusedRequests: 0 });
    expect(returned).toEqual({ returned: true, returnedCredits: leaseRest });
    expect(await client.returnLease({ leaseId: lease.leaseId, unusedRequests: 0 })).toEqual({ returned: false, returnedCredits: '0' });
    expect(await client.getBalance({ accountId })).toEqual({ balance: afterCharge, available: afterCharge, reserved: '0' });
    expect(await keyReserved(keyId)).toBe(0n);

    // A late charge naming the closed lease is charged, and moves nothing.
    const late = uniqueName('req');
    await harness.testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(usageEvent({ requestId: late, accountId, keyId, leaseId: lease.leaseId })).finish(), late);
    const afterLate = formatPico(parseCredits(afterCharge) - parseCredits(CHAT_COST));
    await eventually(async () => expect(await client.getBalance({ accountId })).toEqual({ balance: afterLate, available: afterLate, reserved: '0' }));
    await cleanJournal(client, accountId);
  });

  it('the sweeper closes expired leases and gives back their rest', async () => {
    const { client } = await harness.start({ leaseLifetimeMs: 1_200, leaseDrainMs: 200, sweepIntervalMs: 100 });
    const accountId = await fundedAccount(client, '1');
    const lease = await acquire(client, { accountId, requestedCredits: '0.4' });
    expect((await client.getBalance({ accountId })).reserved).toBe('0.4');
    await eventually(async () => expect(await client.getBalance({ accountId })).toEqual({ balance: '1', available: '1', reserved: '0' }), 5_000);
    const row = await harness.db.selectFrom('leases').selectAll().where('lease_id', '=', lease.leaseId).executeTakeFirstOrThrow();
    expect(row.close_reason).toBe('expired');
    await cleanJournal(client, accountId);
  });

  it('answers `recalling` and broadcasts a LeaseRecall when open leases hold what a refusal lacks', async () => {
    const { client } = await harness.start();
    const recalls: LeaseRecall[] = [];
    const subscription = harness.testBus.bus.subscribe(subjects.leaseRecall, (data) => recalls.push(LeaseRecall.decode(data)));
    try {
      const accountId = await fundedAccount(client, '0.08');
      const held = await acquire(client, { accountId, requestedCredits: '1', holder: 'edge-a' });
      expect(held.grantedCredits).toBe('0.05');
      // 0.03 left: a plain refusal without the flag, `recalling` with it (0.03 + 0.05 held ≥ 0.05).
      expect((await rejection(acquire(client, { accountId, requestedCredits: '1', holder: 'edge-b' }))).reason).toBe(ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA);
      const recalling = await acquire(client, { accountId, requestedCredits: '1', holder: 'edge-b', recallIfHeld: true });
      expect(recalling).toMatchObject({ leaseId: '', grantedCredits: '0', recalling: true });
      await eventually(async () => expect(recalls).toContainEqual(LeaseRecall.create({ accountId, keyId: '' })));
      expect(await client.getBalance({ accountId })).toEqual({ balance: '0.08', available: '0.03', reserved: '0.05' });

      // The holder returns it (nothing spent): the retry is granted.
      expect(await client.returnLease({ leaseId: held.leaseId, unusedRequests: 0, spentCredits: '0' })).toEqual({ returned: true, returnedCredits: '0.05' });
      const granted = await acquire(client, { accountId, requestedCredits: '1', holder: 'edge-b', recallIfHeld: true });
      expect(granted.recalling).toBe(false);
      expect(granted.grantedCredits).toBe('0.05');
      await cleanJournal(client, accountId);

      // Key limit: the key's room is held by its own lease elsewhere; the recall names the key.
      const limited = await fundedAccount(client, '10');
      const keyId = uniqueName('key');
      await acquire(client, { accountId: limited, keyId, requestedCredits: '1', keyCreditLimit: '0.06' });
      const keyRecall = await acquire(client, { accountId: limited, keyId, requestedCredits: '1', keyCreditLimit: '0.06', recallIfHeld: true });
      expect(keyRecall.recalling).toBe(true);
      await eventually(async () => expect(recalls).toContainEqual(LeaseRecall.create({ accountId: limited, keyId })));
    } finally {
      await subscription.stop();
    }
  });

  it('a lease returned with its unsettled spend keeps that reserved until the charges move it; a draining lease is not recalled', async () => {
    const { client } = await harness.start({ reservationLifetimeMs: 60_000, reservationRetentionMs: 120_000 });
    const accountId = await fundedAccount(client, '0.06');
    const keyId = uniqueName('key');
    const lease = await acquire(client, { accountId, keyId, requestedCredits: '1' });
    expect(lease.grantedCredits).toBe('0.05');
    // The holder spent (by its upper bound) 0.04 whose charge is still on the bus: 0.01 comes back now.
    expect(await client.returnLease({ leaseId: lease.leaseId, unusedRequests: 0, spentCredits: '0.04' })).toEqual({ returned: true, returnedCredits: '0.01' });
    expect(await client.returnLease({ leaseId: lease.leaseId, unusedRequests: 0 })).toEqual({ returned: false, returnedCredits: '0' });
    expect(await client.getBalance({ accountId })).toEqual({ balance: '0.06', available: '0.02', reserved: '0.04' });
    const row = await harness.db.selectFrom('leases').selectAll().where('lease_id', '=', lease.leaseId).executeTakeFirstOrThrow();
    expect(row.closed_at).toBeNull();
    expect(row.returned_at).not.toBeNull();
    expect(row.expires_at.getTime() - Date.now()).toBeLessThan(31_000);
    // What the draining lease keeps is spoken for: no recall, a plain refusal.
    const refused = await rejection(acquire(client, { accountId, keyId: uniqueName('key'), requestedCredits: '1', recallIfHeld: true }));
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA);
    await cleanJournal(client, accountId);

    // Its charge arrives: it moves out of the draining lease, not counted twice.
    const requestId = uniqueName('req');
    await harness.testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(usageEvent({ requestId, accountId, keyId, leaseId: lease.leaseId })).finish(), requestId);
    const afterCharge = formatPico(parseCredits('0.06') - parseCredits(CHAT_COST));
    const rest = formatPico(parseCredits('0.04') - parseCredits(CHAT_COST));
    await eventually(async () => expect(await client.getBalance({ accountId })).toEqual({
      balance: afterCharge, available: formatPico(parseCredits(afterCharge) - parseCredits(rest)), reserved: rest,
    }));
    await cleanJournal(client, accountId);
  });

  it('reclaimLeasesOnStart closes every open lease of a previous run and gives back what it did not settle', async () => {
    const first = await harness.start();
    const accountId = await fundedAccount(first.client, '2');
    const lease = await acquire(first.client, { accountId, requestedCredits: '0.5' });
    expect(lease.grantedCredits).toBe('0.5');
    await first.stop();
    // A plain start leaves it open (its holder may be alive); a reclaiming start closes it.
    const plain = await harness.start();
    expect((await plain.client.getBalance({ accountId })).reserved).toBe('0.5');
    await plain.stop();
    const reclaiming = await harness.start({ reclaimLeasesOnStart: true });
    expect(await reclaiming.client.getBalance({ accountId })).toEqual({ balance: '2', available: '2', reserved: '0' });
    const rows = await sql<{ close_reason: string | null }>`select close_reason from ledger.leases where account_id = ${accountId}`.execute(harness.db);
    expect(rows.rows).toEqual([{ close_reason: 'expired' }]);
    await cleanJournal(reclaiming.client, accountId);
  });

  it('renewal: a lease its holder stops renewing is closed a lifetime after its last renewal; a renewed one stays; a later charge is charged once', async () => {
    // Test-short timings: a lifetime of 4 s of which 1.5 s is the drain, so the holder admits for 2.5 s after each
    // renewal (long enough that a loaded CI machine's slow renewal call does not lose the kept lease).
    const { client } = await harness.start({ leaseLifetimeMs: 4_000, leaseDrainMs: 1_500, sweepIntervalMs: 200 });
    const accountId = await fundedAccount(client, '1');
    const kept = await acquire(client, { accountId, requestedCredits: '0.2', holder: 'edge-alive' });
    const dropped = await acquire(client, { accountId, requestedCredits: '0.2', holder: 'edge-alive' });
    expect(kept.renewWithinMs).toBe(2_500);
    expect(Number(kept.expiresAtMs) - Date.now()).toBeLessThan(4_100);
    // Only its holder renews a lease; a returned or unknown one is lost.
    const returned = await acquire(client, { accountId, requestedCredits: '0.05', holder: 'edge-alive' });
    await client.returnLease({ leaseId: returned.leaseId, unusedRequests: 0 });
    expect(await client.renewLeases({ holder: 'edge-other', leaseIds: [kept.leaseId] })).toEqual({ lostLeaseIds: [kept.leaseId], renewWithinMs: 2_500 });
    expect((await client.renewLeases({ holder: 'edge-alive', leaseIds: [kept.leaseId, returned.leaseId, 'lease_unknown'] })).lostLeaseIds)
      .toEqual([returned.leaseId, 'lease_unknown']);
    const started = Date.now();
    // The holder renews `kept` every 500 ms for 5.5 s, `dropped` never again (its holder "died" for it).
    while (Date.now() - started < 5_500) {
      expect((await client.renewLeases({ holder: 'edge-alive', leaseIds: [kept.leaseId] })).lostLeaseIds).toEqual([]);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    const rows = await sql<{ lease_id: string; close_reason: string | null }>`
      select lease_id, close_reason from ledger.leases where account_id = ${accountId} order by created_at`.execute(harness.db);
    expect(rows.rows).toEqual([
      { lease_id: kept.leaseId, close_reason: null },
      { lease_id: dropped.leaseId, close_reason: 'expired' },
      { lease_id: returned.leaseId, close_reason: 'returned' },
    ]);
    expect(await client.getBalance({ accountId })).toEqual({ balance: '1', available: '0.8', reserved: '0.2' });
    expect((await client.renewLeases({ holder: 'edge-alive', leaseIds: [dropped.leaseId] })).lostLeaseIds).toEqual([dropped.leaseId]);

    // A charge naming the closed lease (a request that ended on the dead holder) is charged once, and moves nothing.
    const requestId = uniqueName('req');
    const event = UsageEvent.encode(usageEvent({ requestId, accountId, keyId: 'key_a', leaseId: dropped.leaseId })).finish();
    await harness.testBus.bus.publishDurable(subjects.usageEvents, event, requestId);
    await harness.testBus.bus.publishDurable(subjects.usageEvents, event, `${requestId}-again`);
    const balance = formatPico(parseCredits('1') - parseCredits(CHAT_COST));
    await eventually(async () => expect(await client.getBalance({ accountId })).toEqual({
      balance, available: formatPico(parseCredits(balance) - parseCredits('0.2')), reserved: '0.2',
    }));
    await cleanJournal(client, accountId);
  });

  it('an acquisition refused for credits closes the account\'s lapsed leases itself and is granted on its retry', async () => {
    // No sweep pass within the test: only the acquisition can close the lapsed lease.
    // A lifetime of 3 s: the two calls before its deadline must both come within it on a loaded machine.
    const { client } = await harness.start({ leaseLifetimeMs: 3_000, leaseDrainMs: 500, sweepIntervalMs: 600_000 });
    const accountId = await fundedAccount(client, '0.05');
    expect((await acquire(client, { accountId, requestedCredits: '0.05', holder: 'edge-dead' })).grantedCredits).toBe('0.05');
    // Before its deadline: held; the holder may be alive and admitting.
    expect((await acquire(client, { accountId, requestedCredits: '0.05', holder: 'edge-live', recallIfHeld: true })).recalling).toBe(true);
    expect((await client.getBalance({ accountId })).reserved).toBe('0.05');
    await new Promise((resolve) => setTimeout(resolve, 3_200));
    expect((await acquire(client, { accountId, requestedCredits: '0.05', holder: 'edge-live', recallIfHeld: true })).recalling).toBe(true);
    expect((await acquire(client, { accountId, requestedCredits: '0.05', holder: 'edge-live', recallIfHeld: true })).grantedCredits).toBe('0.05');
    await cleanJournal(client, accountId);
  });

  it('a lease returned with unsettled spend near its deadline still waits the whole drain time for its charges', async () => {
    const { client } = await harness.start({ leaseLifetimeMs: 3_000, leaseDrainMs: 2_000, sweepIntervalMs: 100 });
    const accountId = await fundedAccount(client, '1');
    const lease = await acquire(client, { accountId, requestedCredits: '0.2', holder: 'edge-alive' });
    // 1 s before its deadline, the holder returns it naming 0.04 of spend whose charges may be on the bus.
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    expect(await client.returnLease({ leaseId: lease.leaseId, unusedRequests: 0, spentCredits: '0.04' })).toEqual({ returned: true, returnedCredits: '0.16' });
    // Past the old deadline, within the drain time: still open, the 0.04 still held.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const row = await harness.db.selectFrom('leases').selectAll().where('lease_id', '=', lease.leaseId).executeTakeFirstOrThrow();
    expect(row.closed_at).toBeNull();
    expect((await client.getBalance({ accountId })).reserved).toBe('0.04');
    await eventually(async () => expect((await client.getBalance({ accountId })).reserved).toBe('0'), 5_000);
    await cleanJournal(client, accountId);
  });
});
