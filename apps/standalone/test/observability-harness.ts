import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { expect } from 'vitest';
import {
  createClient, createLogger, createMetricsRegistry, parseCredits, startMetricsServer, type Registry, type RunningMetricsServer,
} from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import {
  createTestBus, createTestDatabase, eventually, parsePrometheusText, startFakeUpstream, type FakeUpstream, type PrometheusSample, type TestBus,
  type TestDatabase,
} from '@gateway/testing';
import { startStack, type RunningStack, type StackOptions } from '../src/index.js';
import { testAdmission } from './admission-mode.js';
import { ctlJson, testCatalog } from './configured-stack.js';

export const OBSERVED_MODEL = 'testco/observed';

/** Every log line the stack wrote, as text (pino writes one JSON object per line). */
export class CapturedLog {
  readonly lines: string[] = [];
  readonly stream = new Writable({
    write: (chunk: Buffer | string, _encoding, done) => {
      for (const line of chunk.toString().split('\n')) if (line !== '') this.lines.push(line);
      done();
    },
  });

  get text(): string {
    return this.lines.join('\n');
  }

  records(): Array<Record<string, unknown>> {
    return this.lines.map((line) => JSON.parse(line) as Record<string, unknown>);
  }
}

export interface ObservedStack {
  stack: RunningStack;
  upstream: FakeUpstream;
  registry: Registry;
  metrics: RunningMetricsServer;
  log: CapturedLog;
  ctl(...argv: string[]): Promise<Record<string, string>>;
  /** A funded account (10 credits, tier-1) with one API key. */
  account(name: string): Promise<{ accountId: string; apiKey: string; provisioningKey: string }>;
  scrape(): Promise<PrometheusSample[]>;
  /** Charges the ledger recorded for the model (this account, all days). */
  charges(accountId: string, modelId?: string): Promise<{ requests: number; costPico: bigint }>;
  stop(): Promise<void>;
}

/**
 * A whole stack (test database, NATS namespace, fake upstream behind provider `upstream`) whose
 * services share one metrics registry, served on its own port as `npm start` serves it, and whose
 * logs (every service, level `logLevel`) are captured.
 */
export async function startObservedStack(options: {
  name: string;
  perMinute?: number;
  logLevel?: string;
  edge?: StackOptions['edge'];
}): Promise<ObservedStack> {
  const upstream = await startFakeUpstream();
  const directory = await mkdtemp(join(tmpdir(), `gateway-${options.name}-e2e-`));
  const log = new CapturedLog();
  const registry = createMetricsRegistry();
  let database: TestDatabase | undefined;
  let testBus: TestBus | undefined;
  let stack: RunningStack | undefined;
  let metrics: RunningMetricsServer | undefined;
  let ledger: ReturnType<typeof createClient<LedgerServiceClient>> | undefined;
  const stop = async () => {
    ledger?.close();
    await stack?.stop();
    await metrics?.stop();
    await testBus?.destroy();
    await database?.drop();
    await upstream.close();
    await rm(directory, { recursive: true, force: true });
  };
  try {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    const configPath = join(directory, 'gateway.yaml');
    await writeFile(configPath, testCatalog(upstream, {
      apiKeyEnv: 'OBSERVED_UPSTREAM_KEY',
      perMinute: options.perMinute ?? 1_000,
      models: [{ id: OBSERVED_MODEL, upstreamModel: 'observed-upstream', inputPrice: '0.000001', outputPrice: '0.000002' }],
    }));
    const logger = createLogger('gateway', options.logLevel ?? 'info', log.stream);
    stack = await startStack({
      databaseUrl: database.url,
      bus: testBus.bus,
      logger,
      port: 0,
      configPath,
      keyHashSecret: `${options.name}-observed-secret-0123456789abcdef`,
      providerSecrets: { OBSERVED_UPSTREAM_KEY: 'sk-upstream-observed' },
      metrics: registry,
      edge: { admission: testAdmission, ...options.edge },
    });
    metrics = await startMetricsServer({ registry, port: 0, host: '127.0.0.1', logger });
    ledger = createClient(LedgerServiceClient, LedgerServiceService, stack.addresses.ledger);
  } catch (error) {
    await stop();
    throw error;
  }
  const running = stack;
  const server = metrics;
  const ledgerClient = ledger;
  const ctl = (...argv: string[]) => ctlJson(running, ...argv);
  return {
    stack: running,
    upstream,
    registry,
    metrics: server,
    log,
    ctl,
    account: async (name) => {
      const created = await ctl('accounts', 'create', '--name', name, '--credits', '10', '--tier', 'tier-1', '--json');
      const apiKey = (await ctl('keys', 'create', created.account_id!, '--name', `${name}-key`, '--json')).api_key!;
      return { accountId: created.account_id!, apiKey, provisioningKey: created.provisioning_key! };
    },
    scrape: async () => {
      const response = await fetch(server.url);
      expect(response.status).toBe(200);
      return parsePrometheusText(await response.text());
    },
    charges: async (accountId, modelId = OBSERVED_MODEL) => {
      const activity = await ledgerClient.getActivity({ accountId, days: 30, keyId: '' });
      const rows = activity.rows.filter((row) => row.modelId === modelId);
      return { requests: rows.reduce((sum, row) => sum + row.requests, 0), costPico: rows.reduce((sum, row) => sum + parseCredits(row.credits), 0n) };
    },
    stop,
  };
}

/** A chat completion over fetch, streamed or not; the body is read to its end. */
export async function chat(
  baseUrl: string,
  apiKey: string,
  options: { stream?: boolean; headers?: Record<string, string>; model?: string; keyHeader?: 'authorization' | 'x-api-key' } = {},
): Promise<{ status: number; headers: Headers; text: string; startedAt: number; endedAt: number }> {
  const startedAt = performance.now();
  const response = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      ...(options.keyHeader === 'x-api-key' ? { 'x-api-key': apiKey } : { authorization: `Bearer ${apiKey}` }),
      'content-type': 'application/json',
      ...options.headers,
    },
    body: JSON.stringify({ model: options.model ?? OBSERVED_MODEL, messages: [{ role: 'user', content: 'Hello there' }], stream: options.stream ?? false }),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text, startedAt, endedAt: performance.now() };
}

export { eventually };
