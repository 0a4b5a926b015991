import { newId, subjects, type EventBus, type Logger } from '@gateway/platform';
import type { UsageEvent } from '@gateway/proto';
import type { BackgroundUsage, BackgroundUsageOptions } from './background-usage.js';
import type { StreamCheckpoint, StreamProgress } from './stream-checkpoints.js';
import { backgroundUsageFor, encodeUsageEvent, publishWithRetry, type UsageBacklog, type UsagePublisher } from './usage-publisher.js';
import type { OutboxEntry, UsageOutbox } from './usage-outbox.js';
import { encodeRepeatedBytes } from '@gateway/proto';

export interface GroupCommitUsagePublisherOptions {
  bus: EventBus;
  logger: Logger;
  /**
   * Longest a gathered event waits while `maxBatchesInFlight` batches await their acknowledgement
   * (default 2 ms): a bound for a slow bus, not a delay — below that limit an event goes at once.
   */
  lingerMs?: number;
  /** Batches awaiting their acknowledgement before new events gather instead of going at once (default 2). */
  maxBatchesInFlight?: number;
  /** Most events per JetStream message (default 256). */
  maxEvents?: number;
  /** Most bytes per JetStream message (default 512 KiB; NATS refuses payloads above 1 MiB by default). */
  maxBytes?: number;
  /** Attempts of one batch publish before its waiting requests are told it failed (default 3). */
  attempts?: number;
  /** Most events waiting for an acknowledgement at once (default 50,000); beyond it publish rejects at once. */
  maxWaitingEvents?: number;
  outbox?: UsageOutbox;
  recovered?: OutboxEntry[];
  /** Most background events held in memory awaiting the bus. */
  maxBacklog?: number;
  /** Stream checkpoint timing (tests shorten it). */
  checkpoints?: BackgroundUsageOptions['checkpoints'];
  /** Observes every batch acknowledged (bench and tests: how full batches run under load). */
  onBatch?: (batch: { batchId: string; events: number; bytes: number }) => void;
}

interface Waiting {
  requestId: string;
  bytes: Uint8Array;
  resolve(): void;
  reject(error: unknown): void;
}

export class UsagePublisherSaturatedError extends Error {
  override name = 'UsagePublisherSaturatedError';
}

/**
 * Group commit (DESIGN §2 "Performance shape"), batched naturally: an event goes out at once (with
 * whatever else was published in the same tick) while fewer than `maxBatchesInFlight` batches await
 * their acknowledgement; otherwise it gathers with the events behind it until a batch completes — so
 * a quiet gateway adds no waiting to a request (the fixed linger used to add up to 2 ms to every
 * non-streamed answer, most of its added median latency), and a busy one still sends one message per
 * acknowledgement round trip. `lingerMs` bounds the gathering when acknowledgements are slow, and
 * `maxEvents` / `maxBytes` bound a batch. A batch is ONE `UsageEventBatch` message on `usage.batches`
 * (msg-id = batch id, so a retried batch is stored once), and every request in it resumes when that
 * message is acknowledged — as durable as one message per event, at a fraction of the publishes. The
 * ledger dedups per request id.
 */
export class GroupCommitUsagePublisher implements UsagePublisher {
  private readonly lingerMs: number;
  private readonly maxBatchesInFlight: number;
  private flushQueued = false;
  private readonly maxEvents: number;
  private readonly maxBytes: number;
  private readonly attempts: number;
  private readonly maxWaitingEvents: number;
  private readonly background: BackgroundUsage;
  private gathering: Waiting[] = [];
  private gatheringBytes = 0;
  private timer: NodeJS.Timeout | null = null;
  private waitingEvents = 0;
  private readonly inFlight = new Set<Promise<void>>();
  private stopped = false;
  /**
   * Batch ids are this publisher's random prefix and a counter: unique across processes and restarts
   * (the prefix) without drawing random bytes per batch, which profiling showed costing more than the
   * rest of the flush at low load.
   */
  private readonly batchIdPrefix = newId('usage-batch', 9);
  private batchSequence = 0;

