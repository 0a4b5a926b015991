import {
  context,
  metrics,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Counter as OtelCounter,
  type Histogram as OtelHistogram,
  type Link,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
} from '@opentelemetry/api';
import type { Metadata } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { startAuditLogExport } from './audit/audit-log-export.js';

/**
 * OpenTelemetry tracing (docs/operations.md "Tracing (OpenTelemetry)"). Off unless an OTLP endpoint is configured through the
 * standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; also
 * `OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_BSP_*`, `OTEL_TRACES_SAMPLER`, and
 * `OTEL_SDK_DISABLED` / `OTEL_TRACES_EXPORTER=none` to turn it off). The spans are made by the gateway's
 * own code at the points that matter (HTTP ingress, every gRPC call both sides, each exchange frame,
 * the upstream request, the usage publish, the settlement): no monkey-patching instrumentation, so
 * nothing depends on module load order, and a process without tracing pays one boolean test per point.
 * OpenTelemetry metrics (the GenAI client metrics, apps/routing/src/observability/gen-ai-telemetry.ts)
 * go out over OTLP too when an endpoint for them is set (`OTEL_EXPORTER_OTLP_ENDPOINT` or
 * `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`; `OTEL_METRIC_EXPORT_INTERVAL`; `OTEL_METRICS_EXPORTER=none` turns them off).
 */
let enabled = false;
let metricsOn = false;

export const tracingEnabled = (): boolean => enabled;

/**
 * Whether OpenTelemetry metrics are exported (OTLP): `OTEL_EXPORTER_OTLP_ENDPOINT` or
 * `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` set, `OTEL_METRICS_EXPORTER` not `none`. Instruments made
 * before the SDK started are no-ops, so their owners make them once this is true.
 */
export const otelMetricsEnabled = (): boolean => metricsOn;

/** The one tracer of the gateway's spans. */
export const tracer = () => trace.getTracer('inference-gateway');

/** The one meter of the gateway's OpenTelemetry metrics (a no-op one until the SDK started with metrics). */
export const meter = () => metrics.getMeter('inference-gateway');

/** Whether the environment asks for tracing. */
export function telemetryConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.OTEL_SDK_DISABLED === 'true' || env.OTEL_TRACES_EXPORTER === 'none') return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/** Whether the environment asks for OTLP metrics (the SDK's default exporter is OTLP once an endpoint is set). */
export function metricsTelemetryConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.OTEL_SDK_DISABLED === 'true') return false;
  const exporters = (env.OTEL_METRICS_EXPORTER ?? '').split(',').map((name) => name.trim());
  if (exporters.includes('none')) return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_METRICS_ENDPOINT);
}

/**
 * Starts the SDK (provider, batch processor, OTLP exporter, W3C propagation, async-context manager) when
 * configured; the returned function flushes and stops it. Called by runMain before the service starts.
 */
export async function startTelemetry(serviceName: string, logger: Logger): Promise<() => Promise<void>> {
  const traces = telemetryConfigured();
  const withMetrics = metricsTelemetryConfigured();
  // The audit log as OTLP log records (audit/audit-log-export.ts): its own provider, off without an endpoint.
  const auditExport = await startAuditLogExport(serviceName === 'gateway' ? 'gateway' : `gateway-${serviceName}`, logger);
  if (!traces && !withMetrics) return async () => auditExport?.stop();
  const { NodeSDK } = await import('@opentelemetry/sdk-node');
  // The SDK builds its metric reader from OTEL_METRICS_EXPORTER and makes none when it is unset; the
  // OpenTelemetry default is `otlp`, so an OTLP endpoint alone turns metrics on (as it does traces).
  if (withMetrics && !process.env.OTEL_METRICS_EXPORTER) process.env.OTEL_METRICS_EXPORTER = 'otlp';
  // The SDK refuses an export interval shorter than the export timeout (30 s unless set): a short
  // interval alone would stop the service from starting.
  const interval = Number(process.env.OTEL_METRIC_EXPORT_INTERVAL);
  if (withMetrics && !process.env.OTEL_METRIC_EXPORT_TIMEOUT && interval > 0 && interval < 30_000) process.env.OTEL_METRIC_EXPORT_TIMEOUT = String(interval);
  // Metrics alone (a metrics endpoint only): no trace exporter to a default address.
  if (!traces && !process.env.OTEL_TRACES_EXPORTER) process.env.OTEL_TRACES_EXPORTER = 'none';
  // gateway-edge, gateway-routing, …; npm start (every service in one process) is just `gateway`.
  const defaultName = serviceName === 'gateway' ? 'gateway' : `gateway-${serviceName}`;
  const sdk = new NodeSDK({ serviceName: process.env.OTEL_SERVICE_NAME || defaultName, instrumentations: [] });
  sdk.start();
  enabled = traces;
  metricsOn = withMetrics;
  logger.info({
    endpoint: process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || process.env.OTEL_EXPORTER_OTLP_ENDPOINT || process.env.OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
    traces, metrics: withMetrics,
  }, 'OpenTelemetry on');
  return async () => {
    enabled = false;
    metricsOn = false;
    await sdk.shutdown().catch((error: unknown) => logger.warn({ err: error }, 'OpenTelemetry shutdown failed'));
    await auditExport?.stop();
  };
}

