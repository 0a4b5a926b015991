import type { Registry } from 'prom-client';

/*
 * A histogram and a counter for the hot path whose callers hold their label sets: a label set is bound
 * once (checked against the label names and hashed then) and the series it returns is updated with a
 * number, nothing else. prom-client's own Histogram.observe / Counter.inc check every label of the object
 * and build its hash string on every call, a few microseconds each, which a handful of updates per
 * request turns into a measurable share of a service's CPU (issue 39).
 *
 * Both register in a prom-client Registry as a metric of their own and give it, from get() and
 * getForPromString(), the objects prom-client's Histogram and Counter give (names, HELP/TYPE, series in
 * the order first observed, a histogram's cumulative buckets, +Inf, _sum, _count), so the exposition is
 * prom-client's and reads exactly as theirs would for the same observations (bound-series.test.ts
 * compares the two).
 */

type LabelValue = string | number;
type Labels = Readonly<Record<string, LabelValue>>;

export interface BoundMetricConfiguration<Label extends string> {
  name: string;
  help: string;
  labelNames: readonly Label[];
}

export interface BoundHistogramConfiguration<Label extends string> extends BoundMetricConfiguration<Label> {
  buckets: readonly number[];
}

/** What a Registry reads from a metric: the object prom-client's own metrics give. */
interface ExportedValue {
  labels: Record<string, LabelValue>;
  sharedLabels?: Record<string, LabelValue>;
  value: number;
  metricName?: string;
  exemplar?: null;
}

interface ExportedMetric {
  name: string;
  help: string;
  type: 'histogram' | 'counter';
  values: ExportedValue[];
  aggregator: 'sum';
}

/**
 * The series of one metric: every label set bound (by its hash, so two binds of equal sets share one)
 * and, in the order first updated, those that show. A bound series shows from its first update on, as
 * prom-client makes a series at its first observation; reset() takes every series off until updated again.
 */
abstract class BoundMetric<Label extends string, Series extends BoundSeries> {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly Label[];
  readonly aggregator = 'sum' as const;
  abstract readonly type: 'histogram' | 'counter';
  private readonly sortedLabelNames: readonly Label[];
  private readonly bound = new Map<string, Series>();
  /** @internal The series that show, in the order first updated (since the last reset). */
  readonly shown = new Map<string, Series>();

  constructor(config: BoundMetricConfiguration<Label>) {
    if (!/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(config.name)) throw new Error(`Invalid metric name ${config.name}`);
    if (config.help === '') throw new Error('Missing mandatory help parameter');
    // An unlabelled metric has one series and nothing to bind: prom-client's own is as cheap for it.
    if (config.labelNames.length === 0) throw new Error(`metric ${config.name}: a bound metric has labels`);
    this.name = config.name;
    this.help = config.help;
    this.labelNames = [...config.labelNames];
    this.sortedLabelNames = [...config.labelNames].sort();
  }

  /** The series of a label set (every label one of the metric's), made once per distinct set. */
  bind(labels: Labels): Series {
    for (const label of Object.keys(labels)) {
      if (!this.labelNames.includes(label as Label)) {
        throw new Error(`Added label "${label}" is not included in initial labelset: [${this.labelNames.join(', ')}]`);
      }
    }
    // The same key prom-client's hashObject makes: the metric's label names sorted, unset ones left out.
    let hash = '';
    for (const name of this.sortedLabelNames) {
      const value = labels[name];
      if (value !== undefined) hash += `${name}:${value},`;
    }
    let series = this.bound.get(hash);
    if (series === undefined) {
      series = this.makeSeries(hash, { ...labels });
      this.bound.set(hash, series);
    }
    return series;
  }

  /** Every series back to nothing and off the exposition until updated again (Registry.resetMetrics). */
  reset(): void {
    for (const series of this.shown.values()) series.clear();
    this.shown.clear();
  }

  async get(): Promise<ExportedMetric> {
    const exported = this.exported();
    // As prom-client's Histogram.get: each value's labels are its own (le) then the series'.
    exported.values = exported.values.map(({ sharedLabels, labels, ...value }) =>
      sharedLabels === undefined ? { ...value, labels } : { ...value, labels: { ...labels, ...sharedLabels } });
    return exported;
  }

  async getForPromString(): Promise<ExportedMetric> {
    return this.exported();
  }

  protected abstract makeSeries(hash: string, labels: Labels): Series;

  private exported(): ExportedMetric {
    const values: ExportedValue[] = [];
    for (const series of this.shown.values()) series.export(values);
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }
}

abstract class BoundSeries {
  private showing = false;

  constructor(private readonly metric: { shown: Map<string, BoundSeries> }, private readonly hash: string, protected readonly labels: Labels) {}

