import { CHECKPOINT_INTERVAL_MS, FIRST_CHECKPOINT_AFTER_MS, type Logger } from '@gateway/platform';
import type { UsageEvent } from '@gateway/proto';
import type { UsageOutbox } from './usage-outbox.js';

/**
 * A stream's usage event exists only in memory until the stream ends, yet its content is with the
 * caller from the first chunk. So once a stream has run a while, its provisional SERVED usage (what
 * was metered so far) is written to the outbox's checkpoint log — never published — and rewritten as
 * content flows; when the final event is stored the checkpoint is retired. After a crash the outbox
 * publishes every checkpoint whose stream never stored its final event (usage-outbox.ts).
 *
 * What a crash can lose, per stream in flight: the output of its last FIRST_CHECKPOINT_AFTER_MS +
 * CHECKPOINT_INTERVAL_MS (400 ms; a stream younger than that has no checkpoint yet), plus however long
 * the disk takes to sync one group of checkpoint writes.
 */

/** The first checkpoint's delay and the interval: the published loss bound (libs/platform usage-checkpoints.ts). */
export { CHECKPOINT_INTERVAL_MS, FIRST_CHECKPOINT_AFTER_MS };
/**
 * A stream that delivered nothing new is rewritten anyway after this long, so its one live record moves
 * to a recent segment and the older segments (all superseded records) can be deleted: the checkpoint
 * log is deleted oldest segment first, and a stalled stream would otherwise pin everything after it.
 */
export const CHECKPOINT_REWRITE_MS = 5_000;
/** At most one log line per this period when checkpoint writes fail (a full or failing disk hits every stream). */
const ERROR_LOG_INTERVAL_MS = 10_000;

/** What a stream exposes to its checkpoints: a counter bumped whenever its metered usage may have changed. */
export interface StreamProgress {
  readonly changes: number;
}

export interface StreamCheckpoint {
  /** The stream's final usage event is stored (acknowledged by the bus, or in the outbox): retire its checkpoints. */
  finalStored(): void;
}

/** Without an outbox there is nowhere durable to checkpoint to. */
export const NO_CHECKPOINT: StreamCheckpoint = { finalStored() {} };

class TrackedStream implements StreamCheckpoint {
  /** `progress.changes` when the last checkpoint was built; -1: none yet. */
  writtenChanges = -1;
  writtenAtMs = 0;
  /** Segment of the stream's live checkpoint record; 0: none on disk. */
  segment = 0;
  requestId = '';
  writing: Promise<void> | null = null;

  constructor(
    private readonly owner: StreamCheckpoints,
    readonly progress: StreamProgress,
    readonly checkpointEvent: () => UsageEvent,
    readonly startedAtMs: number,
  ) {}

  finalStored(): void {
    this.owner.finish(this);
  }
}

export interface StreamCheckpointsOptions {
  outbox: UsageOutbox;
  logger: Logger;
  /** Tests shorten these; production uses the constants above. */
  firstAfterMs?: number;
  intervalMs?: number;
  rewriteAfterMs?: number;
}

export class StreamCheckpoints {
  private readonly streams = new Set<TrackedStream>();
  private readonly closing = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private lastErrorLoggedAtMs = 0;
  private readonly firstAfterMs: number;
  private readonly intervalMs: number;
  private readonly rewriteAfterMs: number;

  constructor(private readonly options: StreamCheckpointsOptions) {
    this.firstAfterMs = options.firstAfterMs ?? FIRST_CHECKPOINT_AFTER_MS;
    this.intervalMs = options.intervalMs ?? CHECKPOINT_INTERVAL_MS;
    this.rewriteAfterMs = options.rewriteAfterMs ?? CHECKPOINT_REWRITE_MS;
  }

  /** Streams tracked (committed, final not yet stored). */
  get inFlight(): number {
    return this.streams.size;
  }

