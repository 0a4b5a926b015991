import type { ServerDuplexStream } from '@grpc/grpc-js';
import {
  Cancellation,
  contextFromTraceparent,
  endRpcSpan,
  GatewayError,
  GrpcStatus,
  ErrorReason,
  errors,
  handlerError,
  otelContext,
  otelTrace,
  SpanKind,
  startRpcSpan,
  tracingEnabled,
  type Logger,
} from '@gateway/platform';
import { ExchangeResponse, RouterServiceService, type ChatRequest, type ChatStreamRequest, type ExchangeRequest } from '@gateway/proto';
import type { Router } from '../routing/router.js';
import type { RoutingLoad } from '../observability/routing-metrics.js';
import { asBuffer, encodeRepeatedBytes, reusedWriterEncoder } from '@gateway/proto';

/** Exchanges one call may hold open at once; more are refused (RESOURCE_EXHAUSTED) until some finish. */
export const MAX_OPEN_EXCHANGES = 10_000;

/** What the call writes: a frame to encode, or frames already encoded (one, or a batch). */
type ExchangeCall = ServerDuplexStream<ExchangeRequest, ExchangeResponse | Uint8Array>;

/** Call metadata by which a caller asks for batched answers (ExchangeResponse.batch). */
export const EXCHANGE_BATCH_METADATA = 'x-gateway-exchange-batch';
/** A batch is written once it holds this many bytes or frames; a larger frame goes alone. */
const MAX_BATCH_BYTES = 256 * 1024;
const MAX_BATCH_FRAMES = 128;
/** ExchangeResponse's `repeated ExchangeResponse batch = 7`. */
const BATCH_FIELD = 7;
const NO_BATCH: ExchangeResponse[] = [];

const encodeExchangeResponse = reusedWriterEncoder(ExchangeResponse);

/** The Exchange call's serializer: frames are encoded on a reused writer, or arrive encoded already (batching). */
export function serializeExchangeResponse(value: ExchangeResponse | Uint8Array): Buffer {
  return asBuffer(value instanceof Uint8Array ? value : encodeExchangeResponse(value));
}

/** One answer frame (no batch). */
function answer(exchangeId: number, frame: ExchangeResponse['frame']): ExchangeResponse {
  return { exchangeId, frame, batch: NO_BATCH };
}

// An exchange's span is named as the RPC it stands for.
const CHAT_PATH = RouterServiceService.chat.path;
const CHAT_STREAM_PATH = RouterServiceService.chatStream.path;

/**
 * Router.Exchange, server side: many Chat / ChatStream exchanges over one call. Each exchange is
 * the same domain call as its own RPC would make; answers are tagged with the exchange id. The call
 * ends once the caller has half-closed it and every exchange has answered.
 */
export class ExchangeService {
  private readonly sessions = new Set<ExchangeSession>();
  private draining = false;

  constructor(
    private readonly router: Router,
    private readonly logger: Logger,
    /** Counts each exchange from its frame's arrival to its answer (gateway_routing_requests_in_flight). */
    private readonly load?: RoutingLoad,
  ) {}

  readonly handler = (call: ExchangeCall): void => {
    const session = new ExchangeSession(call, this.router, this.logger, () => this.sessions.delete(session), this.load);
    this.sessions.add(session);
    if (this.draining) session.drain();
  };

  /** Shutting down: every caller is told to start new exchanges elsewhere; those in flight finish. */
  drain(): void {
    this.draining = true;
    for (const session of this.sessions) session.drain();
  }

}

class ExchangeSession {
  /** Each open exchange's cancellation (its `cancel` frame, or the whole call going away). */
  private readonly open = new Map<number, Cancellation>();
  private halfClosed = false;
  private gone = false;
  /** The caller reads ExchangeResponse.batch (EXCHANGE_BATCH_METADATA). */
  private readonly batching: boolean;
  /** Encoded frames waiting for this turn's write (batching calls only). */
  private gathered: Uint8Array[] = [];
  private gatheredBytes = 0;

  constructor(
    private readonly call: ExchangeCall,
    private readonly router: Router,
    private readonly logger: Logger,
    private readonly onFinished: () => void,
    private readonly load: RoutingLoad | undefined,
  ) {
    this.batching = call.metadata.get(EXCHANGE_BATCH_METADATA)[0] === '1';
    call.on('data', (request: ExchangeRequest) => this.receive(request));
    call.on('end', () => {
      this.halfClosed = true;
      this.endIfIdle();
    });
    // The caller cancelled the call or the connection broke: nobody is left to answer.
    call.on('cancelled', () => this.abandon('exchange call cancelled'));
    call.on('error', () => this.abandon('exchange call failed'));
    call.on('close', () => this.abandon('exchange call closed'));
  }

  drain(): void {
    this.send(answer(0, { $case: 'drain', value: {} }));
  }

