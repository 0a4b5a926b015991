import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { fileURLToPath } from 'node:url';
import { formatCredits, parseCredits } from '@gateway/platform';
import { createTestBus, createTestDatabase, eventually, type TestBus, type TestDatabase } from '@gateway/testing';
import type { RunningStack } from '../src/index.js';
import { gatewayctl } from './stack-harness.js';
import { startTestStack } from './configured-stack.js';

// The Foundation slice end to end, every hop real: HTTP edge -> Auth -> Ledger.Admit -> Router ->
// simulated provider -> UsageEvent on JetStream -> ledger consumer -> balance, driven by the real
// `openai` client and by gatewayctl over gRPC.
const configPath = fileURLToPath(new URL('../../../deploy/config/gateway.example.yaml', import.meta.url));

describe('chat completion, paid, end to end', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let stack: RunningStack;
  let accountId = '';
  let provisioningKey = '';
  let apiKey = '';

  const ctl = (...argv: string[]) => gatewayctl(stack, ...argv);

  const balance = async () => {
    const response = await fetch(`${stack.url}/v1/account/balance`, { headers: { authorization: `Bearer ${provisioningKey}` } });
    expect(response.status).toBe(200);
    return ((await response.json()) as { balance: string }).balance;
  };

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    stack = await startTestStack(database, testBus, { configPath, keyHashSecret: 'e2e-secret-e2e-secret-e2e-secret-0123' });
    const created = await ctl('accounts', 'create', '--name', 'e2e', '--credits', '10', '--json');
    expect(created.code, created.stderr).toBe(0);
    const account = JSON.parse(created.stdout) as { account_id: string; provisioning_key: string };
    accountId = account.account_id;
    provisioningKey = account.provisioning_key;
    const key = await ctl('keys', 'create', accountId, '--name', 'e2e-key', '--json');
    expect(key.code, key.stderr).toBe(0);
    apiKey = (JSON.parse(key.stdout) as { api_key: string }).api_key;
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
    await testBus?.destroy();
    await database?.drop();
  });

  it('lists the example catalog newest first without a key', async () => {
    const response = await fetch(`${stack.url}/v1/models`);
    expect(response.status).toBe(200);
    expect(response.headers.get('x-request-id')).toBeTruthy();
    const body = (await response.json()) as { object: string; data: { id: string; created: number }[] };
    expect(body.object).toBe('list');
    expect(body.data.map((model) => model.id)).toContain('acme/chat-small');
    const created = body.data.map((model) => model.created);
    expect(created).toEqual([...created].sort((a, b) => b - a));
  });

  it('charges exactly prompt × input price + completion × output price, once', async () => {
    expect(await balance()).toBe('10');
    const client = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey, maxRetries: 0 });
    const { data: completion, response } = await client.chat.completions
      .create({ model: 'chat-small', messages: [{ role: 'user', content: 'Say something about gateways.' }] })
      .withResponse();
    expect(completion.id).toMatch(/^chatcmpl-/);
    expect(completion.model).toBe('acme/chat-small');
    expect(completion.choices[0]?.message.role).toBe('assistant');
    expect(completion.choices[0]?.message.content?.length).toBeGreaterThan(0);
    expect(response.headers.get('x-request-id')).toBeTruthy();
    expect(response.headers.get('x-gateway-routing-strategy')).toBe('balanced');
    const usage = completion.usage!;
    expect(usage.prompt_tokens).toBeGreaterThan(0);
    expect(usage.completion_tokens).toBeGreaterThan(0);
    const charge = BigInt(usage.prompt_tokens) * parseCredits('0.0000005') + BigInt(usage.completion_tokens) * parseCredits('0.0000015');
    const expected = formatCredits(parseCredits('10') - charge);
    await eventually(async () => expect(await balance()).toBe(expected), 10_000);
    // Nothing else arrives later: still exactly one charge.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await balance()).toBe(expected);

    const topUp = await ctl('accounts', 'top-up', accountId, '--credits', '5');
    expect(topUp.code, topUp.stderr).toBe(0);
    expect(await balance()).toBe(formatCredits(parseCredits(expected) + parseCredits('5')));
  });

  it('refuses a wrong or missing key with 401 invalid_api_key in the error envelope', async () => {
    const client = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: 'gw-api-not-a-real-key', maxRetries: 0 });
    const error = await client.chat.completions
      .create({ model: 'chat-small', messages: [{ role: 'user', content: 'hi' }] })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((error as InstanceType<typeof OpenAI.AuthenticationError>).status).toBe(401);
    expect((error as { error: { type: string } }).error.type).toBe('invalid_api_key');

    const missing = await fetch(`${stack.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'chat-small', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(missing.status).toBe(401);
    const body = (await missing.json()) as { error: { type: string; message: string } };
    expect(body.error.type).toBe('invalid_api_key');
    expect(missing.headers.get('x-request-id')).toBeTruthy();
  });

  it('answers 400 for an unknown model', async () => {
    const client = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey, maxRetries: 0 });
    const error = await client.chat.completions
      .create({ model: 'no-such/model', messages: [{ role: 'user', content: 'hi' }] })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as { error: { type: string } }).error.type).toBe('invalid_request_error');
  });

  it('refuses the provisioning key on inference and the API key on account routes', async () => {
    const client = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: provisioningKey, maxRetries: 0 });
    const error = await client.chat.completions
      .create({ model: 'chat-small', messages: [{ role: 'user', content: 'hi' }] })
      .catch((caught: unknown) => caught);
    expect((error as { status: number }).status).toBe(401);
    const response = await fetch(`${stack.url}/v1/account/balance`, { headers: { authorization: `Bearer ${apiKey}` } });
    expect(response.status).toBe(401);
  });
});
