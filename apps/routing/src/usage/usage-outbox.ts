import { SegmentLog, type Logger, type RecoveredRecord } from '@gateway/platform';
import { UsageEvent } from '@gateway/proto';

/**
 * The local durable outbox of usage events (spec §7: a stream's usage is never lost), two segment
 * logs (`SegmentLog`: CRC-checked records, group-committed fdatasync) in one directory:
 *
 * - `usage-outbox-*.log`: events nobody waits for — above all a stream whose content already reached
 *   the caller and whose publish the bus refused. A record leaves once the bus acknowledged it; what
 *   is left when the process dies is republished on the next start (msg-id = request id, so the bus
 *   or else the ledger's per-request dedup keeps the charge single).
 * - `usage-checkpoint-*.log`: stream checkpoints (stream-checkpoints.ts), the provisional SERVED usage
 *   of streams in flight, never published while the process lives. Record kinds: a checkpoint (the
 *   event), and "closed" (the request's final event is stored elsewhere). On the next start the latest
 *   checkpoint of every request without a later "closed" record or a final event in the other log
 *   is republished as the request's usage: content that reached a caller is charged after a crash too.
 *
 * Both logs delete their acknowledged prefix oldest segment first, so a "closed" record (always
 * written after the checkpoints it cancels) is never gone from the disk while one of them remains.
 */
export interface UsageOutboxOptions {
  directory: string;
  logger: Logger;
  /** Bound of the events log (default 64 MiB, ~200k events); appends beyond it are refused. */
  maxBytes?: number;
  /**
   * Bound of the checkpoint log (default 16 MiB). Each stream in flight past its first checkpoint
   * keeps one live record there (a few hundred bytes); superseded ones leave with their segments.
   */
  checkpointMaxBytes?: number;
  /** A segment is closed for appends at this size (default 1 MiB). */
  segmentBytes?: number;
}

export interface OutboxEntry {
  readonly event: UsageEvent;
  /** Segment holding the record (internal bookkeeping). */
  readonly segment: number;
  /** A stream checkpoint recovered from a previous run (it lives in the checkpoint log). */
  readonly checkpoint: boolean;
}

const EVENTS_LOG = 'usage-outbox';
const CHECKPOINTS_LOG = 'usage-checkpoint';
const DEFAULT_CHECKPOINT_MAX_BYTES = 16 * 1024 * 1024;
/** A usage event is a few hundred bytes; anything near this is corrupt, not an event. */
const MAX_RECORD_BYTES = 1 << 20;
/** First byte of a checkpoint-log record. */
const CHECKPOINT_RECORD = 1;
const CLOSED_RECORD = 2;

export class UsageOutbox {
  private constructor(
    private readonly events: SegmentLog,
    private readonly checkpoints: SegmentLog,
  ) {}

  /** Opens (creating) the directory, takes its locks, and returns what a previous process left unsent. */
  static async open(options: UsageOutboxOptions): Promise<{ outbox: UsageOutbox; recovered: OutboxEntry[] }> {
    const common = { directory: options.directory, logger: options.logger, segmentBytes: options.segmentBytes, maxRecordBytes: MAX_RECORD_BYTES };
    const events = await SegmentLog.open({ ...common, name: EVENTS_LOG, maxBytes: options.maxBytes });
    let checkpoints: Awaited<ReturnType<typeof SegmentLog.open>>;
    try {
      checkpoints = await SegmentLog.open({ ...common, name: CHECKPOINTS_LOG, maxBytes: options.checkpointMaxBytes ?? DEFAULT_CHECKPOINT_MAX_BYTES });
    } catch (error) {
      await events.log.close();
      throw error;
    }
    const outbox = new UsageOutbox(events.log, checkpoints.log);
    const recovered: OutboxEntry[] = [];
    for (const record of events.recovered) {
      const event = outbox.decode(record, events.log, options.logger);
      if (event) recovered.push({ event, segment: record.segment, checkpoint: false });
    }
    const finals = new Set(recovered.map((entry) => entry.event.requestId));
    const unclosed = await outbox.unclosedCheckpoints(checkpoints.recovered, finals, options.logger);
    if (recovered.length > 0 || unclosed.length > 0) {
      options.logger.warn(
        { events: recovered.length, checkpoints: unclosed.length, directory: options.directory },
        'usage outbox holds usage of a previous run (unsent events, checkpoints of streams cut by a crash); publishing it',
      );
    }
    return { outbox, recovered: [...recovered, ...unclosed] };
  }

