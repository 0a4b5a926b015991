import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { credentials, makeGenericClientConstructor } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  createTestBus, createTestDatabase, eventually, natsUrl, startFakeUpstream, TEST_ADMIN_TOKEN, TEST_INTERNAL_TOKEN,
  type FakeUpstream, type TestBus, type TestDatabase,
} from '@gateway/testing';
import { crashCatalog, crashUpstreamScript } from './crash-streams.js';
import { runGatewayctlProcess } from '../src/bench/gatewayctl-process.js';
import { freePort } from '../src/index.js';
import { testAdmission } from './admission-mode.js';
import { gatewayctlEnv } from './stack-harness.js';

const HealthClient = makeGenericClientConstructor(healthService, 'grpc.health.v1.Health');

export const repositoryRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** The webhook secrets' key of every ledger process of a process stack: 32 bytes in base64. */
const PROCESS_STACK_WEBHOOK_SECRET_KEY = Buffer.alloc(32, 7).toString('base64');

export type ServiceApp = 'auth' | 'catalog' | 'ledger' | 'routing' | 'media' | 'jobs';

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

/** SIGKILL to `child` (no chance to clean up), resolved once it has exited. */
export async function killAbruptly(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}

export interface RoutingReplica {
  address: string;
  metricsUrl: string;
}

export interface JobsReplica {
  address: string;
  /** The process as first started (a replica started again is a new process, in `listeningOn`). */
  process: ChildProcess;
}

