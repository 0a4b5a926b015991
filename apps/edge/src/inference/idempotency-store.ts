import { createHash } from 'node:crypto';
import { KeyValueValueTooLarge, type Cancellation, type EventBus, type KeyValueBucket, type Logger } from '@gateway/platform';
import { ClientGoneError } from '../http.js';
import type { StoredAnswer } from './idempotency-capture.js';
import { decodeRecord, encodeRecord, type IdempotencyRecord } from './idempotency-record.js';

/*
 * The records of Idempotency-Key requests (idempotency.ts): one per account and key, in a key-value
 * bucket of the bus (JetStream, shared by every edge replica; in-process memory under `npm start`),
 * whose compare-and-set writes let exactly one request of a key run.
 */

export interface IdempotencyLimits {
  /** How long an answer is kept (and a key bound to its body). */
  ttlMs: number;
  /** Largest answer kept, bytes; a bigger one leaves a marker and its duplicates get a 409. */
  maxAnswerBytes: number;
  /** Bound of the whole bucket, bytes (past it the oldest records go first, whatever their account). */
  maxBucketBytes: number;
  /**
   * Bytes of kept answers one account may hold (default: a sixteenth of the bucket); past it the
   * account's own oldest records are released, so the bucket's oldest-first bound is reached only when
   * more than maxBucketBytes / maxAccountBytes accounts are full, never by one account alone.
   */
  maxAccountBytes: number;
  /** Most kept answers of one account (its index of them is one value of the bucket). */
  maxAccountRecords: number;
  /** A running request's claim lasts this long unless renewed (every third of it): a crashed edge's claim ends by itself. */
  claimLeaseMs: number;
  /** Longest a duplicate waits for the first request of its key before a 409. */
  waitMs: number;
  /**
   * Most duplicates of one account waiting on this edge at once; past it a duplicate is the 409 at once
   * (as Stripe answers any concurrent duplicate), so one account cannot fill the edge's in-flight places
   * with waiters that hold no credits and no rate-limit slot.
   */
  maxWaitingPerAccount: number;
}

export const DEFAULT_IDEMPOTENCY_LIMITS: IdempotencyLimits = {
  ttlMs: 24 * 3_600_000,
  maxAnswerBytes: 900 * 1024,
  maxBucketBytes: 256 * 1024 * 1024,
  maxAccountBytes: 16 * 1024 * 1024,
  maxAccountRecords: 1024,
  claimLeaseMs: 30_000,
  waitMs: 10 * 60_000,
  maxWaitingPerAccount: 16,
};

/** Room in a record for its status, headers and state beside the answer's bytes. */
const RECORD_OVERHEAD_BYTES = 64 * 1024;
/** Room an index row takes at most (a 64-hex key, bytes, a ms timestamp, separators). */
const INDEX_ROW_BYTES = 96;
/** Tries of a write of an account's index that another writer of the account raced. */
const INDEX_WRITE_TRIES = 8;
/** A waiting duplicate looks again at least this often (and when its client left, stops). */
const WAIT_SLICE_MS = 2_000;

/**
 * Statuses kept as the answer to a key: 2xx, and 4xx that the same body would get again. Not kept (a
 * retry with the same key runs again): 5xx, and 4xx that depend on the moment or the account's state —
 * 401, 402 (credits), 403 (tier), 408, 409, 429 (rate window).
 */
export function keepsAnswer(status: number): boolean {
  if (status >= 200 && status < 300) return true;
  return status >= 400 && status < 500 && ![401, 402, 403, 408, 409, 429].includes(status);
}

/** Where a request of a key stands, as the store found it. */
export type IdempotencyOutcome =
  | { kind: 'run'; claim: IdempotencyClaim }
  | { kind: 'replay'; answer: StoredAnswer }
  | { kind: 'reused' }
  | { kind: 'too-large'; bytes: number }
  | { kind: 'busy' };

/** The idempotency records of one edge, in the bus's key-value bucket (opened on first use). */
export class IdempotencyStore {
  private opening: Promise<KeyValueBucket> | undefined;
  /** The last index write of each account on this edge (the next one waits for it). */
  private readonly indexWrites = new Map<string, Promise<void>>();
  /** Duplicates waiting on this edge, per account id. */
  private readonly waiting = new Map<string, number>();

