import type { Logger } from '@gateway/platform';
import type { UsageEvent } from '@gateway/proto';
import { NO_CHECKPOINT, StreamCheckpoints, type StreamCheckpoint, type StreamProgress } from './stream-checkpoints.js';
import type { OutboxEntry, UsageOutbox } from './usage-outbox.js';

export interface BackgroundUsageOptions {
  /** One attempt to store the event on the bus (msg-id = request id). */
  send(event: UsageEvent): Promise<void>;
  outbox?: UsageOutbox;
  recovered?: OutboxEntry[];
  logger: Logger;
  /** Most events waiting for the bus in memory (default 100,000); beyond it the oldest is dropped and logged. */
  maxBacklog?: number;
  /** Sends in flight at once while draining (default 32). */
  concurrency?: number;
  /** How long stop() lets the backlog drain before leaving the rest in the outbox (default 2 s). */
  stopGraceMs?: number;
  /** Stream checkpoint timing (tests shorten it); see stream-checkpoints.ts. */
  checkpoints?: { firstAfterMs?: number; intervalMs?: number; rewriteAfterMs?: number };
}

interface Pending {
  event: UsageEvent;
  entry?: OutboxEntry;
  /** The stream whose final event this is: its checkpoint is retired once the event is stored. */
  checkpoint?: StreamCheckpoint;
}

const FIRST_RETRY_DELAY_MS = 100;
const MAX_RETRY_DELAY_MS = 10_000;

/**
 * Usage events nobody waits for: written to the durable outbox first (when there is one), then
 * sent until the bus accepts them, then removed from the outbox. Events recovered from a previous
 * run's outbox go first (unsent events and the checkpoints of streams a crash cut off). Without an
 * outbox a crash loses the backlog; the ledger's sweeper then only releases the reservation (an
 * undercharge, never a double charge). It also keeps the checkpoints of streams in flight, which
 * live in the same outbox.
 */
export class BackgroundUsage {
  private readonly backlog: Pending[] = [];
  private readonly appending = new Set<Promise<void>>();
  private readonly maxBacklog: number;
  private readonly concurrency: number;
  private inFlight = 0;
  private draining: Promise<void> | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private retryDelayMs = FIRST_RETRY_DELAY_MS;
  private stopped = false;
  private idleWaiters: Array<() => void> = [];
  private readonly checkpoints: StreamCheckpoints | undefined;

  constructor(private readonly options: BackgroundUsageOptions) {
    this.maxBacklog = options.maxBacklog ?? 100_000;
    this.concurrency = options.concurrency ?? 32;
    this.checkpoints = options.outbox ? new StreamCheckpoints({ outbox: options.outbox, logger: options.logger, ...options.checkpoints }) : undefined;
    for (const entry of options.recovered ?? []) this.backlog.push({ event: entry.event, entry });
    this.kick();
  }

  /** Events not yet accepted by the bus. */
  get pending(): number {
    return this.backlog.length + this.inFlight + this.appending.size;
  }

  /** Metrics: what waits for the bus, and the outbox's size (see UsageBacklog). */
  backlogSizes(): { backgroundEvents: number; outboxRecords: number; outboxBytes: number } {
    const outbox = this.options.outbox;
    return { backgroundEvents: this.pending, outboxRecords: outbox?.pendingCount ?? 0, outboxBytes: outbox?.sizeBytes ?? 0 };
  }

  /** See StreamCheckpoints.track; without an outbox a stream has no checkpoints. */
  trackStream(progress: StreamProgress, checkpointEvent: () => UsageEvent): StreamCheckpoint {
    return this.checkpoints?.track(progress, checkpointEvent) ?? NO_CHECKPOINT;
  }