export interface ProcessStack {
  addresses: Record<ServiceApp, string>;
  edgeUrl: string;
  /** Each process's own metrics endpoint (METRICS_PORT). */
  metricsUrls: Record<ServiceApp | 'edge', string>;
  /** Every routing process (the first is `addresses.routing`), with its metrics endpoint. */
  routingReplicas: RoutingReplica[];
  /** Every ledger process's address (the first is `addresses.ledger`). */
  ledgerReplicas: string[];
  /** Every jobs process (the first is `addresses.jobs`). */
  jobsReplicas: JobsReplica[];
  /** Every process started, in order (a restarted service appears twice). */
  processes: ChildProcess[];
  /** The latest process of each app. */
  running: Map<ServiceApp | 'edge', ChildProcess>;
  /** The latest process listening on each gRPC address (GRPC_LISTEN): one replica of several. */
  listeningOn: Map<string, ChildProcess>;
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
  options: {
    /**
     * Routing processes besides the first, each with its own listen address, metrics port and
     * USAGE_OUTBOX_DIR under `outboxRoot`; the edge then balances over all of them (ROUTER_ADDR=ipv4:...).
     */
    extraRouting?: { count: number; outboxRoot: string };
    /** Ledger processes besides the first, each with its own listen address; the edge then names all of them (LEDGER_ADDR=ipv4:...). */
    extraLedgers?: number;
    /** Jobs processes besides the first, each with its own listen address; the edge then names all of them (JOBS_ADDR=ipv4:...). */
    extraJobs?: number;
  } = {},
): Promise<ProcessStack> {
  // Ports are taken just before each process starts, and a start that dies of EADDRINUSE is retried on
  // fresh ports: a port freePort() handed out can be taken by another test's process (or by an outgoing
  // connection's ephemeral port) before the child binds it.
  const addresses = {} as Record<ServiceApp, string>;
  const metricsPorts = {} as Record<ServiceApp | 'edge', number>;
  let edgePort = 0;
  const processes: ChildProcess[] = [];
  const running = new Map<ServiceApp | 'edge', ChildProcess>();
  const listeningOn = new Map<string, ChildProcess>();
  const logs: string[] = [];
  // Only the services with admin RPCs hold the admin token (the edge, routing and media never do).
  const baseEnv = (app: ServiceApp | 'edge'): Record<string, string> => {
    switch (app) {
      case 'auth': return { GRPC_LISTEN: addresses.auth, KEY_HASH_SECRET: 'multi-process-secret-multi-process-0001', GATEWAY_ADMIN_TOKEN: TEST_ADMIN_TOKEN };
      case 'catalog': return { GRPC_LISTEN: addresses.catalog, GATEWAY_CONFIG: `${repositoryRoot}deploy/config/gateway.example.yaml`, GATEWAY_ADMIN_TOKEN: TEST_ADMIN_TOKEN };
      // Every ledger replica seals webhook secrets under the same key (its main requires one).
      case 'ledger': return { GRPC_LISTEN: addresses.ledger, GATEWAY_ADMIN_TOKEN: TEST_ADMIN_TOKEN, WEBHOOK_SECRET_KEY: PROCESS_STACK_WEBHOOK_SECRET_KEY };
      case 'media': return { GRPC_LISTEN: addresses.media };
      case 'jobs': return {
        GRPC_LISTEN: addresses.jobs, AUTH_ADDR: addresses.auth, CATALOG_ADDR: addresses.catalog, LEDGER_ADDR: addresses.ledger, ROUTER_ADDR: addresses.routing,
      };
      case 'routing': return { GRPC_LISTEN: addresses.routing, CATALOG_ADDR: addresses.catalog };
      case 'edge': return {
        PORT: String(edgePort), AUTH_ADDR: addresses.auth, CATALOG_ADDR: addresses.catalog, LEDGER_ADDR: addresses.ledger,
        ROUTER_ADDR: addresses.routing, MEDIA_ADDR: addresses.media, JOBS_ADDR: addresses.jobs, EDGE_ADMISSION: testAdmission,
      };
    }
  };
  const launch = (app: ServiceApp | 'edge', extra: Record<string, string> = {}) => {
    const childEnv: Record<string, string> = {
      PATH: process.env.PATH ?? '', LOG_LEVEL: 'warn', DATABASE_URL: database.url, NATS_URL: natsUrl, NATS_NAMESPACE: testBus.namespace,
      METRICS_PORT: String(metricsPorts[app]), METRICS_HOST: '127.0.0.1', GATEWAY_INTERNAL_TOKEN: TEST_INTERNAL_TOKEN,
      // As the image sets it (deploy/Dockerfile): large freed blocks go back to the system.
      MALLOC_MMAP_THRESHOLD_: '131072',
      ...baseEnv(app), ...env[app], ...extra,
    };
    const child = spawn(process.execPath, [`apps/${app}/dist/main.js`], { cwd: repositoryRoot, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
    if (childEnv.GRPC_LISTEN) listeningOn.set(childEnv.GRPC_LISTEN, child);
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
  /** Takes ports (`ports()`), launches, and waits for `ready()`; a child that exits of EADDRINUSE is started again on new ports. */
  const startOnFreshPorts = async (app: ServiceApp | 'edge', ports: () => Promise<Record<string, string>>, ready: () => Promise<boolean>) => {
    for (let attempt = 1; ; attempt++) {
      const extra = await ports();
      const from = logs.length;
      const child = launch(app, extra);
      const deadline = Date.now() + 30_000;
      let outcome: 'ready' | 'exited' | 'timeout' = 'timeout';
      while (Date.now() < deadline) {
        if (child.exitCode !== null || child.signalCode !== null) { outcome = 'exited'; break; }
        if (await ready().catch(() => false)) { outcome = 'ready'; break; }
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      if (outcome === 'ready') return;
      // Its last lines may still be in the pipe when 'exit' comes: wait for stdout/stderr to close.
      if (outcome === 'exited') await new Promise((resolve) => { child.once('close', resolve); setTimeout(resolve, 2_000).unref(); });
      const output = logs.slice(from).filter((line) => line.startsWith(`[${app}]`)).join('');
      if (outcome === 'exited' && output.includes('EADDRINUSE') && attempt < 4) continue;
      throw new Error(`${app} never became ready (${outcome}):\n${logs.join('')}`);
    }
  };
  const serving = (address: () => string) => async () => (await healthStatus(address())) === 'SERVING';

  const routingReplicas: RoutingReplica[] = [];
  const ledgerReplicas: string[] = [];
  const jobsReplicas: JobsReplica[] = [];
  try {
    await Promise.all((['auth', 'catalog', 'ledger', 'media'] as const).map((app) => startOnFreshPorts(app, async () => {
      addresses[app] = `127.0.0.1:${await freePort()}`;
      metricsPorts[app] = await freePort();
      return {};
    }, serving(() => addresses[app]))));
    await startOnFreshPorts('routing', async () => {
      addresses.routing = `127.0.0.1:${await freePort()}`;
      metricsPorts.routing = await freePort();
      return {};
    }, serving(() => addresses.routing));
    routingReplicas.push({ address: addresses.routing, metricsUrl: `http://127.0.0.1:${metricsPorts.routing}/metrics` });
    // Batch lines go through routing: the jobs service is started once routing serves.
    await startOnFreshPorts('jobs', async () => {
      addresses.jobs = `127.0.0.1:${await freePort()}`;
      metricsPorts.jobs = await freePort();
      return {};
    }, serving(() => addresses.jobs));
    jobsReplicas.push({ address: addresses.jobs, process: running.get('jobs')! });
    ledgerReplicas.push(addresses.ledger);
    for (let index = 1; index <= (options.extraRouting?.count ?? 0); index++) {
      let address = '';
      let metricsPort = 0;
      await startOnFreshPorts('routing', async () => {
        address = `127.0.0.1:${await freePort()}`;
        metricsPort = await freePort();
        return { GRPC_LISTEN: address, METRICS_PORT: String(metricsPort), USAGE_OUTBOX_DIR: `${options.extraRouting!.outboxRoot}/routing-${index}` };
      }, serving(() => address));
      routingReplicas.push({ address, metricsUrl: `http://127.0.0.1:${metricsPort}/metrics` });
    }
    for (let index = 1; index <= (options.extraLedgers ?? 0); index++) {
      let address = '';
      await startOnFreshPorts('ledger', async () => {
        address = `127.0.0.1:${await freePort()}`;
        return { GRPC_LISTEN: address, METRICS_PORT: String(await freePort()) };
      }, serving(() => address));
      ledgerReplicas.push(address);
    }
    for (let index = 1; index <= (options.extraJobs ?? 0); index++) {
      let address = '';
      await startOnFreshPorts('jobs', async () => {
        address = `127.0.0.1:${await freePort()}`;
        return { GRPC_LISTEN: address, METRICS_PORT: String(await freePort()) };
      }, serving(() => address));
      jobsReplicas.push({ address, process: running.get('jobs')! });
    }
    const routerAddr: Record<string, string> = routingReplicas.length > 1 ? { ROUTER_ADDR: `ipv4:${routingReplicas.map((replica) => replica.address).join(',')}` } : {};
    if (ledgerReplicas.length > 1) routerAddr.LEDGER_ADDR = `ipv4:${ledgerReplicas.join(',')}`;
    if (jobsReplicas.length > 1) routerAddr.JOBS_ADDR = `ipv4:${jobsReplicas.map((replica) => replica.address).join(',')}`;
    await startOnFreshPorts('edge', async () => {
      edgePort = await freePort();
      metricsPorts.edge = await freePort();
      return routerAddr;
    }, async () => (await fetch(`http://127.0.0.1:${edgePort}/v1/models`)).status === 200);
  } catch (error) {
    await stop();
    throw error;
  }
  const edgeUrl = `http://127.0.0.1:${edgePort}`;
  const metricsUrls = Object.fromEntries(Object.entries(metricsPorts).map(([app, port]) => [app, `http://127.0.0.1:${port}/metrics`])) as ProcessStack['metricsUrls'];
  return { addresses, edgeUrl, metricsUrls, routingReplicas, ledgerReplicas, jobsReplicas, processes, running, listeningOn, logs, launch, untilServing, stop };
}

/** A process stack together with the test database and NATS namespace it was started on. */
export interface StandaloneProcessStack {
  database: TestDatabase;
  testBus: TestBus;
  stack: ProcessStack;
  /** Stops the processes, then drops the bus namespace and the database. */
  stop(): Promise<void>;
}

/**
 * startProcessStack on a fresh test database and NATS namespace of its own. When the stack fails to
 * start, the database and namespace are dropped before the error is thrown, as an afterAll would.
 */
export async function startStandaloneProcessStack(
  env: Parameters<typeof startProcessStack>[2] = {},
  options: Parameters<typeof startProcessStack>[3] = {},
): Promise<StandaloneProcessStack> {
  const database = await createTestDatabase();
  let testBus: TestBus | undefined;
  try {
    testBus = await createTestBus('nats');
    const stack = await startProcessStack(database, testBus, env, options);
    const bus = testBus;
    return {
      database, testBus: bus, stack,
      stop: async () => {
        await stack.stop();
        await bus.destroy();
        await database.drop();
      },
    };
  } catch (error) {
    await testBus?.destroy();
    await database.drop();
    throw error;
  }
}

/** A paid account with `credits` and one API key, made with gatewayctl under the admin credential, as an operator would. */
export async function createAccountKey(stack: ProcessStack, name: string, credits: string): Promise<{ accountId: string; apiKey: string }> {
  const env = gatewayctlEnv(stack.addresses, TEST_ADMIN_TOKEN);
  const created = await runGatewayctlProcess(['accounts', 'create', '--name', name, '--credits', credits, '--tier', 'tier-1', '--json'], env);
  expect(created.code, created.stdout + created.stderr).toBe(0);
  const accountId = (JSON.parse(created.stdout) as { account_id: string }).account_id;
  const key = await runGatewayctlProcess(['keys', 'create', accountId, '--name', name, '--json'], env);
  expect(key.code, key.stdout + key.stderr).toBe(0);
  return { accountId, apiKey: (JSON.parse(key.stdout) as { api_key: string }).api_key };
}

/** What the paid-model process tests share: a database, a NATS namespace, the scripted fake upstream and a catalog config naming it. */
export interface PaidModelFixture {
  database: TestDatabase;
  testBus: TestBus;
  upstream: FakeUpstream;
  /** A temporary directory (the config, outbox directories); removed by dispose(). */
  directory: string;
  configPath: string;
  dispose(): Promise<void>;
}

export async function paidModelFixture(prefix: string): Promise<PaidModelFixture> {
  const database = await createTestDatabase();
  const testBus = await createTestBus('nats');
  const upstream = await startFakeUpstream();
  crashUpstreamScript(upstream, { doneStalls: false });
  const directory = await mkdtemp(join(tmpdir(), prefix));
  const configPath = join(directory, 'gateway.yaml');
  await writeFile(configPath, crashCatalog(upstream));
  return {
    database, testBus, upstream, directory, configPath,
    dispose: async () => {
      await upstream.close();
      await testBus.destroy();
      await database.drop();
      await rm(directory, { recursive: true, force: true });
    },
  };
}
