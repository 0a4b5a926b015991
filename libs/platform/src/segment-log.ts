import { closeSync, constants, fsyncSync, openSync } from 'node:fs';
import { mkdir, open, readdir, readFile, rmdir, unlink, writeFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from './logger.js';

/**
 * A local append-only log of opaque records that must survive a crash until someone acknowledges
 * them: routing's usage outbox and the in-process bus's journal. Appends are group-committed —
 * every append queued while a write is in flight goes into the next write and shares its
 * fdatasync — and each resolves only once its record is on disk.
 *
 * Layout: segment files `<name>-<16-digit sequence>.log` of records `[u32 length][u32 crc32][payload]`.
 * The acknowledged prefix of the log is deleted a whole segment at a time, oldest first: a segment
 * goes once it and every older one are fully acknowledged, so a record that outlives another on disk
 * was written after it (users rely on that to cancel a record with a later one). A torn or corrupt
 * record (crash mid-write) ends its segment on recovery. `<name>.lock` keeps two processes from
 * sharing one log.
 */
export interface SegmentLogOptions {
  directory: string;
  /** Prefix of the segment files and the lock file. */
  name: string;
  logger: Logger;
  /** Bound of all segments together (default 64 MiB); appends beyond it are refused. */
  maxBytes?: number;
  /** A segment is closed for appends at this size (default 1 MiB). */
  segmentBytes?: number;
  /** Largest payload accepted (default 1 MiB); anything larger found on recovery is corruption. */
  maxRecordBytes?: number;
}

/** A record a previous process appended and nobody acknowledged. */
export interface RecoveredRecord {
  readonly payload: Buffer;
  /** Segment holding it: what `acknowledge` takes. */
  readonly segment: number;
}

export class SegmentLogFullError extends Error {
  override name = 'SegmentLogFullError';
}

const RECORD_HEADER_BYTES = 8;
const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;
const DEFAULT_SEGMENT_BYTES = 1024 * 1024;
const DEFAULT_MAX_RECORD_BYTES = 1024 * 1024;

interface Segment {
  sequence: number;
  bytes: number;
  /** Records appended (or recovered) and not yet acknowledged. */
  pending: number;
  handle: FileHandle | null;
}

interface QueuedAppend {
  record: Buffer;
  resolve(segment: number): void;
  reject(error: unknown): void;
}

export class SegmentLog {
  /** In ascending sequence: recovery inserts in order and new segments get ever larger numbers. */
  private readonly segments = new Map<number, Segment>();
  private current: Segment | null = null;
  private nextSequence = 1;
  private totalBytes = 0;
  private queue: QueuedAppend[] = [];
  private queuedBytes = 0;
  private writing: Promise<void> | null = null;
  /** Deletions run one after another so segments leave the disk strictly oldest first. */
  private retiring: Promise<void> = Promise.resolve();
  private closed = false;
  private readonly maxBytes: number;
  private readonly segmentBytes: number;
  private readonly maxRecordBytes: number;
  private readonly segmentPattern: RegExp;

  private constructor(private readonly options: SegmentLogOptions) {
    if (!/^[A-Za-z0-9_-]+$/.test(options.name)) throw new Error(`bad segment log name: ${options.name}`);
    this.maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
    this.segmentBytes = options.segmentBytes ?? DEFAULT_SEGMENT_BYTES;
    this.maxRecordBytes = options.maxRecordBytes ?? DEFAULT_MAX_RECORD_BYTES;
    this.segmentPattern = new RegExp(`^${options.name}-(\\d{16})\\.log$`);
  }

  /** Opens (creating) the log, takes its lock, and returns every record not acknowledged before, in append order. */
  static async open(options: SegmentLogOptions): Promise<{ log: SegmentLog; recovered: RecoveredRecord[] }> {
    const log = new SegmentLog(options);
    await mkdir(options.directory, { recursive: true });
    await takeLock(join(options.directory, `${options.name}.lock`));
    const sequences = (await readdir(options.directory))
      .map((name) => log.segmentPattern.exec(name)?.[1])
      .filter((sequence): sequence is string => sequence !== undefined)
      .map(Number)
      .sort((a, b) => a - b);
    log.nextSequence = (sequences.at(-1) ?? 0) + 1;
    const recovered: RecoveredRecord[] = [];
    for (const sequence of sequences) {
      const path = log.pathOf(sequence);
      const { payloads, validBytes, totalBytes } = parseSegment(await readFile(path), log.maxRecordBytes);
      if (validBytes < totalBytes) {
        options.logger.warn({ path, skippedBytes: totalBytes - validBytes }, 'segment log ends in a torn record; skipped it');
      }
      if (payloads.length === 0) {
        await unlink(path);
        continue;
      }
      log.segments.set(sequence, { sequence, bytes: totalBytes, pending: payloads.length, handle: null });
      log.totalBytes += totalBytes;
      for (const payload of payloads) recovered.push({ payload, segment: sequence });
    }
    return { log, recovered };
  }

  /** Records appended (or recovered) and not yet acknowledged. */
  get pendingCount(): number {
    let count = 0;
    for (const segment of this.segments.values()) count += segment.pending;
    return count;
  }

  get sizeBytes(): number {
    return this.totalBytes;
  }

  /** Resolves with the record's segment once it is on disk (fdatasync'ed); rejects when the log is full or closed. */
  append(payload: Uint8Array): Promise<number> {
    if (this.closed) return Promise.reject(new Error(`segment log ${this.options.name} closed`));
    if (payload.length > this.maxRecordBytes) return Promise.reject(new Error(`record of ${payload.length} bytes is too large for ${this.options.name}`));
    const record = Buffer.allocUnsafe(RECORD_HEADER_BYTES + payload.length);
    record.writeUInt32BE(payload.length, 0);
    record.writeUInt32BE(crc32(payload), 4);
    record.set(payload, RECORD_HEADER_BYTES);
    if (this.totalBytes + this.queuedBytes + record.length > this.maxBytes) {
      return Promise.reject(new SegmentLogFullError(`${this.options.name} is full (${this.totalBytes} of ${this.maxBytes} bytes)`));
    }
    this.queuedBytes += record.length;
    return new Promise<number>((resolve, reject) => {
      this.queue.push({ record, resolve, reject });
      this.startWriting();
    });
  }

  /** One record of the segment need not survive any more; the acknowledged prefix of the log is deleted. */
  acknowledge(segment: number): Promise<void> {
    // After close the files may be another process's: the record is simply replayed on the next open.
    if (this.closed) return this.retiring;
    const held = this.segments.get(segment);
    if (!held || held.pending <= 0) return this.retiring;
    held.pending--;
    if (held.pending > 0) return this.retiring;
    return this.retireAcknowledgedPrefix();
  }

  /** Waits for queued appends, then closes the files. Unacknowledged records stay for the next open. */
  async close(): Promise<void> {
    this.closed = true;
    while (this.writing) await this.writing;
    await this.retiring;
    for (const segment of this.segments.values()) {
      await segment.handle?.close().catch(() => undefined);
      segment.handle = null;
    }
    const lockPath = join(this.options.directory, `${this.options.name}.lock`);
    await unlink(lockPath).catch(() => undefined);
    locksHeld.delete(lockPath);
    // Nothing left to replay: leave no empty directory behind (fails harmlessly if anything else is in it).
    if (this.segments.size === 0) await rmdir(this.options.directory).catch(() => undefined);
  }

  private pathOf(sequence: number): string {
    return join(this.options.directory, `${this.options.name}-${String(sequence).padStart(16, '0')}.log`);
  }

  private startWriting(): void {
    if (this.writing) return;
    this.writing = this.writeQueued().finally(() => {
      this.writing = null;
      // Appends queued after the writer saw an empty queue.
      if (this.queue.length > 0) this.startWriting();
      // Acknowledgements that arrived while the write was in flight could not retire its segment.
      else void this.retireAcknowledgedPrefix();
    });
  }

  private async writeQueued(): Promise<void> {
    while (this.queue.length > 0) {
      const group = this.queue;
      this.queue = [];
      let bytes: Buffer | undefined;
      try {
        const segment = await this.segmentForAppend();
        bytes = Buffer.concat(group.map((queued) => queued.record));
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
        for (const queued of group) queued.resolve(segment.sequence);
      } catch (error) {
        this.options.logger.error({ err: error, records: group.length, log: this.options.name }, 'segment log write failed');
        for (const queued of group) queued.reject(error);
      } finally {
        for (const queued of group) this.queuedBytes -= queued.record.length;
      }
    }
  }

  private async segmentForAppend(): Promise<Segment> {
    if (this.current?.handle) return this.current;
    const sequence = this.nextSequence++;
    const handle = await open(this.pathOf(sequence), 'a');
    // The new file's directory entry must be durable too, or a crash could lose the whole segment.
    syncDirectory(this.options.directory);
    const segment: Segment = { sequence, bytes: 0, pending: 0, handle };
    this.segments.set(sequence, segment);
    this.current = segment;
    return segment;
  }

  private retireAcknowledgedPrefix(): Promise<void> {
    this.retiring = this.retiring.then(async () => {
      for (const segment of this.segments.values()) {
        if (segment.pending > 0) return;
        // The segment being appended to is only retired while no write to it is in flight.
        if (segment === this.current) {
          if (this.writing) return;
          this.current = null;
        }
        await segment.handle?.close().catch(() => undefined);
        segment.handle = null;
        try {
          await unlink(this.pathOf(segment.sequence));
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'ENOENT') {
            // Kept (and tried again on the next acknowledgement): deleting a newer segment first would break the order.
            this.options.logger.warn({ err: error, segment: segment.sequence, log: this.options.name }, 'could not delete an acknowledged segment');
            return;
          }
        }
        this.segments.delete(segment.sequence);
        this.totalBytes -= segment.bytes;
      }
    }).catch((error: unknown) => {
      this.options.logger.error({ err: error, log: this.options.name }, 'segment log retirement failed');
    });
    return this.retiring;
  }
}

