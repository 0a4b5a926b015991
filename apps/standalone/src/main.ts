#!/usr/bin/env node
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import {
  commonEnv,
  createLogger,
  InProcessEventBus,
  loadConfig,
  NatsEventBus,
  removeRuntimeAddresses,
  runMain,
  startProcessMetrics,
  writeRuntimeAddresses,
  ADMIN_TOKEN_FILE,
  type EventBus,
  type InternalAuth,
} from '@gateway/platform';
import { ensureDevAccount } from './dev-account.js';
import { lockDataDir } from './data-dir-lock.js';
import { startEmbeddedPostgres, type RunningEmbeddedPostgres } from './embedded-postgres.js';
import { signInFromEnvironment, startStack } from './stack.js';

const repositoryRoot = fileURLToPath(new URL('../../../', import.meta.url));

const env = loadConfig({
  ...commonEnv,
  LOG_LEVEL: commonEnv.LOG_LEVEL.default('warn'),
  PORT: z.coerce.number().int().min(0).max(65_535).default(8080),
  HOST: z.string().default('127.0.0.1'),
  GATEWAY_CONFIG: z.string().default(join(repositoryRoot, 'deploy/config/gateway.example.yaml')),
  GATEWAY_DATA_DIR: z.string().default('.data'),
  DATABASE_URL: z.string().optional(),
  NATS_URL: z.string().optional(),
  NATS_NAMESPACE: z.string().optional(),
  KEY_HASH_SECRET: z.string().min(32).optional(),
  /** The key webhook secrets are encrypted with at rest: 32 bytes in base64 (docs/governance.md "Webhooks"). */
  WEBHOOK_SECRET_KEY: z.string().min(44).optional(),
  /** The edge's admission: 'leased' budgets (default) or 'ledger' (one Ledger.Admit per request). */
  EDGE_ADMISSION: z.enum(['ledger', 'leased']).default('leased'),
  /** Edge to routing: 'exchange' (default, one multiplexed Router.Exchange call) or 'calls' (a call per request). */
  EDGE_ROUTER_TRANSPORT: z.enum(['exchange', 'calls']).default('exchange'),
  GATEWAY_REASONING_TAG_KEY: z.string().min(16).optional(),
  /** Webhooks may go to plain http and private/loopback receivers (docs/governance.md "Webhooks"). */
  GATEWAY_WEBHOOKS_ALLOW_PRIVATE: z.enum(['0', '1']).default('0'),
  /** Attempts before a webhook delivery is dead-lettered, and one attempt's timeout (as the ledger's own main reads them). */
  WEBHOOK_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(100).default(15),
  WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(100).max(60_000).default(10_000),
  /** Internal gRPC credentials; unset: generated into the data dir. */
  GATEWAY_INTERNAL_TOKEN: z.string().min(32).optional(),
  GATEWAY_ADMIN_TOKEN: z.string().min(32).optional(),
});

const logger = createLogger('gateway', env.LOG_LEVEL);

/** A secret of the embedded default: generated once into the data dir (owner-only), never printed. */
function dataDirSecret(dataDir: string, name: string, encoding: 'hex' | 'base64' = 'hex'): string {
  const file = join(dataDir, name);
  if (!existsSync(file)) writeFileSync(file, randomBytes(32).toString(encoding), { mode: 0o600 });
  return readFileSync(file, 'utf8').trim();
}

/**
 * The internal gRPC credentials (docs/operations.md "Internal authentication"): a service token every service
 * presents and an admin token, which `npx gatewayctl` reads from the data dir. Env overrides both.
 */
function internalAuth(dataDir: string): InternalAuth {
  const service = env.GATEWAY_INTERNAL_TOKEN ?? dataDirSecret(dataDir, 'internal-token');
  const admin = env.GATEWAY_ADMIN_TOKEN ?? dataDirSecret(dataDir, ADMIN_TOKEN_FILE);
  return { accepted: { service: [service], admin: [admin] }, credential: service };
}

/** Sign-in with an OpenID provider (EDGE_OIDC_*, docs/governance.md "Sign-in and roles"): read first, a bad value stops the start. */
const signIn = signInFromEnvironment(process.env);

