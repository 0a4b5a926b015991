import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, formatCredits, parseCredits } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import {
  createTestBus, createTestDatabase, eventually, startFakeUpstream, type FakeUpstream, type TestBus, type TestDatabase,
} from '@gateway/testing';
import { solidPng } from './media-e2e-harness.js';
import type { RunningEdge, RunningStack } from '../src/index.js';
import { ctlJson, startConfiguredStack, startTestStack, type ConfiguredStack } from './configured-stack.js';
import { oneModelCatalog, pricedTokens } from './chat-e2e-harness.js';

// Idempotency-Key on inference POSTs through the whole stack (issue 27 item 7): the fake upstream counts
// the calls, the ledger's activity counts the charges, the balance route shows what was taken.

const MODEL = 'testco/idem';
const INPUT_PRICE = '0.000001';
const OUTPUT_PRICE = '0.000002';
const USAGE = { prompt_tokens: 13, completion_tokens: 9 };
const COST = pricedTokens(USAGE.prompt_tokens, USAGE.completion_tokens, INPUT_PRICE, OUTPUT_PRICE);

const EMBEDDING_MODEL = 'testco/idem-embed';
const IMAGE_MODEL = 'testco/idem-image';
const EMBEDDING_MODEL_YAML = `
  - id: ${EMBEDDING_MODEL}
    owned_by: testco
    created: 1767225600
    input_modalities: [text]
    output_modalities: [embeddings]
    supported_parameters: [dimensions]
    pricing: { per_input_token: "0.00000002" }
    limit_group: default
    offers:
      - { provider: upstream-one, upstream_model: idem-embed-upstream, endpoints: [embeddings] }
  - id: ${IMAGE_MODEL}
    owned_by: testco
    created: 1767225600
    input_modalities: [text, image]
    output_modalities: [image]
    supported_parameters: [n, size, response_format]
    max_images: 2
    pricing: { per_input_text_token: "0.000005", per_input_image_token: "0.00001", per_output_image_token: "0.00004" }
    limit_group: default
    offers:
      - { provider: upstream-one, upstream_model: idem-image-upstream, endpoints: [images.edits] }
`;

const WAITING = 2;

interface Account {
  accountId: string;
  provisioningKey: string;
  apiKey: string;
}

