import type { IncomingMessage, ServerResponse } from 'node:http';
import { SpanStatusCode, traceIdsOf, unredactedLogger, type Logger, type Span } from '@gateway/platform';
import { clientRequestIdOf, requestIdOf } from '../request-id.js';
import { edgeErrors, type EdgeError } from '../errors.js';
import type { EdgeMetrics } from './edge-metrics.js';
import { meterBody, type InFlightLimiter } from './overload.js';
import { headersWrittenAt } from './timed-response.js';

/** Probes are never shed, never counted in flight, and logged at debug (a kubelet asks every few seconds). */
export const PROBE_PATHS: ReadonlySet<string> = new Set(['/livez', '/readyz', '/healthz']);

const METHODS: ReadonlySet<string> = new Set(['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS']);

/** What one request came to, filled in as it goes (model and provider by the observed admission and router). */
class RequestRecord {
  model: string | undefined = undefined;
  provider: string | undefined = undefined;
  /** Counted in the tracker's active streams (its answer went out as a stream). */
  streaming = false;

  constructor(
    readonly tracker: RequestTracker,
    readonly requestId: string,
    readonly startedAt: number,
    /** The route's template when known before routing (the inference routes); else express's, at the end. */
    readonly routeTemplate: string | undefined,
    readonly dialect: string,
    public bodyBytes: number,
    /** Counted in flight (not a probe, not shed). */
    readonly admitted: boolean,
    readonly probe: boolean,
    /** Why it was shed: at its start, or (a chunked body) while its body was read. */
    public shed: string | undefined,
    /** The request's span when tracing is on (ended with the request). */
    readonly span: Span | undefined,
  ) {}
}

export interface RequestTrackerOptions {
  logger: Logger;
  metrics: EdgeMetrics;
  limiter: InFlightLimiter;
  /** Largest body a request may have (a declared length counts at most this). */
  maxBodyBytes: number;
}

/**
 * Sees every HTTP request of the edge from its first byte to its close: sheds it past the overload
 * bounds, counts it in flight, and when it ends writes its access log line and its metrics. The model
 * and provider of an inference request are noted on the way by the observed admission and router
 * (observed-edge.ts), keyed by the gateway's request id.
 */
export class RequestTracker {
  private readonly records = new Map<string, RequestRecord>();
  /** Streamed answers open now: HTTP responses marked by `streamStarted`, and responses WebSocket turns. */
  private openStreams = 0;
  private isDraining = false;
  private idleWaiters: Array<() => void> = [];

  /** The access line is built here from known-safe fields only, so it skips pino's redaction pass. */
  private readonly accessLogger: Logger;

  constructor(private readonly options: RequestTrackerOptions) {
    this.accessLogger = unredactedLogger(options.logger);
  }

  /**
   * First thing for every request, once its id is stamped (app.ts). `routeTemplate`: the inference
   * route when it is dispatched directly; `dialect`: the inference endpoint of the path, if any.
   * Returns the 503 to answer when the request is shed; the request is then not read at all.
   */
  begin(
    request: IncomingMessage,
    response: ServerResponse,
    path: string,
    routeTemplate: string | undefined,
    dialect: string | undefined,
    span?: Span,
  ): EdgeError | undefined {
    const startedAt = performance.now();
    const probe = PROBE_PATHS.has(path);
    const bodyBytes = probe ? 0 : declaredBodyBytes(request, this.options.maxBodyBytes);
    const shed = probe ? undefined : this.options.limiter.admit(bodyBytes);
    const record = new RequestRecord(this, requestIdOf(response), startedAt, routeTemplate, dialect ?? 'none', bodyBytes, !probe && shed === undefined, probe, shed, span);
    this.records.set(record.requestId, record);
    (response as TrackedResponse)[RECORD] = record;
    // While draining, each connection closes after its answer: keep-alive would bring more requests.
    if (this.isDraining) response.shouldKeepAlive = false;
    response.once('close', () => this.end(record, request, response));
    if (shed === undefined) {
      // A body that declares no length (chunked) is counted as it is read (overload.ts).
      if (!probe && request.headers['content-length'] === undefined) {
        meterBody(request, (bytes) => {
          if (record.bodyBytes + bytes > this.options.maxBodyBytes) return undefined;
          const refused = this.options.limiter.grow(record.bodyBytes, bytes);
          if (refused === undefined) {
            record.bodyBytes += bytes;
            return undefined;
          }
          record.shed = refused;
          this.options.metrics.shedRequest(refused);
          return edgeErrors.overloaded(this.options.limiter.limits.retryAfterSeconds);
        });
      }
      return undefined;
    }
    this.options.metrics.shedRequest(shed);
    return edgeErrors.overloaded(this.options.limiter.limits.retryAfterSeconds);
  }

  /**
   * A place in flight for an inference that is not an HTTP request (a responses WebSocket's turn):
   * the same bounds, the same 503 when shed. Given back with `leaveTurn`.
   */
  admitTurn(bodyBytes: number): EdgeError | undefined {
    const shed = this.options.limiter.admit(bodyBytes);
    if (shed === undefined) {
      // A responses WebSocket turn answers as a stream of events.
      this.openStreams++;
      return undefined;
    }
    this.options.metrics.shedRequest(shed);
    return edgeErrors.overloaded(this.options.limiter.limits.retryAfterSeconds);
  }

