import { counterOf, declareMetrics, gaugeOf, histogramOf, LATENCY_BUCKETS_SECONDS, sampledGauges, type Counter, type DeclaredMetrics, type Histogram, type Registry } from '@gateway/platform';

type HttpLabel = 'route' | 'method' | 'status' | 'dialect';

/** The label values of one kind of answer, and its series, looked up once and reused. */
interface Series {
  requests: ReturnType<Counter<HttpLabel>['labels']>;
  duration: ReturnType<Histogram<HttpLabel>['labels']>;
  firstByte: ReturnType<Histogram<HttpLabel>['labels']>;
}

/** Most distinct (route, method, status, dialect) combinations kept ready; the label sets are bounded anyway. */
const MAX_CACHED_SERIES = 2_000;

const HTTP_LABELS: readonly HttpLabel[] = ['route', 'method', 'status', 'dialect'];

const EDGE_METRICS = {
  requests: counterOf('gateway_http_requests_total', 'HTTP requests answered by the edge, by route template, method, status and dialect.', HTTP_LABELS),
  duration: histogramOf('gateway_http_request_duration_seconds', 'Time from the request reaching the edge to the last byte of its answer (streams: the end of the stream).', LATENCY_BUCKETS_SECONDS, HTTP_LABELS),
  firstByte: histogramOf('gateway_http_time_to_first_byte_seconds', 'Time from the request reaching the edge to its status line and headers (a stream sends them with its first content).', LATENCY_BUCKETS_SECONDS, HTTP_LABELS),
  shed: counterOf('gateway_http_requests_shed_total', 'Requests refused with 503 overloaded before being read, by the bound they met (in_flight, body_bytes).', ['reason']),
  rateLimited: counterOf('gateway_rate_limit_refusals_total', 'Inference requests refused with 429 by a rate limit (either admission mode).'),
};

/**
 * The edge's HTTP metrics. `route` is the route's template (`/v1/models/*id`), never the raw path: an
 * unknown path is `unmatched`; `dialect` the inference endpoint (chat.completions, messages,
 * responses) or `none`; `status` the HTTP status sent (499: the client left before any answer).
 */
export class EdgeMetrics {
  private readonly metrics: DeclaredMetrics<typeof EDGE_METRICS>;
  private readonly series = new Map<string, Series>();

  constructor(registry: Registry, sampleInFlight: () => { requests: number; bodyBytes: number }, sampleStreams: () => number = () => 0) {
    this.metrics = declareMetrics(registry, EDGE_METRICS);
    // Read at scrape time from the limiter: nothing on the request path.
    this.stop = sampledGauges(registry, [
      [gaugeOf('gateway_http_requests_in_flight', 'Requests admitted by the edge and not yet answered.'), (metric) => metric.set(sampleInFlight().requests)],
      [gaugeOf('gateway_http_request_body_bytes_in_flight', 'Declared request-body bytes of the requests in flight (what the queued-bytes bound counts).'),
        (metric) => metric.set(sampleInFlight().bodyBytes)],
      [gaugeOf('gateway_http_streams_active', 'Streamed answers open now (SSE and streamed audio responses whose headers went out, responses WebSocket turns): connections held with little CPU.'),
        (metric) => metric.set(sampleStreams())],
    ]);
  }

  /** Stops reporting the in-flight gauges (the edge stopped). */
  readonly stop: () => void;

  /** One answered request. `firstByteSeconds` is the duration when the answer had no separate first byte. */
  answered(route: string, method: string, status: number, dialect: string, seconds: number, firstByteSeconds: number): void {
    const key = `${route} ${method} ${status} ${dialect}`;
    let series = this.series.get(key);
    if (series === undefined) {
      const labels = { route, method, status: String(status), dialect };
      const { requests, duration, firstByte } = this.metrics;
      series = { requests: requests.labels(labels), duration: duration.labels(labels), firstByte: firstByte.labels(labels) };
      if (this.series.size < MAX_CACHED_SERIES) this.series.set(key, series);
    }
    series.requests.inc();
    series.duration.observe(seconds);
    series.firstByte.observe(firstByteSeconds);
  }

  shedRequest(reason: 'in_flight' | 'body_bytes'): void {
    this.metrics.shed.inc({ reason });
  }

  rateLimitRefusal(): void {
    this.metrics.rateLimited.inc();
  }
}
