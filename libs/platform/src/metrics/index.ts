export * from './registry.js';
export * from './metrics-server.js';
export * from './pool-metrics.js';
export * from './bound-series.js';
