import { describe, expect, it } from 'vitest';
import { ErrorReason, GatewayError } from '@gateway/platform';
import { UsageOutcome, type UsageEvent } from '@gateway/proto';
import { emptyUsage } from '../usage/token-counter.js';
import type { StreamCheckpoint } from '../usage/stream-checkpoints.js';
import type { UsagePublisher } from '../usage/usage-publisher.js';
import { Reservation } from './reservation.js';

/** Records what a Reservation publishes; `failAwaited` makes the awaited publish reject (bus down). */
function recordingPublisher(failAwaited = false) {
  const published: { event: UsageEvent; awaited: boolean }[] = [];
  const publisher: UsagePublisher = {
    publish: async (event) => {
      published.push({ event, awaited: true });
      if (failAwaited) throw new Error('bus unreachable');
    },
    publishInBackground: (event) => { published.push({ event, awaited: false }); },
    trackStream: () => ({ finalStored: () => undefined }) as unknown as StreamCheckpoint,
    stop: async () => undefined,
  };
  return { publisher, published };
}

const served = { ...emptyUsage(), inputTokens: 7, outputTokens: 3 };
const hold = (publisher: UsagePublisher, streamed = false) =>
  new Reservation(publisher, 'req_1', { requestId: 'req_1', accountId: 'acc', keyId: 'key', leaseId: 'lease_1' }, 'acme/model', 'embeddings', streamed);

describe('Reservation: one owner of a request hold, ended exactly once', () => {
  it('a release publishes one FAILED event; every later release or settle is a no-op', async () => {
    const { publisher, published } = recordingPublisher();
    const reservation = hold(publisher);
    reservation.providerId = 'prov-a';
    reservation.release();
    reservation.release();
    await reservation.settle('prov-a', served);
    reservation.settleInBackground('prov-a', served, true);
    expect(reservation.settleStream('prov-a', served, undefined, () => undefined)).toBeUndefined();
    expect(published).toHaveLength(1);
    expect(published[0]!.event).toMatchObject({
      requestId: 'req_1', accountId: 'acc', keyId: 'key', leaseId: 'lease_1', modelId: 'acme/model', providerId: 'prov-a',
      endpoint: 'embeddings', outcome: UsageOutcome.USAGE_OUTCOME_FAILED, streamed: false,
    });
    expect(reservation.open).toBe(false);
  });

  it('a settle publishes one SERVED event, awaited; a later release is a no-op', async () => {
    const { publisher, published } = recordingPublisher();
    const reservation = hold(publisher);
    await reservation.settle('prov-b', served);
    reservation.release();
    await reservation.settle('prov-b', served);
    expect(published).toEqual([{ event: expect.objectContaining({ outcome: UsageOutcome.USAGE_OUTCOME_SERVED, providerId: 'prov-b', usage: served }), awaited: true }]);
  });

  it('a SERVED event the bus did not take withholds the answer, and no FAILED follows it (it may be stored)', async () => {
    const { publisher, published } = recordingPublisher(true);
    const reservation = hold(publisher);
    const error = await reservation.settle('prov-a', served).then(() => undefined, (caught: unknown) => caught);
    expect(error).toBeInstanceOf(GatewayError);
    expect((error as GatewayError).reason).toBe(ErrorReason.ERROR_REASON_USAGE_NOT_RECORDED);
    reservation.release();
    expect(published.map((entry) => entry.event.outcome)).toEqual([UsageOutcome.USAGE_OUTCOME_SERVED]);
  });

  it("a stream's SERVED event is retried in the background when the bus did not take it, once", async () => {
    const { publisher, published } = recordingPublisher(true);
    const reservation = hold(publisher, true);
    const retried: unknown[] = [];
    const settled = reservation.settleStream('prov-a', served, undefined, (error) => retried.push(error));
    // The event handed back is the one published (the edge keeps it until `stored`).
    expect(settled?.event).toMatchObject({ requestId: 'req_1', outcome: UsageOutcome.USAGE_OUTCOME_SERVED, providerId: 'prov-a', usage: served, streamed: true });
    await settled?.stored;
    reservation.release();
    reservation.settleInBackground('prov-a', served, true);
    expect(retried).toHaveLength(1);
    expect(published.map((entry) => [entry.event.outcome, entry.awaited, entry.event.streamed])).toEqual([
      [UsageOutcome.USAGE_OUTCOME_SERVED, true, true],
      [UsageOutcome.USAGE_OUTCOME_SERVED, false, true],
    ]);
  });

  it('a release of a streamed endpoint is marked streamed unless told otherwise', () => {
    const { publisher, published } = recordingPublisher();
    hold(publisher, true).release();
    hold(publisher, true).release(false);
    expect(published.map((entry) => entry.event.streamed)).toEqual([true, false]);
  });
});
