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
 * One registry per process, with Node's own metrics (event-loop lag, GC, heap, CPU, handles). Every
 * service of the process registers on it: in `npm start` all of them share one.
 */
export function createMetricsRegistry(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
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

/** Histogram buckets (seconds) for HTTP and RPC latencies: 1 ms to 2 minutes (streams run long). */
export const LATENCY_BUCKETS_SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
