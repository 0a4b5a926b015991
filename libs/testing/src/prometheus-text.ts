/** One sample of a Prometheus text exposition: `name{label="value",...} value`. */
export interface PrometheusSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const SAMPLE_LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Parses the text format (version 0.0.4) a /metrics endpoint serves; comment lines are skipped. */
export function parsePrometheusText(text: string): PrometheusSample[] {
  const samples: PrometheusSample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = SAMPLE_LINE.exec(line);
    if (!match) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const label of (match[2] ?? '').matchAll(LABEL)) {
      labels[label[1]!] = label[2]!.replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
    }
    const raw = match[3]!;
    samples.push({ name: match[1]!, labels, value: raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw) });
  }
  return samples;
}

/** The sum of the samples named `name` whose labels include every one of `labels`. */
export function sampleSum(samples: readonly PrometheusSample[], name: string, labels: Record<string, string> = {}): number {
  return samples
    .filter((sample) => sample.name === name && Object.entries(labels).every(([key, value]) => sample.labels[key] === value))
    .reduce((sum, sample) => sum + sample.value, 0);
}

/** Every value label `label` takes among the samples named `name`. */
export function labelValues(samples: readonly PrometheusSample[], name: string, label: string): string[] {
  return [...new Set(samples.filter((sample) => sample.name === name && label in sample.labels).map((sample) => sample.labels[label]!))].sort();
}
