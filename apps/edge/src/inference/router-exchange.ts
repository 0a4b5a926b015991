import {
  activeTraceparent,
  ErrorReason,
  GatewayError,
  GrpcStatus,
  errors,
  fromServiceError,
  fromStatusDetail,
  neverSent,
  openDuplexCall,
  type CallSettings,
  type ClientDuplexStream,
  type Logger,
} from '@gateway/platform';
import {
  ExchangeRequest,
  ExchangeResponse,
  RouterServiceService,
  type ChatRequest,
  type ChatResponse,
  type ChatStreamRequest,
  type ChatStreamResponse,
  type RouterServiceClient,
} from '@gateway/proto';

/**
 * How the chat route reaches the router: per-request calls (the generated client) or Router.Exchange.
 * `retryUnsent` false: this is already the second try of a request another replica never received
 * (RouterExchangeOptions.elsewhere); it is not sent on again.
 */
export interface ChatRouter {
  chat(request: ChatRequest, settings: CallSettings, retryUnsent?: boolean): Promise<ChatResponse>;
  chatStream(request: ChatStreamRequest, settings: CallSettings, retryUnsent?: boolean): AsyncIterable<ChatStreamResponse>;
}

export interface RouterExchangeOptions {
  /**
   * A request whose frame is larger goes on its own call (the fallback): on the shared call it would
   * hold up every exchange behind it while its bytes go out. Default 1 MiB.
   */
  maxFrameBytes?: number;
  /** Stream messages one exchange may hold for a reader that does not keep up before it is failed. Default 262,144. */
  maxQueuedMessages?: number;
  /** Bound on a non-streamed exchange when the caller gives none. Default 10 minutes. */
  defaultDeadlineMs?: number;
  /** Internal credential the Exchange calls carry. */
  credential?: string;
  /**
   * After this long a call takes no new exchanges: the next one opens a fresh call and the old one is
   * ended once its last exchange answers. Keeps every call younger than the routing server's
   * max_connection_age, which would otherwise cut it. Default 60 s.
   */
  maxCallAgeMs?: number;
  /** A call broke (not a drain the router asked for), and why: the router there may be gone. */
  onCallLost?: (failure: GatewayError | undefined) => void;
  /**
   * Where a request goes whose call found no connection (neverSent: it never reached this router, so
   * it cannot have done any work or cost anything): another replica's router, once; undefined: none is up.
   */
  elsewhere?: () => ChatRouter | undefined;
}

type Frame = NonNullable<ExchangeResponse['frame']>;

/** Asks the router for batched answers (ExchangeResponse.batch): several frames per HTTP/2 write. */
const BATCHED_ANSWERS = { 'x-gateway-exchange-batch': '1' };

interface Pending {
  /** A frame answering this exchange. */
  deliver(frame: Frame): void;
  /** The call broke: nothing more will come. */
  fail(error: GatewayError): void;
}

const cancelled = () => new GatewayError(GrpcStatus.CANCELLED, ErrorReason.ERROR_REASON_INTERNAL, 'exchange cancelled by its caller');
const unexpected = (frame: Frame, what: string) => errors.internal(`router exchange answered a ${what} with ${frame.$case}`);

/**
 * Why every exchange of a broken call failed. A call we did not cancel that ends CANCELLED lost its
 * router (a server shutting down forcibly cancels its calls): UNAVAILABLE, like any lost connection.
 */
function callFailure(error: unknown): GatewayError {
  const failure = fromServiceError(error);
  if (failure.status !== GrpcStatus.CANCELLED) return failure;
  return new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_INTERNAL, `router exchange call lost: ${failure.message}`);
}

/** One open Router.Exchange call and the exchanges waiting on it. */
class ExchangeCall {
  readonly pending = new Map<number, Pending>();
  /** The router is shutting down: no new exchanges here; the call is ended once the last one answers. */
  draining = false;
  gone = false;
  /** Why the call broke (set before its exchanges hear of it). */
  failure: GatewayError | undefined;
  readonly openedAt = Date.now();
  private ended = false;
  private nextId = 1;

