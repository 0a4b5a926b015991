import { expect } from 'vitest';
import OpenAI from 'openai';
import { createClient, parseCredits, type PromiseClient } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import {
  eventually, startFakeUpstream, testLogger, type FakeUpstream, type TestBus, type TestDatabase,
} from '@gateway/testing';
import { startEdgeReplica, startLedgerReplica, startStack, type EdgeReplicaOptions, type RunningEdge, type RunningStack, type StackOptions } from '../src/index.js';
import { testAdmission } from './admission-mode.js';
import { onScratchDatabase, type ScratchStack } from './scratch-stack.js';
import { gatewayctl } from './stack-harness.js';

/** `gatewayctl ... --json`'s answer; a non-zero exit fails the test with its stderr. */
export async function ctlJson(stack: RunningStack, ...argv: string[]): Promise<Record<string, string>> {
  const result = await gatewayctl(stack, ...argv);
  expect(result.code, result.stderr).toBe(0);
  return JSON.parse(result.stdout) as Record<string, string>;
}

/**
 * A stack for a test: its database, its NATS namespace, port 0, the test logger, and admission as
 * GATEWAY_TEST_ADMISSION says unless `edge.admission` does.
 */
export function startTestStack(
  database: TestDatabase,
  testBus: TestBus,
  options: Omit<StackOptions, 'databaseUrl' | 'bus' | 'logger' | 'port'>,
): Promise<RunningStack> {
  return startStack({
    databaseUrl: database.url,
    bus: testBus.bus,
    logger: testLogger('stack'),
    port: 0,
    ...options,
    edge: { admission: testAdmission, ...options.edge },
  });
}

type AddressOptions = 'port' | 'authAddress' | 'catalogAddress' | 'ledgerAddress' | 'routerAddress' | 'mediaAddress' | 'bus' | 'logger';

/**
 * Another edge replica of a running stack (stack.ts's startEdgeReplica): its own process state (key
 * cache, leases, catalog cache) and its own bus connection, talking to the stack's services. Admission
 * follows GATEWAY_TEST_ADMISSION unless given; `name` labels its logs.
 */
export async function startSecondEdge(
  stack: RunningStack,
  testBus: TestBus,
  options: Partial<Omit<EdgeReplicaOptions, AddressOptions>> & { name?: string } = {},
): Promise<RunningEdge> {
  const { name = 'edge-2', ...edgeOptions } = options;
  return startEdgeReplica(stack.addresses, {
    port: 0,
    bus: await testBus.connectAnother(),
    logger: testLogger(name),
    admission: testAdmission,
    ...edgeOptions,
  });
}

export type StackOnCatalog = ScratchStack<RunningStack>;

/**
 * A stack for a test (startTestStack) on a fresh test database and NATS namespace, with the catalog
 * `configYaml` written to a temp file. A failed start cleans up what it made.
 */
export async function startStackOnCatalog(
  name: string,
  configYaml: string,
  options: Omit<Parameters<typeof startTestStack>[2], 'configPath'>,
): Promise<StackOnCatalog> {
  return onScratchDatabase(name, configYaml, (database, testBus, configPath) => startTestStack(database, testBus, { configPath, ...options }));
}

export interface ConfiguredStack {
  stack: RunningStack;
  database: TestDatabase;
  testBus: TestBus;
  upstream: FakeUpstream;
  ctl(...argv: string[]): Promise<Record<string, string>>;
  /** A new tier-1 account `name` holding `credits`, and one key of it (`<name>-key`, made with `keyArgs`). */
  accountKey(name: string, credits: string, keyArgs?: readonly string[]): Promise<StackAccountKey>;
  /** What the ledger charged the account over the last 30 days, of `model` only when it is given. */
  charged(accountId: string, model?: string): Promise<Charged>;
  /** Stopped with the stack. */
  startSecondEdge(options?: Parameters<typeof startSecondEdge>[2]): Promise<RunningEdge>;
  stop(): Promise<void>;
}

export interface StackAccountKey {
  accountId: string;
  provisioningKey: string;
  keyId: string;
  apiKey: string;
}

/** Requests charged, and their cost in picocredits. */
export interface Charged {
  requests: number;
  costPico: bigint;
}

/**
 * A whole stack (test database, NATS namespace, fake upstream) on a catalog written for that upstream.
 * Admission follows GATEWAY_TEST_ADMISSION unless `edge.admission` says otherwise.
 */
