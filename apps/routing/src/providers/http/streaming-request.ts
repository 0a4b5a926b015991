import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher, Pool } from 'undici';
import { endUpstreamSpan, startUpstreamSpan } from '@gateway/platform';
import { ProviderError, toProviderError, type AttemptSignal } from '../provider-adapter.js';
import { MAX_ERROR_BODY_BYTES } from './buffered-request.js';

/** A streamed answer whose status is below 300: its headers, and its body as it arrives. */
export interface StreamingResponse {
  statusCode: number;
  headers: IncomingHttpHeaders;
  body: StreamedBody;
}

/**
 * A request whose answer body is read as it arrives (SSE, eventstream, audio). An error status is read
 * (bounded) and turned into the ProviderError `httpError` makes of it (with the answer's headers, for a
 * provider that names the error there); transport failures and aborts become ProviderErrors too.
 *
 * Goes through undici's handler interface (as bufferedRequest does) rather than `request()`: each chunk
 * the socket reads is handed to the reader's pending `next()` directly, without a Readable, its buffering
 * and its async iterator in between, which were the largest part of routing's CPU per relayed stream
 * frame (issue 39, docs/performance.md). The signal learns when the whole request was written (the
 * upstream has the prompt: AttemptSignal.requestSent), and a request whose signal aborts before its
 * connection is established fails at once (the connection, if it comes, is dropped unused).
 */
export function streamingRequest(
  pool: Pool,
  options: Omit<Dispatcher.DispatchOptions, 'signal'>,
  signal: AttemptSignal,
  httpError: (status: number, bodyText: string, headers: IncomingHttpHeaders) => ProviderError,
): Promise<StreamingResponse> {
  if (signal.aborted) return Promise.reject(toProviderError(signal.reason, signal));
  // The span covers the request up to the answer's headers (the body is the stream the caller reads).
  const traced = startUpstreamSpan(options.method, options.path, (options.headers ?? {}) as Record<string, string>);
  if (!traced) return new Promise((resolve, reject) => pool.dispatch(options, new StreamingHandler(signal, httpError, resolve, reject)));
  const { span } = traced;
  // Ended with the status when the headers come (an error status too), else with the transport's failure.
  const onStatus = (statusCode: number) => endUpstreamSpan(span, statusCode);
  return new Promise<StreamingResponse>((resolve, reject) => {
    pool.dispatch({ ...options, headers: traced.headers }, new StreamingHandler(signal, httpError, resolve, reject, onStatus));
  }).catch((error: unknown) => {
    if (span.isRecording()) endUpstreamSpan(span, undefined, error);
    throw error;
  });
}

/** Bytes a body holds for a reader that does not keep up before the socket is paused. */
const HIGH_WATER_BYTES = 64 * 1024;
const DONE: IteratorReturnResult<undefined> = { done: true, value: undefined };

/**
 * The body of a StreamingResponse: an async iterable of the chunks as the socket read them, read once.
 * `destroy()` (or leaving a `for await` early) drops the connection when the body has not ended.
 */
export class StreamedBody implements AsyncIterable<Buffer>, AsyncIterator<Buffer> {
  private chunks: Buffer[] = [];
  private head = 0;
  private bufferedBytes = 0;
  private ended = false;
  private failure: unknown = undefined;
  private waiting: { resolve: (result: IteratorResult<Buffer>) => void; reject: (error: unknown) => void } | undefined;
  /** Set by the handler: resumes a paused socket; aborts the request. */
  resumeSocket: (() => void) | undefined;
  paused = false;
  abortRequest: ((reason: Error) => void) | undefined;

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<Buffer>> {
    if (this.head < this.chunks.length) {
      const chunk = this.chunks[this.head]!;
      this.chunks[this.head] = EMPTY;
      this.head += 1;
      if (this.head === this.chunks.length) {
        this.chunks = [];
        this.head = 0;
      }
      this.bufferedBytes -= chunk.length;
      if (this.paused && this.bufferedBytes < HIGH_WATER_BYTES) {
        this.paused = false;
        this.resumeSocket?.();
      }
      return Promise.resolve({ done: false, value: chunk });
    }
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.ended) return Promise.resolve(DONE);
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }

  /** A reader leaving its loop early: the rest is not wanted. */
  return(): Promise<IteratorResult<Buffer>> {
    this.destroy();
    return Promise.resolve(DONE);
  }

  /** Drops the rest of the body (and the connection, when the body has not ended). */
  destroy(): void {
    if (this.ended || this.failure !== undefined) return;
    const reason = new Error('stream body destroyed by its reader');
    this.fail(reason);
    this.abortRequest?.(reason);
  }

  /** A chunk from the socket; false: hold the socket until the reader takes what is buffered. */
  push(chunk: Buffer): boolean {
    if (this.ended || this.failure !== undefined) return true;
    const waiting = this.waiting;
    if (waiting) {
      this.waiting = undefined;
      waiting.resolve({ done: false, value: chunk });
      return true;
    }
    this.chunks.push(chunk);
    this.bufferedBytes += chunk.length;
    if (this.bufferedBytes < HIGH_WATER_BYTES) return true;
    this.paused = true;
    return false;
  }

  end(): void {
    if (this.ended || this.failure !== undefined) return;
    this.ended = true;
    const waiting = this.waiting;
    this.waiting = undefined;
    waiting?.resolve(DONE);
  }

  fail(error: unknown): void {
    if (this.ended || this.failure !== undefined) return;
    this.failure = error;
    // What was buffered is dropped: a reader hears of the failure at its next read.
    this.chunks = [];
    this.head = 0;
    this.bufferedBytes = 0;
    const waiting = this.waiting;
    this.waiting = undefined;
    waiting?.reject(error);
  }
}

