import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type OpenAI from 'openai';
import type Anthropic from '@anthropic-ai/sdk';
import { startFakeAnthropicUpstream, startFakeGeminiUpstream, startFakeUpstream, type FakeAnthropicUpstream, type FakeGeminiUpstream, type FakeUpstream } from '@gateway/testing';
import { resetFakes, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { anthropicClient } from './messages-e2e-harness.js';

// The table of forwarded parameters (apps/edge/src/canonical/parameters.ts), end to end with the real
// SDKs: every parameter a dialect has reaches the provider on a model that lists it, and on a model
// that lists nothing none reaches it and each is named in x-gateway-dropped-params as the client spelled it.

const EVERYTHING = 'testco/everything';
const BARE = 'testco/bare';
// A model that lists a seed, served by a kind that has one (Gemini) and by one that has none (Anthropic).
const SEEDED_CLAUDE = 'testco/seeded-claude';
const SEEDED_GEMINI = 'testco/seeded-gemini';
// Served by both kinds: what is named is what the serving attempt went without.
const SEEDED_BOTH = 'testco/seeded-both';
// Lists `n`, served by an OpenAI-kind upstream (its own model: its charges are this test's alone).
const CHOICES = 'testco/choices';
// Lists `n` and logprobs, served by a Gemini-kind upstream only (its own model: its charges are this test's alone).
const GEMINI_CHOICES = 'testco/gemini-choices';
const PROVIDER_KEY_ENV = 'FORWARDED_PARAMETERS_E2E_KEY';
const ALL_NAMES = [
  'tools', 'tool_choice', 'response_format', 'structured_outputs', 'temperature', 'top_p', 'top_k', 'stop', 'max_completion_tokens', 'max_tokens',
  'reasoning_effort', 'reasoning', 'presence_penalty', 'frequency_penalty', 'parallel_tool_calls', 'prediction', 'web_search_options', 'image_config', 'user', 'seed', 'verbosity', 'store', 'logprobs', 'top_logprobs',
  'n',
];

function catalog(upstream: FakeUpstream, claude: FakeAnthropicUpstream, gemini: FakeGeminiUpstream): string {
  const model = (id: string, supported: readonly string[], provider = 'upstream') => `
  - id: ${id}
    owned_by: testco
    created: 1767225600
    input_modalities: [text]
    output_modalities: [text]
    supported_parameters: [${supported.join(', ')}]
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002" }
    limit_group: default
    offers:
      - { provider: ${provider}, upstream_model: ${id.split('/')[1]}-upstream, endpoints: [chat.completions, responses, messages] }`;
  return `
startups:
  - { id: testco, display_name: Test Co }
providers:
  - { id: upstream, kind: openai, base_url: ${upstream.url}, api_key_env: ${PROVIDER_KEY_ENV} }
  - { id: claude-up, kind: anthropic, base_url: ${claude.url}, api_key_env: ${PROVIDER_KEY_ENV} }
  - { id: gemini-up, kind: gemini, base_url: ${gemini.url}, api_key_env: ${PROVIDER_KEY_ENV} }
limit_groups:
  - id: default
    tiers: { tier-1: { minute: 600 } }
models:${model(EVERYTHING, ALL_NAMES)}${model(CHOICES, ['n', 'max_completion_tokens'])}${model(BARE, [])}${model(SEEDED_CLAUDE, ['seed', 'verbosity', 'reasoning', 'max_tokens', 'max_completion_tokens', 'n', 'logprobs', 'top_logprobs'], 'claude-up')}${model(
    SEEDED_GEMINI,
    ['seed', 'user', 'verbosity', 'max_tokens', 'max_completion_tokens'],
    'gemini-up',
  )}${model(GEMINI_CHOICES, ['n', 'logprobs', 'top_logprobs', 'max_completion_tokens'], 'gemini-up')}${model(SEEDED_BOTH, ['seed', 'max_tokens', 'max_completion_tokens'], 'claude-up')}
      - { provider: upstream, upstream_model: both-upstream, endpoints: [chat.completions] }
`;
}

const SCHEMA = { type: 'object', properties: { a: { type: 'string' } } };

/** What the provider (chat-completions wire) receives for each dialect's request, field by field. */
const CHAT_UPSTREAM = {
  tools: [{ type: 'function', function: { name: 'f', parameters: SCHEMA } }],
  tool_choice: 'required',
  response_format: { type: 'json_object' },
  temperature: 0.3,
  top_p: 0.7,
  stop: ['END'],
  max_completion_tokens: 77,
  reasoning_effort: 'low',
  presence_penalty: 0.5,
  frequency_penalty: -0.5,
  parallel_tool_calls: false,
  image_config: { aspect_ratio: '16:9' },
  user: 'end-user-1',
  seed: 42,
  verbosity: 'low',
  logprobs: true,
  top_logprobs: 2,
};

const RESPONSES_UPSTREAM = {
  tools: [{ type: 'function', function: { name: 'f', parameters: SCHEMA, strict: false } }],
  tool_choice: 'required',
  response_format: { type: 'json_object' },
  temperature: 0.3,
  top_p: 0.7,
  max_completion_tokens: 77,
  reasoning_effort: 'high',
  presence_penalty: 0.5,
  frequency_penalty: -0.5,
  parallel_tool_calls: false,
  user: 'end-user-1',
  verbosity: 'high',
};

const MESSAGES_UPSTREAM = {
  tools: CHAT_UPSTREAM.tools,
  tool_choice: 'required',
  response_format: { type: 'json_schema', json_schema: { name: 'response', schema: SCHEMA } },
  temperature: 0.3,
  top_p: 0.7,
  top_k: 5,
  stop: ['END'],
  max_completion_tokens: 4000,
  reasoning_effort: 'medium',
  user: 'end-user-1',
};

describe('forwarded parameters, per dialect, end to end', () => {
  let upstream: FakeUpstream;
  let claude: FakeAnthropicUpstream;
  let gemini: FakeGeminiUpstream;
  let harness: ChatHarness;
  let anthropic: Anthropic;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    claude = await startFakeAnthropicUpstream();
    gemini = await startFakeGeminiUpstream();
    harness = await startChatHarness({ configYaml: catalog(upstream, claude, gemini), providerSecrets: { [PROVIDER_KEY_ENV]: 'sk-forwarded-parameters' } });
    anthropic = anthropicClient(harness.stack.url, harness.apiKey);
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [upstream, claude, gemini]));

  beforeEach(() => resetFakes([upstream, claude, gemini]));

  /** The recorded upstream body, narrowed to the fields one of the expectations names. */
  function upstreamFields(expected: Record<string, unknown>): Record<string, unknown> {
    expect(upstream.requests).toHaveLength(1);
    const body = upstream.requests[0]!.body as Record<string, unknown>;
    const fields: Record<string, unknown> = {};
    for (const name of Object.keys(expected)) if (name in body) fields[name] = body[name];
    return fields;
  }

  const chatBody = (model: string) =>
    ({
      model,
      messages: [{ role: 'user', content: 'hi' }],
      tools: [{ type: 'function', function: { name: 'f', parameters: SCHEMA } }],
      tool_choice: 'required',
      response_format: { type: 'json_object' },
      temperature: 0.3,
      top_p: 0.7,
      stop: 'END',
      max_completion_tokens: 77,
      reasoning_effort: 'low',
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      parallel_tool_calls: false,
      prediction: { type: 'content', content: 'x' },
      web_search_options: { search_context_size: 'low' },
      image_config: { aspect_ratio: '16:9' },
      user: 'end-user-1',
      seed: 42,
      verbosity: 'low',
      store: true,
      logprobs: true,
      top_logprobs: 2,
    }) as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming;

  it('chat completions: every parameter reaches the provider on a model that lists it (prediction, web_search_options and store never do)', async () => {
    const { response } = await harness.client.chat.completions.create(chatBody(EVERYTHING)).withResponse();
    // No model lists the first two (spec §2.6: the catalog leaves them out), so none takes them; `store`
    // would keep the conversation at the provider under the operator's account, so it is never passed on.
    expect(response.headers.get('x-gateway-dropped-params')).toBe('prediction,store,web_search_options');
    expect(upstream.requests[0]!.body).not.toHaveProperty('store');
    expect(upstreamFields(CHAT_UPSTREAM)).toEqual(CHAT_UPSTREAM);
    expect(upstream.requests[0]!.body).not.toHaveProperty('prediction');
    expect(upstream.requests[0]!.body).not.toHaveProperty('web_search_options');
  });

  it('chat completions: on a model that lists nothing, none reaches the provider and each is named', async () => {
    const { response } = await harness.client.chat.completions.create(chatBody(BARE)).withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBe(
      'frequency_penalty,image_config,logprobs,max_completion_tokens,parallel_tool_calls,prediction,presence_penalty,reasoning_effort,response_format,seed,stop,store,temperature,tool_choice,tools,top_logprobs,top_p,user,verbosity,web_search_options',
    );
    expect(upstreamFields(CHAT_UPSTREAM)).toEqual({});
  });

  it('chat completions: the old max_tokens is named as the client spelled it', async () => {
    const { response } = await harness.client.chat.completions.create({ model: BARE, messages: [{ role: 'user', content: 'hi' }], max_tokens: 20 }).withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBe('max_tokens');
    expect(upstream.requests[0]!.body).not.toHaveProperty('max_completion_tokens');
  });

  // Issue 37 item 6: a parameter the catalog lists reaches every kind that can express it, and is named
  // as dropped by the kinds that cannot; `n` > 1 (several choices) is answered by OpenAI-wire kinds and
  // refused (400) where no provider of the model can answer it, never answered with one choice.

  it('chat completions: n above 1 answers n choices from an OpenAI-wire upstream, streamed or not, and every choice is charged', async () => {
    upstream.script({ usage: { prompt_tokens: 10, completion_tokens: 40 } });
    const plain = await harness.client.chat.completions.create({ model: CHOICES, messages: [{ role: 'user', content: 'hi' }], n: 3, max_completion_tokens: 50 }).withResponse();
    expect(plain.data.choices.map((choice) => choice.index)).toEqual([0, 1, 2]);
    expect(plain.data.choices.map((choice) => choice.message.content)).toEqual([
      'Hello from the fake upstream.', 'Hello from the fake upstream. (choice 1)', 'Hello from the fake upstream. (choice 2)',
    ]);
    expect(plain.response.headers.get('x-gateway-dropped-params')).toBeNull();
    expect((upstream.requests[0]!.body as { n?: unknown }).n).toBe(3);
    // The upstream's usage covers every choice: 10 × 0.000001 + 40 × 0.000002.
    expect(plain.data.usage?.completion_tokens).toBe(40);
    expect((await harness.chargesSettleAt(CHOICES, 1)).costPico).toBe(10n * 1_000_000n + 40n * 2_000_000n);

    const streamed = await harness.client.chat.completions.create({ model: CHOICES, messages: [{ role: 'user', content: 'hi' }], n: 2, stream: true, stream_options: { include_usage: true } });
    const texts = ['', ''];
    const finished = new Set<number>();
    let completionTokens = 0;
    let promptTokens = 0;
    for await (const chunk of streamed) {
      for (const choice of chunk.choices) {
        texts[choice.index] += choice.delta.content ?? '';
        if (choice.finish_reason) finished.add(choice.index);
      }
      if (chunk.usage) ({ completion_tokens: completionTokens, prompt_tokens: promptTokens } = chunk.usage);
    }
    expect(texts).toEqual(['Hello from the fake upstream.', 'Hello from the fake upstream. (choice 1)']);
    expect([...finished].sort()).toEqual([0, 1]);
    // Both choices' tokens (the fake counts each choice's text).
    expect(completionTokens).toBeGreaterThan(12);
    expect((upstream.requests[1]!.body as { n?: unknown }).n).toBe(2);
    // Charged as the usage chunk says: both choices' tokens.
    const charged = await harness.chargesSettleAt(CHOICES, 2);
    expect(charged.costPico - 90_000_000n).toBe(BigInt(promptTokens) * 1_000_000n + BigInt(completionTokens) * 2_000_000n);
  });

  it('chat completions: n above 1 is refused (400 naming n) on a model that does not list it, or whose providers cannot answer several choices', async () => {
    for (const [model, pattern] of [[BARE, /\bn must be 1/], [SEEDED_CLAUDE, /several choices.*n must be 1/]] as const) {
      for (const stream of [false, true]) {
        const error = await harness.client.chat.completions
          .create({ model, messages: [{ role: 'user', content: 'hi' }], n: 2, stream } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
          .then(() => undefined, (caught: unknown) => caught);
        expect(error, `${model} stream ${stream}`).toBeInstanceOf(Error);
        expect((error as { status?: number }).status).toBe(400);
        expect((error as Error).message).toMatch(pattern);
      }
    }
    expect(upstream.requests).toHaveLength(0);
    expect(claude.requests).toHaveLength(0);
  });

  it('chat completions: n above 1 never falls back to a model that does not list n (it would answer one choice)', async () => {
    upstream.script({ status: 500 });
    const error = await harness.client.chat.completions
      .create({ model: CHOICES, models: [CHOICES, BARE], messages: [{ role: 'user', content: 'hi' }], n: 2 } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
      .then(() => undefined, (caught: unknown) => caught);
    expect((error as { status?: number }).status).toBe(503);
    expect(upstream.requests.map((request) => (request.body as { model?: string }).model)).toEqual(['choices-upstream']);
  });

  it('chat completions: logprobs reach an OpenAI-wire upstream and its logprobs come back, in the answer and in stream chunks', async () => {
    const plain = await harness.client.chat.completions.create({ model: EVERYTHING, messages: [{ role: 'user', content: 'hi' }], logprobs: true, top_logprobs: 1 });
    const content = plain.choices[0]!.logprobs?.content ?? [];
    expect(content.map((entry) => entry.token).join('')).toBe('Hello from the fake upstream.');
    expect(content[0]!.top_logprobs).toEqual([{ token: 'Hello ', logprob: -0.25, bytes: [...Buffer.from('Hello ')] }]);
    expect(upstream.requests[0]!.body).toMatchObject({ logprobs: true, top_logprobs: 1 });

    const streamed = await harness.client.chat.completions.create({ model: EVERYTHING, messages: [{ role: 'user', content: 'hi' }], logprobs: true, stream: true });
    const tokens: string[] = [];
    for await (const chunk of streamed) for (const choice of chunk.choices) for (const entry of choice.logprobs?.content ?? []) tokens.push(entry.token);
    expect(tokens.join('')).toBe('Hello from the fake upstream.');
    // Not asked: none come back.
    const bare = await harness.client.chat.completions.create({ model: EVERYTHING, messages: [{ role: 'user', content: 'hi' }] });
    expect(bare.choices[0]!.logprobs).toBeNull();
  });

  it('chat completions: top_logprobs without logprobs reaches the upstream, whose 400 is the answer (as OpenAI refuses it)', async () => {
    const error = await harness.client.chat.completions
      .create({ model: EVERYTHING, messages: [{ role: 'user', content: 'hi' }], top_logprobs: 2 })
      .then(() => undefined, (caught: unknown) => caught);
    expect((error as { status?: number }).status).toBe(400);
    expect((error as Error).message).toMatch(/logprobs/);
  });

  it('chat completions: logprobs to an Anthropic-kind upstream (no such field) are named, not sent', async () => {
    const { response } = await harness.client.chat.completions.create({ model: SEEDED_CLAUDE, messages: [{ role: 'user', content: 'hi' }], logprobs: true, top_logprobs: 2 }).withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBe('logprobs,top_logprobs');
    expect(JSON.stringify(claude.requests[0]!.body)).not.toContain('logprobs');
  });

  it('chat completions: n above 1 reaches a Gemini-kind upstream as candidateCount, each candidate a choice charged as Gemini counts them; logprobs converted', async () => {
    gemini.script({ text: 'Bonjour mon ami', usage: { promptTokenCount: 10, candidatesTokenCount: 45 } });
    const { data, response } = await harness.client.chat.completions
      .create({ model: GEMINI_CHOICES, messages: [{ role: 'user', content: 'hi' }], n: 3, logprobs: true, top_logprobs: 2, max_completion_tokens: 50 })
      .withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBeNull();
    expect((gemini.requests[0]!.body as { generationConfig?: unknown }).generationConfig).toEqual({ candidateCount: 3, responseLogprobs: true, logprobs: 2, maxOutputTokens: 50 });
    expect(data.choices.map((choice) => choice.index)).toEqual([0, 1, 2]);
    expect(data.choices.map((choice) => choice.message.content)).toEqual(['Bonjour mon ami', 'Bonjour mon ami (candidate 1)', 'Bonjour mon ami (candidate 2)']);
    for (const choice of data.choices) {
      const content = choice.logprobs?.content ?? [];
      expect(content.map((entry) => entry.token).join('')).toBe(choice.message.content);
      expect(content[0]!.bytes).toEqual([...Buffer.from(content[0]!.token)]);
      expect(content.every((entry) => entry.top_logprobs.length === 2)).toBe(true);
    }
    // Gemini's candidatesTokenCount already covers every candidate: 10 × 0.000001 + 45 × 0.000002.
    expect(data.usage?.completion_tokens).toBe(45);
    expect((await harness.chargesSettleAt(GEMINI_CHOICES, 1)).costPico).toBe(10n * 1_000_000n + 45n * 2_000_000n);

    // A stream's logprobs come chunk by chunk, on the text they score.
    const streamed = await harness.client.chat.completions.create({ model: GEMINI_CHOICES, messages: [{ role: 'user', content: 'hi' }], logprobs: true, stream: true });
    let text = '';
    const tokens: string[] = [];
    for await (const chunk of streamed) {
      for (const choice of chunk.choices) {
        text += choice.delta.content ?? '';
        for (const entry of choice.logprobs?.content ?? []) tokens.push(entry.token);
      }
    }
    expect(tokens.join('')).toBe(text);
    expect(text).toBe('Hello from the fake upstream.');
    expect((gemini.requests[1]!.body as { generationConfig?: unknown }).generationConfig).toEqual({ responseLogprobs: true });
  });

  it('hostile callers: n 129, top_logprobs 21, and n a Gemini-only model cannot answer (above 8, or streamed) are refused (400) before any provider', async () => {
    const refusal = async (body: Record<string, unknown>) => {
      const error = await harness.client.chat.completions
        .create({ model: GEMINI_CHOICES, messages: [{ role: 'user', content: 'hi' }], ...body } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
        .then(() => undefined, (caught: unknown) => caught);
      expect(error, JSON.stringify(body)).toBeInstanceOf(Error);
      expect((error as { status?: number }).status, JSON.stringify(body)).toBe(400);
      return (error as Error).message;
    };
    expect(await refusal({ n: 129 })).toMatch(/\bn\b/);
    expect(await refusal({ logprobs: true, top_logprobs: 21 })).toMatch(/top_logprobs/);
    expect(await refusal({ n: 9 })).toMatch(/answers 9 choices per request.*n must be 1/);
    expect(await refusal({ n: 2, stream: true })).toMatch(/answers 2 choices per streamed request.*n must be 1/);
    expect(gemini.requests).toHaveLength(0);
  });

  it('responses: include message.output_text.logprobs with top_logprobs reaches an OpenAI-wire and a Gemini-kind upstream; the output_text part and the delta events carry them', async () => {
    for (const [model, received] of [
      [EVERYTHING, () => upstream.requests.at(-1)!.body as Record<string, unknown>],
      [GEMINI_CHOICES, () => (gemini.requests.at(-1)!.body as { generationConfig: Record<string, unknown> }).generationConfig],
    ] as const) {
      const { data, response } = await harness.client.responses
        .create({ model, input: 'hi', include: ['message.output_text.logprobs'], top_logprobs: 2 })
        .withResponse();
      expect(response.headers.get('x-gateway-dropped-params'), model).toBeNull();
      expect(received(), model).toMatchObject(model === EVERYTHING ? { logprobs: true, top_logprobs: 2 } : { responseLogprobs: true, logprobs: 2 });
      const message = data.output.find((item) => item.type === 'message') as OpenAI.Responses.ResponseOutputMessage;
      const part = message.content[0] as OpenAI.Responses.ResponseOutputText;
      expect(part.logprobs?.map((entry) => entry.token).join(''), model).toBe(part.text);
      expect(part.logprobs![0]!.bytes).toEqual([...Buffer.from(part.logprobs![0]!.token)]);
      expect(part.logprobs![0]!.top_logprobs).toHaveLength(2);

      const stream = await harness.client.responses.create({ model, input: 'hi', include: ['message.output_text.logprobs'], stream: true });
      let text = '';
      const tokens: string[] = [];
      let done: OpenAI.Responses.ResponseTextDoneEvent | undefined;
      for await (const event of stream) {
        if (event.type === 'response.output_text.delta') {
          text += event.delta;
          tokens.push(...event.logprobs.map((entry) => entry.token));
        }
        if (event.type === 'response.output_text.done') done = event;
      }
      expect(tokens.join(''), model).toBe(text);
      expect(done!.logprobs.map((entry) => entry.token).join('')).toBe(text);
    }
    // Not asked: none, and the part has no logprobs beyond the usual.
    const plain = await harness.client.responses.create({ model: EVERYTHING, input: 'hi' });
    const message = plain.output.find((item) => item.type === 'message') as OpenAI.Responses.ResponseOutputMessage;
    expect((message.content[0] as OpenAI.Responses.ResponseOutputText).logprobs).toBeUndefined();
    expect(upstream.requests.at(-1)!.body).not.toHaveProperty('logprobs');
  });

  it('responses: top_logprobs without the include entry ranks nothing and is named; both on a model without logprobs are named as spelled', async () => {
    const alone = await harness.client.responses.create({ model: EVERYTHING, input: 'hi', top_logprobs: 3 }).withResponse();
    expect(alone.response.headers.get('x-gateway-dropped-params')).toBe('top_logprobs');
    expect(upstream.requests.at(-1)!.body).not.toHaveProperty('top_logprobs');
    // The echoed default (0) asks for nothing and names nothing.
    const zero = await harness.client.responses.create({ model: EVERYTHING, input: 'hi', top_logprobs: 0 }).withResponse();
    expect(zero.response.headers.get('x-gateway-dropped-params')).toBeNull();
    const bare = await harness.client.responses.create({ model: BARE, input: 'hi', include: ['message.output_text.logprobs'], top_logprobs: 3 }).withResponse();
    expect(bare.response.headers.get('x-gateway-dropped-params')).toBe('include,top_logprobs');
    expect(upstream.requests.at(-1)!.body).not.toHaveProperty('logprobs');
    // Logprobs to a kind without them (Anthropic) are named.
    const claudeAnswer = await harness.client.responses.create({ model: SEEDED_CLAUDE, input: 'hi', include: ['message.output_text.logprobs'], top_logprobs: 2 }).withResponse();
    expect(claudeAnswer.response.headers.get('x-gateway-dropped-params')).toBe('include,top_logprobs');
    expect(JSON.stringify(claude.requests.at(-1)!.body)).not.toContain('logprobs');
  });

  // Issue 37 item 8: `anthropic-beta` reaches Anthropic-wire upstreams through an allowlist.

  it('messages: anthropic-beta reaches an Anthropic-kind upstream (allowlisted values only; others named), streamed or not', async () => {
    const headers = { 'anthropic-beta': 'interleaved-thinking-2025-05-14, not-a-real-beta-2099-01-01,fine-grained-tool-streaming-2025-05-14' };
    const plain = await anthropic.messages.create({ model: SEEDED_CLAUDE, max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] }, { headers }).withResponse();
    expect(plain.response.headers.get('x-gateway-dropped-params')).toBe('anthropic-beta');
    const streamed = await anthropic.messages.create({ model: SEEDED_CLAUDE, max_tokens: 20, messages: [{ role: 'user', content: 'hi' }], stream: true }, { headers: { 'anthropic-beta': 'interleaved-thinking-2025-05-14' } }).withResponse();
    for await (const event of streamed.data) void event;
    expect(streamed.response.headers.get('x-gateway-dropped-params')).toBeNull();
    expect(claude.requests.map((request) => request.headers['anthropic-beta'])).toEqual([
      'interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14', 'interleaved-thinking-2025-05-14',
    ]);
    // Without the header, none is sent.
    await anthropic.messages.create({ model: SEEDED_CLAUDE, max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] });
    expect(claude.requests[2]!.headers['anthropic-beta']).toBeUndefined();
  });

  it('messages: anthropic-beta to a kind without it (OpenAI wire) is named and not sent', async () => {
    const { response } = await anthropic.messages
      .create({ model: EVERYTHING, max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] }, { headers: { 'anthropic-beta': 'interleaved-thinking-2025-05-14' } })
      .withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBe('anthropic-beta');
    expect(upstream.requests[0]!.headers['anthropic-beta']).toBeUndefined();
  });

  it('chat completions: n 1 is the one answer the gateway gives: accepted, not named, not forwarded', async () => {
    const { data, response } = await harness.client.chat.completions.create({ model: BARE, messages: [{ role: 'user', content: 'hi' }], n: 1 }).withResponse();
    expect(data.choices).toHaveLength(1);
    expect(response.headers.get('x-gateway-dropped-params')).toBeNull();
    expect(upstream.requests[0]!.body).not.toHaveProperty('n');
  });

  it('chat completions: the seed reaches a Gemini-kind upstream as generationConfig.seed', async () => {
    const { response } = await harness.client.chat.completions.create({ model: SEEDED_GEMINI, messages: [{ role: 'user', content: 'hi' }], seed: 42 }).withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBeNull();
    expect(gemini.requests).toHaveLength(1);
    expect((gemini.requests[0]!.body as { generationConfig?: { seed?: unknown } }).generationConfig?.seed).toBe(42);
  });

  it('chat completions: what a Gemini-kind upstream has no field for (user, verbosity) is named, the rest reaches it', async () => {
    const { response } = await harness.client.chat.completions
      .create({ model: SEEDED_GEMINI, messages: [{ role: 'user', content: 'hi' }], seed: 7, user: 'end-user-1', verbosity: 'low' } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
      .withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBe('user,verbosity');
    const body = gemini.requests[0]!.body as Record<string, unknown> & { generationConfig?: { seed?: unknown } };
    expect(body.generationConfig?.seed).toBe(7);
    expect(JSON.stringify(body)).not.toContain('end-user-1');
    expect(JSON.stringify(body)).not.toContain('verbosity');
  });

  it('responses: text.verbosity to an Anthropic-kind upstream is named as the client spelled it, not sent', async () => {
    const { response } = await harness.client.responses.create({ model: SEEDED_CLAUDE, input: 'hi', text: { verbosity: 'low' } }).withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBe('text.verbosity');
    expect(claude.requests).toHaveLength(1);
    expect(JSON.stringify(claude.requests[0]!.body)).not.toContain('verbosity');
  });

  it('messages: metadata.user_id to a Gemini-kind upstream (no end-user field) is named as the client spelled it, streamed or not', async () => {
    const plain = await anthropic.messages.create({ model: SEEDED_GEMINI, max_tokens: 20, messages: [{ role: 'user', content: 'hi' }], metadata: { user_id: 'u-7' } }).withResponse();
    expect(plain.response.headers.get('x-gateway-dropped-params')).toBe('metadata.user_id');
    const streamed = await anthropic.messages.create({ model: SEEDED_GEMINI, max_tokens: 20, messages: [{ role: 'user', content: 'hi' }], metadata: { user_id: 'u-7' }, stream: true }).withResponse();
    for await (const event of streamed.data) void event;
    expect(streamed.response.headers.get('x-gateway-dropped-params')).toBe('metadata.user_id');
    expect(gemini.requests).toHaveLength(2);
    for (const request of gemini.requests) expect(JSON.stringify(request.body)).not.toContain('u-7');
  });

  it('chat completions: an Anthropic-kind upstream (no seed on its wire) goes without it and the answer names it, streamed or not', async () => {
    const plain = await harness.client.chat.completions.create({ model: SEEDED_CLAUDE, messages: [{ role: 'user', content: 'hi' }], seed: 42 }).withResponse();
    expect(plain.response.headers.get('x-gateway-dropped-params')).toBe('seed');
    const streamed = await harness.client.chat.completions.create({ model: SEEDED_CLAUDE, messages: [{ role: 'user', content: 'hi' }], seed: 42, stream: true }).withResponse();
    for await (const chunk of streamed.data) void chunk;
    expect(streamed.response.headers.get('x-gateway-dropped-params')).toBe('seed');
    expect(claude.requests).toHaveLength(2);
    for (const request of claude.requests) expect(request.body).not.toHaveProperty('seed');
    // Without a seed nothing is named.
    const unseeded = await harness.client.chat.completions.create({ model: SEEDED_CLAUDE, messages: [{ role: 'user', content: 'hi' }] }).withResponse();
    expect(unseeded.response.headers.get('x-gateway-dropped-params')).toBeNull();
  });

  it('chat completions: the names are the serving attempt\'s: an Anthropic failure then an OpenAI answer names nothing, and the reverse names the seed', async () => {
    const ask = (first: string, stream: boolean) =>
      harness.client.chat.completions
        .create({ model: SEEDED_BOTH, messages: [{ role: 'user', content: 'hi' }], seed: 11, stream, provider: { order: [first] } } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
        .withResponse();
    for (const stream of [false, true]) {
      upstream.reset();
      claude.reset();
      claude.script({ status: 503 });
      const viaOpenAI = await ask('claude-up', stream);
      if (stream) for await (const chunk of viaOpenAI.data as unknown as AsyncIterable<unknown>) void chunk;
      expect(claude.requests, `stream ${stream}`).toHaveLength(1);
      expect(upstream.requests[0]!.body).toMatchObject({ seed: 11 });
      expect(viaOpenAI.response.headers.get('x-gateway-dropped-params')).toBeNull();

      upstream.reset();
      claude.reset();
      upstream.script({ status: 503 });
      const viaClaude = await ask('upstream', stream);
      if (stream) for await (const chunk of viaClaude.data as unknown as AsyncIterable<unknown>) void chunk;
      expect(upstream.requests).toHaveLength(1);
      expect(claude.requests[0]!.body).not.toHaveProperty('seed');
      expect(viaClaude.response.headers.get('x-gateway-dropped-params')).toBe('seed');
    }
  });

  it('messages: adaptive thinking and output_config.effort reach an Anthropic-kind upstream as written', async () => {
    const { response } = await anthropic.messages
      .create({
        model: SEEDED_CLAUDE, max_tokens: 4000, messages: [{ role: 'user', content: 'hi' }],
        thinking: { type: 'adaptive' }, output_config: { effort: 'xhigh' },
      } as unknown as Anthropic.MessageCreateParamsNonStreaming)
      .withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBeNull();
    expect(claude.requests).toHaveLength(1);
    const body = claude.requests[0]!.body as Record<string, unknown>;
    expect(body.thinking).toEqual({ type: 'adaptive' });
    expect(body.output_config).toEqual({ effort: 'xhigh' });
    // An effort alone is an effort, not a thinking budget.
    claude.reset();
    await anthropic.messages.create({
      model: SEEDED_CLAUDE, max_tokens: 4000, messages: [{ role: 'user', content: 'hi' }], output_config: { effort: 'low' },
    } as unknown as Anthropic.MessageCreateParamsNonStreaming);
    expect(claude.requests[0]!.body).toMatchObject({ output_config: { effort: 'low' } });
    expect(claude.requests[0]!.body).not.toHaveProperty('thinking');
    // The thinking's display has no canonical field: the thinking goes on, the display is named.
    claude.reset();
    const displayed = await anthropic.messages
      .create({
        model: SEEDED_CLAUDE, max_tokens: 4000, messages: [{ role: 'user', content: 'hi' }], thinking: { type: 'adaptive', display: 'omitted' },
      } as unknown as Anthropic.MessageCreateParamsNonStreaming)
      .withResponse();
    expect(displayed.response.headers.get('x-gateway-dropped-params')).toBe('thinking.display');
    expect((claude.requests[0]!.body as Record<string, unknown>).thinking).toEqual({ type: 'adaptive' });
  });

  it('messages: adaptive thinking with an effort reaches an OpenAI-kind upstream as its reasoning_effort', async () => {
    await anthropic.messages.create({
      model: EVERYTHING, max_tokens: 4000, messages: [{ role: 'user', content: 'hi' }], thinking: { type: 'adaptive' }, output_config: { effort: 'high' },
    } as unknown as Anthropic.MessageCreateParamsNonStreaming);
    const body = upstream.requests[0]!.body as Record<string, unknown>;
    expect(body.reasoning_effort).toBe('high');
    expect(body).not.toHaveProperty('thinking');
    expect(body).not.toHaveProperty('output_config');
  });

  const responsesBody = (model: string) =>
    ({
      model,
      input: 'hi',
      tools: [{ type: 'function', name: 'f', parameters: SCHEMA, strict: false }],
      tool_choice: 'required',
      text: { format: { type: 'json_object' }, verbosity: 'high' },
      temperature: 0.3,
      top_p: 0.7,
      max_output_tokens: 77,
      reasoning: { effort: 'high', summary: 'concise' },
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      parallel_tool_calls: false,
      user: 'end-user-1',
    }) as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming;

  it('responses: every parameter reaches the provider on a model that lists it', async () => {
    const { response } = await harness.client.responses.create(responsesBody(EVERYTHING)).withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBeNull();
    expect(upstreamFields(RESPONSES_UPSTREAM)).toEqual(RESPONSES_UPSTREAM);
  });

  it('responses: on a model that lists nothing, none reaches the provider and each is named in the dialect spelling', async () => {
    const { response } = await harness.client.responses.create(responsesBody(BARE)).withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBe(
      'frequency_penalty,max_output_tokens,parallel_tool_calls,presence_penalty,reasoning.effort,reasoning.summary,temperature,text.format,text.verbosity,tool_choice,tools,top_p,user',
    );
    expect(upstreamFields(RESPONSES_UPSTREAM)).toEqual({});
  });

  const messagesBody = (model: string) =>
    ({
      model,
      max_tokens: 4000,
      messages: [{ role: 'user', content: 'hi' }],
      tools: [{ name: 'f', input_schema: SCHEMA }],
      tool_choice: { type: 'any' },
      output_config: { format: { type: 'json_schema', schema: SCHEMA }, effort: 'medium' },
      thinking: { type: 'enabled', budget_tokens: 1024 },
      temperature: 0.3,
      top_p: 0.7,
      top_k: 5,
      stop_sequences: ['END'],
      metadata: { user_id: 'end-user-1' },
    }) as unknown as Anthropic.MessageCreateParamsNonStreaming;

  it('messages: every parameter reaches the provider on a model that lists it', async () => {
    const { response } = await anthropic.messages.create(messagesBody(EVERYTHING)).withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBeNull();
    const fields = upstreamFields(MESSAGES_UPSTREAM);
    // The chat-completions wire names the schema itself; the rest is as sent.
    expect({ ...fields, response_format: { type: (fields.response_format as { type: string }).type } }).toEqual({ ...MESSAGES_UPSTREAM, response_format: { type: 'json_schema' } });
    expect((fields.response_format as { json_schema: { schema: unknown } }).json_schema.schema).toEqual(SCHEMA);
  });

  it('messages: on a model that lists nothing, none reaches the provider and each is named in the dialect spelling', async () => {
    const { response } = await anthropic.messages.create(messagesBody(BARE)).withResponse();
    expect(response.headers.get('x-gateway-dropped-params')).toBe(
      'max_tokens,metadata.user_id,output_config.effort,output_config.format,stop_sequences,temperature,thinking,tool_choice,tools,top_k,top_p',
    );
    expect(upstreamFields(MESSAGES_UPSTREAM)).toEqual({});
  });
});
