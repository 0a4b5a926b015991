import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { credentials, makeGenericClientConstructor } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { BATCH_SETTLER_DURABLE, createLogger, NatsEventBus, SETTLER_DURABLE, USAGE_STREAM } from '@gateway/platform';
import { createDatabase, sql, type Kysely } from '@gateway/platform/db';
import { freePort } from '../embedded-postgres.js';
import { benchModelYaml, wireCatalogYaml, wireRoutingEnv, type WireName } from './bench-wires.js';
import { BenchChild } from './child-processes.js';
import { gatewayctlJson } from './gatewayctl-process.js';
import { consumerBacklog, jetStreamMessageCount } from './nats-stream-info.js';
import { pidsByCommand, readProcStat, type ProcessGroup } from './proc-stat.js';

/**
 * The gateway as it is deployed: every service its own OS process (`node apps/<name>/dist/main.js`,
 * configured by env only), on the machine's Postgres (a fresh database) and NATS (a fresh
 * namespace, so its own JetStream stream), serving one paid model from an `openai`-kind provider
 * that points at the bench's upstream. Everything it creates is removed by stop().
 */

export const SERVICES = ['auth', 'catalog', 'ledger', 'media', 'routing', 'edge'] as const;
/**
 * Node flags every service runs with in production: deploy/Dockerfile's NODE_OPTIONS, then the V8 flags
 * NODE_OPTIONS refuses, which the image's CMD, docker-compose.yaml and the chart's `nodeFlags` pass on the
 * command line (a test keeps them all equal).
 */
export const SERVICE_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=32', '--single-threaded-gc', '--no-memory-reducer'];
export type ServiceName = (typeof SERVICES)[number];
/**
 * Every service but the edge then gets an 8 MiB semi-space on its command line (the later flag wins over
 * NODE_OPTIONS'): their objects seldom survive a scavenge, so the smaller young generation cost no CPU
 * measurable in the bench and kept routing and the ledger under 120 MB (docs/performance.md). The chart's
 * `<service>.nodeFlags` and docker-compose.yaml pass the same.
 */
export const SMALL_YOUNG_GENERATION: readonly string[] = ['--max-semi-space-size=8'];
/**
 * The edge's own: a 16 MiB semi-space, and an old generation allowed to grow by half its live size between
 * full collections (V8 chooses up to 4×). Under load the edge promotes a few MB per second (requests in
 * flight across scavenges), so its old space, not the young one, is what grew: 32 MiB and V8's growth read
 * 125–171 MB PSS, these flags 89–113 MB at the same CPU per request within the runs' noise (docs/performance.md).
 */
export const EDGE_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=16', '--heap-growing-percent=50'];

/** The node flags `service` runs with in production, in order (the image's NODE_OPTIONS first). */
export function serviceNodeFlags(service: ServiceName): readonly string[] {
  return [...SERVICE_NODE_FLAGS, ...(service === 'edge' ? EDGE_NODE_FLAGS : SMALL_YOUNG_GENERATION)];
}

/** The node flags the bench starts `service` with: as in production unless the environment names others. */
function benchNodeFlags(service: ServiceName): readonly string[] {
  const chosen = process.env[`BENCH_NODE_FLAGS_${service.toUpperCase()}`] ?? process.env.BENCH_NODE_FLAGS;
  return chosen !== undefined ? chosen.split(' ').filter(Boolean) : serviceNodeFlags(service);
}

export const BENCH_MODEL = 'bench/chat';
const BENCH_APPLICATION_NAME = 'gateway-bench';
const KEY_HASH_SECRET = 'bench-secret-bench-secret-bench-secret-01';
// Internal gRPC credentials, as deployed (every call carries one and every server checks it).
const INTERNAL_TOKEN = 'bench-internal-service-token-0123456789ab';
const ADMIN_TOKEN = 'bench-internal-admin-token-0123456789abcd';
const START_TIMEOUT_MS = 60_000;