/** Reads records until the end or the first torn / corrupt one. */
export function parseSegment(data: Buffer, maxRecordBytes = DEFAULT_MAX_RECORD_BYTES): { payloads: Buffer[]; validBytes: number; totalBytes: number } {
  const payloads: Buffer[] = [];
  let offset = 0;
  while (offset + RECORD_HEADER_BYTES <= data.length) {
    const length = data.readUInt32BE(offset);
    const checksum = data.readUInt32BE(offset + 4);
    const end = offset + RECORD_HEADER_BYTES + length;
    if (length > maxRecordBytes || end > data.length) break;
    const payload = data.subarray(offset + RECORD_HEADER_BYTES, end);
    if (crc32(payload) !== checksum) break;
    payloads.push(payload);
    offset = end;
  }
  return { payloads, validBytes: offset, totalBytes: data.length };
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

/**
 * Lock files this process holds. Whether a log is open in this process is known here, not from the pid
 * in its lock file: in a container node runs as pid 1 in every incarnation, so a crashed run's lock names
 * the restarted process's own pid, and refusing it would keep the log (and its unsent usage) locked forever.
 */
const locksHeld = new Set<string>();

/** One process per log: a second one appending to the same segments would corrupt them. */
async function takeLock(path: string): Promise<void> {
  if (locksHeld.has(path)) throw new Error(`${path}: the log is already open in this process`);
  try {
    await writeFile(path, String(process.pid), { flag: 'wx' });
    locksHeld.add(path);
    return;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  const owner = Number((await readFile(path, 'utf8').catch(() => '')).trim());
  if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && processIsAlive(owner)) {
    throw new Error(`${path} is held by process ${owner}`);
  }
  // The owner died without cleaning up (a crash; with our own pid: an earlier incarnation in a container): ours now.
  await writeFile(path, String(process.pid));
  locksHeld.add(path);
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