describe('Idempotency-Key, end to end', () => {
  let gateway: ConfiguredStack;
  let secondEdge: RunningEdge;
  /** An edge on which at most WAITING duplicates of one account wait at once. */
  let boundedEdge: RunningEdge;
  let ledger: ReturnType<typeof createClient<LedgerServiceClient>>;
  let alice: Account;
  let bob: Account;

  beforeAll(async () => {
    gateway = await startConfiguredStack({
      name: 'idempotency',
      keyHashSecret: 'idempotency-e2e-secret-0123456789ab',
      providerSecrets: { IDEM_KEY: 'sk-idem' },
      config: (upstream) =>
        oneModelCatalog({
          model: MODEL,
          provider: { kind: 'openai', url: upstream.url, keyEnv: 'IDEM_KEY' },
          upstreamModel: 'idem-upstream',
          supportedParameters: ['temperature', 'max_completion_tokens', 'stream_options'],
          endpoints: ['chat.completions', 'messages', 'responses'],
          inputPrice: INPUT_PRICE,
          outputPrice: OUTPUT_PRICE,
        }) + EMBEDDING_MODEL_YAML,
    });
    const account = async (name: string): Promise<Account> => {
      const created = await gateway.ctl('accounts', 'create', '--name', name, '--credits', '10', '--tier', 'tier-1', '--json');
      const key = await gateway.ctl('keys', 'create', created.account_id!, '--name', `${name}-key`, '--json');
      return { accountId: created.account_id!, provisioningKey: created.provisioning_key!, apiKey: key.api_key! };
    };
    alice = await account('alice');
    bob = await account('bob');
    ledger = createClient(LedgerServiceClient, LedgerServiceService, gateway.stack.addresses.ledger);
    secondEdge = await gateway.startSecondEdge({ name: 'edge-idem-2' });
    boundedEdge = await gateway.startSecondEdge({ name: 'edge-idem-bounded', idempotency: { maxWaitingPerAccount: WAITING } });
  }, 120_000);

  afterAll(async () => {
    ledger?.close();
    await gateway?.stop();
  });

  beforeEach(() => {
    gateway.upstream.reset();
    gateway.upstream.setFallback({ usage: USAGE, text: 'Kept once, answered twice.' });
  });

  const calls = () => gateway.upstream.requests.filter((request) => request.path.endsWith('/chat/completions')).length;

  function post(account: Account, key: string | undefined, body: unknown, options: { url?: string; path?: string; headers?: Record<string, string> } = {}) {
    return fetch(`${options.url ?? gateway.stack.url}${options.path ?? '/v1/chat/completions'}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${account.apiKey}`, 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}), ...options.headers },
      body: JSON.stringify(body),
    });
  }

  const chat = (content: string, extra: Record<string, unknown> = {}) => ({ model: MODEL, messages: [{ role: 'user', content }], ...extra });

  async function charges(account: Account): Promise<{ requests: number; costPico: bigint }> {
    const activity = await ledger.getActivity({ accountId: account.accountId, days: 30, keyId: '' });
    const rows = activity.rows.filter((row) => row.modelId === MODEL);
    return { requests: rows.reduce((sum, row) => sum + row.requests, 0), costPico: rows.reduce((sum, row) => sum + parseCredits(row.credits), 0n) };
  }

  async function balance(account: Account): Promise<bigint> {
    const response = await fetch(`${gateway.stack.url}/v1/account/balance`, { headers: { authorization: `Bearer ${account.provisioningKey}` } });
    expect(response.status).toBe(200);
    return parseCredits(((await response.json()) as { balance: string }).balance);
  }

  /** Waits for `requests` charges in all, then gives the ledger time to show a stray extra one. */
  async function settledAt(account: Account, requests: number): Promise<{ requests: number; costPico: bigint }> {
    await eventually(async () => expect((await charges(account)).requests).toBe(requests), 15_000);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const seen = await charges(account);
    expect(seen.requests).toBe(requests);
    return seen;
  }

  it('the same key and body twice: the same answer, one upstream call, one exact charge', async () => {
    const key = `same-${randomUUID()}`;
    const before = await charges(alice);
    const balanceBefore = await balance(alice);
    const first = await post(alice, key, chat('Charge me once.'));
    expect(first.status).toBe(200);
    const firstText = await first.text();
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    // Key order and spacing do not make another body.
    const second = await fetch(`${gateway.stack.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${alice.apiKey}`, 'content-type': 'application/json', 'idempotency-key': key },
      body: `{ "messages": [ { "content": "Charge me once.", "role": "user" } ], "model": "${MODEL}" }`,
    });
    expect(second.status).toBe(200);
    expect(await second.text()).toBe(firstText);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.headers.get('x-gateway-request-id')).toBe(first.headers.get('x-gateway-request-id'));
    expect(JSON.parse(firstText).usage).toMatchObject({ prompt_tokens: USAGE.prompt_tokens, completion_tokens: USAGE.completion_tokens });
    expect(calls()).toBe(1);
    const after = await settledAt(alice, before.requests + 1);
    expect(after.costPico - before.costPico).toBe(COST);
    await eventually(async () => expect(formatCredits(await balance(alice))).toBe(formatCredits(balanceBefore - COST)), 10_000);
  });

  it('a stream replays its stored events, byte for byte, without a second call or charge', async () => {
    const key = `stream-${randomUUID()}`;
    const before = await charges(alice);
    const body = chat('Stream me once.', { stream: true, stream_options: { include_usage: true } });
    const first = await post(alice, key, body);
    expect(first.status).toBe(200);
    expect(first.headers.get('content-type')).toContain('text/event-stream');
    const events = await first.text();
    expect(events).toContain('Kept once');
    expect(events.trimEnd().endsWith('data: [DONE]')).toBe(true);
    const second = await post(alice, key, body);
    expect(second.status).toBe(200);
    expect(second.headers.get('content-type')).toContain('text/event-stream');
    expect(await second.text()).toBe(events);
    expect(calls()).toBe(1);
    const after = await settledAt(alice, before.requests + 1);
    expect(after.costPico - before.costPico).toBe(COST);
  });

  it('the same key with another body is a 422 idempotency_key_reused, and calls nothing', async () => {
    const key = `reused-${randomUUID()}`;
    const before = await charges(alice);
    expect((await post(alice, key, chat('First body.'))).status).toBe(200);
    const other = await post(alice, key, chat('Second body.'));
    expect(other.status).toBe(422);
    const error = ((await other.json()) as { error: { code: string; type: string } }).error;
    expect(error.code).toBe('idempotency_key_reused');
    expect(error.type).toBe('invalid_request_error');
    // Another route with the same body is another request too.
    const messages = await post(alice, key, { ...chat('First body.'), max_tokens: 64 }, { path: '/v1/messages' });
    expect(messages.status).toBe(422);
    expect(((await messages.json()) as { type: string; error: { type: string } }).type).toBe('error');
    expect(calls()).toBe(1);
    expect((await settledAt(alice, before.requests + 1)).costPico - before.costPico).toBe(COST);
  });

  it('the headers that change the answer are bound to the key: another anthropic-beta or routing strategy is a 422, the same ones replay', async () => {
    const key = `headers-${randomUUID()}`;
    const before = await charges(alice);
    const body = { ...chat('Bound with its headers.'), max_tokens: 64 };
    const beta = { 'anthropic-beta': 'prompt-caching-2024-07-31' };
    const first = await post(alice, key, body, { path: '/v1/messages', headers: beta });
    expect(first.status).toBe(200);
    const firstText = await first.text();
    const others: Record<string, string>[] = [{}, { 'anthropic-beta': 'token-efficient-tools-2025-02-19' }, { ...beta, 'x-gateway-routing-strategy': 'latency' }];
    for (const headers of others) {
      const other = await post(alice, key, body, { path: '/v1/messages', headers });
      expect(other.status, JSON.stringify(headers)).toBe(422);
      expect(((await other.json()) as { error: { type: string } }).error.type).toBe('invalid_request_error');
    }
    const again = await post(alice, key, body, { path: '/v1/messages', headers: beta });
    expect(again.status).toBe(200);
    expect(await again.text()).toBe(firstText);
    expect(calls()).toBe(1);
    expect((await settledAt(alice, before.requests + 1)).costPico - before.costPico).toBe(COST);
  });

  it('concurrent duplicates on two edge replicas: one upstream call, both get the answer', async () => {
    gateway.upstream.setFallback({ usage: USAGE, text: 'Slow and single.', latencyMs: 800 });
    const key = `concurrent-${randomUUID()}`;
    const before = await charges(alice);
    const body = chat('Only one of us goes upstream.');
    const answers = await Promise.all([post(alice, key, body), post(alice, key, body, { url: secondEdge.url }), post(alice, key, body)]);
    const texts = await Promise.all(answers.map((answer) => answer.text()));
    expect(answers.map((answer) => answer.status)).toEqual([200, 200, 200]);
    expect(new Set(texts).size).toBe(1);
    expect(answers.filter((answer) => answer.headers.get('idempotent-replayed') === 'true')).toHaveLength(2);
    expect(calls()).toBe(1);
    const after = await settledAt(alice, before.requests + 1);
    expect(after.costPico - before.costPico).toBe(COST);
  });

  it(`duplicates waiting on a slow original are bounded per account: past ${WAITING} a duplicate is a 409 at once; another account still waits; the original completes and is charged once`, async () => {
    gateway.upstream.setFallback({ usage: USAGE, text: 'Slow original.', latencyMs: 1_500 });
    const key = `waiters-${randomUUID()}`;
    const bobKey = `waiters-bob-${randomUUID()}`;
    const before = await charges(alice);
    const bobBefore = await charges(bob);
    const body = chat('One original, many duplicates.');
    const original = post(alice, key, body);
    const bobOriginal = post(bob, bobKey, body);
    await eventually(() => expect(calls()).toBe(2), 5_000);
    const waiting = Array.from({ length: WAITING }, () => post(alice, key, body, { url: boundedEdge.url }));
    await new Promise((resolve) => setTimeout(resolve, 200));
    // Past the account's bound: answered at once, while the original still runs.
    const started = Date.now();
    const refused = await Promise.all(Array.from({ length: 3 }, () => post(alice, key, body, { url: boundedEdge.url })));
    expect(Date.now() - started).toBeLessThan(1_000);
    for (const response of refused) {
      expect(response.status).toBe(409);
      expect(response.headers.get('retry-after')).toBe('1');
      const error = ((await response.json()) as { error: { type: string; code: string; message: string } }).error;
      expect(error).toMatchObject({ type: 'invalid_request_error', code: 'idempotency_key_in_progress' });
    }
    // Another account's duplicate on the same edge is not refused for Alice's waiters.
    const bobDuplicate = post(bob, bobKey, body, { url: boundedEdge.url });
    const answers = await Promise.all([original, ...waiting, bobOriginal, bobDuplicate]);
    expect(answers.map((answer) => answer.status)).toEqual(Array.from({ length: WAITING + 3 }, () => 200));
    const texts = await Promise.all(answers.slice(0, WAITING + 1).map((answer) => answer.text()));
    expect(new Set(texts).size).toBe(1);
    expect(answers[answers.length - 1]!.headers.get('idempotent-replayed')).toBe('true');
    expect(calls()).toBe(2);
    expect((await settledAt(alice, before.requests + 1)).costPico - before.costPico).toBe(COST);
    expect((await settledAt(bob, bobBefore.requests + 1)).costPico - bobBefore.costPico).toBe(COST);
  });

  it('keys are per account: another account with the same key gets its own answer and charge', async () => {
    const key = `shared-${randomUUID()}`;
    const aliceBefore = await charges(alice);
    const bobBefore = await charges(bob);
    const body = chat('Same key, two accounts.');
    expect((await post(alice, key, body)).status).toBe(200);
    const bobs = await post(bob, key, body);
    expect(bobs.status).toBe(200);
    expect(bobs.headers.get('idempotent-replayed')).toBeNull();
    expect(calls()).toBe(2);
    // Bob's key with another body is not bound by Alice's.
    expect((await post(bob, `${key}-b`, chat('Bob alone.'))).status).toBe(200);
    expect((await settledAt(alice, aliceBefore.requests + 1)).costPico - aliceBefore.costPico).toBe(COST);
    expect((await settledAt(bob, bobBefore.requests + 2)).costPico - bobBefore.costPico).toBe(2n * COST);
  });

  it('a 5xx first attempt is not kept: the retry with the same key calls upstream again, and that answer is kept', async () => {
    gateway.upstream.setFallback({ status: 500 });
    const key = `retry-${randomUUID()}`;
    const before = await charges(alice);
    const body = chat('Fail first, then work.');
    const failed = await post(alice, key, body);
    expect(failed.status).toBeGreaterThanOrEqual(500);
    await failed.text();
    const failedCalls = calls();
    expect(failedCalls).toBeGreaterThanOrEqual(1);
    gateway.upstream.setFallback({ usage: USAGE, text: 'Second time lucky.' });
    // The failed first request released the key as its response closed: the retry runs.
    let retried: Response | undefined;
    await eventually(async () => {
      retried = await post(alice, key, body);
      expect(retried.status).toBe(200);
    }, 5_000);
    const retriedText = await retried!.text();
    expect(retriedText).toContain('Second time lucky.');
    expect(calls()).toBe(failedCalls + 1);
    const third = await post(alice, key, body);
    expect(await third.text()).toBe(retriedText);
    expect(third.headers.get('idempotent-replayed')).toBe('true');
    expect(calls()).toBe(failedCalls + 1);
    const after = await settledAt(alice, before.requests + 1);
    expect(after.costPico - before.costPico).toBe(COST);
  });

  it('a stream that failed after its first content is not kept: the same key runs again', async () => {
    gateway.upstream.setFallback({ usage: USAGE, text: 'one two three four', chunkCount: 4, cutAfterChunks: 1 });
    const key = `cut-${randomUUID()}`;
    const before = await charges(alice);
    const body = chat('Cut me.', { stream: true, stream_options: { include_usage: true } });
    const cut = await post(alice, key, body);
    expect(cut.status).toBe(200);
    const cutEvents = await cut.text();
    expect(cutEvents).toContain('"error"');
    const cutCalls = calls();
    gateway.upstream.setFallback({ usage: USAGE, text: 'Whole this time.' });
    const whole = await post(alice, key, body);
    const wholeEvents = await whole.text();
    expect(whole.headers.get('idempotent-replayed')).toBeNull();
    expect(wholeEvents).not.toContain('"error"');
    expect(wholeEvents.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(calls()).toBe(cutCalls + 1);
    const replayed = await post(alice, key, body);
    expect(await replayed.text()).toBe(wholeEvents);
    expect(calls()).toBe(cutCalls + 1);
    // The cut stream was charged for what it delivered, the whole one once.
    await settledAt(alice, before.requests + 2);
  });

  it('an endpoint family (embeddings) answers a duplicate from the record', async () => {
    const key = `embed-${randomUUID()}`;
    const body = { model: EMBEDDING_MODEL, input: ['kept', 'vectors'] };
    const first = await post(alice, key, body, { path: '/v1/embeddings' });
    expect(first.status).toBe(200);
    const firstText = await first.text();
    expect(JSON.parse(firstText).data).toHaveLength(2);
    const second = await post(alice, key, body, { path: '/v1/embeddings' });
    expect(await second.text()).toBe(firstText);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(gateway.upstream.requests.filter((request) => request.path.endsWith('/embeddings'))).toHaveLength(1);
  });

  it('a multipart upload (image edits) is the same body whatever boundary the client picked', async () => {
    const key = `edit-${randomUUID()}`;
    const pictureBytes = solidPng(16, 90);
    const send = (prompt: string) => {
      // A new FormData each time: the client picks a new multipart boundary for every request.
      const form = new FormData();
      form.append('model', IMAGE_MODEL);
      form.append('prompt', prompt);
      form.append('response_format', 'b64_json');
      form.append('image', new Blob([new Uint8Array(pictureBytes)], { type: 'image/png' }), 'in.png');
      return fetch(`${gateway.stack.url}/v1/images/edits`, { method: 'POST', headers: { authorization: `Bearer ${alice.apiKey}`, 'idempotency-key': key }, body: form });
    };
    const first = await send('add a hat');
    expect(first.status).toBe(200);
    const firstText = await first.text();
    const second = await send('add a hat');
    expect(second.status).toBe(200);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(await second.text()).toBe(firstText);
    expect((await send('add a scarf')).status).toBe(422);
    expect(gateway.upstream.requests.filter((request) => request.path.endsWith('/images/edits'))).toHaveLength(1);
  });

  it('requests without the header are never deduplicated; a malformed key is a 400 before any call', async () => {
    const body = chat('No key, no memory.');
    const before = await charges(alice);
    expect((await post(alice, undefined, body)).status).toBe(200);
    expect((await post(alice, undefined, body)).status).toBe(200);
    expect(calls()).toBe(2);
    const tooLong = await post(alice, 'k'.repeat(256), body);
    expect(tooLong.status).toBe(400);
    expect(((await tooLong.json()) as { error: { code: string } }).error.code).toBe('invalid_idempotency_key');
    expect(calls()).toBe(2);
    await settledAt(alice, before.requests + 2);
  });
});