await runMain('gateway', logger, async () => {
  const dataDir = resolve(env.GATEWAY_DATA_DIR);
  mkdirSync(dataDir, { recursive: true });
  lockDataDir(dataDir);
  let embedded: RunningEmbeddedPostgres | undefined;
  let bus: EventBus | undefined;
  // One registry for every service of this process, on METRICS_PORT when set (on HOST unless METRICS_HOST says otherwise).
  const metrics = await startProcessMetrics(logger, { ...process.env, METRICS_HOST: process.env.METRICS_HOST || env.HOST });
  try {
    if (!existsSync(env.GATEWAY_CONFIG)) throw new Error(`GATEWAY_CONFIG: no such file ${env.GATEWAY_CONFIG}`);
    embedded = env.DATABASE_URL ? undefined : await startEmbeddedPostgres(dataDir, logger);
    const databaseUrl = env.DATABASE_URL ?? embedded!.url;
    bus = env.NATS_URL
      ? await NatsEventBus.connect(env.NATS_URL, logger, { name: 'gateway', namespace: env.NATS_NAMESPACE })
      : // Usage published and not yet settled survives a crash: journaled, redelivered on the next start.
        await InProcessEventBus.open(logger, { journalDirectory: join(dataDir, 'bus') });
    const credentials = internalAuth(dataDir);
    const stack = await startStack({
      databaseUrl,
      bus,
      logger,
      configPath: env.GATEWAY_CONFIG,
      keyHashSecret: env.KEY_HASH_SECRET ?? dataDirSecret(dataDir, 'key-hash-secret'),
      port: env.PORT,
      host: env.HOST,
      metrics: metrics.registry,
      internalAuth: credentials,
      // Usage of streams already answered survives a crash here and is republished on the next start.
      routing: { usageOutboxDirectory: join(dataDir, 'usage-outbox') },
      edge: {
        admission: env.EDGE_ADMISSION,
        routerTransport: env.EDGE_ROUTER_TRANSPORT,
        reasoningTagKey: env.GATEWAY_REASONING_TAG_KEY ?? dataDirSecret(dataDir, 'reasoning-tag-key'),
        // Sign-in (EDGE_OIDC_*): one process holds every service, so signed-in operators act with its admin token.
        ...(signIn === undefined ? {} : { signIn, operatorSessionCredential: credentials.accepted.admin[0] }),
      },
      ledger: {
        // The embedded Postgres is this process's alone (the data dir lock), so any open lease is a
        // previous run's: one a crash, or a stop cut short, left unreturned.
        ...(embedded ? { reclaimLeasesOnStart: true } : {}),
        webhookSecretKey: env.WEBHOOK_SECRET_KEY ?? dataDirSecret(dataDir, 'webhook-secret-key', 'base64'),
        webhooks: { allowPrivate: env.GATEWAY_WEBHOOKS_ALLOW_PRIVATE === '1', maxAttempts: env.WEBHOOK_MAX_ATTEMPTS, requestTimeoutMs: env.WEBHOOK_TIMEOUT_MS },
        // Single-process mode is for a developer watching the balance: settle within 25 ms rather than
        // the 50 ms default. Not less: every settlement transaction's queries run on this one event loop
        // between requests, and 2 ms (one transaction per few requests at 500 req/s) added ~0.6 ms to the
        // p50 of every answer (docs/performance.md, issue 17).
        ...(env.NATS_URL ? {} : { consumer: { lingerMs: 25 } }),
        // One event loop runs every service here: more connections than it can keep busy only cost
        // memory (each Postgres backend is 2–7 MB; ten per service was a third of the embedded
        // Postgres's memory under load). Settlement holds at most two transactions at once.
        maxConnections: 4,
      },
      auth: { maxConnections: 2 },
    });
    // `npx gatewayctl` reads these when no flag or env names an address (the ports are new on every start).
    writeRuntimeAddresses(dataDir, {
      auth: stack.addresses.auth, ledger: stack.addresses.ledger, catalog: stack.addresses.catalog, jobs: stack.addresses.jobs, edge: stack.url, pid: process.pid,
    });
    const devKeysFile = join(dataDir, 'dev-keys.json');
    const { keys, created } = await ensureDevAccount(devKeysFile, stack.addresses, credentials.accepted.admin[0]);
    process.stdout.write([
      '',
      `Inference gateway listening on ${stack.url}`,
      `  Console:           ${stack.url}/console/ (sign in with the provisioning key below)`,
      `                     (its Operator view takes the admin token: ${env.GATEWAY_ADMIN_TOKEN ? 'GATEWAY_ADMIN_TOKEN' : join(dataDir, ADMIN_TOKEN_FILE)})`,
      `  Postgres:          ${env.DATABASE_URL ? 'DATABASE_URL' : `embedded (${join(dataDir, 'postgres')})`}`,
      `  Event bus:         ${env.NATS_URL ? `NATS ${env.NATS_URL}` : 'in-process (single-process mode)'}`,
      `  Catalog:           ${env.GATEWAY_CONFIG}`,
      `  Metrics:           ${metrics.server ? metrics.server.url : 'off (set METRICS_PORT to serve /metrics)'}`,
      `  Dev account:       ${keys.account_id}${created ? ' (created, 10 credits)' : ' (reused)'}`,
      `  Provisioning key:  ${keys.provisioning_key}`,
      `  API key:           ${keys.api_key}`,
      `  (keys saved in ${devKeysFile})`,
      `  gatewayctl env:    AUTH_ADDR=${stack.addresses.auth} LEDGER_ADDR=${stack.addresses.ledger} CATALOG_ADDR=${stack.addresses.catalog}`,
      `                     (npx gatewayctl finds them in ${join(dataDir, 'addresses.json')}: try npx gatewayctl accounts show ${keys.account_id})`,
      '',
      `Try: curl ${stack.url}/v1/chat/completions -H "Authorization: Bearer ${keys.api_key}" \\`,
      `       -H 'content-type: application/json' -d '{"model":"chat-small","messages":[{"role":"user","content":"Hello"}]}'`,
      '',
    ].join('\n'));
    const ownBus = bus;
    const ownPostgres = embedded;
    return {
      stop: async () => {
        removeRuntimeAddresses(dataDir);
        await stack.stop();
        await ownBus.close();
        await ownPostgres?.stop();
        await metrics.stop();
      },
    };
  } catch (error) {
    await bus?.close().catch(() => undefined);
    await embedded?.stop().catch(() => undefined);
    await metrics.stop().catch(() => undefined);
    throw error;
  }
});
