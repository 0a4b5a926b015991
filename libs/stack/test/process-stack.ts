import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { credentials, makeGenericClientConstructor } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { eventually, natsUrl, type TestBus, type TestDatabase } from '@gateway/testing';
import { freePort } from '../src/index.js';
import { testAdmission } from './admission-mode.js';

const HealthClient = makeGenericClientConstructor(healthService, 'grpc.health.v1.Health');

export const repositoryRoot = fileURLToPath(new URL('../../../', import.meta.url));

export type ServiceApp = 'auth' | 'catalog' | 'ledger' | 'routing' | 'media';

/** A service's standard gRPC health answer ('SERVING' when up). */
export function healthStatus(address: string): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const client = new HealthClient(address, credentials.createInsecure());
    const check = (client as unknown as { check: (request: object, options: object, callback: (error: Error | null, response?: { status: unknown }) => void) => void }).check;
    check.call(client, { service: '' }, { deadline: Date.now() + 1_000 }, (error, response) => {
      client.close();
      if (error) reject(error);
      // The health proto's enum arrives as its name or its number (1 = SERVING) depending on the loader.
      else resolve(response?.status === 1 ? 'SERVING' : String(response?.status));
    });
  });
}

export interface ProcessStack {
  addresses: Record<ServiceApp, string>;
  edgeUrl: string;
  /** Each process's own metrics endpoint (METRICS_PORT). */
  metricsUrls: Record<ServiceApp | 'edge', string>;
  /** Every process started, in order (a restarted service appears twice). */
  processes: ChildProcess[];
  /** The latest process of each app. */
  running: Map<ServiceApp | 'edge', ChildProcess>;
  logs: string[];
  /** Starts `node apps/<app>/dist/main.js` with the stack's env plus `env`. */
  launch(app: ServiceApp | 'edge', env?: Record<string, string>): ChildProcess;
  /** Waits until the service at its address answers SERVING. */
  untilServing(app: ServiceApp): Promise<void>;
  /** SIGTERM to every process still running (SIGKILL after 8 s). */
  stop(): Promise<void>;
}

/**
 * Each server app as its own OS process (`node apps/<name>/dist/main.js`, configured by env only), wired
 * like a real deployment on the test's database and NATS namespace. `env` adds variables per app
 * (the catalog's GATEWAY_CONFIG, routing's USAGE_OUTBOX_DIR, provider secrets).
 */
export async function startProcessStack(
  database: TestDatabase,
  testBus: TestBus,
  env: Partial<Record<ServiceApp | 'edge', Record<string, string>>> = {},
): Promise<ProcessStack> {
  const addresses = {} as Record<ServiceApp, string>;
  for (const app of ['auth', 'catalog', 'ledger', 'routing', 'media'] as const) addresses[app] = `127.0.0.1:${await freePort()}`;
  const edgePort = await freePort();
  const metricsPorts = {} as Record<ServiceApp | 'edge', number>;
  for (const app of ['auth', 'catalog', 'ledger', 'routing', 'media', 'edge'] as const) metricsPorts[app] = await freePort();
  const processes: ChildProcess[] = [];
  const running = new Map<ServiceApp | 'edge', ChildProcess>();
  const logs: string[] = [];
  const baseEnv: Record<ServiceApp | 'edge', Record<string, string>> = {
    auth: { GRPC_LISTEN: addresses.auth, KEY_HASH_SECRET: 'multi-process-secret-multi-process-0001' },
    catalog: { GRPC_LISTEN: addresses.catalog, GATEWAY_CONFIG: `${repositoryRoot}deploy/config/gateway.example.yaml` },
    ledger: { GRPC_LISTEN: addresses.ledger },
    media: { GRPC_LISTEN: addresses.media },
    routing: { GRPC_LISTEN: addresses.routing, CATALOG_ADDR: addresses.catalog },
    edge: {
      PORT: String(edgePort), AUTH_ADDR: addresses.auth, CATALOG_ADDR: addresses.catalog, LEDGER_ADDR: addresses.ledger,
      ROUTER_ADDR: addresses.routing, MEDIA_ADDR: addresses.media, EDGE_ADMISSION: testAdmission,
    },
  };
  const launch = (app: ServiceApp | 'edge', extra: Record<string, string> = {}) => {
    const child = spawn(process.execPath, [`apps/${app}/dist/main.js`], {
      cwd: repositoryRoot,
      env: {
        PATH: process.env.PATH ?? '', LOG_LEVEL: 'warn', DATABASE_URL: database.url, NATS_URL: natsUrl, NATS_NAMESPACE: testBus.namespace,
        METRICS_PORT: String(metricsPorts[app]), METRICS_HOST: '127.0.0.1',
        ...baseEnv[app], ...env[app], ...extra,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (chunk: Buffer) => logs.push(`[${app}] ${chunk}`));
    child.stderr!.on('data', (chunk: Buffer) => logs.push(`[${app}] ${chunk}`));
    processes.push(child);
    running.set(app, child);
    return child;
  };
  const untilServing = async (app: ServiceApp) => {
    await eventually(async () => expect(await healthStatus(addresses[app])).toBe('SERVING'), 30_000, 200).catch((error) => {
      throw new Error(`${app} never became healthy: ${error}\n${logs.join('')}`);
    });
  };
  const stop = () => Promise.all(processes.map((child) => new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
    setTimeout(() => { child.kill('SIGKILL'); }, 8_000).unref();
  }))).then(() => undefined);

  const edgeUrl = `http://127.0.0.1:${edgePort}`;
  try {
    for (const app of ['auth', 'catalog', 'ledger', 'media'] as const) launch(app);
    for (const app of ['auth', 'catalog', 'ledger', 'media'] as const) await untilServing(app);
    launch('routing');
    await untilServing('routing');
    launch('edge');
    await eventually(async () => expect((await fetch(`${edgeUrl}/v1/models`)).status).toBe(200), 30_000, 200).catch((error) => {
      throw new Error(`edge never answered: ${error}\n${logs.join('')}`);
    });
  } catch (error) {
    await stop();
    throw error;
  }
  const metricsUrls = Object.fromEntries(Object.entries(metricsPorts).map(([app, port]) => [app, `http://127.0.0.1:${port}/metrics`])) as ProcessStack['metricsUrls'];
  return { addresses, edgeUrl, metricsUrls, processes, running, logs, launch, untilServing, stop };
}
