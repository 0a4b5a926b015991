import { Dispatcher, type Pool } from 'undici';
import type { AttemptSignal } from '../provider-adapter.js';

/**
 * `pool.request` that also tells the attempt's signal when undici wrote the whole request to an
 * established connection (AttemptSignal.requestSent; its socket has it, so the upstream gets the prompt
 * unless the connection breaks): from then on a caller who leaves pays for that prompt. undici's request
 * handler has no hook for that, so its dispatch goes through a dispatcher of ours (one per pool) that
 * wraps the handler in a SentNotice, which passes every call on unchanged.
 */
export function requestNotingSent(pool: Pool, options: Dispatcher.RequestOptions): Promise<Dispatcher.ResponseData> {
  let noting = dispatchers.get(pool);
  if (noting === undefined) dispatchers.set(pool, (noting = new NotingDispatcher(pool)));
  return Dispatcher.prototype.request.call(noting as unknown as Dispatcher, options) as Promise<Dispatcher.ResponseData>;
}

const dispatchers = new WeakMap<Pool, NotingDispatcher>();

class NotingDispatcher {
  constructor(private readonly pool: Pool) {}

  dispatch(options: Dispatcher.DispatchOptions & { signal?: unknown }, handler: Dispatcher.DispatchHandler): boolean {
    const signal = options.signal as AttemptSignal | undefined;
    return this.pool.dispatch(options, signal?.requestSent ? (new SentNotice(handler, signal) as unknown as Dispatcher.DispatchHandler) : handler);
  }
}

/** undici's legacy handler methods, as SentNotice passes them on. */
type LegacyHandler = Partial<Record<LegacyMethod, (...args: unknown[]) => unknown>>;
type LegacyMethod = 'onRequestSent' | 'onConnect' | 'onBodySent' | 'onResponseStarted' | 'onHeaders' | 'onData' | 'onComplete' | 'onError' | 'onUpgrade';

/**
 * A legacy-style undici handler passing every call to `inner`, and onRequestSent to the signal too. It
 * also ends a request whose signal aborts before its connection is established: undici's own request
 * handler can only abort once connected, so a stream attempt cancelled while connecting (a TLS handshake
 * that never completes) would wait for the connect timeout; here it fails at once, and the connection,
 * if it ever comes, is dropped before anything is written to it.
 */
class SentNotice {
  private readonly inner: LegacyHandler;
  /** Set when the signal aborted before the connection: the request already failed with it. */
  private gone: Error | undefined = undefined;
  private readonly onAbort = () => {
    const reason = this.signal.reason;
    this.gone = reason instanceof Error ? reason : new Error('request aborted');
    this.inner.onError!(this.gone);
  };

  constructor(inner: Dispatcher.DispatchHandler, private readonly signal: AttemptSignal) {
    this.inner = inner as unknown as LegacyHandler;
    signal.addEventListener('abort', this.onAbort, { once: true });
  }

  onRequestSent() {
    this.signal.requestSent?.();
    return this.inner.onRequestSent?.();
  }

  onConnect(abort: (reason: Error) => void, context: unknown) {
    if (this.gone !== undefined) return abort(this.gone);
    // Connected: from here undici's own handler aborts the request on the signal.
    this.signal.removeEventListener('abort', this.onAbort);
    return this.inner.onConnect!(abort, context);
  }

  onBodySent(chunk: unknown) {
    return this.inner.onBodySent?.(chunk);
  }

  onResponseStarted() {
    return this.inner.onResponseStarted?.();
  }

  onHeaders(statusCode: unknown, rawHeaders: unknown, resume: unknown, statusMessage: unknown) {
    return this.inner.onHeaders!(statusCode, rawHeaders, resume, statusMessage);
  }

  onData(chunk: unknown) {
    return this.inner.onData!(chunk);
  }

  onComplete(trailers: unknown) {
    return this.inner.onComplete!(trailers);
  }

  onError(error: unknown) {
    // The request already failed with the signal's reason (onAbort): undici's echo of it is not news.
    if (this.gone !== undefined) return undefined;
    this.signal.removeEventListener('abort', this.onAbort);
    return this.inner.onError!(error);
  }

  onUpgrade(statusCode: unknown, rawHeaders: unknown, socket: unknown) {
    return this.inner.onUpgrade?.(statusCode, rawHeaders, socket);
  }
}