  leaveTurn(bodyBytes: number): void {
    this.openStreams--;
    this.options.limiter.leave(bodyBytes);
    if (this.inFlight === 0 && this.idleWaiters.length > 0) for (const waiter of this.idleWaiters.splice(0)) waiter();
  }

  /** One more streamed answer open (streamStarted); given back when its response closes. */
  countStream(): void {
    this.openStreams++;
  }

  /** The catalog model an inference request resolved to. */
  noteModel(requestId: string, modelId: string): void {
    const record = this.records.get(requestId);
    if (record !== undefined) record.model = modelId;
  }

  /** The provider that served (or is serving) the request. */
  noteProvider(requestId: string, providerId: string): void {
    const record = this.records.get(requestId);
    if (record !== undefined && providerId !== '') record.provider = providerId;
  }

  rateLimited(): void {
    this.options.metrics.rateLimitRefusal();
  }

  get draining(): boolean {
    return this.isDraining;
  }

  get inFlight(): number {
    return this.options.limiter.inFlight.requests;
  }

  /** Streamed answers open now (what `gateway_http_streams_active` reports). */
  get activeStreams(): number {
    return this.openStreams;
  }

  /** From now on: readiness fails, and connections close after their current answer. */
  drain(): void {
    this.isDraining = true;
  }

  /** Resolves true once no admitted request is in flight, or false after `timeoutMs`. */
  whenIdle(timeoutMs: number): Promise<boolean> {
    if (this.inFlight === 0) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => {
        this.idleWaiters = this.idleWaiters.filter((waiter) => waiter !== done);
        resolve(false);
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        resolve(true);
      };
      this.idleWaiters.push(done);
    });
  }

  private end(record: RequestRecord, request: IncomingMessage, response: ServerResponse): void {
    this.records.delete(record.requestId);
    if (record.streaming) this.openStreams--;
    if (record.admitted) {
      this.options.limiter.leave(record.bodyBytes);
      if (this.inFlight === 0 && this.idleWaiters.length > 0) for (const waiter of this.idleWaiters.splice(0)) waiter();
    }
    const endedAt = performance.now();
    // 499 (nginx's convention): the client left before any answer was sent.
    const status = response.headersSent ? response.statusCode : 499;
    const route = record.routeTemplate ?? expressRoute(request) ?? (status === 404 ? 'unmatched' : 'other');
    const method = METHODS.has(request.method ?? '') ? (request.method as string) : 'other';
    const seconds = (endedAt - record.startedAt) / 1000;
    const headersAt = headersWrittenAt(response);
    const firstByteSeconds = headersAt === undefined ? seconds : (headersAt - record.startedAt) / 1000;
    this.options.metrics.answered(route, method, status, record.dialect, seconds, firstByteSeconds);
    const span = record.span;
    if (span !== undefined) {
      span.updateName(`${method} ${route}`);
      span.setAttributes({ 'http.route': route, 'http.response.status_code': status });
      // The catalog's ids: the GenAI conventions' attributes are on routing's attempt spans (the upstream's names).
      if (record.model !== undefined) span.setAttribute('gateway.model', record.model);
      if (record.provider !== undefined) span.setAttribute('gateway.provider', record.provider);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    }
    const logger = this.accessLogger;
    const level = record.probe ? 'debug' : 'info';
    if (!logger.isLevelEnabled(level)) return;
    const traceIds = traceIdsOf(span);
    logger[level]({
      route,
      method,
      status,
      dialect: record.dialect === 'none' ? undefined : record.dialect,
      model: record.model,
      provider: record.provider,
      latency_ms: roundMs(seconds * 1000),
      ttfb_ms: headersAt === undefined ? undefined : roundMs(firstByteSeconds * 1000),
      request_id: record.requestId,
      client_request_id: clientRequestIdOf(response),
      trace_id: traceIds?.trace_id,
      span_id: traceIds?.span_id,
      shed: record.shed,
      client_closed: response.writableFinished ? undefined : true,
    }, 'http request');
  }
}

const RECORD = Symbol('gateway.requestRecord');
type TrackedResponse = ServerResponse & { [RECORD]?: RequestRecord };

/**
 * The response's answer goes out as a stream (SSE, streamed audio): counted among the edge's active
 * streams until the response closes. Once per request (later calls do nothing); nothing per frame.
 * A response the tracker did not begin (tests driving a route alone) is not counted.
 */
export function streamStarted(response: ServerResponse): void {
  const record = (response as TrackedResponse)[RECORD];
  if (record === undefined || record.streaming || !record.admitted) return;
  record.streaming = true;
  record.tracker.countStream();
}

/** The declared content-length, at most the body limit (a longer one is refused with 413 before any byte is read). */
function declaredBodyBytes(request: IncomingMessage, maxBodyBytes: number): number {
  const declared = request.headers['content-length'];
  if (declared === undefined) return 0;
  const bytes = Number(declared);
  return Number.isFinite(bytes) && bytes > 0 ? Math.min(bytes, maxBodyBytes) : 0;
}

/** The template of the express route that answered (`/v1/models/*id`), if one did. */
function expressRoute(request: IncomingMessage): string | undefined {
  const route = (request as IncomingMessage & { route?: { path?: unknown } }).route;
  return typeof route?.path === 'string' ? route.path : undefined;
}

function roundMs(ms: number): number {
  return Math.round(ms * 10) / 10;
}