  private receive(request: ExchangeRequest): void {
    const id = request.exchangeId;
    const frame = request.frame;
    if (frame?.$case === 'cancel') {
      this.open.get(id)?.abort(new Error('caller cancelled the exchange'));
      return;
    }
    if (!frame) return this.fail(id, errors.invalidRequest('ExchangeRequest has no frame', 'frame'));
    if (this.open.has(id)) return this.fail(id, errors.invalidRequest(`exchange ${id} is already open on this call`, 'exchange_id'));
    if (this.open.size >= MAX_OPEN_EXCHANGES) {
      return this.fail(id, new GatewayError(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_INTERNAL, `more than ${MAX_OPEN_EXCHANGES} exchanges open on one call`));
    }
    const cancellation = new Cancellation();
    this.open.set(id, cancellation);
    if (!tracingEnabled()) {
      if (frame.$case === 'chat') void this.chat(id, frame.value, cancellation);
      else void this.chatStream(id, frame.value, cancellation);
      return;
    }
    // A span per exchange (not one for the shared call), the child of the edge's request span.
    const parent = contextFromTraceparent(request.traceParent);
    const span = startRpcSpan(frame.$case === 'chat' ? CHAT_PATH : CHAT_STREAM_PATH, SpanKind.SERVER, parent);
    span.setAttribute('gateway.exchange', true);
    otelContext.with(otelTrace.setSpan(parent, span), () => {
      const done = frame.$case === 'chat' ? this.chat(id, frame.value, cancellation) : this.chatStream(id, frame.value, cancellation);
      void done.then((failure) => endRpcSpan(span, failure ?? (cancellation.aborted ? { code: GrpcStatus.CANCELLED, message: 'cancelled' } : undefined)));
    });
  }

  private chat(id: number, request: ChatRequest, cancellation: Cancellation): Promise<GatewayError | undefined> {
    return this.run(id, false, 'Exchange.Chat', cancellation, async () => {
      const response = await this.router.chat(request, cancellation);
      if (!cancellation.aborted) this.send(answer(id, { $case: 'chat', value: response }));
    });
  }

  private chatStream(id: number, request: ChatStreamRequest, cancellation: Cancellation): Promise<GatewayError | undefined> {
    return this.run(id, true, 'Exchange.ChatStream', cancellation, async () => {
      if (!request.chat) throw errors.invalidRequest('ChatStreamRequest.chat is required', 'chat_stream.chat');
      // The call's buffer is shared by every exchange: a stream waits for it to drain, as ChatStream
      // waits for its own call (answers of other exchanges still go out meanwhile). A cancelled
      // exchange's messages are dropped (the stream itself ends through the cancellation).
      await this.router.streamChat(request.chat, cancellation, { combinedStart: request.combinedStart }, {
        send: (message) => cancellation.aborted || this.send(answer(id, { $case: 'stream', value: message })),
        drained: () => this.drained(cancellation),
      });
      if (!cancellation.aborted) this.send(answer(id, { $case: 'end', value: {} }));
    });
  }

  /**
   * One exchange's work, counted in the load while it runs; a failure is answered on the exchange unless it
   * was cancelled. Resolves with the failure the exchange answered, if any.
   */
  private async run(id: number, streamed: boolean, method: string, cancellation: Cancellation, work: () => Promise<void>): Promise<GatewayError | undefined> {
    this.load?.begin(streamed);
    try {
      await work();
      return undefined;
    } catch (error) {
      const failure = handlerError(error, this.logger, method);
      if (!cancellation.aborted) this.fail(id, failure);
      return failure;
    } finally {
      this.load?.end(streamed);
      this.finish(id);
    }
  }

  private drained(cancellation: Cancellation): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        this.call.off('drain', done);
        cancellation.removeEventListener('abort', done);
        resolve();
      };
      this.call.on('drain', done);
      cancellation.addEventListener('abort', done);
    });
  }

  private fail(id: number, error: GatewayError): void {
    this.send(answer(id, { $case: 'failure', value: { status: error.status, detail: error.detail } }));
  }

  /**
   * False when the call's buffer is full (the caller is slow to read). On a batching call the frame is
   * encoded now and written with the others sent in this turn of the event loop (setImmediate: after
   * the I/O callbacks of the turn, so answers completed by the same reads travel together).
   */
  private send(response: ExchangeResponse): boolean {
    if (this.gone) return true;
    if (!this.batching) return this.call.write(response);
    const bytes = encodeExchangeResponse(response);
    if (this.gathered.length > 0 && (this.gatheredBytes + bytes.length > MAX_BATCH_BYTES || this.gathered.length >= MAX_BATCH_FRAMES)) this.flush();
    this.gathered.push(bytes);
    this.gatheredBytes += bytes.length;
    if (this.gathered.length === 1) setImmediate(this.flush);
    return !this.call.writableNeedDrain;
  }

  /** Writes what was gathered: a lone frame as it is, several as one ExchangeResponse of `batch`. */
  private readonly flush = (): void => {
    const frames = this.gathered;
    if (frames.length === 0) return;
    this.gathered = [];
    this.gatheredBytes = 0;
    if (this.gone) return;
    this.call.write(frames.length === 1 ? frames[0]! : encodeRepeatedBytes(BATCH_FIELD, frames));
  };

  private finish(id: number): void {
    this.open.delete(id);
    this.endIfIdle();
  }

  private endIfIdle(): void {
    if (!this.halfClosed || this.open.size > 0 || this.gone) return;
    // The last answers go out before the end of the call.
    this.flush();
    this.gone = true;
    this.call.end();
    this.onFinished();
  }

  private abandon(reason: string): void {
    if (this.gone && this.open.size === 0) return;
    this.gone = true;
    for (const cancellation of this.open.values()) cancellation.abort(new Error(reason));
    this.onFinished();
  }
}