export async function startConfiguredStack(options: {
  name: string;
  config: (upstream: FakeUpstream) => string;
  keyHashSecret: string;
  providerSecrets: Record<string, string>;
  edge?: StackOptions['edge'];
  ledger?: StackOptions['ledger'];
}): Promise<ConfiguredStack> {
  const upstream = await startFakeUpstream();
  let base: StackOnCatalog;
  try {
    base = await startStackOnCatalog(options.name, options.config(upstream), {
      keyHashSecret: options.keyHashSecret,
      providerSecrets: options.providerSecrets,
      ...(options.edge ? { edge: options.edge } : {}),
      ...(options.ledger ? { ledger: options.ledger } : {}),
    });
  } catch (error) {
    await upstream.close();
    throw error;
  }
  const { stack, database, testBus } = base;
  const edges: RunningEdge[] = [];
  return {
    stack,
    database,
    testBus,
    upstream,
    ctl: (...argv) => ctlJson(stack, ...argv),
    async accountKey(name, credits, keyArgs = []) {
      const created = await ctlJson(stack, 'accounts', 'create', '--name', name, '--credits', credits, '--tier', 'tier-1', '--json');
      const key = await ctlJson(stack, 'keys', 'create', created.account_id!, '--name', `${name}-key`, ...keyArgs, '--json');
      return { accountId: created.account_id!, provisioningKey: created.provisioning_key!, keyId: key.key_id!, apiKey: key.api_key! };
    },
    async charged(accountId, model) {
      const ledger = createClient(LedgerServiceClient, LedgerServiceService, stack.addresses.ledger);
      try {
        const rows = (await ledger.getActivity({ accountId, days: 30, keyId: '' })).rows.filter((row) => model === undefined || row.modelId === model);
        return { requests: rows.reduce((sum, row) => sum + row.requests, 0), costPico: rows.reduce((sum, row) => sum + parseCredits(row.credits), 0n) };
      } finally {
        ledger.close();
      }
    },
    startSecondEdge: async (edgeOptions) => {
      const edge = await startSecondEdge(stack, testBus, edgeOptions);
      edges.push(edge);
      return edge;
    },
    stop: async () => {
      for (const edge of edges) await edge.stop();
      await base.stop();
      await upstream.close();
    },
  };
}

export interface TestCatalogModel {
  id: string;
  upstreamModel: string;
  inputPrice: string;
  outputPrice: string;
  supportedParameters?: readonly string[];
  contextWindow?: number;
  maxOutputTokens?: number;
}

/**
 * A catalog of chat models all offered by the one fake upstream (provider `upstream`, secret from
 * `apiKeyEnv`), in limit group `default` whose tier `tier-1` allows `perMinute` requests a minute.
 */
export function testCatalog(upstream: FakeUpstream, options: { apiKeyEnv: string; perMinute: number; models: readonly TestCatalogModel[] }): string {
  const models = options.models.map((model) => `
  - id: ${model.id}
    owned_by: testco
    created: 1767225600${model.contextWindow !== undefined ? `
    context_window: ${model.contextWindow}` : ''}${model.maxOutputTokens !== undefined ? `
    max_output_tokens: ${model.maxOutputTokens}` : ''}
    input_modalities: [text]
    output_modalities: [text]
    supported_parameters: [${(model.supportedParameters ?? ['temperature']).join(', ')}]
    pricing: { per_input_token: "${model.inputPrice}", per_output_token: "${model.outputPrice}" }
    limit_group: default
    offers:
      - { provider: upstream, upstream_model: ${model.upstreamModel}, endpoints: [chat.completions] }`).join('');
  return `
startups:
  - { id: testco, display_name: Test Co }
providers:
  - { id: upstream, kind: openai, base_url: ${upstream.url}, api_key_env: ${options.apiKeyEnv} }
limit_groups:
  - id: default
    tiers: { tier-1: { minute: ${options.perMinute} } }
models:${models}
`;
}

/** A JSON request to `url` with a bearer token: its status, its body parsed (undefined when empty) and as text. */
export async function bearerJson(url: string, method: string, bearer: string, body?: unknown): Promise<{ status: number; body: any; text: string }> {
  const response = await fetch(url, {
    method, headers: { authorization: `Bearer ${bearer}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text === '' ? undefined : JSON.parse(text), text };
}

/** What a request came to, as the admission tests compare outcomes: 200, `402 <code>` (which refusal for money), or the status. */
export async function statusOf(promise: Promise<unknown>): Promise<number | string> {
  try {
    await promise;
    return 200;
  } catch (error) {
    if (error instanceof OpenAI.APIError) return error.status === 402 ? `402 ${error.code}` : error.status ?? 0;
    throw error;
  }
}

/**
 * Stops the fixture's stack and, with a fresh ledger whose sweeper closes leases returned on recall once
 * their drain time is over, waits until each account holds nothing reserved, runs `check` on it, and
 * verifies that the journal matches every balance.
 */
export async function expectNothingReservedAfterStop(
  fixture: ConfiguredStack,
  accountIds: readonly string[],
  check: (ledger: PromiseClient<LedgerServiceClient>, accountId: string) => Promise<void> = async () => undefined,
): Promise<void> {
  await fixture.stack.stop();
  const ledgerService = await startLedgerReplica({
    databaseUrl: fixture.database.url, bus: fixture.testBus.bus, logger: testLogger('ledger-after'), consumer: { enabled: false },
    sweepIntervalMs: 100,
  });
  const client = createClient(LedgerServiceClient, LedgerServiceService, ledgerService.address);
  try {
    for (const accountId of accountIds) {
      await eventually(async () => expect((await client.getBalance({ accountId })).reserved).toBe('0'), 10_000);
      await check(client, accountId);
    }
    expect((await client.verifyJournal({ accountId: '' })).mismatches).toEqual([]);
  } finally {
    client.close();
    await ledgerService.stop();
  }
}

/** GET /v1/generation of one request with an API key of its account, polled past the 404 before settlement: its `data`. */
export async function generationRecord(url: string, apiKey: string, requestId: string): Promise<Record<string, any>> {
  let record: Record<string, any> = {};
  await eventually(async () => {
    const response = await fetch(`${url}/v1/generation?id=${encodeURIComponent(requestId)}`, { headers: { authorization: `Bearer ${apiKey}` } });
    expect(response.status).toBe(200);
    record = ((await response.json()) as { data: Record<string, any> }).data;
  }, 15_000);
  return record;
}
