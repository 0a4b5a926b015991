import type { Dispatcher, Pool } from 'undici';
import { endUpstreamSpan, startUpstreamSpan } from '@gateway/platform';
import { ProviderError, type AttemptSignal } from '../provider-adapter.js';

/** Largest non-streamed answer we read: beyond it the answer is treated as broken. */
export const MAX_RESPONSE_BYTES = 32 * 1024 * 1024;
/** Most of an error answer we read: enough for the provider's message. */
export const MAX_ERROR_BODY_BYTES = 64 * 1024;

export interface BufferedAnswer {
  statusCode: number;
  text: string;
}

/**
 * One request whose answer is read whole into a string, at most `maxBytes` of it (`MAX_ERROR_BODY_BYTES`
 * for an error status). Settles once: with the answer, or with the transport error, the signal's
 * reason when it aborts, or a ProviderError when the answer is too large (the connection is dropped then).
 * Goes through undici's handler interface rather than `request()`: no response stream, async iterator
 * and AsyncResource per answer, which were a large part of routing's CPU per request.
 */
export function bufferedRequest(
  pool: Pool,
  options: Dispatcher.DispatchOptions,
  signal: AttemptSignal,
  maxBytes: number = MAX_RESPONSE_BYTES,
): Promise<BufferedAnswer> {
  if (signal.aborted) return Promise.reject(signal.reason);
  const traced = startUpstreamSpan(options.method, options.path, (options.headers ?? {}) as Record<string, string>);
  if (traced) {
    const { span } = traced;
    return new Promise<BufferedAnswer>((resolve, reject) => {
      pool.dispatch({ ...options, headers: traced.headers }, new BufferingHandler(signal, maxBytes, resolve, reject));
    }).then(
      (answer) => { endUpstreamSpan(span, answer.statusCode); return answer; },
      (error: unknown) => { endUpstreamSpan(span, undefined, error); throw error; },
    );
  }
  return new Promise((resolve, reject) => {
    pool.dispatch(options, new BufferingHandler(signal, maxBytes, resolve, reject));
  });
}

/** undici handler of `bufferedRequest`: one object per request (methods, not closures). */
export class BufferingHandler implements Dispatcher.DispatchHandler {
  private settled = false;
  private failure: unknown;
  private abortRequest: ((reason: Error) => void) | undefined;
  private statusCode = 0;
  private size = 0;
  private readonly chunks: Buffer[] = [];
  private readonly onAbort = () => this.fail(this.signal.reason);

  constructor(
    private readonly signal: AttemptSignal,
    private limit: number,
    private readonly resolve: (answer: BufferedAnswer) => void,
    private readonly reject: (error: unknown) => void,
  ) {
    signal.addEventListener('abort', this.onAbort);
  }

  onConnect(abort: (reason: Error) => void) {
    if (this.settled) abort(this.failure instanceof Error ? this.failure : new Error('request aborted'));
    else this.abortRequest = abort;
  }

  /** undici wrote the whole request to the established connection: the upstream gets the prompt. */
  onRequestSent() {
    this.signal.requestSent?.();
  }

  onHeaders(statusCode: number) {
    this.statusCode = statusCode;
    if (statusCode >= 300) this.limit = MAX_ERROR_BODY_BYTES;
    return true;
  }

  onData(chunk: Buffer) {
    this.size += chunk.length;
    if (this.size > this.limit) {
      this.fail(new ProviderError('connection', `answer larger than ${this.limit} bytes`));
      return false;
    }
    this.chunks.push(chunk);
    return true;
  }

  onComplete() {
    if (this.settled) return;
    this.settle();
    const body = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size);
    this.resolve({ statusCode: this.statusCode, text: body.toString('utf8') });
  }

  onError(error: Error) {
    this.fail(error);
  }

  private settle() {
    this.settled = true;
    this.signal.removeEventListener('abort', this.onAbort);
  }

  private fail(error: unknown) {
    if (this.settled) return;
    this.settle();
    this.failure = error;
    this.reject(error);
    // undici reports the abort back through onError, which is ignored once settled.
    this.abortRequest?.(error instanceof Error ? error : new Error(String(error)));
  }
}
