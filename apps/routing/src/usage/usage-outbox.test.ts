import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SegmentLogFullError } from '@gateway/platform';
import { UsageEvent, UsageOutcome } from '@gateway/proto';
import { crashCopy, testLogger } from '@gateway/testing';
import { UsageOutbox } from './usage-outbox.js';

// The segment log itself (CRC, torn records, order of deletion, locks) is tested in libs/platform
// (segment-log.test.ts); here: what the outbox keeps and gives back.

const event = (requestId: string, outputTokens = 34) => UsageEvent.create({
  requestId, accountId: 'acc_1', keyId: 'key_1', modelId: 'acme/chat', outcome: UsageOutcome.USAGE_OUTCOME_SERVED,
  usage: { inputTokens: 12, outputTokens } as UsageEvent['usage'], prices: { perInputToken: '0.0000005' }, streamed: true,
});

let root: string;
let directory: string;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'usage-outbox-'));
  directory = join(root, 'outbox');
});
afterEach(async () => { await rm(root, { recursive: true, force: true }); });
let copies = 0;
/** The outbox as a SIGKILL would leave it, where a restarted process opens it. */
const crashed = () => crashCopy(directory, join(root, `crashed-${++copies}`));

const segments = async (path = directory) => (await readdir(path).catch(() => [])).filter((name) => name.endsWith('.log'));
const open = (path = directory) => UsageOutbox.open({ directory: path, logger: testLogger('outbox') });
const summary = (entries: { event: UsageEvent; checkpoint: boolean }[]) =>
  entries.map((entry) => [entry.event.requestId, entry.event.usage!.outputTokens, entry.checkpoint]);

describe('usage outbox', () => {
  it('gives back after a reopen exactly the events appended and not acknowledged', async () => {
    const { outbox, recovered } = await open();
    expect(recovered).toEqual([]);
    const entries = await Promise.all(['a', 'b', 'c', 'd'].map((id) => outbox.append(event(id))));
    await outbox.acknowledge(entries[1]!);
    await outbox.acknowledge(entries[3]!);
    expect(outbox.pendingCount).toBe(2);
    await outbox.close();

    const reopened = await open();
    // A segment is kept whole until all of it is acknowledged: a republish of b and d is harmless (same msg-id, ledger dedup).
    expect(reopened.recovered.map((entry) => entry.event.requestId)).toEqual(['a', 'b', 'c', 'd']);
    expect(reopened.recovered[0]!.event).toEqual(event('a'));
    for (const entry of reopened.recovered) await reopened.outbox.acknowledge(entry);
    expect(await segments()).toEqual([]);
    expect(reopened.outbox.sizeBytes).toBe(0);
    await reopened.outbox.close();
    expect((await open()).recovered).toEqual([]);
  });

  it('refuses events beyond its byte bound', async () => {
    const { outbox } = await UsageOutbox.open({ directory, logger: testLogger('outbox'), maxBytes: 400 });
    await outbox.append(event('1'));
    await outbox.append(event('2'));
    await expect(Promise.all(Array.from({ length: 10 }, (_, index) => outbox.append(event(`more-${index}`))))).rejects.toBeInstanceOf(SegmentLogFullError);
    await outbox.close();
  });
});

describe('usage outbox: stream checkpoints after a crash', () => {
  it('gives back the latest checkpoint of a stream that never stored its final event, as that request\'s usage', async () => {
    const { outbox } = await open();
    await outbox.appendCheckpoint(event('cut-stream', 10));
    await outbox.appendCheckpoint(event('other-stream', 3));
    await outbox.appendCheckpoint(event('cut-stream', 25));
    const recovered = (await open(await crashed())).recovered;
    expect(summary(recovered)).toEqual([['cut-stream', 25, true], ['other-stream', 3, true]]);
    await outbox.close();
  });

  it('gives back nothing of a stream whose "closed" record followed its checkpoints', async () => {
    const { outbox } = await open();
    await outbox.appendCheckpoint(event('finished', 10));
    await outbox.appendCheckpoint(event('cut', 7));
    await outbox.appendCheckpoint(event('finished', 20));
    await outbox.appendStreamClosed('finished');
    const { outbox: recoveredOutbox, recovered } = await open(await crashed());
    expect(summary(recovered)).toEqual([['cut', 7, true]]);
    await recoveredOutbox.close();
    await outbox.close();
  });

  it('gives back only the final event when the stream\'s final is still in the events log', async () => {
    const { outbox } = await open();
    await outbox.appendCheckpoint(event('stream', 10));
    await outbox.append(event('stream', 42));
    const { recovered } = await open(await crashed());
    expect(summary(recovered)).toEqual([['stream', 42, false]]);
    await outbox.close();
  });

  it('deletes every checkpoint segment once the recovered checkpoints are acknowledged (published)', async () => {
    const { outbox } = await UsageOutbox.open({ directory, logger: testLogger('outbox'), segmentBytes: 200 });
    for (let round = 1; round <= 4; round++) {
      for (const requestId of ['s1', 's2', 's3']) await outbox.appendCheckpoint(event(requestId, round * 10));
    }
    await outbox.appendStreamClosed('s2');
    const copy = await crashed();
    expect((await segments(copy)).length).toBeGreaterThan(2);
    const reopened = await UsageOutbox.open({ directory: copy, logger: testLogger('outbox'), segmentBytes: 200 });
    expect(summary(reopened.recovered)).toEqual([['s1', 40, true], ['s3', 40, true]]);
    // Superseded checkpoints and the closed record were let go on open; the two live ones go when published.
    for (const entry of reopened.recovered) await reopened.outbox.acknowledge(entry);
    expect(await segments(copy)).toEqual([]);
    expect(reopened.outbox.pendingCount).toBe(0);
    await reopened.outbox.close();
    await outbox.close();
  });
});
