import type { IncomingMessage, ServerResponse } from 'node:http';
import type { EdgeContext } from '../context.js';
import { echoed } from '../echoed-value.js';
import { IDEMPOTENCY_HEADER, idempotencyErrors } from '../errors.js';
import { ClientGoneError } from '../http.js';
import { AnswerCapture, bodyDigest, replayAnswer } from './idempotency-capture.js';
import { IdempotencyStore, keepsAnswer, type IdempotencyOutcome } from './idempotency-store.js';
import type { InferenceJob } from './pipeline-steps.js';

/*
 * Idempotency-Key on inference POSTs (docs/operations.md "Idempotency-Key"). Scoped to the account: the
 * first request with a key runs the pipeline and its answer is kept for `ttlMs`; the same key with the
 * same body gets that answer again without a Router call (so without a second charge); with another
 * body a 422. Duplicates that arrive while the first runs wait for it. Records live in a key-value
 * bucket of the bus (JetStream, shared by every edge replica; in-process memory under `npm start`),
 * whose compare-and-set create lets exactly one request of a key run. A request without the header
 * does none of this.
 */

const MAX_IDEMPOTENCY_KEY_CHARS = 255;

/** The request's Idempotency-Key, checked (1–255 printable ASCII characters); undefined without the header. */
export function idempotencyKeyOf(request: IncomingMessage): string | undefined {
  const value = request.headers[IDEMPOTENCY_HEADER];
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value.length === 0) throw idempotencyErrors.invalidKey('must not be empty.');
  if (value.length > MAX_IDEMPOTENCY_KEY_CHARS) throw idempotencyErrors.invalidKey(`at most ${MAX_IDEMPOTENCY_KEY_CHARS} characters (got ${value.length}).`);
  if (!/^[\x20-\x7e]+$/.test(value)) throw idempotencyErrors.invalidKey(`printable ASCII only (got \`${echoed(value)}\`).`);
  return value;
}

/** What identifies one request of a key: its account, the key, the route's endpoint and the body's value. */
export interface IdempotentRequest {
  key: string;
  accountId: string;
  endpoint: string;
  /** The body as JSON (a JSON route), or as the route read it (a multipart upload, files as bytes). */
  body: unknown;
  /** Request headers that change the answer, by lower-case name: bound to the key with the body. */
  headers?: Readonly<Record<string, string>>;
}

/**
 * Runs an inference request that carries an Idempotency-Key: the pipeline (`run`) for the first of its
 * key, whose answer is recorded as it goes out and kept when its response finished with a status worth
 * keeping and no failure after the commit point; the kept answer for a duplicate; an error otherwise.
 * Errors `run` throws are answered by the caller as usual, and seen here as they go out.
 */
export async function runIdempotent(
  context: EdgeContext,
  request: IdempotentRequest,
  response: ServerResponse,
  job: InferenceJob,
  run: () => Promise<void>,
): Promise<void> {
  const store = context.idempotency;
  if (!store) throw idempotencyErrors.unavailable();
  const recordKey = IdempotencyStore.recordKey(request.accountId, request.key);
  let outcome: IdempotencyOutcome;
  try {
    outcome = await store.begin(recordKey, bodyDigest(request.endpoint, request.body, request.headers), job.signal, request.accountId);
  } catch (error) {
    if (error instanceof ClientGoneError) throw error;
    context.logger.warn({ err: error, request_id: job.requestId }, 'idempotency store unreachable');
    throw idempotencyErrors.unavailable();
  }
  switch (outcome.kind) {
    case 'replay':
      replayAnswer(response, outcome.answer);
      return;
    case 'reused':
      throw idempotencyErrors.reused();
    case 'too-large':
      throw idempotencyErrors.answerTooLarge(outcome.bytes, store.limits.maxAnswerBytes);
    case 'busy':
      throw idempotencyErrors.inProgress();
    case 'run':
      break;
  }
  const claim = outcome.claim;
  if (job.signal.aborted) {
    // The response closed while the claim was being taken: no close event is left to end it.
    void claim.finish(undefined);
    throw new ClientGoneError('client left before its Idempotency-Key request ran');
  }
  const capture = new AnswerCapture(response, store.limits.maxAnswerBytes);
  response.once('close', () => {
    const whole = response.writableFinished && !job.failedAfterCommit && keepsAnswer(capture.status);
    void claim.finish(!whole ? undefined : capture.overflowed ? { tooLarge: capture.bytes } : { answer: capture.answer() });
  });
  await run();
}