  constructor(
    private readonly bus: EventBus,
    readonly limits: IdempotencyLimits,
    private readonly logger: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  /** The record key of an account's Idempotency-Key: a digest, so neither appears in the store. */
  static recordKey(accountId: string, key: string): string {
    return createHash('sha256').update(accountId).update('\n').update(key).digest('hex');
  }

  private bucket(): Promise<KeyValueBucket> {
    if (!this.opening) {
      if (!this.bus.keyValue) return Promise.reject(new Error('this bus has no key-value buckets'));
      const opening = this.bus.keyValue({
        name: 'gateway_idempotency',
        ttlMs: this.limits.ttlMs,
        maxBytes: this.limits.maxBucketBytes,
        maxValueBytes: this.limits.maxAnswerBytes + RECORD_OVERHEAD_BYTES,
      });
      opening.catch(() => {
        if (this.opening === opening) this.opening = undefined;
      });
      this.opening = opening;
    }
    return this.opening;
  }

  /** Duplicates of the account waiting on this edge now. */
  waitingOf(accountId: string): number {
    return this.waiting.get(accountId) ?? 0;
  }

  /**
   * What a request of `accountId` with this record key and body digest does: run (it holds the key's
   * claim), get the kept answer, or be refused. While another request of the key runs, waits (at most
   * `waitMs`) for it — unless `maxWaitingPerAccount` of the account already wait here: then busy at once.
   */
  async begin(recordKey: string, body: string, signal: Cancellation, accountId: string): Promise<IdempotencyOutcome> {
    const bucket = await this.bucket();
    const deadline = this.now() + this.limits.waitMs;
    // The usual case is a key's first request: one write, no read before it.
    const first = await bucket.create(recordKey, encodeRecord({ state: 'running', body, until: this.now() + this.limits.claimLeaseMs }));
    if (first !== undefined) return { kind: 'run', claim: new IdempotencyClaim(this, bucket, accountId, recordKey, body, first, this.limits, this.logger, this.now) };
    let counted = false;
    try {
      return await this.awaitTurn(bucket, recordKey, body, signal, accountId, deadline, () => {
        // Counted once, when the duplicate first has to wait; given back however begin ends.
        if (counted) return true;
        const waiting = this.waiting.get(accountId) ?? 0;
        if (waiting >= this.limits.maxWaitingPerAccount) return false;
        this.waiting.set(accountId, waiting + 1);
        counted = true;
        return true;
      });
    } finally {
      if (counted) {
        const left = (this.waiting.get(accountId) ?? 1) - 1;
        if (left <= 0) this.waiting.delete(accountId);
        else this.waiting.set(accountId, left);
      }
    }
  }

  /** The loop of a duplicate: look, take the key when free, or wait (when `mayWait` lets it) for a change. */
  private async awaitTurn(
    bucket: KeyValueBucket,
    recordKey: string,
    body: string,
    signal: Cancellation,
    accountId: string,
    deadline: number,
    mayWait: () => boolean,
  ): Promise<IdempotencyOutcome> {
    for (;;) {
      if (signal.aborted) throw new ClientGoneError('client left while waiting for the first request of its Idempotency-Key');
      const entry = await bucket.get(recordKey);
      const record = entry ? decodeRecord(entry.value) : undefined;
      const now = this.now();
      // Free: never used, expired, released by a first request that kept nothing, or claimed by one that stopped renewing.
      if (!record || record.state === 'released' || (record.state === 'running' && record.until <= now)) {
        const running = encodeRecord({ state: 'running', body, until: now + this.limits.claimLeaseMs });
        const revision = entry ? await bucket.update(recordKey, running, entry.revision) : await bucket.create(recordKey, running);
        if (revision !== undefined) return { kind: 'run', claim: new IdempotencyClaim(this, bucket, accountId, recordKey, body, revision, this.limits, this.logger, this.now) };
        continue; // another request took it first: look again
      }
      if (record.body !== body) return { kind: 'reused' };
      if (record.state === 'done') return { kind: 'replay', answer: record.answer };
      if (record.state === 'too-large') return { kind: 'too-large', bytes: record.bytes };
      const left = deadline - now;
      if (left <= 0 || !mayWait()) return { kind: 'busy' };
      await bucket.changed(recordKey, entry!.revision, Math.max(1, Math.min(left, WAIT_SLICE_MS, record.until - now + 10)));
    }
  }

  /** Rows an account's index may hold: maxAccountRecords, within what one value of the bucket may be. */
  private get maxIndexRows(): number {
    return Math.min(this.limits.maxAccountRecords, Math.floor((this.limits.maxAnswerBytes + RECORD_OVERHEAD_BYTES) / INDEX_ROW_BYTES));
  }

  /** The kept answers of an account as its index counts them (expired ones left out). */
  async keptOf(accountId: string): Promise<{ bytes: number; records: number }> {
    const entry = await (await this.bucket()).get(indexKey(accountId));
    const rows = entry ? liveRows(decodeIndex(entry.value), this.now() - this.limits.ttlMs) : [];
    return { bytes: rows.reduce((sum, row) => sum + row.bytes, 0), records: rows.length };
  }

  /**
   * A kept answer of the account was written: counted in the account's index (one value of the bucket,
   * written by compare-and-set), then the account's oldest kept answers past its bytes or records bound
   * are released — only its own, and only while they still hold an answer (a key running again is
   * never touched). This edge's writes of one account's index go one after another (concurrent ones
   * would race each other out of their tries); other replicas' race by compare-and-set. An answer that
   * could not be counted is released rather than kept uncounted: the bound never leaks.
   */
  kept(bucket: KeyValueBucket, accountId: string, recordKey: string, bytes: number): Promise<void> {
    const previous = this.indexWrites.get(accountId);
    const written = (previous ?? Promise.resolve()).then(() => this.writeIndex(bucket, accountId, recordKey, bytes));
    const tail = written.catch(() => undefined);
    this.indexWrites.set(accountId, tail);
    void tail.then(() => {
      if (this.indexWrites.get(accountId) === tail) this.indexWrites.delete(accountId);
    });
    return written;
  }

  private async writeIndex(bucket: KeyValueBucket, accountId: string, recordKey: string, bytes: number): Promise<void> {
    const key = indexKey(accountId);
    try {
      for (let attempt = 0; attempt < INDEX_WRITE_TRIES; attempt++) {
        const entry = await bucket.get(key);
        const now = this.now();
        const rows = (entry ? liveRows(decodeIndex(entry.value), now - this.limits.ttlMs) : []).filter((row) => row.key !== recordKey);
        rows.push({ key: recordKey, bytes, at: now });
        let total = rows.reduce((sum, row) => sum + row.bytes, 0);
        let drop = 0;
        // The newest stays even alone over the bound (maxAnswerBytes may exceed maxAccountBytes).
        while (rows.length - drop > 1 && (total > this.limits.maxAccountBytes || rows.length - drop > this.maxIndexRows)) {
          total -= rows[drop]!.bytes;
          drop++;
        }
        const value = encodeIndex(rows.slice(drop));
        const revision = entry ? await bucket.update(key, value, entry.revision) : await bucket.create(key, value);
        if (revision === undefined) continue;
        for (let index = 0; index < drop; index++) await releaseKept(bucket, rows[index]!.key);
        return;
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'idempotency account index not written; the answer is not kept');
      await releaseKept(bucket, recordKey);
      return;
    }
    this.logger.warn({ tries: INDEX_WRITE_TRIES }, 'idempotency account index not written (raced); the answer is not kept');
    await releaseKept(bucket, recordKey);
  }
}

/**
 * The claim of the one request of a key that runs: renewed while it runs, then replaced by the answer
 * to keep, or released so that the next request of the key runs again. Writes are in order; a claim
 * that lost its key (its renewal came too late and another request took over) writes nothing more.
 */
export class IdempotencyClaim {
  private lost = false;
  private writes: Promise<void> = Promise.resolve();
  private readonly renewal: NodeJS.Timeout;

