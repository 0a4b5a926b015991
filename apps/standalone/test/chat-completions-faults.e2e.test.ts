import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { formatCredits, parseCredits } from '@gateway/platform';
import { eventually, startFakeUpstream, type FakeBehaviour, type FakeUpstream } from '@gateway/testing';
import { failFirstAttempt, pricedTokens, resetFakes, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { catalogYaml, tokenPricing, type CatalogModel } from './catalog-yaml.js';

// Fault tolerance of chat completions through the whole stack, driven by the real `openai` client:
// two OpenAI-compatible fake upstreams serve one model; each fault on the first attempt must be
// absorbed by the other provider with exactly one charge, failures after content must end the
// stream with an error, and requests nobody served must cost nothing.

const MODEL = 'testco/dual';
const SLOW_MODEL = 'testco/slow';
const INPUT_PRICE = '0.000001';
const OUTPUT_PRICE = '0.000002';
const ATTEMPT_TIMEOUT_MS = 1_000;

function config(first: FakeUpstream, second: FakeUpstream, slowUrl: string): string {
  const model = (id: string, offers: { provider: string; upstreamModel: string }[]): CatalogModel => ({
    id,
    supportedParameters: ['temperature', 'max_completion_tokens', 'stream_options'],
    pricing: tokenPricing(INPUT_PRICE, OUTPUT_PRICE),
    offers: offers.map((offer) => ({ ...offer, endpoints: ['chat.completions'] })),
  });
  return catalogYaml({
    providers: [
      { id: 'upstream-one', kind: 'openai', url: first.url, keyEnv: 'FAULTS_KEY' },
      { id: 'upstream-two', kind: 'openai', url: second.url, keyEnv: 'FAULTS_KEY' },
      { id: 'upstream-slow', kind: 'openai', url: slowUrl, keyEnv: 'FAULTS_KEY' },
    ],
    models: [
      model(MODEL, [{ provider: 'upstream-one', upstreamModel: 'dual-a' }, { provider: 'upstream-two', upstreamModel: 'dual-b' }]),
      model(SLOW_MODEL, [{ provider: 'upstream-slow', upstreamModel: 'slow' }]),
    ],
  });
}

/** An upstream that streams a word every `intervalMs` for a long time, and notes when its client hung up. */
async function startSlowUpstream(intervalMs: number) {
  const state = { requests: 0, closedAt: 0, chunksSent: 0 };
  const server: Server = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      state.requests++;
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      let sent = 0;
      const timer = setInterval(() => {
        if (sent >= 600) {
          clearInterval(timer);
          response.end('data: [DONE]\n\n');
          return;
        }
        const chunk = { id: 'chatcmpl-slow', object: 'chat.completion.chunk', created: 1, model: 'slow', choices: [{ index: 0, delta: { content: `word${sent} ` }, finish_reason: null }] };
        response.write(`data: ${JSON.stringify(chunk)}\n\n`);
        sent++;
        state.chunksSent = sent;
      }, intervalMs);
      response.on('close', () => {
        clearInterval(timer);
        state.closedAt = Date.now();
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    state,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('chat completions fault tolerance, end to end', () => {
  let one: FakeUpstream;
  let two: FakeUpstream;
  let slow: Awaited<ReturnType<typeof startSlowUpstream>>;
  let harness: ChatHarness;

  beforeAll(async () => {
    one = await startFakeUpstream();
    two = await startFakeUpstream();
    slow = await startSlowUpstream(100);
    harness = await startChatHarness({
      configYaml: config(one, two, slow.url),
      providerSecrets: { FAULTS_KEY: 'sk-faults' },
      routing: { attemptTimeoutMs: ATTEMPT_TIMEOUT_MS, maxAttempts: 3 },
    });
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [one, two, slow]));

  beforeEach(() => resetFakes([one, two]));


  const attempts = () => [...one.requests.map(() => 'one'), ...two.requests.map(() => 'two')];

  /** Runs `request`, then checks that exactly one charge of `expectedCost` (when given) landed, and the balance moved by it. */
  async function expectOneCharge(request: () => Promise<bigint | undefined>): Promise<bigint> {
    const before = await harness.charges(MODEL);
    const balanceBefore = parseCredits(await harness.balance());
    const expectedCost = await request();
    const after = await harness.chargesSettleAt(MODEL, before.requests + 1);
    const cost = after.costPico - before.costPico;
    expect(cost).toBeGreaterThan(0n);
    if (expectedCost !== undefined) expect(cost).toBe(expectedCost);
    await eventually(async () => expect(await harness.balance()).toBe(formatCredits(balanceBefore - cost)), 10_000);
    return cost;
  }

  /** No charge: a later, served request settles alone (the ledger settles events in order). */
  async function expectNoCharge(request: () => Promise<void>) {
    const before = await harness.charges(MODEL);
    const balanceBefore = parseCredits(await harness.balance());
    await request();
    one.setFallback({});
    two.setFallback({});
    const sentinel = await harness.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'sentinel' }] });
    const sentinelCost = pricedTokens(sentinel.usage!.prompt_tokens, sentinel.usage!.completion_tokens, INPUT_PRICE, OUTPUT_PRICE);
    const after = await harness.chargesSettleAt(MODEL, before.requests + 1);
    expect(after.costPico - before.costPico).toBe(sentinelCost);
    await eventually(async () => expect(await harness.balance()).toBe(formatCredits(balanceBefore - sentinelCost)), 10_000);
  }

  const faults: Array<[string, FakeBehaviour]> = [
    ['connection reset', { reset: true }],
    ['HTTP 500', { status: 500 }],
    ['HTTP 429', { status: 429 }],
    ['timeout (no answer)', { stall: true }],
  ];

  it.each(faults)('non-streamed, %s on the first provider: served by the other, charged once', async (_name, fault) => {
    failFirstAttempt([one, two], fault);
    await expectOneCharge(async () => {
      const completion = await harness.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hello there, gateway.' }] });
      expect(completion.choices[0]!.message.content).toBe('Hello from the fake upstream.');
      expect(attempts().sort()).toEqual(['one', 'two']);
      return pricedTokens(completion.usage!.prompt_tokens, completion.usage!.completion_tokens, INPUT_PRICE, OUTPUT_PRICE);
    });
  });

  const streamFaults: Array<[string, FakeBehaviour]> = [
    ...faults.filter(([name]) => name !== 'timeout (no answer)'),
    ['stall before the first chunk', { stallAfterChunks: 0 }],
    ['cut before the first chunk', { cutAfterChunks: 0 }],
  ];

  it.each(streamFaults)('streamed, %s on the first provider: served by the other, charged once', async (_name, fault) => {
    failFirstAttempt([one, two], fault);
    await expectOneCharge(async () => {
      const stream = await harness.client.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: 'Stream to me, gateway.' }],
        stream: true,
        stream_options: { include_usage: true },
      });
      let text = '';
      let usage: OpenAI.CompletionUsage | undefined;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta?.content ?? '';
        if (chunk.usage) usage = chunk.usage;
      }
      expect(text).toBe('Hello from the fake upstream.');
      expect(attempts().sort()).toEqual(['one', 'two']);
      return pricedTokens(usage!.prompt_tokens, usage!.completion_tokens, INPUT_PRICE, OUTPUT_PRICE);
    });
  });

  it('a stream cut after its first chunk ends with an error (no switch), charged once for what was delivered', async () => {
    failFirstAttempt([one, two], { cutAfterChunks: 1, chunkCount: 3 });
    await expectOneCharge(async () => {
      const stream = await harness.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Stream and fail.' }], stream: true });
      let text = '';
      const error = await (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      })().then(() => undefined, (caught: unknown) => caught);
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect(text.length).toBeGreaterThan(0);
      expect(text.length).toBeLessThan('Hello from the fake upstream.'.length);
      expect(attempts()).toHaveLength(1);
      return undefined; // counted by the gateway's tokenizer: the provider never sent usage
    });
  });

  it('every provider failing: 503 "No upstream available." with Retry-After, and no charge', async () => {
    await expectNoCharge(async () => {
      one.setFallback({ status: 500 });
      two.setFallback({ status: 503 });
      const { response } = await harness.client.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'anyone?' }] })
        .withResponse()
        .then(() => ({ response: undefined }), (error: unknown) => ({ response: error as InstanceType<typeof OpenAI.APIError> }));
      expect(response).toBeInstanceOf(OpenAI.APIError);
      expect(response!.status).toBe(503);
      expect(response!.message).toMatch(/No upstream available\./);
      expect(Number(response!.headers?.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(attempts().sort()).toEqual(['one', 'two']);

      // The same when streaming: nothing was sent, so it is still a plain 503.
      one.reset();
      two.reset();
      one.setFallback({ reset: true });
      two.setFallback({ stallAfterChunks: 0 });
      const streamed = await harness.client.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'anyone?' }], stream: true })
        .then(() => undefined, (error: unknown) => error as InstanceType<typeof OpenAI.APIError>);
      expect(streamed?.status).toBe(503);
      expect(streamed?.headers?.get('retry-after')).toBeTruthy();
    });
  });

  it('a provider refusing the request: 400 "Upstream returned an error: ..." without failover, and no charge', async () => {
    await expectNoCharge(async () => {
      const refusal = { status: 400, errorBody: { error: { message: "Invalid 'messages[0].content': too long.", type: 'invalid_request_error' } } };
      one.setFallback(refusal);
      two.setFallback(refusal);
      const error = await harness.client.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'refuse me' }] })
        .then(() => undefined, (caught: unknown) => caught as InstanceType<typeof OpenAI.APIError>);
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
      expect(error!.message).toContain("Upstream returned an error: Invalid 'messages[0].content': too long.");
      expect(attempts()).toHaveLength(1);

      const streamed = await harness.client.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'refuse me' }], stream: true })
        .then(() => undefined, (caught: unknown) => caught as InstanceType<typeof OpenAI.APIError>);
      expect(streamed).toBeInstanceOf(OpenAI.BadRequestError);
      expect(streamed!.message).toContain('Upstream returned an error:');
    });
  });

  it('a client that disconnects mid-stream cancels the upstream within 1 s and is charged once for what was generated', async () => {
    const before = await harness.charges(SLOW_MODEL);
    const controller = new AbortController();
    const stream = await harness.client.chat.completions.create(
      { model: SLOW_MODEL, messages: [{ role: 'user', content: 'Take your time.' }], stream: true },
      { signal: controller.signal },
    );
    let received = 0;
    let abortedAt = 0;
    const ended = await (async () => {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta?.content) received++;
        if (received === 3) {
          abortedAt = Date.now();
          controller.abort();
        }
      }
    })().then(() => undefined, (caught: unknown) => caught);
    // The SDK ends an aborted stream quietly (or with APIUserAbortError, depending on timing).
    if (ended !== undefined) expect(ended).toBeInstanceOf(OpenAI.APIUserAbortError);
    expect(received).toBe(3);
    await eventually(() => expect(slow.state.closedAt).toBeGreaterThan(0), 3_000);
    expect(slow.state.closedAt - abortedAt).toBeLessThan(1_000);
    expect(slow.state.requests).toBe(1);
    const after = await harness.chargesSettleAt(SLOW_MODEL, before.requests + 1);
    const cost = after.costPico - before.costPico;
    expect(cost).toBeGreaterThan(0n);
    // At least the prompt plus the three words the client saw; at most what the upstream produced.
    const generatedWords = slow.state.chunksSent;
    expect(cost).toBeGreaterThanOrEqual(pricedTokens(1, 3, INPUT_PRICE, OUTPUT_PRICE));
    expect(cost).toBeLessThanOrEqual(pricedTokens(100, generatedWords * 4, INPUT_PRICE, OUTPUT_PRICE));
    // Nothing else arrives later.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await harness.charges(SLOW_MODEL)).toEqual(after);
  });
});