  constructor(
    private readonly call: ClientDuplexStream<Uint8Array, ExchangeResponse>,
    private readonly onGone: (call: ExchangeCall) => void,
  ) {
    call.on('data', (response: ExchangeResponse) => this.receive(response));
    call.on('error', (error: unknown) => this.broken(callFailure(error)));
    call.on('end', () => this.broken(new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_INTERNAL, 'router exchange call ended')));
  }

  /** An id no open exchange of this call uses. */
  allocate(): number {
    let id: number;
    do {
      id = this.nextId;
      this.nextId = this.nextId >= 0xffff_ffff ? 1 : this.nextId + 1;
    } while (this.pending.has(id));
    return id;
  }

  open(id: number, pending: Pending, frame: Uint8Array): void {
    this.pending.set(id, pending);
    this.call.write(frame);
  }

  /** The exchange answered or was given up: forget it (and end a draining call once it is idle). */
  close(id: number): void {
    this.pending.delete(id);
    if (this.draining && this.pending.size === 0) this.endCall();
  }

  /** Half-closes a drained call once (the router then ends it). */
  private endCall(): void {
    if (this.gone || this.ended) return;
    this.ended = true;
    this.call.end();
  }

  /** Tells the router to stop working on an exchange nobody waits for any more. */
  cancel(id: number): void {
    // Written before close(): closing the last exchange of a draining call ends (half-closes) it.
    if (!this.gone && !this.ended) this.call.write(ExchangeRequest.encode({ exchangeId: id, frame: { $case: 'cancel', value: {} }, traceParent: '' }).finish());
    this.close(id);
  }

  /** Takes no new exchanges; ends once the open ones answered (as a drain the router asked for). */
  retire(): void {
    if (this.draining || this.gone) return;
    this.draining = true;
    this.onGone(this);
    if (this.pending.size === 0) this.endCall();
  }

  shutdown(reason: string): void {
    this.broken(new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_INTERNAL, reason));
    this.call.cancel();
  }

  private receive(response: ExchangeResponse): void {
    // Answers the router sent in one turn of its event loop, in order.
    if (response.batch.length > 0) {
      for (const inner of response.batch) this.receive(inner);
      return;
    }
    const frame = response.frame;
    if (!frame) return;
    if (frame.$case === 'drain') {
      this.draining = true;
      this.onGone(this);
      if (this.pending.size === 0) this.endCall();
      return;
    }
    // Unknown ids are answers to exchanges given up on (cancel and answer crossed): dropped.
    this.pending.get(response.exchangeId)?.deliver(frame);
  }

  private broken(error: GatewayError): void {
    if (this.gone) return;
    this.gone = true;
    this.failure = error;
    this.onGone(this);
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const exchange of pending) exchange.fail(error);
  }
}

/**
 * Router.Exchange, edge side: chat requests go to the router as frames of one long-lived call,
 * answers come back tagged with their exchange id. Per request this costs a frame each way instead
 * of an HTTP/2 stream and a grpc-js call, whose objects outlived the request (docs/performance.md).
 * Semantics match the per-request RPCs: the same errors, cancellation when the caller's signal
 * aborts, a deadline for non-streamed chats. Frames over `maxFrameBytes` use `fallback` instead.
 */
export class RouterExchange implements ChatRouter {
  private current: ExchangeCall | undefined;
  private readonly calls = new Set<ExchangeCall>();
  private readonly maxFrameBytes: number;
  private readonly maxQueuedMessages: number;
  private readonly defaultDeadlineMs: number;
  private readonly credential: string | undefined;
  private readonly maxCallAgeMs: number;
  private readonly onCallLost: ((failure: GatewayError | undefined) => void) | undefined;
  private readonly elsewhere: (() => ChatRouter | undefined) | undefined;
  private closed = false;

  constructor(
    private readonly client: RouterServiceClient,
    private readonly fallback: ChatRouter,
    private readonly logger: Logger,
    options: RouterExchangeOptions = {},
  ) {
    this.maxFrameBytes = options.maxFrameBytes ?? 1024 * 1024;
    this.maxQueuedMessages = options.maxQueuedMessages ?? 262_144;
    this.defaultDeadlineMs = options.defaultDeadlineMs ?? 10 * 60_000;
    this.credential = options.credential;
    this.maxCallAgeMs = options.maxCallAgeMs ?? 60_000;
    this.onCallLost = options.onCallLost;
    this.elsewhere = options.elsewhere;
  }

  /** Exchanges waiting for an answer, over every call (the pool's least-loaded tie-break, tests). */
  get openExchanges(): number {
    let open = 0;
    for (const call of this.calls) open += call.pending.size;
    return open;
  }