export interface GatewayClusterOptions {
  root: string;
  upstreamBaseUrl: string;
  postgresAdminUrl: string;
  natsUrl: string;
  /** Services started under `node --cpu-prof`, writing into profileDir. */
  profile?: { services: ServiceName[]; dir: string };
  /** Passed to every service (default: the services' own default, info). */
  logLevel?: string;
  /** Accounts to create, one API key each (default 1). */
  accounts?: number;
  /** The edge's admission (EDGE_ADMISSION): 'leased' budgets (default) or 'ledger' (one Admit per request). */
  admission?: 'ledger' | 'leased';
  /** How the edge reaches routing (EDGE_ROUTER_TRANSPORT): 'exchange' (default, one multiplexed call) or 'calls' (a call per request). */
  routerTransport?: 'exchange' | 'calls';
  /** Provider wires the bench model is also served over (`--wire`); the OpenAI wire always is. */
  wires?: readonly WireName[];
}

export interface GatewayCluster {
  url: string;
  /** One API key per account. */
  apiKeys: string[];
  databaseName: string;
  namespace: string;
  /** gRPC address of each service (edge: its HTTP host:port). */
  addresses: Record<ServiceName, string>;
  children: Map<ServiceName, BenchChild>;
  /**
   * Gateway services, Postgres (`postgres`: the backends of the bench database; `postgres-shared`:
   * postmaster, WAL writer, checkpointer, background writer, which serve every database) and NATS.
   */
  processGroups(): Promise<ProcessGroup[]>;
  /** Reservations not yet settled: 0 once the ledger has caught up with every request. */
  openReservations(): Promise<number>;
  /** Charges the ledger has booked. */
  charges(): Promise<number>;
  /**
   * Running totals to diff around a phase: charges booked, settlement transactions (charges of one
   * transaction share its now()), and messages in the usage stream (one per published batch).
   */
  counters(): Promise<{ charges: number; settlementTransactions: number; usageMessages: number }>;
  /** Waits until every reservation is settled (bounded); returns false on timeout. */
  waitSettled(timeoutMs: number): Promise<boolean>;
  stop(): Promise<void>;
}

export function benchConfigYaml(upstreamBaseUrl: string, wires: readonly WireName[] = ['openai']): string {
  const extra = wireCatalogYaml(new URL(upstreamBaseUrl).origin, BENCH_MODEL, wires);
  return `# Written by the bench (apps/standalone/src/bench): one paid model served by the bench's fake upstream.
startups:
  - id: bench
    display_name: Bench
providers:
  - id: bench-upstream
    kind: openai
    base_url: ${upstreamBaseUrl}
    api_key_env: BENCH_UPSTREAM_API_KEY
${extra.providers}limit_groups:
  # Rate windows still count every request in Postgres; the limit is high enough never to refuse one.
  - id: bench
    tiers:
      # Below 2^31: the ledger binds the limits as Postgres integers (the catalog accepts up to 2^32-1).
      tier-4: { minute: 2000000000, day: 2000000000 }
      # npm start's dev account (--npm-start).
      tier-1: { minute: 2000000000, day: 2000000000 }
models:
${benchModelYaml({ id: BENCH_MODEL, displayName: 'Bench Chat', description: "The bench's model.", provider: 'bench-upstream', upstreamModel: 'bench-upstream-model' })}${extra.models}`;
}

const HealthClient = makeGenericClientConstructor(healthService, 'grpc.health.v1.Health');

function serving(address: string): Promise<boolean> {
  return new Promise((resolve) => {
    const client = new HealthClient(address, credentials.createInsecure());
    const check = (client as unknown as { check: (request: object, options: object, callback: (error: Error | null, response?: { status: unknown }) => void) => void }).check;
    check.call(client, { service: '' }, { deadline: Date.now() + 1_000 }, (error, response) => {
      client.close();
      resolve(!error && (response?.status === 1 || response?.status === 'SERVING'));
    });
  });
}

async function until(check: () => Promise<boolean>, timeoutMs: number, what: string, child?: BenchChild): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child && child.process.exitCode !== null) throw new Error(`${what}: process exited (${child.process.exitCode})\n${child.logs()}`);
    if (await check().catch(() => false)) return;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`${what}: not ready within ${timeoutMs} ms${child ? `\n${child.logs()}` : ''}`);
}