// `npm start` runs every service in one process on the in-process bus: the records live in its memory.
describe('Idempotency-Key on the in-process bus (single-process mode)', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let upstream: FakeUpstream;
  let stack: RunningStack;
  let directory: string;
  let ledger: ReturnType<typeof createClient<LedgerServiceClient>>;
  const STORE_BYTES = 1024 * 1024;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    directory = await mkdtemp(join(tmpdir(), 'gateway-idempotency-memory-'));
    const configPath = join(directory, 'gateway.yaml');
    await writeFile(
      configPath,
      oneModelCatalog({
        model: MODEL,
        provider: { kind: 'openai', url: upstream.url, keyEnv: 'IDEM_KEY' },
        upstreamModel: 'idem-upstream',
        supportedParameters: ['stream_options'],
        endpoints: ['chat.completions'],
        inputPrice: INPUT_PRICE,
        outputPrice: OUTPUT_PRICE,
      }),
    );
    database = await createTestDatabase();
    testBus = await createTestBus('memory');
    stack = await startTestStack(database, testBus, {
      configPath,
      keyHashSecret: 'idempotency-e2e-secret-0123456789ab',
      providerSecrets: { IDEM_KEY: 'sk-idem' },
      // A small store, so that one account can write past it in a test.
      edge: { idempotency: { maxBucketBytes: STORE_BYTES, maxAccountBytes: STORE_BYTES / 8 } },
    });
    ledger = createClient(LedgerServiceClient, LedgerServiceService, stack.addresses.ledger);
  }, 120_000);

  afterAll(async () => {
    ledger?.close();
    await stack?.stop();
    await testBus?.destroy();
    await database?.drop();
    await upstream?.close();
    if (directory) await rm(directory, { recursive: true, force: true });
  });

  it('concurrent duplicates and a later one: one upstream call, one answer; another body 422', async () => {
    upstream.setFallback({ usage: USAGE, latencyMs: 300 });
    const created = await ctlJson(stack, 'accounts', 'create', '--name', 'solo', '--credits', '10', '--tier', 'tier-1', '--json');
    const apiKey = (await ctlJson(stack, 'keys', 'create', created.account_id!, '--name', 'solo-key', '--json')).api_key!;
    const send = (content: string) =>
      fetch(`${stack.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'idempotency-key': 'solo-key-1' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }] }),
      });
    const answers = await Promise.all([send('Once.'), send('Once.')]);
    const texts = await Promise.all(answers.map((answer) => answer.text()));
    expect(answers.map((answer) => answer.status)).toEqual([200, 200]);
    expect(texts[1]).toBe(texts[0]);
    const later = await send('Once.');
    expect(await later.text()).toBe(texts[0]);
    expect(later.headers.get('idempotent-replayed')).toBe('true');
    expect((await send('Twice?')).status).toBe(422);
    expect(upstream.requests).toHaveLength(1);
  });

  it('one account filling the store never evicts another account\'s record: the other\'s retry gets its kept answer and is charged once', async () => {
    const create = async (name: string) => {
      const created = await ctlJson(stack, 'accounts', 'create', '--name', name, '--credits', '10', '--tier', 'tier-1', '--json');
      return { accountId: created.account_id!, apiKey: (await ctlJson(stack, 'keys', 'create', created.account_id!, '--name', `${name}-key`, '--json')).api_key! };
    };
    const filler = await create('filler');
    const keeper = await create('keeper');
    const send = (apiKey: string, key: string, content: string) =>
      fetch(`${stack.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }] }),
      });
    const requestsOf = async (accountId: string) =>
      (await ledger.getActivity({ accountId, days: 30, keyId: '' })).rows.filter((row) => row.modelId === MODEL).reduce((sum, row) => sum + row.requests, 0);
    const costOf = async (accountId: string) =>
      (await ledger.getActivity({ accountId, days: 30, keyId: '' })).rows.filter((row) => row.modelId === MODEL).reduce((sum, row) => sum + parseCredits(row.credits), 0n);
    upstream.reset();
    upstream.setFallback({ usage: USAGE, text: 'y'.repeat(40_000) });
    const first = await send(keeper.apiKey, 'keeper-1', 'Keep me.');
    expect(first.status).toBe(200);
    const kept = await first.text();
    // The filler writes well past the whole store (each answer ~40 KB, 40 of them).
    for (let index = 0; index < 40; index++) {
      const answer = await send(filler.apiKey, `filler-${index}`, `Fill ${index}.`);
      expect(answer.status).toBe(200);
      await answer.arrayBuffer();
    }
    expect(upstream.requests).toHaveLength(41);
    const retry = await send(keeper.apiKey, 'keeper-1', 'Keep me.');
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await retry.text()).toBe(kept);
    expect(upstream.requests).toHaveLength(41);
    // The filler's own oldest went (its retry runs again), its newest is kept.
    const newest = await send(filler.apiKey, 'filler-39', 'Fill 39.');
    expect(newest.headers.get('idempotent-replayed')).toBe('true');
    await newest.arrayBuffer();
    expect(upstream.requests).toHaveLength(41);
    const oldest = await send(filler.apiKey, 'filler-0', 'Fill 0.');
    expect(oldest.headers.get('idempotent-replayed')).toBeNull();
    await oldest.arrayBuffer();
    expect(upstream.requests).toHaveLength(42);
    // The keeper's ledger rows: one charge, exactly the usage's price.
    await eventually(async () => expect(await requestsOf(keeper.accountId)).toBe(1), 15_000);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(await requestsOf(keeper.accountId)).toBe(1);
    expect(await costOf(keeper.accountId)).toBe(COST);
  }, 60_000);
});
