import { Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { boundCounter, boundHistogram } from './index.js';

/*
 * The bound histogram and counter must read on /metrics exactly as prom-client's own Histogram and
 * Counter would for the same observations: each test makes the same metrics both ways in two registries,
 * feeds them the same values, and compares the whole exposition text (and the JSON the registry gives).
 */

const LABELS = ['operation', 'provider', 'model', 'port', 'error'] as const;
const BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12];

/** Label sets in the order they are first used; the second and fourth share a series (same labels, keys in another order). */
const SETS: Record<string, string | number>[] = [
  { operation: 'chat', provider: 'openai', model: 'gpt-x', port: 443 },
  { operation: 'chat', provider: 'anthropic', model: 'claude "q"\\n', port: 8443, error: 'timeout' },
  { operation: 'embeddings', provider: 'openai', model: 'emb' },
  { error: 'timeout', port: 8443, model: 'claude "q"\\n', provider: 'anthropic', operation: 'chat' },
];

/** Values inside, on and between the bounds, above the last, zero and negative, with a fraction that does not add exactly. */
const VALUES = [0.003, 0.01, 0.0100001, 0.3, 0.1 + 0.2, 5.12, 7, 1e6, 0, -1, 0.64, 2];

function pair() {
  const prom = new Registry();
  const bound = new Registry();
  const promHistogram = new Histogram({ name: 'gateway_test_seconds', help: 'A time (seconds).', labelNames: LABELS, buckets: BUCKETS, registers: [prom] });
  const boundHist = boundHistogram(bound, { name: 'gateway_test_seconds', help: 'A time (seconds).', labelNames: LABELS, buckets: BUCKETS });
  const promCounter = new Counter({ name: 'gateway_test_tokens_total', help: 'Tokens.', labelNames: LABELS, registers: [prom] });
  const boundCount = boundCounter(bound, { name: 'gateway_test_tokens_total', help: 'Tokens.', labelNames: LABELS });
  return { prom, bound, promHistogram, boundHist, promCounter, boundCount };
}

describe('bound histogram and counter', () => {
  it('expose the same text and JSON as prom-client’s Histogram and Counter for the same observations', async () => {
    const { prom, bound, promHistogram, boundHist, promCounter, boundCount } = pair();
    // Nothing observed yet: both show HELP and TYPE and no series (a series bound but not updated does not show).
    const unused = boundHist.bind(SETS[0]!);
    expect(await bound.metrics()).toBe(await prom.metrics());
    const histogramSeries = SETS.map((labels) => (labels === SETS[0] ? unused : boundHist.bind(labels)));
    const counterSeries = SETS.map((labels) => boundCount.bind(labels));
    expect(histogramSeries[3]).toBe(histogramSeries[1]);
    // Interleaved across series, so the order in which series first show is tested too (set 2 before set 0).
    for (const [index, value] of VALUES.entries()) {
      const set = [2, 0, 1, 3][index % 4]!;
      promHistogram.observe(SETS[set]!, value);
      histogramSeries[set]!.observe(value);
      if (value >= 0) {
        promCounter.inc(SETS[set]!, value);
        counterSeries[set]!.inc(value);
      }
    }
    const text = await bound.metrics();
    expect(text).toContain('gateway_test_seconds_bucket{le="0.32",operation="chat",provider="openai",model="gpt-x",port="443"} 2');
    expect(text).toBe(await prom.metrics());
    expect(await bound.getMetricsAsJSON()).toEqual(await prom.getMetricsAsJSON());
  });

  it('take every series off on a reset until it is updated again, as prom-client does', async () => {
    const { prom, bound, promHistogram, boundHist, promCounter, boundCount } = pair();
    const [first, second] = [boundHist.bind(SETS[0]!), boundHist.bind(SETS[1]!)];
    const counted = boundCount.bind(SETS[0]!);
    for (const value of [0.05, 3]) {
      promHistogram.observe(SETS[0]!, value);
      first.observe(value);
      promHistogram.observe(SETS[1]!, value);
      second.observe(value);
      promCounter.inc(SETS[0]!, value);
      counted.inc(value);
    }
    prom.resetMetrics();
    bound.resetMetrics();
    expect(await bound.metrics()).toBe(await prom.metrics());
    promHistogram.observe(SETS[1]!, 0.2);
    second.observe(0.2);
    promCounter.inc(SETS[0]!, 4);
    counted.inc(4);
    expect(await bound.metrics()).toBe(await prom.metrics());
  });

  it('checks a label set once, when it is bound, and refuses what prom-client refuses', () => {
    const { boundHist, boundCount } = pair();
    expect(() => boundHist.bind({ operation: 'chat', tenant: 'a' })).toThrow(/"tenant" is not included/);
    expect(() => boundCount.bind({ ...SETS[0]!, le: '1' })).toThrow(/"le" is not included/);
    expect(() => boundHist.bind(SETS[0]!).observe(Number.NaN)).toThrow(TypeError);
    expect(() => boundCount.bind(SETS[0]!).inc(-1)).toThrow(/decrease/);
  });

  it('gives a second service of the process the metric already registered, and refuses a name taken by another kind', () => {
    const { bound, boundHist } = pair();
    expect(boundHistogram(bound, { name: 'gateway_test_seconds', help: 'A time (seconds).', labelNames: LABELS, buckets: BUCKETS })).toBe(boundHist);
    expect(() => boundCounter(bound, { name: 'gateway_test_seconds', help: 'A time (seconds).', labelNames: LABELS })).toThrow(/another kind/);
    new Counter({ name: 'gateway_test_plain_total', help: 'Plain.', labelNames: ['a'], registers: [bound] });
    expect(() => boundCounter(bound, { name: 'gateway_test_plain_total', help: 'Plain.', labelNames: ['a'] })).toThrow(/another kind/);
  });
});
