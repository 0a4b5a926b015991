import { Dispatcher, type Pool } from 'undici';
import type { AttemptSignal } from '../provider-adapter.js';

/**
 * `pool.request` that also tells the attempt's signal when undici wrote the whole request
 * (AttemptSignal.requestSent): from then on the upstream has the prompt, and a caller who leaves pays
 * for it. undici's request handler has no hook for that, so its dispatch goes through a dispatcher of
 * ours (one per pool) that wraps the handler in a SentNotice, which passes every call on unchanged.
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

/** A legacy-style undici handler passing every call to `inner`, and onRequestSent to the signal too. */
type LegacyHandler = Partial<Record<LegacyMethod, (...args: unknown[]) => unknown>>;
type LegacyMethod = 'onRequestSent' | 'onConnect' | 'onBodySent' | 'onResponseStarted' | 'onHeaders' | 'onData' | 'onComplete' | 'onError' | 'onUpgrade';

class SentNotice {
  private readonly inner: LegacyHandler;

  constructor(inner: Dispatcher.DispatchHandler, private readonly signal: AttemptSignal) {
    this.inner = inner as unknown as LegacyHandler;
  }

  onRequestSent() {
    this.signal.requestSent?.();
    return this.inner.onRequestSent?.();
  }

  onConnect(abort: unknown, context: unknown) {
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
    return this.inner.onError!(error);
  }

  onUpgrade(statusCode: unknown, rawHeaders: unknown, socket: unknown) {
    return this.inner.onUpgrade?.(statusCode, rawHeaders, socket);
  }
}