  /** `checkpoint`: the stream this is the final event of; its checkpoint is retired once the event is stored. */
  submit(event: UsageEvent, checkpoint?: StreamCheckpoint): void {
    if (this.stopped) {
      // The stream's checkpoint (if it has one) stays on disk and is published on the next start.
      this.options.logger.error({ request_id: event.requestId }, 'usage event submitted after stop; not stored');
      return;
    }
    const outbox = this.options.outbox;
    if (!outbox) {
      this.enqueue({ event, checkpoint });
      return;
    }
    const appended = outbox.append(event).then(
      (entry) => {
        // The final event is on disk: it supersedes the checkpoint on recovery.
        checkpoint?.finalStored();
        this.enqueue({ event, entry });
      },
      (error) => {
        // Full or failing disk: still try the bus from memory rather than give up on the event; the
        // checkpoint stays until the bus has it.
        this.options.logger.error({ err: error, request_id: event.requestId }, 'usage outbox refused the event; retrying from memory only');
        this.enqueue({ event, checkpoint });
      },
    ).finally(() => this.appending.delete(appended));
    this.appending.add(appended);
  }

  /** Resolves once every event submitted so far is in the outbox (tests, orderly shutdown). */
  async durable(): Promise<void> {
    while (this.appending.size > 0) await Promise.all([...this.appending]);
  }

  /** Resolves when nothing is waiting for the bus. */
  idle(): Promise<void> {
    if (this.pending === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  async stop(): Promise<void> {
    await this.durable();
    const graceMs = this.options.stopGraceMs ?? 2_000;
    if (this.pending > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.idle(), new Promise<void>((resolve) => { timer = setTimeout(resolve, graceMs); })]);
      clearTimeout(timer);
    }
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    await this.draining;
    const left = this.backlog.length;
    if (left > 0) {
      const kept = this.options.outbox ? this.backlog.filter((pending) => pending.entry).length : 0;
      this.options.logger.error({ left, keptInOutbox: kept }, 'stopping with unpublished usage events');
    }
    // Checkpoint retirements write to the outbox: they finish before it closes.
    await this.checkpoints?.stop();
    await this.options.outbox?.close();
  }

  private enqueue(pending: Pending): void {
    if (this.backlog.length >= this.maxBacklog) {
      const dropped = this.backlog.shift()!;
      // In the outbox it is still safe on disk and comes back on the next start.
      this.options.logger.error({ request_id: dropped.event.requestId, inOutbox: dropped.entry !== undefined }, 'usage backlog full; oldest event left for the next start');
    }
    this.backlog.push(pending);
    this.kick();
  }

  private kick(): void {
    if (this.stopped || this.retryTimer || this.draining) return;
    this.draining = this.drain().finally(() => {
      this.draining = null;
      // Events enqueued after the workers saw an empty backlog.
      if (this.backlog.length > 0) this.kick();
      else if (this.pending === 0) for (const resolve of this.idleWaiters.splice(0)) resolve();
    });
  }

  private async drain(): Promise<void> {
    const workers: Array<Promise<void>> = [];
    let failed = false;
    const work = async () => {
      while (!this.stopped && !failed && this.backlog.length > 0) {
        const pending = this.backlog.shift()!;
        this.inFlight++;
        try {
          await this.options.send(pending.event);
          pending.checkpoint?.finalStored();
          if (pending.entry) await this.options.outbox?.acknowledge(pending.entry);
          this.retryDelayMs = FIRST_RETRY_DELAY_MS;
        } catch (error) {
          failed = true;
          this.backlog.unshift(pending);
          this.options.logger.error({ err: error, request_id: pending.event.requestId, backlog: this.backlog.length }, 'usage event still not stored; will retry');
        } finally {
          this.inFlight--;
        }
      }
    };
    for (let index = 0; index < this.concurrency; index++) workers.push(work());
    await Promise.all(workers);
    if (this.stopped) return;
    if (failed) {
      const delayMs = this.retryDelayMs;
      this.retryDelayMs = Math.min(this.retryDelayMs * 2, MAX_RETRY_DELAY_MS);
      this.retryTimer = setTimeout(() => {
        this.retryTimer = null;
        this.kick();
      }, delayMs * (0.5 + Math.random() / 2));
      this.retryTimer.unref();
    }
  }
}