  constructor(
    private readonly records: IdempotencyStore,
    private readonly bucket: KeyValueBucket,
    private readonly accountId: string,
    private readonly recordKey: string,
    private readonly body: string,
    private revision: number,
    private readonly limits: IdempotencyLimits,
    private readonly logger: Logger,
    private readonly now: () => number,
  ) {
    this.renewal = setInterval(() => this.write({ state: 'running', body, until: this.now() + limits.claimLeaseMs }), Math.max(1, Math.floor(limits.claimLeaseMs / 3)));
    this.renewal.unref();
  }

  /** Ends the claim: keeps `answer` for the key's duplicates, or (undefined) releases the key. Resolves when written. */
  finish(answer: { answer: StoredAnswer } | { tooLarge: number } | undefined): Promise<void> {
    clearInterval(this.renewal);
    const record: IdempotencyRecord =
      answer === undefined
        ? { state: 'released', body: this.body }
        : 'answer' in answer
          ? { state: 'done', body: this.body, answer: answer.answer }
          : { state: 'too-large', body: this.body, bytes: answer.tooLarge };
    return this.write(record);
  }

  private write(record: IdempotencyRecord): Promise<void> {
    this.writes = this.writes.then(() => this.store(record)).catch((error: unknown) => {
      this.logger.warn({ err: error, state: record.state }, 'idempotency record not written');
    });
    return this.writes;
  }