  constructor(private readonly options: GroupCommitUsagePublisherOptions) {
    this.lingerMs = options.lingerMs ?? 2;
    this.maxBatchesInFlight = options.maxBatchesInFlight ?? 2;
    if (!(this.maxBatchesInFlight >= 1 && this.maxBatchesInFlight <= 64)) throw new Error(`maxBatchesInFlight must be 1..64: ${this.maxBatchesInFlight}`);
    this.maxEvents = options.maxEvents ?? 256;
    this.maxBytes = options.maxBytes ?? 512 * 1024;
    this.attempts = options.attempts ?? 3;
    this.maxWaitingEvents = options.maxWaitingEvents ?? 50_000;
    if (!(this.maxEvents >= 1 && this.maxEvents <= 10_000)) throw new Error(`maxEvents must be 1..10000: ${this.maxEvents}`);
    if (!(this.lingerMs >= 0 && this.lingerMs <= 1_000)) throw new Error(`lingerMs must be 0..1000: ${this.lingerMs}`);
    // Background events keep the per-event msg-id (request id), not the batch's.
    this.background = backgroundUsageFor(options);
  }

  publish(event: UsageEvent): Promise<void> {
    if (this.stopped) return Promise.reject(new Error('usage publisher stopped'));
    if (this.waitingEvents >= this.maxWaitingEvents) {
      return Promise.reject(new UsagePublisherSaturatedError(`${this.waitingEvents} usage events already wait for the bus`));
    }
    const bytes = encodeUsageEvent(event);
    if (bytes.length + 64 > this.maxBytes) return Promise.reject(new Error(`usage event of ${bytes.length} bytes exceeds the batch bound`));
    return new Promise<void>((resolve, reject) => {
      if (this.gatheringBytes + bytes.length + 16 > this.maxBytes) this.flush();
      this.waitingEvents++;
      this.gathering.push({ requestId: event.requestId, bytes, resolve, reject });
      this.gatheringBytes += bytes.length + 16;
      if (this.gathering.length >= this.maxEvents) this.flush();
      else if (this.inFlight.size < this.maxBatchesInFlight) this.queueFlush();
      else if (!this.timer) this.timer = setTimeout(() => this.flush(), this.lingerMs);
    });
  }

  /** Flushes after the current tick's other publishes joined the batch (one microtask, no timer). */
  private queueFlush(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    queueMicrotask(this.flushQueuedBatch);
  }

  private readonly flushQueuedBatch = (): void => {
    this.flushQueued = false;
    if (this.inFlight.size < this.maxBatchesInFlight) this.flush();
    else if (this.gathering.length > 0 && !this.timer) this.timer = setTimeout(() => this.flush(), this.lingerMs);
  };

  publishInBackground(event: UsageEvent, checkpoint?: StreamCheckpoint): void {
    this.background.submit(event, checkpoint);
  }

  trackStream(progress: StreamProgress, checkpointEvent: () => UsageEvent): StreamCheckpoint {
    return this.background.trackStream(progress, checkpointEvent);
  }

  /** Resolves once every background event submitted so far is in the outbox. */
  backgroundDurable(): Promise<void> {
    return this.background.durable();
  }

  backlog(): UsageBacklog {
    return this.background.backlogSizes();
  }

  async stop(): Promise<void> {
    this.flush();
    this.stopped = true;
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
    await this.background.stop();
  }

  private flush(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const batch = this.gathering;
    if (batch.length === 0) return;
    this.gathering = [];
    this.gatheringBytes = 0;
    const batchId = `${this.batchIdPrefix}-${(++this.batchSequence).toString(36)}`;
    const data = encodeUsageEventBatch(batchId, batch.map((waiting) => waiting.bytes));
    const sent = publishWithRetry(this.options.bus, subjects.usageBatches, data, batchId, this.attempts, (error, attempt) => {
      this.options.logger.warn({ err: error, batch_id: batchId, events: batch.length, attempt }, 'usage batch publish failed; retrying');
    }).then(
      () => {
        this.options.onBatch?.({ batchId, events: batch.length, bytes: data.length });
        for (const waiting of batch) waiting.resolve();
      },
      (error) => {
        this.options.logger.error({ err: error, batch_id: batchId, events: batch.length }, 'usage batch not stored');
        for (const waiting of batch) waiting.reject(error);
      },
    ).finally(() => {
      this.waitingEvents -= batch.length;
      this.inFlight.delete(sent);
      // What gathered behind the full pipeline goes as the next batch.
      if (this.gathering.length > 0 && !this.stopped) this.flush();
    });
    this.inFlight.add(sent);
  }
}

/**
 * `UsageEventBatch { batch_id = 1; repeated UsageEvent events = 2; }` from events already encoded
 * (each is encoded once, when published, to bound the message size).
 */
export function encodeUsageEventBatch(batchId: string, events: readonly Uint8Array[]): Uint8Array {
  return encodeRepeatedBytes(2, events, { field: 1, bytes: Buffer.from(batchId, 'utf8') });
}
