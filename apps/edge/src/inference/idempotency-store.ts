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
  /** Bound of the whole bucket, bytes (past it the oldest records go first). */
  maxBucketBytes: number;
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
  claimLeaseMs: 30_000,
  waitMs: 10 * 60_000,
  maxWaitingPerAccount: 16,
};

/** Room in a record for its status, headers and state beside the answer's bytes. */
const RECORD_OVERHEAD_BYTES = 64 * 1024;
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
    if (first !== undefined) return { kind: 'run', claim: new IdempotencyClaim(bucket, recordKey, body, first, this.limits, this.logger, this.now) };
    let counted = false;
    try {
      return await this.awaitTurn(bucket, recordKey, body, signal, deadline, () => {
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
        if (revision !== undefined) return { kind: 'run', claim: new IdempotencyClaim(bucket, recordKey, body, revision, this.limits, this.logger, this.now) };
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
    private readonly bucket: KeyValueBucket,
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
  }
}

/** The edge's store of idempotency records over its bus. */
export function idempotencyStore(bus: EventBus, limits: Partial<IdempotencyLimits> | undefined, logger: Logger): IdempotencyStore {
  return new IdempotencyStore(bus, { ...DEFAULT_IDEMPOTENCY_LIMITS, ...limits }, logger);
}
