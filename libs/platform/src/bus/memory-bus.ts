import type { Logger } from 'pino';
import { SegmentLog } from '../segment-log.js';
import {
  USAGE_DEDUP_WINDOW_MS,
  type DurableConsumerOptions,
  type DurableMessage,
  type EventBus,
  type Subscription,
} from './event-bus.js';
import { MemoryKeyValueBucket, type KeyValueBucket, type KeyValueBucketOptions } from './key-value.js';

interface Stored {
  subject: string;
  data: Uint8Array;
  msgId: string;
  deliveries: number;
  /** Journal segment of the message; 0 without a journal. */
  segment: number;
}

/** Most messages kept in memory: beyond it publishers are refused rather than memory growing without bound. */
const MAX_BACKLOG = 100_000;
/** The journal's bound on disk: a ledger stopped for a while leaves ~1M usage events here before publishers are refused. */
const DEFAULT_JOURNAL_MAX_BYTES = 256 * 1024 * 1024;
/** A group-commit message is at most 512 KiB; NATS's own payload limit is 1 MiB. */
const MAX_JOURNAL_RECORD_BYTES = 2 * 1024 * 1024;

export interface InProcessEventBusOptions {
  /**
   * Where durable messages are journaled (`bus-journal-*.log`, one process per directory). Unset:
   * nothing survives the process.
   */
  journalDirectory?: string;
  journalMaxBytes?: number;
}

/**
 * In-process bus for single-process mode (`npm start` without NATS_URL). Same contract as JetStream
 * (dedup by msg-id within the window, batches, ack on success, redelivery on failure). With a journal
 * (`InProcessEventBus.open`) durable messages survive a crash too: `publishDurable` resolves once the
 * message is on disk (a segment log, group-committed fdatasync), a consumer's successful handler
 * retires it, and the next start redelivers every message no handler acknowledged. Without one
 * (`new InProcessEventBus`) published-but-unconsumed messages die with the process.
 */
export class InProcessEventBus implements EventBus {
  private readonly queues = new Map<string, Stored[]>();
  private readonly seen = new Map<string, number>();
  /** Messages being journaled: a duplicate publish meanwhile resolves with the original, once it is on disk. */
  private readonly journaling = new Map<string, Promise<void>>();
  private readonly durableWaiters = new Map<string, Set<() => void>>();
  private readonly listeners = new Map<string, Set<(data: Uint8Array) => void>>();
  private journal: SegmentLog | null = null;
  private readonly buckets = new Map<string, MemoryKeyValueBucket>();
  private closed = false;

  constructor(private readonly logger: Logger) {}

  /** A bus whose durable messages are journaled in `journalDirectory`; unacknowledged ones from a previous run are redelivered. */
  static async open(logger: Logger, options: InProcessEventBusOptions): Promise<InProcessEventBus> {
    const bus = new InProcessEventBus(logger);
    if (!options.journalDirectory) return bus;
    const { log, recovered } = await SegmentLog.open({
      directory: options.journalDirectory,
      name: 'bus-journal',
      logger,
      maxBytes: options.journalMaxBytes ?? DEFAULT_JOURNAL_MAX_BYTES,
      maxRecordBytes: MAX_JOURNAL_RECORD_BYTES,
    });
    bus.journal = log;
    const now = Date.now();
    for (const record of recovered) {
      const message = decodeJournalRecord(record.payload);
      if (!message) {
        logger.error({ segment: record.segment }, 'undecodable bus journal record; dropped');
        await log.acknowledge(record.segment);
        continue;
      }
      bus.seen.set(message.msgId, now);
      // Delivered before (or maybe): consumers see it as a redelivery, which it may well be.
      bus.queueFor(message.subject).push({ ...message, deliveries: 1, segment: record.segment });
    }
    if (recovered.length > 0) logger.warn({ messages: recovered.length, directory: options.journalDirectory }, 'bus journal holds unacknowledged messages of a previous run; redelivering');
    return bus;
  }

  async publishDurable(subject: string, data: Uint8Array, msgId: string): Promise<void> {
    if (this.closed) throw new Error('event bus closed');
    const pending = this.journaling.get(msgId);
    if (pending) return pending;
    const now = Date.now();
    const firstSeen = this.seen.get(msgId);
    if (firstSeen !== undefined && now - firstSeen < USAGE_DEDUP_WINDOW_MS) return;
    this.pruneSeen(now);
    const queue = this.queueFor(subject);
    if (queue.length >= MAX_BACKLOG) throw new Error(`in-process backlog full on ${subject}`);
    if (!this.journal) {
      this.seen.set(msgId, now);
      this.enqueue(queue, { subject, data, msgId, deliveries: 0, segment: 0 });
      return;
    }
    const journaled = this.journal.append(encodeJournalRecord(subject, msgId, data)).then(
      (segment) => {
        this.seen.set(msgId, now);
        this.enqueue(queue, { subject, data, msgId, deliveries: 0, segment });
      },
    ).finally(() => this.journaling.delete(msgId));
    this.journaling.set(msgId, journaled);
    return journaled;
  }

