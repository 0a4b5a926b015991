import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../logger.js';
import { counter, counterOf, createMetricsRegistry, EVENT_LOOP_SAMPLE_MS, declareMetrics, gaugeOf, histogramOf, observePool, sampledGauge, sampledGauges, startMetricsServer, startProcessMetrics } from './index.js';

const logger = createLogger('metrics-test', 'silent');
const postgresUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** The value of the sample line `name{labels}` in a text exposition, or undefined. */
function sample(text: string, line: string): number | undefined {
  const found = text.split('\n').find((candidate) => candidate.startsWith(`${line} `));
  return found === undefined ? undefined : Number(found.slice(line.length + 1));
}

describe('metrics registry', () => {
  it('gives two services of one process the same shared metric instead of a registration error', () => {
    const registry = createMetricsRegistry();
    const first = counter(registry, { name: 'gateway_test_things_total', help: 'Things.', labelNames: ['kind'] as const });
    const second = counter(registry, { name: 'gateway_test_things_total', help: 'Things.', labelNames: ['kind'] as const });
    expect(second).toBe(first);
  });

  it('reads a sampled gauge from every source at scrape time and forgets a removed source', async () => {
    const registry = createMetricsRegistry();
    let depth = 3;
    const removeA = sampledGauge(registry, { name: 'gateway_test_depth', help: 'Depth.', labelNames: ['source'] as const }, (gauge) => gauge.set({ source: 'a' }, depth));
    sampledGauge(registry, { name: 'gateway_test_depth', help: 'Depth.', labelNames: ['source'] as const }, (gauge) => gauge.set({ source: 'b' }, 7));
    let text = await registry.metrics();
    expect(sample(text, 'gateway_test_depth{source="a"}')).toBe(3);
    expect(sample(text, 'gateway_test_depth{source="b"}')).toBe(7);
    depth = 5;
    expect(sample(await registry.metrics(), 'gateway_test_depth{source="a"}')).toBe(5);
    removeA();
    text = await registry.metrics();
    expect(sample(text, 'gateway_test_depth{source="a"}')).toBeUndefined();
    expect(sample(text, 'gateway_test_depth{source="b"}')).toBe(7);
  });

  it('makes a table of declared metrics, each with its help, labels and buckets, reusing one already registered', async () => {
    const registry = createMetricsRegistry();
    const shared = counter(registry, { name: 'gateway_test_shared_total', help: 'Shared.', labelNames: ['kind'] as const });
    const metrics = declareMetrics(registry, {
      things: counterOf('gateway_test_things_total', 'Things done.', ['kind']),
      shared: counterOf('gateway_test_shared_total', 'Shared.', ['kind']),
      level: gaugeOf('gateway_test_level', 'A level.'),
      seconds: histogramOf('gateway_test_seconds', 'A time.', [0.5, 2], ['step']),
    });
    expect(metrics.shared).toBe(shared);
    metrics.things.inc({ kind: 'a' }, 2);
    metrics.level.set(4);
    metrics.seconds.observe({ step: 'x' }, 1);
    const text = await registry.metrics();
    expect(text).toContain('# HELP gateway_test_things_total Things done.');
    expect(text).toContain('# TYPE gateway_test_seconds histogram');
    expect(sample(text, 'gateway_test_things_total{kind="a"}')).toBe(2);
    expect(sample(text, 'gateway_test_level')).toBe(4);
    expect(sample(text, 'gateway_test_seconds_bucket{le="0.5",step="x"}')).toBe(0);
    expect(sample(text, 'gateway_test_seconds_bucket{le="2",step="x"}')).toBe(1);
  });

  it('reads several sampled gauges at scrape time and removes them all with the one function returned', async () => {
    const registry = createMetricsRegistry();
    const stop = sampledGauges(registry, [
      [gaugeOf('gateway_test_open', 'Open.'), (gauge) => gauge.set(2)],
      [gaugeOf('gateway_test_by_pool', 'By pool.', ['pool']), (gauge) => gauge.set({ pool: 'p' }, 9)],
    ]);
    let text = await registry.metrics();
    expect(sample(text, 'gateway_test_open')).toBe(2);
    expect(sample(text, 'gateway_test_by_pool{pool="p"}')).toBe(9);
    stop();
    text = await registry.metrics();
    // An unlabelled gauge with no source left shows prom-client's default 0; a labelled one no series.
    expect(sample(text, 'gateway_test_open')).toBe(0);
    expect(sample(text, 'gateway_test_by_pool{pool="p"}')).toBeUndefined();
  });

  it('still sees a blocked event loop in the lag figures at its coarser sampling (EVENT_LOOP_SAMPLE_MS)', async () => {
    const registry = createMetricsRegistry();
    // Let the lag monitor take its first samples, then hold the loop well past one sampling period.
    await new Promise((resolve) => setTimeout(resolve, 2 * EVENT_LOOP_SAMPLE_MS + 20));
    const until = Date.now() + 3 * EVENT_LOOP_SAMPLE_MS;
    while (Date.now() < until) { /* a handler that blocks the loop */ }
    await new Promise((resolve) => setTimeout(resolve, 2 * EVENT_LOOP_SAMPLE_MS));
    const text = await registry.metrics();
    const max = sample(text, 'nodejs_eventloop_lag_max_seconds');
    expect(max).toBeGreaterThanOrEqual((2 * EVENT_LOOP_SAMPLE_MS) / 1000);
    registry.clear();
  });

  it('serves GET /metrics in the Prometheus text format with Node’s own metrics, and nothing else', async () => {
    const registry = createMetricsRegistry();
    counter(registry, { name: 'gateway_test_requests_total', help: 'Requests.' }).inc(2);
    const server = await startMetricsServer({ registry, port: 0, host: '127.0.0.1', logger });
    try {
      const response = await fetch(server.url);
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toContain('text/plain; version=0.0.4');
      const text = await response.text();
      expect(sample(text, 'gateway_test_requests_total')).toBe(2);
      // Event-loop lag and the rest of prom-client's default metrics.
      expect(text).toContain('nodejs_eventloop_lag_seconds');
      expect(text).toContain('process_cpu_seconds_total');
      expect((await fetch(server.url.replace('/metrics', '/other'))).status).toBe(404);
    } finally {
      await server.stop();
    }
  });

  it('starts the metrics server only when METRICS_PORT is set', async () => {
    const off = await startProcessMetrics(logger, { METRICS_PORT: '' });
    expect(off.server).toBeUndefined();
    await off.stop();
    const on = await startProcessMetrics(logger, { METRICS_PORT: '0', METRICS_HOST: '127.0.0.1' });
    try {
      expect(on.server?.port).toBeGreaterThan(0);
      expect((await fetch(on.server!.url)).status).toBe(200);
    } finally {
      await on.stop();
    }
  });

  it('reports a real Postgres pool by state, and drops it once the pool ended', async () => {
    const registry = createMetricsRegistry();
    const pool = new pg.Pool({ connectionString: postgresUrl, max: 3 });
    observePool(registry, 'testpool', pool);
    const held = await pool.connect();
    try {
      await held.query('select 1');
      const text = await registry.metrics();
      expect(sample(text, 'gateway_db_pool_connections{pool="testpool",state="in_use"}')).toBe(1);
      expect(sample(text, 'gateway_db_pool_max_connections{pool="testpool"}')).toBe(3);
      expect(sample(text, 'gateway_db_pool_waiting_requests{pool="testpool"}')).toBe(0);
    } finally {
      held.release();
    }
    expect(sample(await registry.metrics(), 'gateway_db_pool_connections{pool="testpool",state="idle"}')).toBe(1);
    await pool.end();
    expect(await registry.metrics()).not.toContain('pool="testpool"');
  });
});
