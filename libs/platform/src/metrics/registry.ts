import {
  collectDefaultMetrics,
  Counter,
  Gauge,
  Histogram,
  Registry,
  type CounterConfiguration,
  type GaugeConfiguration,
  type HistogramConfiguration,
} from 'prom-client';

export { Counter, Gauge, Histogram, Registry } from 'prom-client';

/**
 * Metrics follow Prometheus conventions (https://prometheus.io/docs/practices/naming/): `gateway_`
 * prefix, base units (`_seconds`, `_bytes`), `_total` on counters, and labels whose values come from a
 * bounded set — route templates, provider and model ids of the catalog, outcome names — never a
 * request, key or account id.
 */

/**
 * How often the event-loop lag histogram takes a sample (prom-client's default is every 10 ms). Each
 * sample is a timer firing, so the default woke every idle service 100 times a second: ~4 ms of CPU a
 * second per process (2026-11-30: an idle node process with the default metrics 7.6 ms/s, with 100 ms
 * 3.4, without them 2.5), a quarter of a core's percent in each of the six. A loop blocked longer than
 * this still shows in the lag figures; shorter blocks are sampled less often.
 */
export const EVENT_LOOP_SAMPLE_MS = 100;

/**
 * One registry per process, with Node's own metrics (event-loop lag, GC, heap, CPU, handles). Every
 * service of the process registers on it: in `npm start` all of them share one.
 */
export function createMetricsRegistry(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  return registry;
}

type Named = { name: string };

/**
 * The metric of that name already on the registry, or a new one. Two services in one process (npm
 * start, tests) define the same shared metric (e.g. the Postgres pool gauges): they must get one
 * metric, not a "metric already registered" error.
 */
function existing<Metric>(registry: Registry, config: Named): Metric | undefined {
  return registry.getSingleMetric(config.name) as Metric | undefined;
}

export function counter<Label extends string>(registry: Registry, config: Omit<CounterConfiguration<Label>, 'registers'>): Counter<Label> {
  return existing<Counter<Label>>(registry, config) ?? new Counter({ ...config, registers: [registry] });
}

export function gauge<Label extends string>(registry: Registry, config: Omit<GaugeConfiguration<Label>, 'registers' | 'collect'>): Gauge<Label> {
  return existing<Gauge<Label>>(registry, config) ?? new Gauge({ ...config, registers: [registry] });
}

export function histogram<Label extends string>(registry: Registry, config: Omit<HistogramConfiguration<Label>, 'registers'>): Histogram<Label> {
  return existing<Histogram<Label>>(registry, config) ?? new Histogram({ ...config, registers: [registry] });
}

/** Fills a gauge at scrape time; may be async (a query), in which case it should bound its own time. */
export type GaugeSampler<Label extends string> = (gauge: Gauge<Label>) => void | Promise<void>;

const samplersOf = new WeakMap<Gauge<string>, Set<GaugeSampler<string>>>();

/**
 * A gauge read at scrape time from several sources (one per service or pool in the process: each
 * labels its own series). Returns the function that removes this source, called when it stops, so a
 * stopped service neither shows stale values nor is kept alive by the registry.
 */
export function sampledGauge<Label extends string>(
  registry: Registry,
  config: Omit<GaugeConfiguration<Label>, 'registers' | 'collect'>,
  sampler: GaugeSampler<Label>,
): () => void {
  let metric = existing<Gauge<Label>>(registry, config);
  if (metric === undefined) {
    const samplers = new Set<GaugeSampler<string>>();
    metric = new Gauge<Label>({
      ...config,
      registers: [registry],
      // Every scrape starts from nothing, so a series whose source is gone disappears.
      async collect() {
        this.reset();
        await Promise.all([...samplers].map(async (sample) => {
          try {
            await sample(this as Gauge<string>);
          } catch {
            // A source that cannot be read this time shows no series rather than failing the whole scrape.
          }
        }));
      },
    });
    samplersOf.set(metric as Gauge<string>, samplers);
  }
  const samplers = samplersOf.get(metric as Gauge<string>);
  if (samplers === undefined) throw new Error(`metric ${config.name} exists but is not a sampled gauge`);
  samplers.add(sampler as GaugeSampler<string>);
  return () => { samplers.delete(sampler as GaugeSampler<string>); };
}

