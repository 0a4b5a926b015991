import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { oneModelCatalog, pricedTokens, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { anthropicClient, expectWellFormedStream, rawPost } from './messages-e2e-harness.js';

/*
 * Every streamed answer ends with its dialect's terminal event, on both router transports, on the Node
 * major the image runs (package.json's engines; `npm test` runs on it through scripts/node-major.sh).
 * Issue 24: on Node 22 the edge's corked writes of a router turn were dropped when the stream ended in
 * the same tick, so every stream longer than a few chunks was cut before its finish_reason / [DONE],
 * message_stop or response.completed while the 200 closed cleanly — and was charged in full.
 * Each stream here is long (48 content chunks, from the fake OpenAI-compatible provider), read by the
 * real SDK and as raw SSE, and must be charged exactly once at the usage the provider reported.
 */

const MODEL = 'testco/long';
const PROVIDER_KEY_ENV = 'STREAM_COMPLETENESS_KEY';
const CHUNKS = 48;
const TEXT = Array.from({ length: CHUNKS }, (_, index) => `w${String(index).padStart(2, '0')}`).join(' ');
const USAGE = { prompt_tokens: 13, completion_tokens: CHUNKS };
const INPUT_PRICE = '0.000001';
const OUTPUT_PRICE = '0.000002';
const COST = pricedTokens(USAGE.prompt_tokens, USAGE.completion_tokens, INPUT_PRICE, OUTPUT_PRICE);

function catalog(upstream: FakeUpstream): string {
  return oneModelCatalog({
    model: MODEL,
    provider: { kind: 'openai', url: upstream.url, keyEnv: PROVIDER_KEY_ENV },
    upstreamModel: 'long-upstream',
    supportedParameters: ['max_tokens', 'max_completion_tokens', 'stream_options'],
    endpoints: ['chat.completions', 'messages', 'responses'],
    inputPrice: INPUT_PRICE,
    outputPrice: OUTPUT_PRICE,
    perMinute: 1000,
  });
}

/** The `data:` payloads of a chat-completions SSE body, in order. */
function chatFrames(body: string): string[] {
  return body
    .split('\n\n')
    .filter((frame) => frame.trim() !== '' && !frame.startsWith(':'))
    .map((frame) => {
      expect(frame.startsWith('data: '), frame).toBe(true);
      return frame.slice('data: '.length);
    });
}

it("runs on the Node major package.json's engines names (the image's)", () => {
  const range = (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { engines: { node: string } }).engines.node;
  const major = /^\s*(?:>=|\^|~)?\s*v?(\d+)/.exec(range)?.[1];
  expect(major, `engines.node ${range}`).toBeDefined();
  expect(`${process.versions.node.split('.')[0]}`, 'run the tests through `npm test` (scripts/node-major.sh)').toBe(major);
});

describe.each(['exchange', 'calls'] as const)(`streams end with their terminal event over the %s router transport (node ${process.versions.node})`, (transport) => {
  let upstream: FakeUpstream;
  let harness: ChatHarness;
  /** The model's charges so far: each stream must add exactly one, of COST. */
  let settled = { requests: 0, costPico: 0n };

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    upstream.setFallback({ text: TEXT, chunkCount: CHUNKS, usage: USAGE });
    harness = await startChatHarness({
      configYaml: catalog(upstream),
      providerSecrets: { [PROVIDER_KEY_ENV]: 'sk-stream-completeness' },
      edge: { routerTransport: transport },
    });
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [upstream]));

  const chargedOnceInFull = async () => {
    const now = await harness.chargesSettleAt(MODEL, settled.requests + 1);
    expect(now.costPico - settled.costPico).toBe(COST);
    settled = now;
  };
  const auth = () => ({ authorization: `Bearer ${harness.apiKey}` });

  it('chat: the openai SDK gets every delta, the finish_reason and the usage chunk', async () => {
    const stream = await harness.client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'Say the words.' }], stream: true, stream_options: { include_usage: true },
    });
    let text = '';
    const finishReasons: (string | null)[] = [];
    let usage: unknown;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.choices[0]?.finish_reason) finishReasons.push(chunk.choices[0].finish_reason);
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(TEXT);
    expect(finishReasons).toEqual(['stop']);
    expect(usage).toMatchObject(USAGE);
    await chargedOnceInFull();
  });

  it('chat, raw SSE: a chunk with finish_reason, then data: [DONE] last', async () => {
    const response = await fetch(`${harness.stack.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say the words.' }], stream: true }),
    });
    expect(response.status).toBe(200);
    const frames = chatFrames(await response.text());
    expect(frames.at(-1)).toBe('[DONE]');
    const chunks = frames.slice(0, -1).map((frame) => JSON.parse(frame) as { choices: { delta: { content?: string }; finish_reason: string | null }[] });
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('stop');
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? '').join('')).toBe(TEXT);
    await chargedOnceInFull();
  });

  it('messages: the anthropic SDK gets every text delta, then message_delta and message_stop', async () => {
    const client = anthropicClient(harness.stack.url, harness.apiKey);
    const stream = await client.messages.create({ model: MODEL, max_tokens: 200, messages: [{ role: 'user', content: 'Say the words.' }], stream: true });
    const types: string[] = [];
    let text = '';
    let outputTokens = -1;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
      if (event.type === 'message_delta') outputTokens = event.usage.output_tokens;
    }
    expect(text).toBe(TEXT);
    expect(types.filter((type) => type !== 'ping').slice(-2)).toEqual(['message_delta', 'message_stop']);
    expect(outputTokens).toBe(USAGE.completion_tokens);
    await chargedOnceInFull();
  });

  it('messages, raw SSE: a well-formed stream ending with message_stop', async () => {
    const answer = await rawPost(`${harness.stack.url}/v1/messages`, { 'x-api-key': harness.apiKey, 'anthropic-version': '2023-06-01' }, {
      model: MODEL, max_tokens: 200, messages: [{ role: 'user', content: 'Say the words.' }], stream: true,
    });
    expect(answer.status).toBe(200);
    expect(expectWellFormedStream(answer.events)).toEqual(['text']);
    expect(answer.events.at(-1)!.event).toBe('message_stop');
    const text = answer.events.filter((event) => event.event === 'content_block_delta').map((event) => event.data.delta.text as string).join('');
    expect(text).toBe(TEXT);
    await chargedOnceInFull();
  });

  it('responses: the openai SDK gets every output_text delta and response.completed last', async () => {
    const stream = await harness.client.responses.create({ model: MODEL, input: 'Say the words.', stream: true });
    const types: string[] = [];
    let text = '';
    let completed: { output_text?: string; usage?: { input_tokens: number; output_tokens: number } | null } | undefined;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') completed = event.response;
    }
    expect(text).toBe(TEXT);
    expect(types.at(-1)).toBe('response.completed');
    expect(completed?.usage).toMatchObject({ input_tokens: USAGE.prompt_tokens, output_tokens: USAGE.completion_tokens });
    await chargedOnceInFull();
  });

  it('responses, raw SSE: response.completed is the last event', async () => {
    const answer = await rawPost(`${harness.stack.url}/v1/responses`, auth(), { model: MODEL, input: 'Say the words.', stream: true });
    expect(answer.status).toBe(200);
    const names = answer.events.map((event) => event.event);
    expect(names[0]).toBe('response.created');
    expect(names.slice(-4)).toEqual(['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
    expect(answer.events.at(-1)!.data.response.status).toBe('completed');
    await chargedOnceInFull();
  });
});