  /**
   * A stream committed (its first content is going to the caller). `checkpointEvent` builds the SERVED
   * event of what it delivered so far; it runs on the timer, never on the stream's own path.
   */
  track(progress: StreamProgress, checkpointEvent: () => UsageEvent): StreamCheckpoint {
    if (this.stopped) return NO_CHECKPOINT;
    const stream = new TrackedStream(this, progress, checkpointEvent, Date.now());
    this.streams.add(stream);
    if (!this.timer) this.arm();
    return stream;
  }

  /** Called through StreamCheckpoint.finalStored. */
  finish(stream: TrackedStream): void {
    if (!this.streams.delete(stream)) return;
    // The common case: a stream that ended before its first checkpoint never touched the disk.
    if (!stream.writing && stream.segment === 0) return;
    const closing = this.close(stream).finally(() => this.closing.delete(closing));
    this.closing.add(closing);
  }

  /** Resolves once the checkpoint writes and retirements under way are done. */
  async settled(): Promise<void> {
    await Promise.all([...this.streams].map((stream) => stream.writing));
    while (this.closing.size > 0) await Promise.all([...this.closing]);
  }

  /** Stops checkpointing; waits for the writes and retirements under way. Live checkpoints stay for the next start. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.settled();
  }

  private arm(): void {
    this.timer = setTimeout(this.tick, this.intervalMs);
    this.timer.unref();
  }

  private readonly tick = (): void => {
    this.timer = null;
    if (this.stopped) return;
    const now = Date.now();
    for (const stream of this.streams) {
      // One write per stream at a time: a slow disk skips a tick rather than queueing stale records.
      if (stream.writing || now - stream.startedAtMs < this.firstAfterMs) continue;
      if (stream.progress.changes === stream.writtenChanges && now - stream.writtenAtMs < this.rewriteAfterMs) continue;
      this.write(stream, now);
    }
    if (this.streams.size > 0) this.arm();
  };

  private write(stream: TrackedStream, now: number): void {
    // Read before building: whatever arrives meanwhile is either in this event or makes the next tick write.
    const changes = stream.progress.changes;
    let event: UsageEvent;
    try {
      event = stream.checkpointEvent();
    } catch (error) {
      this.logError(error, 'could not meter a stream checkpoint');
      return;
    }
    stream.requestId = event.requestId;
    stream.writtenChanges = changes;
    stream.writtenAtMs = now;
    stream.writing = this.options.outbox.appendCheckpoint(event).then(
      (segment) => {
        const previous = stream.segment;
        stream.segment = segment;
        // The new record is on disk; the old one is superseded (recovery takes the latest anyway).
        if (previous !== 0) return this.options.outbox.acknowledgeCheckpoint(previous);
      },
      (error: unknown) => {
        stream.writtenChanges = -1; // try again next tick
        this.logError(error, 'stream checkpoint not written; a crash now would lose more of this stream\'s usage');
      },
    ).finally(() => {
      stream.writing = null;
    });
  }

  /**
   * The final event is stored: a "closed" record first, then the checkpoint goes. In that order a
   * crash in between leaves the closed record, never a checkpoint that recovery would publish although
   * the final event got out (which the ledger would dedup, but possibly keeping the smaller one).
   */
  private async close(stream: TrackedStream): Promise<void> {
    if (stream.writing) await stream.writing;
    if (stream.segment === 0) return;
    let closedSegment = 0;
    try {
      closedSegment = await this.options.outbox.appendStreamClosed(stream.requestId);
    } catch (error) {
      this.logError(error, 'stream closed record not written; its checkpoint is retired without it');
    }
    await this.options.outbox.acknowledgeCheckpoint(stream.segment);
    if (closedSegment !== 0) await this.options.outbox.acknowledgeCheckpoint(closedSegment);
  }

  private logError(error: unknown, message: string): void {
    const now = Date.now();
    if (now - this.lastErrorLoggedAtMs < ERROR_LOG_INTERVAL_MS) return;
    this.lastErrorLoggedAtMs = now;
    this.options.logger.error({ err: error, streams: this.streams.size }, message);
  }
}
