import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { eventually, labelValues, parsePrometheusText, sampleSum, TEST_ADMIN_TOKEN, TEST_INTERNAL_TOKEN } from '@gateway/testing';
import { createClient, GatewayError, GrpcStatus, parseCredits, type PromiseClient } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { runGatewayctlProcess } from '../src/bench/gatewayctl-process.js';
import { exampleTokenCostPico } from './account-harness.js';
import { startStandaloneProcessStack, type ProcessStack, type StandaloneProcessStack } from './process-stack.js';

// Each server app as its own OS process (`node apps/<name>/dist/main.js`, configured by env only),
// wired like a real deployment: proves the standalone entry points, the health service, and the
// whole request path across process boundaries.

describe('every service as its own process', () => {
  let standalone: StandaloneProcessStack;
  let stack: ProcessStack;
  const addresses: Record<string, string> = {};
  let edgeUrl = '';

  beforeAll(async () => {
    standalone = await startStandaloneProcessStack();
    stack = standalone.stack;
    Object.assign(addresses, stack.addresses);
    edgeUrl = stack.edgeUrl;
  }, 120_000);

  afterAll(async () => {
    await standalone?.stop();
  }, 30_000);

  it('serves and bills a chat completion across six processes', async () => {
    const env = { AUTH_ADDR: addresses.auth!, LEDGER_ADDR: addresses.ledger!, CATALOG_ADDR: addresses.catalog!, GATEWAY_ADMIN_TOKEN: TEST_ADMIN_TOKEN };
    const created = await runGatewayctlProcess(['accounts', 'create', '--name', 'mp', '--credits', '1', '--json'], env);
    expect(created.code, created.stderr).toBe(0);
    const account = JSON.parse(created.stdout) as { account_id: string; provisioning_key: string };
    const keyCreated = await runGatewayctlProcess(['keys', 'create', account.account_id, '--name', 'mp', '--json'], env);
    expect(keyCreated.code, keyCreated.stderr).toBe(0);
    const apiKey = (JSON.parse(keyCreated.stdout) as { api_key: string }).api_key;

    const client = new OpenAI({ baseURL: `${edgeUrl}/v1`, apiKey, maxRetries: 0 });
    const completion = await client.chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'one two three' }] });
    expect(completion.choices[0]?.message.content).toBeTruthy();
    // Charged exactly once, at the catalog's prices for the usage the answer reported.
    const cost = exampleTokenCostPico('acme/chat-small', {
      input: completion.usage!.prompt_tokens, cached: completion.usage!.prompt_tokens_details?.cached_tokens ?? 0, output: completion.usage!.completion_tokens,
    });
    expect(cost).toBeGreaterThan(0n);
    await eventually(async () => {
      const response = await fetch(`${edgeUrl}/v1/account/balance`, { headers: { authorization: `Bearer ${account.provisioning_key}` } });
      const { balance } = (await response.json()) as { balance: string };
      expect(parseCredits(balance)).toBe(parseCredits('1') - cost);
    }, 10_000);

    // Every process serves its own /metrics (METRICS_PORT), each with its own part of the request.
    const scrape = async (app: keyof ProcessStack['metricsUrls']) => parsePrometheusText(await (await fetch(stack.metricsUrls[app])).text());
    const edge = await scrape('edge');
    expect(sampleSum(edge, 'gateway_http_requests_total', { route: '/v1/chat/completions', method: 'POST', status: '200' })).toBe(1);
    expect(sampleSum(edge, 'gateway_upstream_attempts_total')).toBe(0);
    expect(sampleSum(await scrape('routing'), 'gateway_upstream_attempts_total', { outcome: 'success' })).toBe(1);
    await eventually(async () => expect(sampleSum(await scrape('ledger'), 'gateway_usage_events_settled_total', { outcome: 'served' })).toBe(1), 10_000);
    expect(labelValues(await scrape('auth'), 'gateway_db_pool_connections', 'pool')).toEqual(['auth']);
    expect(labelValues(await scrape('catalog'), 'gateway_db_pool_connections', 'pool')).toEqual(['catalog']);
    const media = await scrape('media');
    expect(media.some((sample) => sample.name === 'nodejs_eventloop_lag_seconds')).toBe(true);
    // Media's health follows its Postgres (the image store), and says so in its metrics like the others.
    expect(sampleSum(media, 'gateway_dependency_up', { server: 'gateway.v1.MediaService' })).toBe(1);
  });

  it('refuses internal calls without the right credential (a pod reaching a gRPC port is not enough)', async () => {
    const call = async (address: string, credential: string | undefined, run: (ledger: PromiseClient<LedgerServiceClient>) => Promise<unknown>) => {
      const ledger = createClient(LedgerServiceClient, LedgerServiceService, address, { credential, maxAttempts: 1 });
      try {
        return await run(ledger).then(() => 'OK', (error: GatewayError) => GrpcStatus[error.status]);
      } finally {
        ledger.close();
      }
    };
    const topUp = (ledger: PromiseClient<LedgerServiceClient>) => ledger.topUp({ accountId: 'acc_nobody', credits: '1000', idempotencyKey: `mp-${Date.now()}`, note: 'intruder' });
    const balance = (ledger: PromiseClient<LedgerServiceClient>) => ledger.getBalance({ accountId: 'acc_nobody' });
    expect(await call(addresses.ledger!, undefined, topUp)).toBe('UNAUTHENTICATED');
    expect(await call(addresses.ledger!, undefined, balance)).toBe('UNAUTHENTICATED');
    expect(await call(addresses.ledger!, TEST_INTERNAL_TOKEN, topUp)).toBe('PERMISSION_DENIED');
    // The service credential reaches the non-admin RPC (an unknown account is NOT_FOUND or an empty balance, not a refusal).
    expect(['OK', 'NOT_FOUND']).toContain(await call(addresses.ledger!, TEST_INTERNAL_TOKEN, balance));

    // gatewayctl without the admin credential says what to set.
    const intruder = await runGatewayctlProcess(['accounts', 'create', '--name', 'intruder'],
      { AUTH_ADDR: addresses.auth!, LEDGER_ADDR: addresses.ledger!, CATALOG_ADDR: addresses.catalog!, GATEWAY_DATA_DIR: '/nonexistent' });
    expect(intruder.code).toBe(1);
    expect(intruder.stdout + intruder.stderr).toContain('GATEWAY_ADMIN_TOKEN');
    // The refusals were logged by the ledger as warnings, naming the method.
    await eventually(async () => expect(stack.logs.join('')).toContain('internal call refused'), 5_000);
  });

  it('stops every process cleanly on SIGTERM', async () => {
    const { processes } = stack;
    const exits = processes.map((child) => new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code))));
    for (const child of processes) child.kill('SIGTERM');
    expect(await Promise.all(exits)).toEqual(processes.map(() => 0));
  }, 30_000);
});