const metadataSetter: TextMapSetter<Metadata> = { set: (carrier, key, value) => carrier.set(key, value) };
const metadataGetter: TextMapGetter<Metadata> = {
  get: (carrier, key) => {
    const values = carrier.get(key);
    return values.length > 0 ? String(values[0]) : undefined;
  },
  keys: (carrier) => Object.keys(carrier.getMap()),
};

/** Writes the span's context into gRPC metadata (traceparent). */
export function injectIntoMetadata(span: Span, metadata: Metadata): void {
  propagation.inject(trace.setSpan(context.active(), span), metadata, metadataSetter);
}

/** The caller's context a gRPC call carried (the root context when it carried none). */
export function contextFromMetadata(metadata: Metadata): Context {
  return propagation.extract(ROOT_CONTEXT, metadata, metadataGetter);
}

/** The active context as a W3C traceparent; '' when tracing is off or nothing is active. */
export function activeTraceparent(): string {
  if (!enabled) return '';
  const carrier: { traceparent?: string } = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent ?? '';
}

/** The context a traceparent names (root when empty or malformed). */
export function contextFromTraceparent(traceparent: string | undefined): Context {
  if (!traceparent) return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, { traceparent });
}

/** A link to the span a traceparent names; undefined when it names none. */
export function linkTo(traceparent: string | undefined): Link | undefined {
  const spanContext = trace.getSpanContext(contextFromTraceparent(traceparent));
  return spanContext ? { context: spanContext } : undefined;
}

/** The trace and span id of a span, for log lines; undefined when it is not a real (sampled-in) span. */
export function traceIdsOf(span: Span | undefined): { trace_id: string; span_id: string } | undefined {
  const spanContext = span?.spanContext();
  if (!spanContext || !trace.isSpanContextValid(spanContext)) return undefined;
  return { trace_id: spanContext.traceId, span_id: spanContext.spanId };
}

/**
 * The span of one HTTP request the edge serves (kind SERVER), the child of the caller's `traceparent`
 * header when it sent one, and the context to run the request in. Named by method now; the tracker
 * renames it with the route template when the request ends.
 */
export function startHttpServerSpan(
  request: { method?: string | undefined; headers: Record<string, string | string[] | undefined> },
  requestId: string,
): { span: Span; context: Context } {
  const parent = propagation.extract(ROOT_CONTEXT, request.headers);
  const method = request.method ?? 'GET';
  const span = tracer().startSpan(method, {
    kind: SpanKind.SERVER,
    attributes: { 'http.request.method': method, 'gateway.request_id': requestId },
  }, parent);
  return { span, context: trace.setSpan(parent, span) };
}

/**
 * A client span for one upstream HTTP request (the provider call), the child of the active span, and
 * the headers to send with it (its traceparent added); undefined when tracing is off.
 */
export function startUpstreamSpan<Headers extends Record<string, string>>(
  method: string,
  path: string,
  headers: Headers,
): { span: Span; headers: Headers & { traceparent?: string } } | undefined {
  if (!enabled) return undefined;
  const span = tracer().startSpan(`${method} upstream`, {
    kind: SpanKind.CLIENT,
    attributes: { 'http.request.method': method, 'url.path': path.split('?')[0] ?? path },
  });
  const carrier: { traceparent?: string } = {};
  propagation.inject(trace.setSpan(context.active(), span), carrier);
  return { span, headers: { ...headers, ...carrier } };
}

/** Ends an upstream span with the answer's status (>= 500 or a transport failure is an error). */
export function endUpstreamSpan(span: Span, statusCode: number | undefined, error?: unknown): void {
  if (statusCode !== undefined) span.setAttribute('http.response.status_code', statusCode);
  if (error !== undefined || (statusCode !== undefined && statusCode >= 500)) endSpanWithError(span, error ?? new Error(`HTTP ${statusCode}`));
  else span.end();
}

/** A span of one gRPC call (client or server side), named by its method path. */
export function startRpcSpan(path: string, kind: SpanKind, parent: Context = context.active()): Span {
  const slash = path.lastIndexOf('/');
  return tracer().startSpan(path.slice(1), {
    kind,
    attributes: { 'rpc.system': 'grpc', 'rpc.service': path.slice(1, slash), 'rpc.method': path.slice(slash + 1) },
  }, parent);
}

/** Ends an RPC span with the call's status code (0 when it succeeded). */
export function endRpcSpan(span: Span, error?: unknown): void {
  if (error === undefined || error === null) {
    span.setAttribute('rpc.grpc.status_code', 0);
    span.end();
    return;
  }
  const code = (error as { code?: unknown; status?: unknown }).code ?? (error as { status?: unknown }).status;
  endSpanWithError(span, error, { 'rpc.grpc.status_code': typeof code === 'number' ? code : 2 });
}

/** Ends a span with an error status and the error's message. */
export function endSpanWithError(span: Span, error: unknown, attributes?: Attributes): void {
  if (attributes) span.setAttributes(attributes);
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
  span.end();
}

export { context as otelContext, SpanKind, SpanStatusCode, trace as otelTrace, type Span, type Attributes as OtelAttributes, type OtelCounter, type OtelHistogram, type Context as OtelContext };
