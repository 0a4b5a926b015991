import { mkdtemp, readdir, readFile, rm, appendFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { UsageEvent, UsageOutcome } from '@gateway/proto';
import { testLogger } from '@gateway/testing';
import { crc32, OutboxFullError, UsageOutbox } from './usage-outbox.js';

const event = (requestId: string) => UsageEvent.create({
  requestId, accountId: 'acc_1', keyId: 'key_1', modelId: 'acme/chat', outcome: UsageOutcome.USAGE_OUTCOME_SERVED,
  usage: { inputTokens: 12, outputTokens: 34 } as UsageEvent['usage'], prices: { perInputToken: '0.0000005' }, streamed: true,
});

let directory: string;
beforeEach(async () => { directory = await mkdtemp(join(tmpdir(), 'usage-outbox-')); });
afterEach(async () => { await rm(directory, { recursive: true, force: true }); });

const segments = async () => (await readdir(directory)).filter((name) => name.endsWith('.log'));

describe('usage outbox', () => {
  it('computes the standard CRC-32', () => {
    expect(crc32(Buffer.from('123456789'))).toBe(0xcbf43926);
    expect(crc32(new Uint8Array())).toBe(0);
  });

  it('gives back after a reopen exactly the events appended and not acknowledged', async () => {
    const { outbox, recovered } = await UsageOutbox.open({ directory, logger: testLogger('outbox') });
    expect(recovered).toEqual([]);
    const entries = await Promise.all(['a', 'b', 'c', 'd'].map((id) => outbox.append(event(id))));
    await outbox.acknowledge(entries[1]!);
    await outbox.acknowledge(entries[3]!);
    expect(outbox.pendingCount).toBe(2);
    await outbox.close();

    const reopened = await UsageOutbox.open({ directory, logger: testLogger('outbox') });
    // A segment is kept whole until all of it is acknowledged: a republish of b and d is harmless (same msg-id, ledger dedup).
    expect(reopened.recovered.map((entry) => entry.event.requestId)).toEqual(['a', 'b', 'c', 'd']);
    expect(reopened.recovered[0]!.event).toEqual(event('a'));
    for (const entry of reopened.recovered) await reopened.outbox.acknowledge(entry);
    expect(await segments()).toEqual([]);
    expect(reopened.outbox.sizeBytes).toBe(0);
    await reopened.outbox.close();
    expect((await UsageOutbox.open({ directory, logger: testLogger('outbox') })).recovered).toEqual([]);
  });

  it('deletes a segment once everything in it is acknowledged, and rolls segments at their size bound', async () => {
    const { outbox } = await UsageOutbox.open({ directory, logger: testLogger('outbox'), segmentBytes: 300 });
    const entries = [];
    for (let index = 0; index < 6; index++) entries.push(await outbox.append(event(`r${index}`)));
    const before = await segments();
    expect(before.length).toBeGreaterThan(1);
    const first = entries[0]!.segment;
    const inFirst = entries.filter((entry) => entry.segment === first);
    for (const entry of inFirst.slice(0, -1)) await outbox.acknowledge(entry);
    expect(await segments()).toEqual(before);
    await outbox.acknowledge(inFirst.at(-1)!);
    expect(await segments()).toEqual(before.slice(1));
    for (const entry of entries.filter((item) => item.segment !== first)) await outbox.acknowledge(entry);
    expect(await segments()).toEqual([]);
    await outbox.close();
  });

  it('skips a torn record at the end of a segment (a crash mid-write) and keeps the whole ones', async () => {
    const { outbox } = await UsageOutbox.open({ directory, logger: testLogger('outbox') });
    await outbox.append(event('whole-1'));
    await outbox.append(event('whole-2'));
    await outbox.close();
    const [segment] = await segments();
    const bytes = await readFile(join(directory, segment!));
    await appendFile(join(directory, segment!), bytes.subarray(0, 20)); // half a record
    const reopened = await UsageOutbox.open({ directory, logger: testLogger('outbox') });
    expect(reopened.recovered.map((entry) => entry.event.requestId)).toEqual(['whole-1', 'whole-2']);
    await reopened.outbox.close();
  });

  it('refuses appends beyond its byte bound', async () => {
    const { outbox } = await UsageOutbox.open({ directory, logger: testLogger('outbox'), maxBytes: 400 });
    await outbox.append(event('1'));
    await outbox.append(event('2'));
    await expect(Promise.all(Array.from({ length: 10 }, (_, index) => outbox.append(event(`more-${index}`))))).rejects.toBeInstanceOf(OutboxFullError);
    expect(outbox.sizeBytes).toBeLessThanOrEqual(400);
    await outbox.close();
  });

  it('cannot be opened twice at once', async () => {
    const { outbox } = await UsageOutbox.open({ directory, logger: testLogger('outbox') });
    await expect(UsageOutbox.open({ directory, logger: testLogger('outbox') })).rejects.toThrow(/already open/);
    await outbox.close();
    const again = await UsageOutbox.open({ directory, logger: testLogger('outbox') });
    await again.outbox.close();
  });
});