  private async store(record: IdempotencyRecord): Promise<void> {
    if (this.lost) return;
    let value = encodeRecord(record);
    let revision: number | undefined;
    try {
      revision = await this.bucket.update(this.recordKey, value, this.revision);
    } catch (error) {
      if (!(error instanceof KeyValueValueTooLarge) || record.state !== 'done') throw error;
      value = encodeRecord({ state: 'too-large', body: this.body, bytes: record.answer.body.byteLength });
      revision = await this.bucket.update(this.recordKey, value, this.revision);
    }
    if (revision === undefined) {
      this.lost = true;
      clearInterval(this.renewal);
      this.logger.warn({ state: record.state }, 'idempotency claim was taken over (not renewed in time); its record is left to the new holder');
      return;
    }
    this.revision = revision;
    if (record.state === 'done' || record.state === 'too-large') await this.records.kept(this.bucket, this.accountId, this.recordKey, value.byteLength);
  }
}

/** One kept answer in an account's index: its record key, bytes, and when it was written. */
interface IndexRow {
  key: string;
  bytes: number;
  at: number;
}

/** The bucket key of an account's index: a digest (the account id does not appear in the store). */
function indexKey(accountId: string): string {
  return `account-${createHash('sha256').update('idempotency-index\n').update(accountId).digest('hex')}`;
}

/** Rows as lines `key bytes at`, oldest first (compact: an index of 1,024 rows is ~90 KB). */
function encodeIndex(rows: readonly IndexRow[]): Uint8Array {
  return Buffer.from(rows.map((row) => `${row.key} ${row.bytes} ${row.at}`).join('\n'));
}

function decodeIndex(value: Uint8Array): IndexRow[] {
  const rows: IndexRow[] = [];
  for (const line of Buffer.from(value).toString('utf8').split('\n')) {
    const [key, bytes, at] = line.split(' ');
    if (key && bytes && at) rows.push({ key, bytes: Number(bytes), at: Number(at) });
  }
  return rows;
}

/** Rows written after `since` (older ones have expired from the bucket). */
function liveRows(rows: IndexRow[], since: number): IndexRow[] {
  return rows.filter((row) => row.at > since);
}

/** Releases a record that still holds a kept answer (compare-and-set: a key that runs again is left alone). */
async function releaseKept(bucket: KeyValueBucket, recordKey: string): Promise<void> {
  const entry = await bucket.get(recordKey);
  const record = entry ? decodeRecord(entry.value) : undefined;
  if (!entry || !record || (record.state !== 'done' && record.state !== 'too-large')) return;
  await bucket.update(recordKey, encodeRecord({ state: 'released', body: record.body }), entry.revision);
}

/** The edge's store of idempotency records over its bus. */
export function idempotencyStore(bus: EventBus, limits: Partial<IdempotencyLimits> | undefined, logger: Logger): IdempotencyStore {
  const maxBucketBytes = limits?.maxBucketBytes ?? DEFAULT_IDEMPOTENCY_LIMITS.maxBucketBytes;
  return new IdempotencyStore(bus, { ...DEFAULT_IDEMPOTENCY_LIMITS, maxAccountBytes: Math.floor(maxBucketBytes / 16), ...limits }, logger);
}