  chat(request: ChatRequest, settings: CallSettings = {}, retryUnsent = true): Promise<ChatResponse> {
    const opened = this.frameFor({ $case: 'chat', value: request });
    if (!opened) return this.fallback.chat(request, settings);
    const { exchange, id, frame } = opened;
    return new Promise<ChatResponse>((resolve, reject) => {
      const signal = settings.signal;
      const finish = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      const giveUp = (error: GatewayError) => {
        finish();
        exchange.cancel(id);
        reject(error);
      };
      const onAbort = () => giveUp(cancelled());
      const deadlineMs = settings.deadlineMs ?? this.defaultDeadlineMs;
      const timer = setTimeout(() => giveUp(new GatewayError(GrpcStatus.DEADLINE_EXCEEDED, ErrorReason.ERROR_REASON_INTERNAL, `no answer from the router within ${deadlineMs} ms`)), deadlineMs);
      if (signal?.aborted) return giveUp(cancelled());
      signal?.addEventListener('abort', onAbort, { once: true });
      exchange.open(id, {
        deliver: (answer) => {
          finish();
          exchange.close(id);
          if (answer.$case === 'chat') resolve(answer.value);
          else if (answer.$case === 'failure') reject(fromStatusDetail(answer.value.status, answer.value.detail));
          else reject(unexpected(answer, 'chat'));
        },
        fail: (error) => {
          finish();
          // Never reached this router (no connection): another replica gets it, once.
          const other = retryUnsent && neverSent(error) ? this.elsewhere?.() : undefined;
          if (other) resolve(other.chat(request, settings, false));
          else reject(error);
        },
      }, frame);
    });
  }

  chatStream(request: ChatStreamRequest, settings: CallSettings = {}, retryUnsent = true): AsyncIterableIterator<ChatStreamResponse> {
    return new ExchangeStream(this, request, settings, retryUnsent);
  }

  /** An exchange for a stream (ExchangeStream); undefined: its frame goes on the fallback. */
  openStream(request: ChatStreamRequest): { exchange: ExchangeCall; id: number; frame: Uint8Array } | undefined {
    return this.frameFor({ $case: 'chatStream', value: request });
  }

  /** The per-call router, for a frame too large for the shared call. */
  fallbackStream(request: ChatStreamRequest, settings: CallSettings): AsyncIterable<ChatStreamResponse> {
    return this.fallback.chatStream(request, settings);
  }

  /** Another replica's router for a request that never reached this one, if any is up. */
  otherRouter(): ChatRouter | undefined {
    return this.elsewhere?.();
  }

  get streamQueueBound(): number {
    return this.maxQueuedMessages;
  }

  /** Ends every call; exchanges still open fail as UNAVAILABLE. */
  close(): void {
    this.closed = true;
    for (const call of [...this.calls]) call.shutdown('edge stopping');
    this.calls.clear();
    this.current = undefined;
  }

  /** The call, id and encoded frame of a new exchange; undefined when the frame is too large for the shared call. */
  private frameFor(request: ExchangeRequest['frame']): { exchange: ExchangeCall; id: number; frame: Uint8Array } | undefined {
    const exchange = this.callForNewExchange();
    const id = exchange.allocate();
    // The request's trace context rides in the frame: routing's span for this exchange is its child.
    const frame = ExchangeRequest.encode({ exchangeId: id, frame: request, traceParent: activeTraceparent() }).finish();
    return frame.length > this.maxFrameBytes ? undefined : { exchange, id, frame };
  }

  private callForNewExchange(): ExchangeCall {
    if (this.closed) throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_INTERNAL, 'edge stopping');
    const current = this.current;
    if (current && !current.draining && !current.gone) {
      if (Date.now() - current.openedAt < this.maxCallAgeMs) return current;
      current.retire();
    }
    const opened = openDuplexCall(this.client, RouterServiceService.exchange.path, ExchangeResponse.decode, this.credential, BATCHED_ANSWERS);
    const call: ExchangeCall = new ExchangeCall(opened, (finished) => {
      if (this.current === finished) this.current = undefined;
      // A draining call stays in `calls` (so close() can end it) until it is gone.
      if (finished.gone) {
        this.calls.delete(finished);
        if (!finished.draining && !this.closed) this.onCallLost?.(finished.failure);
      }
    });
    this.calls.add(call);
    this.current = call;
    this.logger.debug({ open_calls: this.calls.size }, 'router exchange call opened');
    return call;
  }
}

const DONE: IteratorResult<ChatStreamResponse> = { done: true, value: undefined };

/**
 * One stream exchange as the relay reads it: an async iterator written by hand, not an async generator.
 * A message that finds its reader waiting resolves that reader's read directly (one promise per message,
 * no generator step or queue in between); messages that arrive while the reader is busy (several of one
 * batch) wait in a queue bounded by maxQueuedMessages (the call is shared: it is never paused for one
 * slow reader). The exchange is opened on the first read, as a generator's body would run. One reader:
 * reads are not made concurrently (a `for await` loop).
 */
class ExchangeStream implements AsyncIterableIterator<ChatStreamResponse> {
  private opened = false;
  /** Iteration is over (ended and read, failed, or returned). */
  private finished = false;
  /** Another stream this one's reads go to: the fallback for a large frame, or another replica's router. */
  private delegate: AsyncIterator<ChatStreamResponse> | undefined;
  private exchange: ExchangeCall | undefined;
  private id = 0;
  private queue: ChatStreamResponse[] = [];
  private head = 0;
  private ended = false;
  private failure: GatewayError | undefined;
  private waiting: { resolve: (result: IteratorResult<ChatStreamResponse>) => void; reject: (error: unknown) => void } | undefined;
  private readonly signal: CallSettings['signal'];

