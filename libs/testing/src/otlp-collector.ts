import { createServer, type Server } from 'node:http';
import { gunzipSync } from 'node:zlib';
import protobuf from 'protobufjs';

/** A span as an OTLP collector received it, flattened. */
export interface CollectedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** OTLP kind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, unknown>;
  links: { traceId: string; spanId: string; attributes: Record<string, unknown> }[];
  /** 0 unset, 1 ok, 2 error. */
  statusCode: number;
}

/** One data point of a metric as an OTLP collector received it (every export, in order), flattened. */
export interface CollectedMetricPoint {
  service: string;
  name: string;
  unit: string;
  /** histogram, sum (a counter: monotonic), gauge. */
  type: 'histogram' | 'sum' | 'gauge';
  monotonic: boolean;
  attributes: Record<string, unknown>;
  /** Histogram: count, sum, explicit bounds and bucket counts; sum / gauge: value. */
  count: number;
  sum: number;
  bounds: number[];
  bucketCounts: number[];
  value: number;
}

/** A log record as an OTLP collector received it (JSON or protobuf), flattened. */
export interface CollectedLogRecord {
  service: string;
  scope: string;
  eventName: string;
  timeUnixNano: string;
  severityNumber: number;
  severityText: string;
  body: unknown;
  attributes: Record<string, unknown>;
  /** How it arrived: `application/json` or `application/x-protobuf`. */
  contentType: string;
}

export interface OtlpCollector {
  /** Base URL for OTEL_EXPORTER_OTLP_ENDPOINT (the exporters append /v1/traces and /v1/metrics). */
  url: string;
  spans: CollectedSpan[];
  /** Metric points of every export (cumulative temporality: the latest export of a series holds its totals). */
  metrics: CollectedMetricPoint[];
  /** Log records of every export (POST /v1/logs, JSON or protobuf). */
  logs: CollectedLogRecord[];
  close(): Promise<void>;
}

export const SPAN_KIND = { internal: 1, server: 2, client: 3, producer: 4, consumer: 5 } as const;

type OtlpValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number; arrayValue?: { values?: OtlpValue[] } };
type OtlpAttribute = { key: string; value: OtlpValue };

function valueOf(value: OtlpValue | undefined): unknown {
  if (!value) return undefined;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(valueOf);
  return undefined;
}

const attributesOf = (attributes: OtlpAttribute[] | undefined) =>
  Object.fromEntries((attributes ?? []).map((attribute) => [attribute.key, valueOf(attribute.value)]));

/*
 * The part of the OTLP logs protobuf schema (opentelemetry-proto, collector/logs/v1 and logs/v1) a test
 * reads, so the receiver decodes what the default http/protobuf exporters send. Field numbers as in the
 * published .proto files; names in the JSON mapping's camelCase, so both encodings flatten alike.
 */
const otlpLogsSchema = protobuf.Root.fromJSON({
  nested: {
    otlp: {
      nested: {
        ExportLogsServiceRequest: { fields: { resourceLogs: { rule: 'repeated', type: 'ResourceLogs', id: 1 } } },
        ResourceLogs: { fields: { resource: { type: 'Resource', id: 1 }, scopeLogs: { rule: 'repeated', type: 'ScopeLogs', id: 2 } } },
        Resource: { fields: { attributes: { rule: 'repeated', type: 'KeyValue', id: 1 } } },
        ScopeLogs: { fields: { scope: { type: 'InstrumentationScope', id: 1 }, logRecords: { rule: 'repeated', type: 'LogRecord', id: 2 } } },
        InstrumentationScope: { fields: { name: { type: 'string', id: 1 }, version: { type: 'string', id: 2 } } },
        LogRecord: {
          fields: {
            timeUnixNano: { type: 'fixed64', id: 1 },
            severityNumber: { type: 'int32', id: 2 },
            severityText: { type: 'string', id: 3 },
            body: { type: 'AnyValue', id: 5 },
            attributes: { rule: 'repeated', type: 'KeyValue', id: 6 },
            eventName: { type: 'string', id: 12 },
          },
        },
        KeyValue: { fields: { key: { type: 'string', id: 1 }, value: { type: 'AnyValue', id: 2 } } },
        AnyValue: {
          oneofs: { value: { oneof: ['stringValue', 'boolValue', 'intValue', 'doubleValue', 'arrayValue'] } },
          fields: {
            stringValue: { type: 'string', id: 1 },
            boolValue: { type: 'bool', id: 2 },
            intValue: { type: 'int64', id: 3 },
            doubleValue: { type: 'double', id: 4 },
            arrayValue: { type: 'ArrayValue', id: 5 },
          },
        },
        ArrayValue: { fields: { values: { rule: 'repeated', type: 'AnyValue', id: 1 } } },
      },
    },
  },
}).lookupType('otlp.ExportLogsServiceRequest');