  /** Shows the series from its first update (and its first after a reset). */
  protected show(): void {
    if (!this.showing) {
      this.showing = true;
      this.metric.shown.set(this.hash, this);
    }
  }

  /** @internal */
  clear(): void {
    this.showing = false;
    this.zero();
  }

  protected abstract zero(): void;
  /** @internal Appends the series' exported values. */
  abstract export(values: ExportedValue[]): void;
}

/** One label set's series of a BoundHistogram. */
export class BoundHistogramSeries extends BoundSeries {
  /** Observations per bucket (not cumulative), the last one above every bound. */
  private readonly counts: number[];
  private sum = 0;
  private count = 0;

  constructor(metric: BoundHistogram<string>, hash: string, labels: Labels, private readonly upperBounds: readonly number[], private readonly name: string) {
    super(metric, hash, labels);
    this.counts = new Array<number>(upperBounds.length + 1).fill(0);
  }

  observe(value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    this.show();
    const bounds = this.upperBounds;
    let index = 0;
    while (index < bounds.length && value > bounds[index]!) index += 1;
    this.counts[index]! += 1;
    this.sum += value;
    this.count += 1;
  }

  protected zero(): void {
    this.counts.fill(0);
    this.sum = 0;
    this.count = 0;
  }

  export(values: ExportedValue[]): void {
    const bucket = `${this.name}_bucket`;
    const labels = this.labels as Record<string, LabelValue>;
    let cumulative = 0;
    for (let index = 0; index < this.upperBounds.length; index += 1) {
      cumulative += this.counts[index]!;
      values.push({ labels: { le: this.upperBounds[index]! }, sharedLabels: labels, value: cumulative, metricName: bucket, exemplar: null });
    }
    values.push(
      { labels: { le: '+Inf' }, sharedLabels: labels, value: this.count, metricName: bucket, exemplar: null },
      { labels: {}, sharedLabels: labels, value: this.sum, metricName: `${this.name}_sum`, exemplar: undefined },
      { labels: {}, sharedLabels: labels, value: this.count, metricName: `${this.name}_count`, exemplar: undefined },
    );
  }
}

/** One label set's series of a BoundCounter. */
export class BoundCounterSeries extends BoundSeries {
  private value = 0;

  inc(value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    if (value < 0) throw new Error('It is not possible to decrease a counter');
    this.show();
    this.value += value;
  }

  protected zero(): void {
    this.value = 0;
  }

  export(values: ExportedValue[]): void {
    values.push({ value: this.value, labels: this.labels as Record<string, LabelValue> });
  }
}

/** A histogram updated through series bound once per label set (its buckets as prom-client's: sorted upper bounds). */
export class BoundHistogram<Label extends string> extends BoundMetric<Label, BoundHistogramSeries> {
  readonly type = 'histogram' as const;
  readonly upperBounds: readonly number[];

  constructor(config: BoundHistogramConfiguration<Label>) {
    super(config);
    if (config.labelNames.includes('le' as Label)) throw new Error('le is a reserved label keyword');
    this.upperBounds = [...config.buckets];
  }

  protected makeSeries(hash: string, labels: Labels): BoundHistogramSeries {
    return new BoundHistogramSeries(this, hash, labels, this.upperBounds, this.name);
  }
}

/** A counter updated through series bound once per label set. */
export class BoundCounter<Label extends string> extends BoundMetric<Label, BoundCounterSeries> {
  readonly type = 'counter' as const;

  protected makeSeries(hash: string, labels: Labels): BoundCounterSeries {
    return new BoundCounterSeries(this, hash, labels);
  }
}

/**
 * The metric of that name on the registry (a second service of the process gets the first's), else a
 * new one registered. A metric of that name of another type is an error, not a silent second metric.
 */
function registered<Metric>(registry: Registry, name: string, type: abstract new (...args: never[]) => Metric, make: () => Metric): Metric {
  const existing: unknown = registry.getSingleMetric(name);
  if (existing === undefined) {
    const metric = make();
    // The registry reads a metric through get() / getForPromString(), name, help, type and reset(): this one gives them as prom-client's do.
    registry.registerMetric(metric as unknown as Parameters<Registry['registerMetric']>[0]);
    return metric;
  }
  if (!(existing instanceof type)) throw new Error(`metric ${name} is already registered as another kind of metric`);
  return existing;
}

export function boundHistogram<Label extends string>(registry: Registry, config: BoundHistogramConfiguration<Label>): BoundHistogram<Label> {
  return registered(registry, config.name, BoundHistogram, () => new BoundHistogram(config)) as BoundHistogram<Label>;
}

export function boundCounter<Label extends string>(registry: Registry, config: BoundMetricConfiguration<Label>): BoundCounter<Label> {
  return registered(registry, config.name, BoundCounter, () => new BoundCounter(config)) as BoundCounter<Label>;
}