  constructor(
    private readonly router: RouterExchange,
    private readonly request: ChatStreamRequest,
    private readonly settings: CallSettings,
    private readonly retryUnsent: boolean,
  ) {
    this.signal = settings.signal;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<ChatStreamResponse>> {
    if (this.delegate) return this.delegate.next();
    if (this.finished) return Promise.resolve(DONE);
    if (!this.opened) {
      try {
        this.open();
      } catch (error) {
        this.finished = true;
        return Promise.reject(error);
      }
      if (this.delegate) return (this.delegate as AsyncIterator<ChatStreamResponse>).next();
    }
    return this.read();
  }

  return(): Promise<IteratorResult<ChatStreamResponse>> {
    if (this.delegate) return this.delegate.return?.() ?? Promise.resolve(DONE);
    this.finish();
    return Promise.resolve(DONE);
  }

  throw(error?: unknown): Promise<IteratorResult<ChatStreamResponse>> {
    if (this.delegate) return this.delegate.throw?.(error) ?? Promise.reject(error);
    this.finish();
    return Promise.reject(error);
  }

  private open(): void {
    this.opened = true;
    const opened = this.router.openStream(this.request);
    if (!opened) {
      this.delegate = this.router.fallbackStream(this.request, this.settings)[Symbol.asyncIterator]();
      return;
    }
    const { exchange, id, frame } = opened;
    if (this.signal?.aborted) throw cancelled();
    this.exchange = exchange;
    this.id = id;
    this.signal?.addEventListener('abort', this.onAbort, { once: true });
    exchange.open(id, { deliver: this.deliver, fail: this.end }, frame);
  }

  private readonly onAbort = (): void => {
    if (this.ended) return;
    this.exchange!.cancel(this.id);
    this.end(cancelled());
  };

  private readonly deliver = (answer: Frame): void => {
    if (this.ended) return;
    const exchange = this.exchange!;
    if (answer.$case === 'stream') {
      const waiting = this.waiting;
      if (waiting !== undefined) {
        // The reader waits, so nothing is queued: the message is its read.
        this.waiting = undefined;
        waiting.resolve({ done: false, value: answer.value });
        return;
      }
      const bound = this.router.streamQueueBound;
      if (this.queue.length - this.head >= bound) {
        exchange.cancel(this.id);
        this.end(new GatewayError(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_INTERNAL, `stream reader fell ${bound} messages behind`));
        return;
      }
      this.queue.push(answer.value);
      return;
    }
    exchange.close(this.id);
    if (answer.$case === 'end') this.end();
    else if (answer.$case === 'failure') this.end(fromStatusDetail(answer.value.status, answer.value.detail));
    else this.end(unexpected(answer, 'stream'));
  };

  private readonly end = (error?: GatewayError): void => {
    this.ended = true;
    this.failure = error;
    const waiting = this.waiting;
    if (waiting === undefined) return;
    this.waiting = undefined;
    this.read().then(waiting.resolve, waiting.reject);
  };

  private read(): Promise<IteratorResult<ChatStreamResponse>> {
    // A caller that gave up hears so at once, not after the messages already queued.
    if (this.signal?.aborted) {
      const failure = this.failure ?? cancelled();
      this.finish();
      return Promise.reject(failure);
    }
    if (this.head < this.queue.length) {
      const message = this.queue[this.head] as ChatStreamResponse;
      this.head += 1;
      if (this.head === this.queue.length) {
        this.queue = [];
        this.head = 0;
      }
      return Promise.resolve({ done: false, value: message });
    }
    if (this.ended) {
      const failure = this.failure;
      this.finish();
      if (!failure) return Promise.resolve(DONE);
      // Never reached this router (no connection, so nothing was queued): another replica gets it, once.
      const other = this.retryUnsent && neverSent(failure) ? this.router.otherRouter() : undefined;
      if (!other) return Promise.reject(failure);
      this.delegate = other.chatStream(this.request, this.settings, false)[Symbol.asyncIterator]();
      return this.delegate.next();
    }
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }

  /** Iteration is over: the abort listener goes, and a router stream still running is cancelled. */
  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    this.signal?.removeEventListener('abort', this.onAbort);
    // The reader stopped before the end (client left, error while relaying): stop the router's work.
    if (this.exchange && !this.ended) {
      this.ended = true;
      this.exchange.cancel(this.id);
    }
    this.queue = [];
    this.head = 0;
  }
}
