import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { MemoryKeyValueBucket, KeyValueValueTooLarge, type KeyValueBucket, type KeyValueBucketOptions } from './key-value.js';
import { InProcessEventBus } from './memory-bus.js';
import { NatsEventBus } from './nats-bus.js';

const bytes = (text: string) => new TextEncoder().encode(text);
const text = (value: Uint8Array | undefined) => (value ? new TextDecoder().decode(value) : undefined);
const logger = pino({ level: 'silent' });
const natsUrl = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

const OPTIONS: KeyValueBucketOptions = { name: 'kvtest', ttlMs: 60_000, maxBytes: 1024 * 1024, maxValueBytes: 4096 };

/** The contract both buckets keep: compare-and-set with one winner, revisions, the value bound, change waits. */
function contract(name: string, open: () => Promise<KeyValueBucket>) {
  describe(name, () => {
    it('create writes once: a second create loses and the first value stays', async () => {
      const bucket = await open();
      const key = `k-${randomUUID()}`;
      expect(await bucket.get(key)).toBeUndefined();
      const revision = await bucket.create(key, bytes('first'));
      expect(revision).toBeGreaterThan(0);
      expect(await bucket.create(key, bytes('second'))).toBeUndefined();
      const entry = await bucket.get(key);
      expect(text(entry?.value)).toBe('first');
      expect(entry?.revision).toBe(revision);
    });

    it('racing creates have exactly one winner', async () => {
      const bucket = await open();
      const key = `race-${randomUUID()}`;
      const results = await Promise.all(Array.from({ length: 8 }, (_, index) => bucket.create(key, bytes(`writer-${index}`))));
      const winners = results.filter((revision) => revision !== undefined);
      expect(winners).toHaveLength(1);
      const winner = results.findIndex((revision) => revision !== undefined);
      expect(text((await bucket.get(key))?.value)).toBe(`writer-${winner}`);
    });

    it('update needs the current revision', async () => {
      const bucket = await open();
      const key = `u-${randomUUID()}`;
      const first = (await bucket.create(key, bytes('a')))!;
      const second = await bucket.update(key, bytes('b'), first);
      expect(second).toBeGreaterThan(first);
      expect(await bucket.update(key, bytes('c'), first)).toBeUndefined();
      expect(text((await bucket.get(key))?.value)).toBe('b');
    });

    it('refuses a value over the bound', async () => {
      const bucket = await open();
      await expect(bucket.create(`big-${randomUUID()}`, new Uint8Array(OPTIONS.maxValueBytes + 1))).rejects.toBeInstanceOf(KeyValueValueTooLarge);
    });

    it('changed resolves on a write, and after its timeout otherwise', async () => {
      const bucket = await open();
      const key = `w-${randomUUID()}`;
      const revision = (await bucket.create(key, bytes('pending')))!;
      const started = Date.now();
      await bucket.changed(key, revision, 150);
      expect(Date.now() - started).toBeGreaterThanOrEqual(140);
      const waiting = bucket.changed(key, revision, 10_000);
      setTimeout(() => void bucket.update(key, bytes('done'), revision), 50);
      const before = Date.now();
      await waiting;
      expect(Date.now() - before).toBeLessThan(5_000);
      expect(text((await bucket.get(key))?.value)).toBe('done');
      // Already moved on: no wait at all.
      const quick = Date.now();
      await bucket.changed(key, revision, 10_000);
      expect(Date.now() - quick).toBeLessThan(1_000);
    });
  });
}

contract('memory bucket', async () => new MemoryKeyValueBucket(OPTIONS));
contract('in-process bus bucket', async () => new InProcessEventBus(logger).keyValue(OPTIONS));

describe('JetStream bucket', () => {
  const namespace = `kv-${randomUUID().slice(0, 8)}`;
  let bus: NatsEventBus | undefined;
  afterAll(async () => {
    await bus?.destroyStream();
    await bus?.close();
  });
  contract('on the machine NATS', async () => {
    bus ??= await NatsEventBus.connect(natsUrl, logger, { namespace });
    return bus.keyValue(OPTIONS);
  });

  it('two connections share one bucket', async () => {
    bus ??= await NatsEventBus.connect(natsUrl, logger, { namespace });
    const other = await NatsEventBus.connect(natsUrl, logger, { namespace });
    try {
      const key = `shared-${randomUUID()}`;
      const mine = await bus.keyValue(OPTIONS);
      const theirs = await other.keyValue(OPTIONS);
      expect(await mine.create(key, bytes('mine'))).toBeDefined();
      expect(await theirs.create(key, bytes('theirs'))).toBeUndefined();
      expect(text((await theirs.get(key))?.value)).toBe('mine');
    } finally {
      await other.close();
    }
  });
});

describe('memory bucket bounds', () => {
  it('drops a value once its time is up, and the oldest past the byte bound', async () => {
    let now = 1_000;
    const bucket = new MemoryKeyValueBucket({ name: 'b', ttlMs: 100, maxBytes: 10, maxValueBytes: 10 }, () => now);
    expect(await bucket.create('a', bytes('aaaa'))).toBeDefined();
    now += 101;
    expect(await bucket.get('a')).toBeUndefined();
    expect(await bucket.create('a', bytes('aaaa'))).toBeDefined();
    expect(await bucket.create('b', bytes('bbbb'))).toBeDefined();
    expect(await bucket.create('c', bytes('cccc'))).toBeDefined();
    // 12 bytes over a 10-byte bound: the oldest (a) went.
    expect(await bucket.get('a')).toBeUndefined();
    expect(text((await bucket.get('b'))?.value)).toBe('bbbb');
    expect(text((await bucket.get('c'))?.value)).toBe('cccc');
  });
});