export async function startGatewayCluster(options: GatewayClusterOptions): Promise<GatewayCluster> {
  const stamp = `${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`;
  const databaseName = `gw_bench_${stamp}`;
  const namespace = `bench-${stamp}`;
  const databaseUrl = new URL(options.postgresAdminUrl);
  databaseUrl.pathname = `/${databaseName}`;
  const configDir = mkdtempSync(join(tmpdir(), 'gateway-bench-'));
  const configPath = join(configDir, 'bench-config.yaml');
  writeFileSync(configPath, benchConfigYaml(options.upstreamBaseUrl, options.wires));

  const admin = createDatabase({ url: options.postgresAdminUrl, schema: 'public', maxConnections: 1, applicationName: BENCH_APPLICATION_NAME });
  await sql.raw(`create database "${databaseName}"`).execute(admin);
  await admin.destroy();
  let benchDb: Kysely<any> | undefined;
  const children = new Map<ServiceName, BenchChild>();

  const stop = async () => {
    // Front to back, like a deployment draining: stop taking requests first.
    for (const name of [...SERVICES].reverse()) await children.get(name)?.stop().catch(() => undefined);
    await benchDb?.destroy().catch(() => undefined);
    try {
      const bus = await NatsEventBus.connect(options.natsUrl, createLogger('bench', 'silent'), { namespace });
      await bus.destroyStream();
      await bus.close();
    } catch {
      // NATS unreachable: nothing of ours to delete there either.
    }
    const cleaner = createDatabase({ url: options.postgresAdminUrl, schema: 'public', maxConnections: 1, applicationName: BENCH_APPLICATION_NAME });
    await sql.raw(`drop database if exists "${databaseName}" with (force)`).execute(cleaner).catch(() => undefined);
    await cleaner.destroy().catch(() => undefined);
    rmSync(configDir, { recursive: true, force: true });
  };

  try {
    const addresses = {} as Record<ServiceName, string>;
    for (const name of SERVICES) addresses[name] = `127.0.0.1:${await freePort()}`;
    const edgePort = await freePort();
    addresses.edge = `127.0.0.1:${edgePort}`;
    const url = `http://127.0.0.1:${edgePort}`;
    const baseEnv: Record<string, string> = {
      PATH: process.env.PATH ?? '',
      DATABASE_URL: databaseUrl.toString(),
      NATS_URL: options.natsUrl,
      NATS_NAMESPACE: namespace,
      GATEWAY_INTERNAL_TOKEN: INTERNAL_TOKEN,
      ...(options.logLevel ? { LOG_LEVEL: options.logLevel } : {}),
    };
    const launch = (name: ServiceName, env: Record<string, string>) => {
      const profiled = options.profile?.services.includes(name);
      const args = [
        // As deployed (the Dockerfile's NODE_OPTIONS), or BENCH_NODE_FLAGS to try other runtime settings
        // (BENCH_NODE_FLAGS_<SERVICE>, e.g. BENCH_NODE_FLAGS_ROUTING, for one service alone).
        ...benchNodeFlags(name),
        ...(profiled ? ['--cpu-prof', '--cpu-prof-dir', options.profile!.dir, '--cpu-prof-name', `${name}.cpuprofile`] : []),
        `apps/${name}/dist/main.js`,
      ];
      const child = new BenchChild(name, { args, cwd: options.root, env: { ...baseEnv, ...env } });
      children.set(name, child);
      return child;
    };
    launch('auth', { GRPC_LISTEN: addresses.auth, KEY_HASH_SECRET, GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN });
    launch('catalog', { GRPC_LISTEN: addresses.catalog, GATEWAY_CONFIG: configPath, GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN });
    launch('ledger', { GRPC_LISTEN: addresses.ledger, GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN, WEBHOOK_SECRET_KEY: randomBytes(32).toString('base64') });
    launch('media', { GRPC_LISTEN: addresses.media });
    for (const name of ['auth', 'catalog', 'ledger', 'media'] as const) {
      await until(() => serving(addresses[name]), START_TIMEOUT_MS, `${name} health`, children.get(name));
    }
    launch('routing', { GRPC_LISTEN: addresses.routing, CATALOG_ADDR: addresses.catalog, BENCH_UPSTREAM_API_KEY: 'bench-upstream-key', ...wireRoutingEnv(options.wires ?? []) });
    await until(() => serving(addresses.routing), START_TIMEOUT_MS, 'routing health', children.get('routing'));
    // Where the edge and gatewayctl find the services they both call.
    const serviceEnv = { AUTH_ADDR: addresses.auth, CATALOG_ADDR: addresses.catalog, LEDGER_ADDR: addresses.ledger };
    launch('edge', {
      HOST: '127.0.0.1',
      PORT: String(edgePort),
      ...serviceEnv,
      ROUTER_ADDR: addresses.routing,
      MEDIA_ADDR: addresses.media,
      EDGE_ADMISSION: options.admission ?? 'leased',
      EDGE_ROUTER_TRANSPORT: options.routerTransport ?? 'exchange',
    });
    await until(async () => (await fetch(`${url}/v1/models`)).status === 200, START_TIMEOUT_MS, 'edge', children.get('edge'));

    // gatewayctl as its own process, as an operator runs it.
    const ctlEnv = { ...serviceEnv, GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN };
    const ctl = (...argv: string[]) => gatewayctlJson(argv, ctlEnv);
    const apiKeys: string[] = [];
    for (let index = 0; index < (options.accounts ?? 1); index += 1) {
      const account = await ctl('accounts', 'create', '--name', `bench-${index}`, '--credits', '1000000', '--tier', 'tier-4', '--json');
      apiKeys.push((await ctl('keys', 'create', account.account_id!, '--name', 'bench', '--json')).api_key!);
    }

    benchDb = createDatabase({ url: databaseUrl.toString(), schema: 'ledger', maxConnections: 1, applicationName: BENCH_APPLICATION_NAME });
    const db = benchDb;
    const openReservations = async () => {
      const result = await sql<{ open: bigint }>`select count(*) as open from ledger.reservations where closed_at is null`.execute(db);
      return Number(result.rows[0]?.open ?? 0);
    };
    // Stream naming of NatsEventBus: USAGE_<NAMESPACE upper-cased, - as _>.
    const usageStream = `${USAGE_STREAM}_${namespace.toUpperCase().replaceAll('-', '_')}`;
    return {
      url,
      apiKeys,
      addresses,
      databaseName,
      namespace,
      children,
      openReservations,
      charges: async () => {
        const result = await sql<{ charges: bigint }>`select count(*) as charges from ledger.charges`.execute(db);
        return Number(result.rows[0]?.charges ?? 0);
      },
      counters: async () => {
        const result = await sql<{ charges: bigint; transactions: bigint }>`
          select count(*) as charges, count(distinct created_at) as transactions from ledger.charges`.execute(db);
        return {
          charges: Number(result.rows[0]?.charges ?? 0),
          settlementTransactions: Number(result.rows[0]?.transactions ?? 0),
          usageMessages: await jetStreamMessageCount(options.natsUrl, usageStream).catch(() => Number.NaN),
        };
      },
      waitSettled: async (timeoutMs) => {
        // Leased requests hold no reservation of their own: the ledger has also caught up only once
        // its settlement consumers have acked everything published (an answered request's event was).
        const backlog = async () => {
          let total = 0;
          for (const durable of [SETTLER_DURABLE, BATCH_SETTLER_DURABLE]) total += await consumerBacklog(options.natsUrl, usageStream, durable);
          return total;
        };
        const deadline = Date.now() + timeoutMs;
        while (Date.now() < deadline) {
          if ((await openReservations()) === 0 && (await backlog()) === 0) return true;
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        return false;
      },
      processGroups: async () => {
        const groups: ProcessGroup[] = [...children].map(([name, child]) => ({ name, pids: [child.pid] }));
        // Backends of other databases (other users of this Postgres) are not ours; the postmaster and
        // its background processes (WAL writer, checkpointer, background writer) serve everyone,
        // this bench's commits included, and are counted.
        const activity = await sql<{ pid: number; backend_type: string; datname: string | null; application_name: string }>`
          select pid, backend_type, datname, application_name from pg_stat_activity`.execute(db);
        const backends = activity.rows
          .filter((row) => row.datname === databaseName && row.application_name !== BENCH_APPLICATION_NAME)
          .map((row) => Number(row.pid));
        const shared = activity.rows.filter((row) => row.datname === null && row.backend_type !== 'client backend').map((row) => Number(row.pid));
        const background = activity.rows.find((row) => row.backend_type === 'checkpointer');
        const postmaster = background ? readProcStat(Number(background.pid))?.ppid : undefined;
        if (postmaster) shared.push(postmaster);
        groups.push({ name: 'postgres', pids: backends });
        groups.push({ name: 'postgres-shared', pids: shared });
        groups.push({ name: 'nats', pids: pidsByCommand('nats-server') });
        return groups;
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
