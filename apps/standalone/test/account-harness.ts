import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { parse } from 'yaml';
import { parseCredits, type AccountKeyRecord } from '@gateway/platform';
import { gatewayctlAs } from './stack-harness.js';
import { createTestBus, createTestDatabase, TEST_ADMIN_TOKEN, TEST_INTERNAL_TOKEN, type TestBus, type TestDatabase } from '@gateway/testing';
import type { RunningStack } from '../src/index.js';
import { startTestStack } from './configured-stack.js';

/**
 * Shared set-up of the account API end-to-end tests: a whole stack on a fresh database and an
 * isolated NATS namespace, accounts made by gatewayctl over gRPC, and a small HTTP client that
 * returns status, headers and the parsed body.
 */
export const exampleConfigPath = fileURLToPath(new URL('../../../deploy/config/gateway.example.yaml', import.meta.url));
export const KEY_HASH_SECRET = 'e2e-account-secret-0123456789-abcdef';

export interface Account {
  accountId: string;
  provisioningKey: string;
}

export interface HttpAnswer<Body = any> {
  status: number;
  headers: Headers;
  body: Body;
  text: string;
}

export interface CallOptions {
  /** Sent as `Authorization: Bearer <bearer>`. */
  bearer?: string;
  /** Sent as `x-api-key`. */
  apiKeyHeader?: string;
  /** A whole Authorization header value (e.g. `Basic abc`). */
  authorization?: string;
  /** JSON-encoded unless a string. */
  body?: unknown;
  headers?: Record<string, string>;
}

export interface AccountStack {
  stack: RunningStack;
  /** The stack's internal tokens when it runs with internal authentication (startAccountStack's option). */
  internalTokens: { service: string; admin: string } | undefined;
  database: TestDatabase;
  testBus: TestBus;
  ctl(...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }>;
  newAccount(name: string, credits?: string): Promise<Account>;
  call<Body = any>(method: string, path: string, options?: CallOptions, baseUrl?: string): Promise<HttpAnswer<Body>>;
  /** POST /v1/account/keys; expects 201 and returns the record with its plaintext `key`. */
  createKey(account: Account, body: Record<string, unknown>): Promise<KeyJson & { key: string }>;
  /** A small paid chat completion (acme/chat-small). */
  chat(apiKey: string, baseUrl?: string): Promise<HttpAnswer>;
  stop(): Promise<void>;
}

export type KeyJson = AccountKeyRecord;

/** The literal of a JSON number field as the server wrote it (JSON.parse would go through a double). */
export function decimalField(text: string, field: string): string {
  const match = new RegExp(`"${field}":(-?\\d+(?:\\.\\d+)?)`).exec(text);
  if (!match) throw new Error(`no numeric ${field} in ${text}`);
  return match[1]!;
}

export const chatBody = { model: 'chat-small', messages: [{ role: 'user', content: 'Say hello.' }], max_completion_tokens: 16 };

/** Token counts of one answer: `input` includes the `cached` reads (the chat dialect's prompt_tokens). */
export interface TokenUsage {
  input: number;
  cached?: number;
  output: number;
}

/**
 * What an answer with this usage costs, in pico credits, at the prices the example config (the catalog
 * these stacks run) gives the model with this id or alias: money checks use the exact amount.
 */
export function exampleTokenCostPico(model: string, usage: TokenUsage): bigint {
  const models = (parse(readFileSync(exampleConfigPath, 'utf8')) as { models: { id: string; aliases?: string[]; pricing?: Record<string, string> }[] }).models;
  const pricing = models.find((entry) => entry.id === model || entry.aliases?.includes(model))?.pricing;
  if (!pricing?.per_input_token || !pricing.per_output_token) throw new Error(`${model} has no token prices in ${exampleConfigPath}`);
  const cached = usage.cached ?? 0;
  if (cached > 0 && !pricing.per_cached_input_token) throw new Error(`${model} has no cached-input price`);
  return BigInt(usage.input - cached) * parseCredits(pricing.per_input_token)
    + BigInt(cached) * parseCredits(pricing.per_cached_input_token ?? '0')
    + BigInt(usage.output) * parseCredits(pricing.per_output_token);
}

/**
 * `internalAuth`: every service checks internal credentials (the edge sends the service token,
 * gatewayctl the admin token), as deployed; the /v1/admin/ routes need it.
 */
export async function startAccountStack(options: { internalAuth?: boolean } = {}): Promise<AccountStack> {
  const database = await createTestDatabase();
  const testBus = await createTestBus('nats');
  const internalTokens = options.internalAuth ? { service: TEST_INTERNAL_TOKEN, admin: TEST_ADMIN_TOKEN } : undefined;
  let stack: RunningStack;
  try {
    stack = await startTestStack(database, testBus, {
      configPath: exampleConfigPath,
      keyHashSecret: KEY_HASH_SECRET,
      ...(internalTokens
        ? { internalAuth: { accepted: { service: [internalTokens.service], admin: [internalTokens.admin] }, credential: internalTokens.service } }
        : {}),
    });
  } catch (error) {
    await testBus.destroy();
    await database.drop();
    throw error;
  }

  const ctl: AccountStack['ctl'] = (...argv) => gatewayctlAs(stack, internalTokens?.admin, ...argv);

  const call: AccountStack['call'] = async (method, path, options = {}, baseUrl = stack.url) => {
    const headers: Record<string, string> = { ...options.headers };
    if (options.bearer !== undefined) headers.authorization = `Bearer ${options.bearer}`;
    if (options.authorization !== undefined) headers.authorization = options.authorization;
    if (options.apiKeyHeader !== undefined) headers['x-api-key'] = options.apiKeyHeader;
    let body: string | undefined;
    if (options.body !== undefined) {
      body = typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
      headers['content-type'] ??= 'application/json';
    }
    const response = await fetch(`${baseUrl}${path}`, { method, headers, body });
    const text = await response.text();
    let parsed: unknown = undefined;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    return { status: response.status, headers: response.headers, body: parsed as any, text };
  };

  return {
    stack,
    internalTokens,
    database,
    testBus,
    ctl,
    call,
    async newAccount(name, credits = '10') {
      const created = await ctl('accounts', 'create', '--name', name, '--credits', credits, '--json');
      expect(created.code, created.stderr).toBe(0);
      const account = JSON.parse(created.stdout) as { account_id: string; provisioning_key: string };
      return { accountId: account.account_id, provisioningKey: account.provisioning_key };
    },
    async createKey(account, body) {
      const answer = await call('POST', '/v1/account/keys', { bearer: account.provisioningKey, body });
      expect(answer.status, answer.text).toBe(201);
      return answer.body as KeyJson & { key: string };
    },
    chat: (apiKey, baseUrl) => call('POST', '/v1/chat/completions', { bearer: apiKey, body: chatBody }, baseUrl),
    async stop() {
      await stack.stop();
      await testBus.destroy();
      await database.drop();
    },
  };
}
