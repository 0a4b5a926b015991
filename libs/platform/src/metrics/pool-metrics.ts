import type pg from 'pg';
import type { Registry } from 'prom-client';
import { sampledGauge } from './registry.js';

/**
 * A Postgres pool's state at scrape time, labelled `pool` (the service's schema: auth, catalog,
 * ledger). Waiting requests above zero mean the pool bound, not Postgres, is what requests queue on.
 * A pool that was ended (the service stopped) drops out by itself; the function returned stops
 * reporting it earlier.
 */
export function observePool(registry: Registry, poolName: string, pool: pg.Pool): () => void {
  const removers: Array<() => void> = [];
  const remove = () => { for (const removeOne of removers.splice(0)) removeOne(); };
  const unlessEnded = <Gauge>(sample: (gauge: Gauge) => void) => (gauge: Gauge) => {
    if (pool.ending) remove();
    else sample(gauge);
  };
  removers.push(
    sampledGauge(registry, {
      name: 'gateway_db_pool_connections',
      help: 'Postgres connections the pool holds, by state (idle, in_use).',
      labelNames: ['pool', 'state'] as const,
    }, unlessEnded((gauge) => {
      gauge.set({ pool: poolName, state: 'idle' }, pool.idleCount);
      gauge.set({ pool: poolName, state: 'in_use' }, pool.totalCount - pool.idleCount);
    })),
    sampledGauge(registry, {
      name: 'gateway_db_pool_waiting_requests',
      help: 'Queries waiting for a pool connection (all connections in use).',
      labelNames: ['pool'] as const,
    }, unlessEnded((gauge) => gauge.set({ pool: poolName }, pool.waitingCount))),
    sampledGauge(registry, {
      name: 'gateway_db_pool_max_connections',
      help: 'The pool bound: most connections the pool opens.',
      labelNames: ['pool'] as const,
    }, unlessEnded((gauge) => gauge.set({ pool: poolName }, pool.options.max ?? 10))),
  );
  return remove;
}