const EMPTY = Buffer.alloc(0);

/** undici handler of `streamingRequest` (legacy handler methods, as BufferingHandler's). */
class StreamingHandler implements Dispatcher.DispatchHandler {
  /** Settled: the headers went to the caller, or the request failed before them. */
  private answered = false;
  private failure: Error | undefined;
  private abortRequest: ((reason: Error) => void) | undefined;
  private statusCode = 0;
  private headers: IncomingHttpHeaders = {};
  /** An error status: its body, bounded, for httpError. */
  private errorChunks: Buffer[] | undefined;
  private errorBytes = 0;
  private body: StreamedBody | undefined;
  private readonly onAbort = () => this.abort(this.signal.reason);

  constructor(
    private readonly signal: AttemptSignal,
    private readonly httpError: (status: number, bodyText: string, headers: IncomingHttpHeaders) => ProviderError,
    private readonly resolve: (response: StreamingResponse) => void,
    private readonly reject: (error: unknown) => void,
    private readonly onStatus?: (statusCode: number) => void,
  ) {
    signal.addEventListener('abort', this.onAbort);
  }

  onConnect(abort: (reason: Error) => void) {
    // Aborted while connecting: the connection is dropped before anything is written to it.
    if (this.failure) abort(this.failure);
    else this.abortRequest = abort;
  }

  /** undici wrote the whole request to the established connection: the upstream gets the prompt. */
  onRequestSent() {
    this.signal.requestSent?.();
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void) {
    if (this.failure) return false;
    this.statusCode = statusCode;
    this.headers = parseRawHeaders(rawHeaders);
    this.onStatus?.(statusCode);
    if (statusCode >= 300) {
      this.errorChunks = [];
      return true;
    }
    const body = (this.body = new StreamedBody());
    body.resumeSocket = resume;
    body.abortRequest = (reason) => this.abort(reason);
    this.answered = true;
    this.resolve({ statusCode, headers: this.headers, body });
    return true;
  }

  onData(chunk: Buffer) {
    if (this.errorChunks) {
      // Enough of an error answer for the provider's message; a larger one is a broken answer.
      this.errorBytes += chunk.length;
      if (this.errorBytes > MAX_ERROR_BODY_BYTES) {
        this.abort(new ProviderError('connection', `answer larger than ${MAX_ERROR_BODY_BYTES} bytes`));
        return false;
      }
      this.errorChunks.push(chunk);
      return true;
    }
    return this.body ? this.body.push(chunk) : true;
  }

  onComplete() {
    this.signal.removeEventListener('abort', this.onAbort);
    if (this.errorChunks) {
      if (this.failure) return;
      this.answered = true;
      const text = Buffer.concat(this.errorChunks).toString('utf8');
      this.reject(this.httpError(this.statusCode, text, this.headers));
      return;
    }
    this.body?.end();
  }

  onError(error: Error) {
    this.signal.removeEventListener('abort', this.onAbort);
    // Aborted by us: the caller already heard why; undici's echo of it is not news.
    if (this.failure) return;
    this.failure = error;
    this.deliverFailure(toProviderError(error, this.signal));
  }

  /** The signal aborted or the reader destroyed the body: fail now, and end the request. */
  private abort(reason: unknown) {
    if (this.failure) return;
    this.signal.removeEventListener('abort', this.onAbort);
    this.failure = reason instanceof Error ? reason : new Error('request aborted');
    this.deliverFailure(toProviderError(reason, this.signal));
    // Before the connection, onConnect drops it; after, undici ends the request (onError is then ignored).
    this.abortRequest?.(this.failure);
  }

  private deliverFailure(error: ProviderError) {
    if (!this.answered) {
      this.answered = true;
      this.reject(error);
    } else {
      this.body?.fail(error);
    }
  }
}

/** undici's raw header list (name, value, name, value...) as node:http names them: lower case, repeats in an array. */
function parseRawHeaders(raw: Buffer[]): IncomingHttpHeaders {
  const headers: Record<string, string | string[]> = {};
  for (let index = 0; index + 1 < raw.length; index += 2) {
    const name = raw[index]!.toString('latin1').toLowerCase();
    const value = raw[index + 1]!.toString('latin1');
    const existing = headers[name];
    if (existing === undefined) headers[name] = value;
    else if (Array.isArray(existing)) existing.push(value);
    else headers[name] = [existing, value];
  }
  return headers;
}