  /** Events and checkpoints written and not yet acknowledged (recovered ones included). */
  get pendingCount(): number {
    return this.events.pendingCount + this.checkpoints.pendingCount;
  }

  get sizeBytes(): number {
    return this.events.sizeBytes + this.checkpoints.sizeBytes;
  }

  /** Resolves once the event is on disk (fdatasync'ed); rejects when the outbox is full or closed. */
  async append(event: UsageEvent): Promise<OutboxEntry> {
    const segment = await this.events.append(UsageEvent.encode(event).finish());
    return { event, segment, checkpoint: false };
  }

  /** The event was acknowledged by the bus: its record need not survive. */
  acknowledge(entry: OutboxEntry): Promise<void> {
    return (entry.checkpoint ? this.checkpoints : this.events).acknowledge(entry.segment);
  }

  /** A stream's provisional usage; resolves with its segment once on disk. */
  appendCheckpoint(event: UsageEvent): Promise<number> {
    const encoded = UsageEvent.encode(event).finish();
    const payload = Buffer.allocUnsafe(1 + encoded.length);
    payload[0] = CHECKPOINT_RECORD;
    payload.set(encoded, 1);
    return this.checkpoints.append(payload);
  }

  /** The request's final usage event is stored (bus or events log): its checkpoints no longer count. */
  appendStreamClosed(requestId: string): Promise<number> {
    const payload = Buffer.allocUnsafe(1 + Buffer.byteLength(requestId));
    payload[0] = CLOSED_RECORD;
    payload.write(requestId, 1);
    return this.checkpoints.append(payload);
  }

  /** A checkpoint or "closed" record of the checkpoint log need not survive any more. */
  acknowledgeCheckpoint(segment: number): Promise<void> {
    return this.checkpoints.acknowledge(segment);
  }

  /** Waits for queued appends, then closes the files. Unacknowledged records stay for the next start. */
  async close(): Promise<void> {
    await this.checkpoints.close();
    await this.events.close();
  }

  /** A record that passed its CRC but does not decode can never be sent: it is logged and let go. */
  private decode(record: RecoveredRecord, log: SegmentLog, logger: Logger, offset = 0): UsageEvent | undefined {
    try {
      return UsageEvent.decode(record.payload.subarray(offset));
    } catch (error) {
      logger.error({ err: error, segment: record.segment, bytes: record.payload.toString('base64') }, 'undecodable usage outbox record; dropped');
      void log.acknowledge(record.segment);
      return undefined;
    }
  }

  /**
   * The latest checkpoint of each request that has neither a later "closed" record nor a final event
   * in the events log. Every other checkpoint-log record is acknowledged here.
   */
  private async unclosedCheckpoints(records: RecoveredRecord[], finals: ReadonlySet<string>, logger: Logger): Promise<OutboxEntry[]> {
    const latest = new Map<string, OutboxEntry>();
    const done: number[] = [];
    for (const record of records) {
      const kind = record.payload[0];
      if (kind === CHECKPOINT_RECORD) {
        const event = this.decode(record, this.checkpoints, logger, 1);
        if (!event) continue;
        const previous = latest.get(event.requestId);
        if (previous) done.push(previous.segment);
        latest.set(event.requestId, { event, segment: record.segment, checkpoint: true });
      } else if (kind === CLOSED_RECORD) {
        const requestId = record.payload.toString('utf8', 1);
        const checkpoint = latest.get(requestId);
        if (checkpoint) done.push(checkpoint.segment);
        latest.delete(requestId);
        done.push(record.segment);
      } else {
        logger.error({ kind, segment: record.segment }, 'unknown usage checkpoint record; dropped');
        done.push(record.segment);
      }
    }
    const unclosed: OutboxEntry[] = [];
    for (const entry of latest.values()) {
      if (finals.has(entry.event.requestId)) done.push(entry.segment);
      else unclosed.push(entry);
    }
    for (const segment of done) await this.checkpoints.acknowledge(segment);
    return unclosed;
  }
}
