import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { UsageEvent, UsageOutcome } from '@gateway/proto';
import { crashCopy, testLogger } from '@gateway/testing';
import { CHECKPOINT_INTERVAL_MS, CHECKPOINT_REWRITE_MS, FIRST_CHECKPOINT_AFTER_MS, StreamCheckpoints } from './stream-checkpoints.js';
import { UsageOutbox } from './usage-outbox.js';

// The checkpoint timer runs on fake time (setTimeout and Date); the outbox underneath writes real
// files, and a crash is a copy of its directory taken while everything is still open.

/** A stream as the router exposes it: a change counter and its usage so far. */
class FakeStream {
  changes = 0;
  outputTokens = 0;
  constructor(readonly requestId: string) {}
  deliver(tokens: number) {
    this.changes++;
    this.outputTokens += tokens;
  }
  event = () => UsageEvent.create({
    requestId: this.requestId, accountId: 'acc_1', modelId: 'acme/chat', outcome: UsageOutcome.USAGE_OUTCOME_SERVED, streamed: true,
    usage: { inputTokens: 9, outputTokens: this.outputTokens } as UsageEvent['usage'],
  });
}

let root: string;
let outbox: UsageOutbox;
let checkpoints: StreamCheckpoints;
let built = 0;
beforeEach(async () => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
  root = await mkdtemp(join(tmpdir(), 'stream-checkpoints-'));
  ({ outbox } = await UsageOutbox.open({ directory: join(root, 'outbox'), logger: testLogger('outbox') }));
  checkpoints = new StreamCheckpoints({ outbox, logger: testLogger('checkpoints') });
  built = 0;
});
afterEach(async () => {
  vi.useRealTimers();
  await checkpoints.stop();
  await outbox.close();
  await rm(root, { recursive: true, force: true });
});

const track = (stream: FakeStream) => checkpoints.track(stream, () => { built++; return stream.event(); });
/** Lets fake time pass, then waits for the checkpoint writes it started. */
async function elapse(ms: number) {
  vi.advanceTimersByTime(ms);
  await checkpoints.settled();
}
let copies = 0;
/** What the next start would publish if the process were killed now. */
async function recoveredAfterCrash() {
  const copy = await crashCopy(join(root, 'outbox'), join(root, `crashed-${++copies}`));
  const reopened = await UsageOutbox.open({ directory: copy, logger: testLogger('outbox') });
  await reopened.outbox.close();
  return reopened.recovered.map((entry) => [entry.event.requestId, entry.event.usage!.outputTokens]);
}
const files = async () => (await readdir(join(root, 'outbox')).catch(() => [])).filter((name) => name.endsWith('.log'));

describe('stream checkpoints', () => {
  it('never touch the disk for a stream that ends before the first checkpoint', async () => {
    const stream = new FakeStream('short');
    const checkpoint = track(stream);
    stream.deliver(5);
    await elapse(FIRST_CHECKPOINT_AFTER_MS - 1);
    checkpoint.finalStored();
    await elapse(10 * CHECKPOINT_INTERVAL_MS);
    expect(built).toBe(0);
    expect(await files()).toEqual([]);
    expect(checkpoints.inFlight).toBe(0);
  });

  it('keep the usage of a long stream cut by a crash, at most one interval behind what it delivered', async () => {
    const stream = new FakeStream('long');
    track(stream);
    stream.deliver(3);
    await elapse(FIRST_CHECKPOINT_AFTER_MS + CHECKPOINT_INTERVAL_MS);
    expect(await recoveredAfterCrash()).toEqual([['long', 3]]);
    stream.deliver(4);
    await elapse(CHECKPOINT_INTERVAL_MS);
    expect(await recoveredAfterCrash()).toEqual([['long', 7]]);
    // Delivered after the last tick: not yet in the checkpoint, which is the bound of what a crash loses.
    stream.deliver(2);
    expect(await recoveredAfterCrash()).toEqual([['long', 7]]);
  });

  it('write nothing while a stream delivers nothing new, until the rewrite period', async () => {
    const stream = new FakeStream('stalled');
    track(stream);
    stream.deliver(1);
    await elapse(FIRST_CHECKPOINT_AFTER_MS + CHECKPOINT_INTERVAL_MS);
    const afterFirst = built;
    expect(afterFirst).toBe(1);
    await elapse(CHECKPOINT_REWRITE_MS - 2 * CHECKPOINT_INTERVAL_MS);
    expect(built).toBe(afterFirst);
    await elapse(3 * CHECKPOINT_INTERVAL_MS);
    expect(built).toBe(afterFirst + 1);
    expect(await recoveredAfterCrash()).toEqual([['stalled', 1]]);
  });

  it('are retired once the final event is stored, with a closed record so a crash publishes nothing for the stream', async () => {
    const finished = new FakeStream('finished');
    const running = new FakeStream('running');
    const checkpoint = track(finished);
    track(running);
    finished.deliver(8);
    running.deliver(6);
    await elapse(FIRST_CHECKPOINT_AFTER_MS + CHECKPOINT_INTERVAL_MS);
    expect(await recoveredAfterCrash()).toEqual([['finished', 8], ['running', 6]]);
    checkpoint.finalStored();
    await checkpoints.settled();
    expect(await recoveredAfterCrash()).toEqual([['running', 6]]);
    expect(checkpoints.inFlight).toBe(1);
  });

  it('leave the checkpoint log empty once every stream stored its final event', async () => {
    const streams = Array.from({ length: 5 }, (_, index) => new FakeStream(`s${index}`));
    const handles = streams.map(track);
    for (let round = 0; round < 5; round++) {
      for (const stream of streams) stream.deliver(1);
      await elapse(CHECKPOINT_INTERVAL_MS);
    }
    expect(built).toBeGreaterThanOrEqual(15);
    for (const handle of handles) handle.finalStored();
    await checkpoints.settled();
    expect(outbox.pendingCount).toBe(0);
    // Deletions finish by the time the outbox is closed.
    await checkpoints.stop();
    await outbox.close();
    expect(await files()).toEqual([]);
  });
});