  async consumeDurable(
    options: DurableConsumerOptions,
    handler: (batch: DurableMessage[]) => Promise<void>,
  ): Promise<Subscription> {
    const queue = this.queueFor(options.subject);
    let stopped = false;
    let wake: (() => void) | null = null;
    const waiter = () => { const resolve = wake; wake = null; resolve?.(); };
    const waiters = this.durableWaiters.get(options.subject) ?? new Set();
    waiters.add(waiter);
    this.durableWaiters.set(options.subject, waiters);

    const worker = (async () => {
      while (!stopped) {
        if (queue.length === 0) {
          await new Promise<void>((resolve) => { wake = resolve; });
          continue;
        }
        if (queue.length < options.maxBatch && options.lingerMs > 0) {
          await new Promise((resolve) => setTimeout(resolve, options.lingerMs));
        }
        const batch = queue.splice(0, options.maxBatch);
        try {
          const behind = queue.length;
          await handler(batch.map((stored) => ({ data: stored.data, msgId: stored.msgId, redelivered: stored.deliveries++ > 0, pending: behind })));
          this.acknowledge(batch);
        } catch (error) {
          this.logger.error({ err: error, size: batch.length }, 'batch handler failed; redelivering');
          queue.unshift(...batch);
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      }
    })();

    return {
      stop: async () => {
        stopped = true;
        waiters.delete(waiter);
        waiter();
        await worker;
      },
    };
  }

  broadcast(subject: string, data: Uint8Array): void {
    for (const listener of this.listeners.get(subject) ?? []) {
      queueMicrotask(() => {
        try { listener(data); } catch (error) { this.logger.error({ err: error, subject }, 'subscriber failed'); }
      });
    }
  }

  subscribe(subject: string, handler: (data: Uint8Array) => void): Subscription {
    const set = this.listeners.get(subject) ?? new Set();
    set.add(handler);
    this.listeners.set(subject, set);
    return { stop: async () => { set.delete(handler); } };
  }

  /** Unacknowledged journaled messages stay on disk for the next start. */
  isConnected(): boolean {
    return !this.closed;
  }

  /** A bucket in this process's memory: one process is the only writer in single-process mode. */
  async keyValue(options: KeyValueBucketOptions): Promise<KeyValueBucket> {
    let bucket = this.buckets.get(options.name);
    if (!bucket) this.buckets.set(options.name, (bucket = new MemoryKeyValueBucket(options)));
    return bucket;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const waiters of this.durableWaiters.values()) for (const wake of waiters) wake();
    await this.journal?.close();
  }

  private enqueue(queue: Stored[], stored: Stored): void {
    queue.push(stored);
    for (const wake of this.durableWaiters.get(stored.subject) ?? []) wake();
  }

  private acknowledge(batch: readonly Stored[]): void {
    const journal = this.journal;
    if (!journal) return;
    // Not awaited: a segment deletion must not hold up the next batch; a crash before it only redelivers.
    for (const stored of batch) if (stored.segment !== 0) void journal.acknowledge(stored.segment);
  }

  private queueFor(subject: string): Stored[] {
    let queue = this.queues.get(subject);
    if (!queue) { queue = []; this.queues.set(subject, queue); }
    return queue;
  }

  private pruneSeen(now: number): void {
    if (this.seen.size < 10_000) return;
    for (const [msgId, at] of this.seen) {
      if (now - at < USAGE_DEDUP_WINDOW_MS) break;
      this.seen.delete(msgId);
    }
  }
}

/** `[u16 subject length][subject][u16 msg-id length][msg-id][data]`, UTF-8. */
function encodeJournalRecord(subject: string, msgId: string, data: Uint8Array): Buffer {
  const subjectBytes = Buffer.byteLength(subject);
  const msgIdBytes = Buffer.byteLength(msgId);
  if (subjectBytes > 0xffff || msgIdBytes > 0xffff) throw new Error('subject or msg-id too long for the bus journal');
  const record = Buffer.allocUnsafe(4 + subjectBytes + msgIdBytes + data.length);
  record.writeUInt16BE(subjectBytes, 0);
  record.write(subject, 2);
  record.writeUInt16BE(msgIdBytes, 2 + subjectBytes);
  record.write(msgId, 4 + subjectBytes);
  record.set(data, 4 + subjectBytes + msgIdBytes);
  return record;
}

function decodeJournalRecord(record: Buffer): { subject: string; msgId: string; data: Uint8Array } | undefined {
  if (record.length < 4) return undefined;
  const subjectBytes = record.readUInt16BE(0);
  if (record.length < 4 + subjectBytes) return undefined;
  const msgIdBytes = record.readUInt16BE(2 + subjectBytes);
  const dataStart = 4 + subjectBytes + msgIdBytes;
  if (record.length < dataStart) return undefined;
  return {
    subject: record.toString('utf8', 2, 2 + subjectBytes),
    msgId: record.toString('utf8', 4 + subjectBytes, dataStart),
    // A copy: the recovered record is a view into the whole segment file's buffer.
    data: new Uint8Array(record.subarray(dataStart)),
  };
}
