import { appendFile, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InProcessEventBus, type DurableMessage, type Subscription } from '@gateway/platform';
import { crashCopy } from './crash-copy.js';
import { eventually, testLogger } from './infra.js';

// The journal of the in-process bus (npm start without NATS): a process killed with messages
// published and not yet handled redelivers them on its next start. A kill is modelled by copying the
// journal directory as it is while the bus is still open (crashCopy: every resolved publish is
// fdatasync'ed, so the copy holds what a SIGKILL would leave) and opening a new bus on the copy.

const logger = testLogger('bus-journal');
const encode = (text: string) => new TextEncoder().encode(text);
const decode = (data: Uint8Array) => new TextDecoder().decode(data);

let root: string;
const open: InProcessEventBus[] = [];
const subscriptions: Subscription[] = [];
beforeEach(async () => { root = await mkdtemp(join(tmpdir(), 'bus-journal-')); });
afterEach(async () => {
  for (const subscription of subscriptions.splice(0)) await subscription.stop();
  for (const bus of open.splice(0)) await bus.close();
  await rm(root, { recursive: true, force: true });
});

async function openBus(directory: string): Promise<InProcessEventBus> {
  const bus = await InProcessEventBus.open(logger, { journalDirectory: directory });
  open.push(bus);
  return bus;
}

let copies = 0;
const crashed = (directory: string) => crashCopy(directory, join(root, `crashed-${++copies}`));

const segments = async (directory: string) => (await readdir(directory).catch(() => [])).filter((name) => name.endsWith('.log'));

/** The first batch a new consumer gets: every recovered message, since they are queued before it subscribes. */
async function firstBatch(bus: InProcessEventBus, subject = 'usage.events'): Promise<DurableMessage[]> {
  return new Promise((resolve) => {
    void bus.consumeDurable({ subject, durable: 'test', maxBatch: 1_000, lingerMs: 0 }, async (batch) => { resolve(batch); })
      .then((subscription) => subscriptions.push(subscription));
  });
}

describe('in-process bus with a journal', () => {
  it('redelivers, after a kill, every message published and never handled', async () => {
    const directory = join(root, 'bus');
    const bus = await openBus(directory);
    for (let index = 0; index < 5; index++) await bus.publishDurable('usage.events', encode(`event-${index}`), `id-${index}`);
    await bus.publishDurable('usage.batches', encode('batch-0'), 'batch-id-0');
    expect((await segments(directory)).length).toBeGreaterThan(0);

    const restarted = await openBus(await crashed(directory));
    const events = await firstBatch(restarted);
    expect(events.map((message) => [message.msgId, decode(message.data), message.redelivered])).toEqual(
      Array.from({ length: 5 }, (_, index) => [`id-${index}`, `event-${index}`, true]),
    );
    const batches = await firstBatch(restarted, 'usage.batches');
    expect(batches.map((message) => [message.msgId, decode(message.data)])).toEqual([['batch-id-0', 'batch-0']]);
    // The msg-ids are known again: a republish of one within the dedup window is not stored twice.
    await restarted.publishDurable('usage.events', encode('event-0 again'), 'id-0');
  });

  it('does not redeliver what a handler acknowledged', async () => {
    const directory = join(root, 'bus');
    const bus = await openBus(directory);
    const handled: string[] = [];
    const subscription = await bus.consumeDurable(
      { subject: 'usage.events', durable: 'settler', maxBatch: 10, lingerMs: 0 },
      async (batch) => { handled.push(...batch.map((message) => message.msgId)); },
    );
    for (let index = 0; index < 5; index++) await bus.publishDurable('usage.events', encode(`settled-${index}`), `settled-${index}`);
    await eventually(() => expect(handled).toHaveLength(5));
    // Acknowledged: the whole segment is deleted.
    await eventually(async () => expect(await segments(directory)).toEqual([]));
    await subscription.stop();
    await bus.publishDurable('usage.events', encode('open-1'), 'open-1');
    await bus.publishDurable('usage.events', encode('open-2'), 'open-2');

    const restarted = await openBus(await crashed(directory));
    expect((await firstBatch(restarted)).map((message) => message.msgId)).toEqual(['open-1', 'open-2']);
  });

  it('keeps a message whose handler failed for the next start', async () => {
    const directory = join(root, 'bus');
    const bus = await openBus(directory);
    let calls = 0;
    subscriptions.push(await bus.consumeDurable(
      { subject: 'usage.events', durable: 'failing', maxBatch: 10, lingerMs: 0 },
      async () => { calls++; throw new Error('settlement failed'); },
    ));
    await bus.publishDurable('usage.events', encode('unsettled'), 'unsettled-1');
    await eventually(() => expect(calls).toBeGreaterThanOrEqual(1));
    const restarted = await openBus(await crashed(directory));
    expect((await firstBatch(restarted)).map((message) => message.msgId)).toEqual(['unsettled-1']);
  });

  it('tolerates a torn record at the end of the journal (a kill mid-write)', async () => {
    const directory = join(root, 'bus');
    const bus = await openBus(directory);
    await bus.publishDurable('usage.events', encode('whole-1'), 'whole-1');
    await bus.publishDurable('usage.events', encode('whole-2'), 'whole-2');
    const copy = await crashed(directory);
    const [segment] = await segments(copy);
    const bytes = await readFile(join(copy, segment!));
    await appendFile(join(copy, segment!), bytes.subarray(0, 20)); // the start of a record, cut short
    const restarted = await openBus(copy);
    expect((await firstBatch(restarted)).map((message) => decode(message.data))).toEqual(['whole-1', 'whole-2']);
  });

  it('resolves a duplicate publish made during the first one\'s write only once that write is on disk, and stores it once', async () => {
    const directory = join(root, 'bus');
    const bus = await openBus(directory);
    const first = bus.publishDurable('usage.events', encode('once'), 'dup-1');
    const second = bus.publishDurable('usage.events', encode('once, again'), 'dup-1');
    await second;
    const copy = await crashed(directory);
    await first;
    const restarted = await openBus(copy);
    expect((await firstBatch(restarted)).map((message) => decode(message.data))).toEqual(['once']);
  });

  it('refuses publishes beyond the journal\'s bound instead of growing without one', async () => {
    const bus = await InProcessEventBus.open(logger, { journalDirectory: join(root, 'bus'), journalMaxBytes: 1_000 });
    open.push(bus);
    const publishes = Array.from({ length: 20 }, (_, index) => bus.publishDurable('usage.events', new Uint8Array(100), `big-${index}`));
    const results = await Promise.allSettled(publishes);
    expect(results.filter((result) => result.status === 'fulfilled').length).toBeGreaterThan(0);
    expect(results.filter((result) => result.status === 'rejected').length).toBeGreaterThan(0);
  });
});