/**
 * One metric, declared in a line: kind, name, help and label names (a histogram also its buckets). A
 * service lists its metrics as a table of these and makes them with declareMetrics, its scrape-time
 * gauges with sampledGauges; both go through counter / gauge / histogram / sampledGauge above.
 */
export interface MetricDeclaration<Kind extends 'counter' | 'gauge' | 'histogram' = 'counter' | 'gauge' | 'histogram', Label extends string = string> {
  readonly kind: Kind;
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly Label[];
  readonly buckets?: readonly number[];
}

export function counterOf<Label extends string = string>(name: string, help: string, labelNames: readonly Label[] = []): MetricDeclaration<'counter', Label> {
  return { kind: 'counter', name, help, labelNames };
}

export function gaugeOf<Label extends string = string>(name: string, help: string, labelNames: readonly Label[] = []): MetricDeclaration<'gauge', Label> {
  return { kind: 'gauge', name, help, labelNames };
}

export function histogramOf<Label extends string = string>(
  name: string, help: string, buckets: readonly number[], labelNames: readonly Label[] = [],
): MetricDeclaration<'histogram', Label> {
  return { kind: 'histogram', name, help, labelNames, buckets };
}

/** The prom-client metric a declaration makes. */
export type DeclaredMetric<Declaration> =
  Declaration extends MetricDeclaration<'counter', infer Label> ? Counter<Label>
    : Declaration extends MetricDeclaration<'gauge', infer Label> ? Gauge<Label>
      : Declaration extends MetricDeclaration<'histogram', infer Label> ? Histogram<Label>
        : never;

/** The metrics of a table of declarations, under its keys. */
export type DeclaredMetrics<Table> = { readonly [Key in keyof Table]: DeclaredMetric<Table[Key]> };

function configOf<Label extends string>(declaration: MetricDeclaration<'counter' | 'gauge' | 'histogram', Label>) {
  return { name: declaration.name, help: declaration.help, labelNames: declaration.labelNames };
}

/** Every metric of a table of declarations, under the table's keys (an existing metric of that name is reused, as above). */
export function declareMetrics<Table extends Record<string, MetricDeclaration<'counter' | 'gauge' | 'histogram', string>>>(
  registry: Registry,
  table: Table,
): DeclaredMetrics<Table> {
  const metrics: Record<string, Counter<string> | Gauge<string> | Histogram<string>> = {};
  for (const [key, declaration] of Object.entries(table)) {
    const config = configOf(declaration);
    metrics[key] = declaration.kind === 'counter' ? counter(registry, config)
      : declaration.kind === 'gauge' ? gauge(registry, config)
        : histogram(registry, declaration.buckets === undefined ? config : { ...config, buckets: [...declaration.buckets] });
  }
  return metrics as DeclaredMetrics<Table>;
}

/** One scrape-time gauge: its declaration and what fills it. */
export type SampledGaugeSource = readonly [declaration: MetricDeclaration<'gauge', string>, sampler: GaugeSampler<string>];

/** Several sampled gauges (sampledGauge above) at once; returns the one function that removes them all. */
export function sampledGauges(registry: Registry, sources: readonly SampledGaugeSource[]): () => void {
  const removers = sources.map(([declaration, sampler]) => sampledGauge(registry, configOf(declaration), sampler));
  return () => { for (const remove of removers) remove(); };
}

/** Histogram buckets (seconds) for HTTP and RPC latencies: 1 ms to 2 minutes (streams run long). */
export const LATENCY_BUCKETS_SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
