import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { z } from 'zod';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { loadConfig } from '../config.js';
import { createMetricsRegistry } from './registry.js';

export interface RunningMetricsServer {
  url: string;
  port: number;
  stop(): Promise<void>;
}

/**
 * `GET /metrics` (Prometheus text format) on its own port: metrics stay off the public edge port and
 * off the gRPC ports, so a NetworkPolicy can open them to the scraper alone.
 */
export async function startMetricsServer(options: { registry: Registry; port: number; host?: string; logger: Logger }): Promise<RunningMetricsServer> {
  const server = createServer((request, response) => {
    const path = (request.url ?? '').split('?', 1)[0];
    if (request.method !== 'GET' || path !== '/metrics') {
      response.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('not found: the metrics are at GET /metrics\n');
      return;
    }
    options.registry.metrics().then(
      (text) => response.writeHead(200, { 'content-type': options.registry.contentType }).end(text),
      (error: unknown) => {
        options.logger.warn({ err: error }, 'metrics collection failed');
        response.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('metrics collection failed\n');
      },
    );
  });
  const host = options.host ?? '0.0.0.0';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}/metrics`;
  options.logger.info({ url }, 'metrics listening');
  return {
    url,
    port,
    stop: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}

/** An empty variable counts as unset (compose files and charts often pass `METRICS_PORT=`). */
const optionalPort = z.preprocess(
  (value) => (value === '' ? undefined : value),
  z.coerce.number().int().min(0).max(65_535).optional(),
);

/** Env every service binary reads: METRICS_PORT (unset: no metrics server) and METRICS_HOST. */
export const metricsEnv = {
  METRICS_PORT: optionalPort,
  METRICS_HOST: z.string().min(1).default('0.0.0.0'),
};

export interface ProcessMetrics {
  registry: Registry;
  /** The scrape address, when METRICS_PORT is set. */
  server?: RunningMetricsServer;
  stop(): Promise<void>;
}

/** The process's registry, and its metrics server when METRICS_PORT asks for one. */
export async function startProcessMetrics(logger: Logger, env: NodeJS.ProcessEnv = process.env): Promise<ProcessMetrics> {
  const config = loadConfig(metricsEnv, env);
  const registry = createMetricsRegistry();
  const server = config.METRICS_PORT === undefined
    ? undefined
    : await startMetricsServer({ registry, port: config.METRICS_PORT, host: config.METRICS_HOST, logger });
  return { registry, ...(server ? { server } : {}), stop: async () => { await server?.stop(); } };
}
