import { appendFile, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from './logger.js';
import { crc32, SegmentLog, SegmentLogFullError } from './segment-log.js';

const logger = createLogger('segment-log-test', 'silent');
const record = (text: string) => Buffer.from(text.padEnd(40, '.'));
const texts = (records: { payload: Buffer }[]) => records.map((recovered) => recovered.payload.toString().replace(/\.+$/, ''));

let directory: string;
beforeEach(async () => { directory = await mkdtemp(join(tmpdir(), 'segment-log-')); });
afterEach(async () => { await rm(directory, { recursive: true, force: true }); });

const segments = async () => (await readdir(directory)).filter((name) => name.endsWith('.log')).sort();
const open = (options: { segmentBytes?: number; maxBytes?: number } = {}) => SegmentLog.open({ directory, name: 'test-log', logger, ...options });

describe('segment log', () => {
  it('computes the standard CRC-32', () => {
    expect(crc32(Buffer.from('123456789'))).toBe(0xcbf43926);
    expect(crc32(new Uint8Array())).toBe(0);
  });

  it('gives back after a reopen exactly the records appended and not acknowledged, in order', async () => {
    const { log, recovered } = await open();
    expect(recovered).toEqual([]);
    const appended = await Promise.all(['a', 'b', 'c', 'd'].map((text) => log.append(record(text))));
    // Appended together: one group, one segment, one fdatasync.
    expect(new Set(appended).size).toBe(1);
    await log.acknowledge(appended[1]!);
    await log.acknowledge(appended[3]!);
    expect(log.pendingCount).toBe(2);
    await log.close();

    const reopened = await open();
    // A segment is kept whole until all of it is acknowledged: its acknowledged records come back too.
    expect(texts(reopened.recovered)).toEqual(['a', 'b', 'c', 'd']);
    for (const recovered of reopened.recovered) await reopened.log.acknowledge(recovered.segment);
    expect(await segments()).toEqual([]);
    expect(reopened.log.sizeBytes).toBe(0);
    await reopened.log.close();
    expect((await open()).recovered).toEqual([]);
  });

  it('deletes acknowledged segments oldest first only: a fully acknowledged segment waits for the older ones', async () => {
    const { log } = await open({ segmentBytes: 90 });
    const written: number[] = [];
    for (let index = 0; index < 6; index++) written.push(await log.append(record(`r${index}`)));
    const before = await segments();
    expect(before.length).toBe(3); // a segment closes at 90 bytes: two 48-byte records each
    const [first, second, third] = [...new Set(written)];
    // The second segment fully acknowledged: kept, because the first still holds a live record.
    for (const segment of written.filter((segment) => segment === second)) await log.acknowledge(segment);
    expect(await segments()).toEqual(before);
    await log.acknowledge(first!);
    expect(await segments()).toEqual(before);
    await log.acknowledge(first!);
    expect(await segments()).toEqual(before.slice(2));
    for (const segment of written.filter((segment) => segment === third)) await log.acknowledge(segment);
    expect(await segments()).toEqual([]);
    await log.close();
  });

  it('skips a torn record at the end of a segment (a crash mid-write) and keeps the whole ones', async () => {
    const { log } = await open();
    await log.append(record('whole-1'));
    await log.append(record('whole-2'));
    await log.close();
    const [segment] = await segments();
    const bytes = await readFile(join(directory, segment!));
    await appendFile(join(directory, segment!), bytes.subarray(0, 20)); // half a record
    const reopened = await open();
    expect(texts(reopened.recovered)).toEqual(['whole-1', 'whole-2']);
    // Appends after the torn tail go to a new segment, so they are not hidden behind it.
    await reopened.log.append(record('after'));
    await reopened.log.close();
    expect(texts((await open()).recovered)).toEqual(['whole-1', 'whole-2', 'after']);
  });

  it('refuses appends beyond its byte bound', async () => {
    const { log } = await open({ maxBytes: 150 });
    await log.append(record('1'));
    await log.append(record('2'));
    await expect(Promise.all(Array.from({ length: 10 }, (_, index) => log.append(record(`more-${index}`))))).rejects.toBeInstanceOf(SegmentLogFullError);
    expect(log.sizeBytes).toBeLessThanOrEqual(150);
    await log.close();
  });

  it('cannot be opened twice at once; a second log of another name may share the directory', async () => {
    const { log } = await open();
    await expect(open()).rejects.toThrow(/already open/);
    const other = await SegmentLog.open({ directory, name: 'other-log', logger });
    await other.log.close();
    await log.close();
    const again = await open();
    await again.log.close();
  });

  it("takes over a crashed run's lock that names this process's own pid (a container's pid 1 after a restart), with its records", async () => {
    const { log } = await open();
    await log.append(record('before the crash'));
    // The crash: the files stay as they are, the lock names the pid the next incarnation will have too.
    const lock = join(directory, 'test-log.lock');
    const held = await readFile(lock, 'utf8');
    expect(held.trim()).toBe(String(process.pid));
    const copy = await mkdtemp(join(tmpdir(), 'segment-log-crashed-'));
    try {
      for (const name of await readdir(directory)) await appendFile(join(copy, name), await readFile(join(directory, name)));
      const reopened = await SegmentLog.open({ directory: copy, name: 'test-log', logger });
      expect(texts(reopened.recovered)).toEqual(['before the crash']);
      await reopened.log.close();
    } finally {
      await rm(copy, { recursive: true, force: true });
    }
    await log.close();
  });
});
