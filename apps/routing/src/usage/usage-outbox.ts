import { closeSync, constants, fsyncSync, openSync } from 'node:fs';
import { mkdir, open, readdir, readFile, rmdir, unlink, writeFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '@gateway/platform';
import { UsageEvent } from '@gateway/proto';

/**
 * The local durable outbox of usage events (spec §7: a stream's usage is never lost). An event goes
 * in when nobody waits for its publish — above all a stream whose content already reached the caller
 * and whose publish the bus refused — and leaves once JetStream acknowledged it. Whatever is still
 * in it when the process dies is republished on the next start (same msg-id, so the bus or else the
 * ledger's per-request dedup keeps the charge single).
 *
 * Layout: append-only segment files `usage-outbox-<seq>.log` of records
 * `[u32 length][u32 crc32][UsageEvent protobuf]`, each group of appends written and fdatasync'ed
 * before its callers resume. A segment is deleted once every record in it was acknowledged; a torn
 * record at the end (crash mid-write) is skipped on recovery. A `LOCK` file keeps two processes
 * from sharing one directory.
 */
export interface UsageOutboxOptions {
  directory: string;
  logger: Logger;
  /** Bound of all segments together (default 64 MiB, ~200k events); appends beyond it are refused. */
  maxBytes?: number;
  /** A segment is closed for appends at this size (default 1 MiB). */
  segmentBytes?: number;
}

export interface OutboxEntry {
  readonly event: UsageEvent;
  /** Segment holding the record (internal bookkeeping). */
  readonly segment: number;
}

export class OutboxFullError extends Error {
  override name = 'OutboxFullError';
}

const SEGMENT_PATTERN = /^usage-outbox-(\d{16})\.log$/;
const RECORD_HEADER_BYTES = 8;
/** A usage event is a few hundred bytes; anything near this is corrupt, not an event. */
const MAX_RECORD_BYTES = 1 << 20;
const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;
const DEFAULT_SEGMENT_BYTES = 1024 * 1024;

const segmentName = (sequence: number) => `usage-outbox-${String(sequence).padStart(16, '0')}.log`;

interface Segment {
  sequence: number;
  bytes: number;
  /** Records appended (or recovered) and not yet acknowledged. */
  pending: number;
  handle: FileHandle | null;
}

interface QueuedAppend {
  record: Buffer;
  event: UsageEvent;
  resolve(entry: OutboxEntry): void;
  reject(error: unknown): void;
}

export class UsageOutbox {
  private readonly segments = new Map<number, Segment>();
  private current: Segment | null = null;
  private nextSequence: number;
  private totalBytes = 0;
  private queue: QueuedAppend[] = [];
  private writing: Promise<void> | null = null;
  private closed = false;
  private readonly maxBytes: number;
  private readonly segmentBytes: number;

  private constructor(private readonly options: UsageOutboxOptions, nextSequence: number) {
    this.maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
    this.segmentBytes = options.segmentBytes ?? DEFAULT_SEGMENT_BYTES;
    this.nextSequence = nextSequence;
  }

  /** Opens (creating) the directory, takes its lock, and returns what a previous process left unsent. */
  static async open(options: UsageOutboxOptions): Promise<{ outbox: UsageOutbox; recovered: OutboxEntry[] }> {
    await mkdir(options.directory, { recursive: true });
    await takeLock(options.directory);
    const names = (await readdir(options.directory)).filter((name) => SEGMENT_PATTERN.test(name)).sort();
    const sequences = names.map((name) => Number(SEGMENT_PATTERN.exec(name)![1]));
    const outbox = new UsageOutbox(options, (sequences.at(-1) ?? 0) + 1);
    const recovered: OutboxEntry[] = [];
    for (const sequence of sequences) {
      const path = join(options.directory, segmentName(sequence));
      const { events, validBytes, totalBytes } = parseSegment(await readFile(path));
      if (validBytes < totalBytes) {
        options.logger.warn({ path, skippedBytes: totalBytes - validBytes }, 'usage outbox segment ends in a torn record; skipped it');
      }
      if (events.length === 0) {
        await unlink(path);
        continue;
      }
      outbox.segments.set(sequence, { sequence, bytes: totalBytes, pending: events.length, handle: null });
      outbox.totalBytes += totalBytes;
      for (const event of events) recovered.push({ event, segment: sequence });
    }
    if (recovered.length > 0) options.logger.warn({ events: recovered.length, directory: options.directory }, 'usage outbox holds unsent events from a previous run; republishing');
    return { outbox, recovered };
  }

  /** Events appended and not yet acknowledged (recovered ones included). */
  get pendingCount(): number {
    let count = 0;
    for (const segment of this.segments.values()) count += segment.pending;
    return count;
  }

  get sizeBytes(): number {
    return this.totalBytes;
  }

  /** Resolves once the event is on disk (fdatasync'ed); rejects when the outbox is full or closed. */
  append(event: UsageEvent): Promise<OutboxEntry> {
    if (this.closed) return Promise.reject(new Error('usage outbox closed'));
    const payload = UsageEvent.encode(event).finish();
    if (payload.length > MAX_RECORD_BYTES) return Promise.reject(new Error(`usage event of ${payload.length} bytes is too large for the outbox`));
    const record = Buffer.allocUnsafe(RECORD_HEADER_BYTES + payload.length);
    record.writeUInt32BE(payload.length, 0);
    record.writeUInt32BE(crc32(payload), 4);
    record.set(payload, RECORD_HEADER_BYTES);
    const queuedBytes = this.queue.reduce((sum, queued) => sum + queued.record.length, 0);
    if (this.totalBytes + queuedBytes + record.length > this.maxBytes) {
      return Promise.reject(new OutboxFullError(`usage outbox is full (${this.totalBytes} of ${this.maxBytes} bytes)`));
    }
    return new Promise<OutboxEntry>((resolve, reject) => {
      this.queue.push({ record, event, resolve, reject });
      this.startWriting();
    });
  }

  private startWriting(): void {
    if (this.writing) return;
    this.writing = this.writeQueued().finally(() => {
      this.writing = null;
      // Appends queued after the writer saw an empty queue.
      if (this.queue.length > 0) this.startWriting();
    });
  }

  /** The event was acknowledged by the bus: its record need not survive. Deletes a segment once all of it is acknowledged. */
  async acknowledge(entry: OutboxEntry): Promise<void> {
    const segment = this.segments.get(entry.segment);
    if (!segment || segment.pending <= 0) return;
    segment.pending--;
    if (segment.pending > 0) return;
    // The segment being appended to is only retired while no write to it is in flight.
    if (segment === this.current) {
      if (this.writing) return;
      this.current = null;
    }
    await this.retire(segment);
  }

  /** Waits for queued appends, then closes the files. Unacknowledged records stay for the next start. */
  async close(): Promise<void> {
    this.closed = true;
    while (this.writing) await this.writing;
    for (const segment of this.segments.values()) {
      await segment.handle?.close().catch(() => undefined);
      segment.handle = null;
    }
    await unlink(join(this.options.directory, 'LOCK')).catch(() => undefined);
    // Nothing left to replay: leave no empty directory behind (fails harmlessly if anything else is in it).
    if (this.segments.size === 0) await rmdir(this.options.directory).catch(() => undefined);
  }

  private async writeQueued(): Promise<void> {
    while (this.queue.length > 0) {
      const group = this.queue;
      this.queue = [];
      try {
        const segment = await this.segmentForAppend();
        const bytes = Buffer.concat(group.map((queued) => queued.record));
        segment.pending += group.length;
        try {
          await segment.handle!.write(bytes);
          await segment.handle!.datasync();
        } catch (error) {
          segment.pending -= group.length;
          // A partial write leaves a torn record that recovery skips; later appends go to a new segment.
          await segment.handle?.close().catch(() => undefined);
          segment.handle = null;
          if (this.current === segment) this.current = null;
          throw error;
        }
        segment.bytes += bytes.length;
        this.totalBytes += bytes.length;
        if (segment.bytes >= this.segmentBytes && this.current === segment) {
          this.current = null;
          await segment.handle!.close();
          segment.handle = null;
        }
        for (const queued of group) queued.resolve({ event: queued.event, segment: segment.sequence });
      } catch (error) {
        this.options.logger.error({ err: error, events: group.length }, 'usage outbox write failed');
        for (const queued of group) queued.reject(error);
      }
    }
    // Acknowledgements that arrived while this write was in flight could not retire the segment.
    const current = this.current;
    if (current && current.pending === 0) {
      this.current = null;
      await this.retire(current);
    }
  }

  private async segmentForAppend(): Promise<Segment> {
    if (this.current?.handle) return this.current;
    const sequence = this.nextSequence++;
    const handle = await open(join(this.options.directory, segmentName(sequence)), 'a');
    // The new file's directory entry must be durable too, or a crash could lose the whole segment.
    syncDirectory(this.options.directory);
    const segment: Segment = { sequence, bytes: 0, pending: 0, handle };
    this.segments.set(sequence, segment);
    this.current = segment;
    return segment;
  }

  private async retire(segment: Segment): Promise<void> {
    this.segments.delete(segment.sequence);
    this.totalBytes -= segment.bytes;
    await segment.handle?.close().catch(() => undefined);
    segment.handle = null;
    // A leftover file would only be republished (and deduplicated) after a crash.
    await unlink(join(this.options.directory, segmentName(segment.sequence))).catch((error) => {
      this.options.logger.warn({ err: error, segment: segment.sequence }, 'could not delete an acknowledged usage outbox segment');
    });
  }
}

/** Reads records until the end or the first torn / corrupt one. */
export function parseSegment(data: Buffer): { events: UsageEvent[]; validBytes: number; totalBytes: number } {
  const events: UsageEvent[] = [];
  let offset = 0;
  while (offset + RECORD_HEADER_BYTES <= data.length) {
    const length = data.readUInt32BE(offset);
    const checksum = data.readUInt32BE(offset + 4);
    const end = offset + RECORD_HEADER_BYTES + length;
    if (length > MAX_RECORD_BYTES || end > data.length) break;
    const payload = data.subarray(offset + RECORD_HEADER_BYTES, end);
    if (crc32(payload) !== checksum) break;
    try {
      events.push(UsageEvent.decode(payload));
    } catch {
      break;
    }
    offset = end;
  }
  return { events, validBytes: offset, totalBytes: data.length };
}

function syncDirectory(directory: string): void {
  let descriptor: number | undefined;
  try {
    descriptor = openSync(directory, constants.O_RDONLY);
    fsyncSync(descriptor);
  } catch {
    // Some filesystems refuse fsync on a directory; the file's own fdatasync still holds its data.
  } finally {
    if (descriptor !== undefined) closeSync(descriptor);
  }
}

/** One process per directory: a second replica appending to the same segments would corrupt them. */
async function takeLock(directory: string): Promise<void> {
  const path = join(directory, 'LOCK');
  try {
    await writeFile(path, String(process.pid), { flag: 'wx' });
    return;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  const owner = Number((await readFile(path, 'utf8').catch(() => '')).trim());
  if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && processIsAlive(owner)) {
    throw new Error(`usage outbox ${directory} is in use by process ${owner}`);
  }
  if (owner === process.pid) throw new Error(`usage outbox ${directory} is already open in this process`);
  // The owner died without cleaning up (a crash): the directory is ours now.
  await writeFile(path, String(process.pid));
}

function processIsAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let index = 0; index < 256; index++) {
    let value = index;
    for (let bit = 0; bit < 8; bit++) value = value & 1 ? 0xedb88320 ^ (value >>> 1) : value >>> 1;
    table[index] = value >>> 0;
  }
  return table;
})();

/** CRC-32 (IEEE), as zlib computes it; node:zlib only has it from Node 20.15. */
export function crc32(data: Uint8Array): number {
  let crc = 0xffffffff;
  for (let index = 0; index < data.length; index++) crc = CRC_TABLE[(crc ^ data[index]!) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}