function collectLogs(payload: { resourceLogs?: { resource?: { attributes?: OtlpAttribute[] }; scopeLogs?: { scope?: { name?: string }; logRecords?: any[] }[] }[] }, contentType: string, into: CollectedLogRecord[]): void {
  for (const resourceLogs of payload.resourceLogs ?? []) {
    const service = String(attributesOf(resourceLogs.resource?.attributes)['service.name'] ?? '');
    for (const scope of resourceLogs.scopeLogs ?? []) {
      for (const record of scope.logRecords ?? []) {
        into.push({
          service,
          scope: scope.scope?.name ?? '',
          eventName: record.eventName ?? '',
          timeUnixNano: String(record.timeUnixNano ?? '0'),
          severityNumber: Number(record.severityNumber ?? 0),
          severityText: record.severityText ?? '',
          body: valueOf(record.body),
          attributes: attributesOf(record.attributes),
          contentType,
        });
      }
    }
  }
}

const numberOf = (value: unknown): number => (value === undefined || value === null ? 0 : Number(value));

function collectMetrics(payload: { resourceMetrics?: { resource?: { attributes?: OtlpAttribute[] }; scopeMetrics?: { metrics?: any[] }[] }[] }, into: CollectedMetricPoint[]): void {
  for (const resourceMetrics of payload.resourceMetrics ?? []) {
    const service = String(attributesOf(resourceMetrics.resource?.attributes)['service.name'] ?? '');
    for (const scope of resourceMetrics.scopeMetrics ?? []) {
      for (const metric of scope.metrics ?? []) {
        const base = { service, name: String(metric.name), unit: String(metric.unit ?? '') };
        for (const point of metric.histogram?.dataPoints ?? []) {
          into.push({
            ...base, type: 'histogram', monotonic: false, attributes: attributesOf(point.attributes), count: numberOf(point.count), sum: numberOf(point.sum),
            bounds: (point.explicitBounds ?? []).map(Number), bucketCounts: (point.bucketCounts ?? []).map(Number), value: 0,
          });
        }
        for (const [type, data] of [['sum', metric.sum], ['gauge', metric.gauge]] as const) {
          for (const point of data?.dataPoints ?? []) {
            into.push({
              ...base, type, monotonic: Boolean(data.isMonotonic), attributes: attributesOf(point.attributes), count: 0, sum: 0, bounds: [], bucketCounts: [],
              value: point.asDouble !== undefined ? Number(point.asDouble) : numberOf(point.asInt),
            });
          }
        }
      }
    }
  }
}

/**
 * An OTLP/HTTP receiver of traces and metrics for tests (JSON encoding: run the exporters with
 * OTEL_EXPORTER_OTLP_PROTOCOL=http/json), and of logs in either encoding (JSON or protobuf): a real HTTP server every process of a stack exports to, so one
 * test sees the spans and metrics of all of them.
 */
export async function startOtlpCollector(): Promise<OtlpCollector> {
  const spans: CollectedSpan[] = [];
  const metrics: CollectedMetricPoint[] = [];
  const logs: CollectedLogRecord[] = [];
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      try {
        let body = Buffer.concat(chunks);
        if (request.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
        if (request.url === '/v1/logs') {
          const contentType = String(request.headers['content-type'] ?? '').split(';')[0]!.trim();
          const protobufBody = contentType === 'application/x-protobuf';
          const payload = protobufBody
            ? otlpLogsSchema.toObject(otlpLogsSchema.decode(body), { longs: String, defaults: false })
            : JSON.parse(body.toString('utf8'));
          collectLogs(payload, contentType, logs);
          response.writeHead(200, { 'content-type': protobufBody ? 'application/x-protobuf' : 'application/json' }).end(protobufBody ? Buffer.alloc(0) : '{}');
          return;
        }
        if (request.url === '/v1/metrics') {
          collectMetrics(JSON.parse(body.toString('utf8')), metrics);
          response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
          return;
        }
        if (request.url !== '/v1/traces') throw new Error(`unexpected path ${request.url}`);
        const payload = JSON.parse(body.toString('utf8')) as {
          resourceSpans?: { resource?: { attributes?: OtlpAttribute[] }; scopeSpans?: { spans?: any[] }[] }[];
        };
        for (const resourceSpans of payload.resourceSpans ?? []) {
          const service = String(attributesOf(resourceSpans.resource?.attributes)['service.name'] ?? '');
          for (const scope of resourceSpans.scopeSpans ?? []) {
            for (const span of scope.spans ?? []) {
              spans.push({
                service,
                traceId: span.traceId,
                spanId: span.spanId,
                parentSpanId: span.parentSpanId ?? '',
                name: span.name,
                kind: span.kind,
                attributes: attributesOf(span.attributes),
                links: (span.links ?? []).map((link: any) => ({ traceId: link.traceId, spanId: link.spanId, attributes: attributesOf(link.attributes) })),
                statusCode: span.status?.code ?? 0,
              });
            }
          }
        }
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } catch (error) {
        response.writeHead(400, { 'content-type': 'text/plain' }).end(String(error));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    metrics,
    logs,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
