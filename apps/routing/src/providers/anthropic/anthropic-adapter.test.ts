import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { sameHiddenClass, startFakeAnthropicUpstream, type FakeAnthropicUpstream } from '@gateway/testing';
import { Provider, type ChatRequest, type ChatStreamDelta, type Tool } from '@gateway/proto';
import type { AdapterStreamPart, ProviderAdapter } from '../provider-adapter.js';
import { createAdapter } from '../create-adapter.js';
import { AnthropicAdapter } from './anthropic-adapter.js';
import { adapterRequest, chatRequest, collect, deltasOf, failureOf, message, signal } from '../../../test/adapter-test-support.js';

const fixture = (name: string) => readFileSync(new URL(`./__fixtures__/${name}`, import.meta.url), 'utf8');

const weatherTool: Tool = {
  name: 'get_weather', description: 'Weather for a city',
  parameters: '{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}',
};

const request = (chat: ChatRequest) => adapterRequest('claude-fake', chat);

describe('AnthropicAdapter', () => {
  let upstream: FakeAnthropicUpstream;
  let adapter: AnthropicAdapter;

  beforeAll(async () => {
    upstream = await startFakeAnthropicUpstream({ apiKey: 'sk-ant-test' });
    adapter = new AnthropicAdapter({ providerId: 'claude-a', baseUrl: upstream.url, apiKey: 'sk-ant-test' });
  });
  afterAll(async () => {
    // The fake first: it drops stalled sockets, which the pool's close would otherwise wait for.
    await upstream.close();
    await adapter.close();
  });
  beforeEach(() => upstream.reset());

  it('normalises a recorded answer (fixture), input counting every prompt token', async () => {
    upstream.script({ replay: { contentType: 'application/json', body: fixture('message.json') } });
    const result = await adapter.chat(request(chatRequest('Capital of France?')), signal());
    expect(result.choices).toEqual([{
      index: 0, finishReason: 'stop', stopSequence: '',
      message: { content: 'The capital of France is Paris.', toolCalls: [], reasoning: [], images: [] },
    }]);
    expect(result.usage).toMatchObject({ inputTokens: 21 + 3400 + 1200, cachedInputTokens: 3400, cacheWriteTokens: 1200, outputTokens: 10, estimated: false });
    expect(result.response).toEqual({ id: 'msg_01XFDUDYJgAACzvnptvVoYEL', model: 'claude-sonnet-4-5-20250929' });
  });

  it('normalises recorded thinking, redacted thinking and tool use (fixture), tagged with this provider', async () => {
    upstream.script({ replay: { contentType: 'application/json', body: fixture('message-thinking-tool-use.json') } });
    const result = await adapter.chat(request(chatRequest('Weather in Paris?', { tools: [weatherTool] })), signal());
    const recorded = JSON.parse(fixture('message-thinking-tool-use.json'));
    expect(result.choices[0]).toEqual({
      index: 0, finishReason: 'tool_calls', stopSequence: '',
      message: {
        content: 'Let me check the weather for you.',
        toolCalls: [{ id: 'toolu_01A09q90qw90lq917835lq9', name: 'get_weather', arguments: '{"city":"Paris","unit":"celsius"}' }],
        reasoning: [
          { text: recorded.content[0].thinking, signature: recorded.content[0].signature, encryptedData: '', providerId: 'claude-a' },
          { text: '', signature: '', encryptedData: recorded.content[1].data, providerId: 'claude-a' },
        ],
        images: [],
      },
    });
  });

  it('streams a recorded transcript (fixture): thinking, signature, text, tool calls by tool index, then finish and usage', async () => {
    upstream.script({ replay: { contentType: 'text/event-stream', body: fixture('message-stream.sse.txt') } });
    const parts = await collect(adapter.chatStream(request(chatRequest('Weather?', { tools: [weatherTool] })), signal()));
    const deltas = deltasOf(parts);
    expect(deltas.map((delta) => [delta.reasoning, delta.reasoningSignature, delta.content, delta.toolCalls, delta.finishReason])).toEqual([
      ['The user asks for Paris weather;', '', '', [], ''],
      [' get_weather fits.', '', '', [], ''],
      ['', 'EqQBCgIYAhIMzx7K3kN2cKkSXpGhGgyZsS8gRVw8W4Dl3MgiMKRnq8Rz+y6cB4d5kqHb5H1n2t3T8yWl', '', [], ''],
      ['', '', 'Checking', [], ''],
      ['', '', ' the weather.', [], ''],
      ['', '', '', [{ index: 0, id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6', name: 'get_weather', arguments: '' }], ''],
      ['', '', '', [{ index: 0, id: '', name: '', arguments: '{"city": "Pa' }], ''],
      ['', '', '', [{ index: 0, id: '', name: '', arguments: 'ris"}' }], ''],
      ['', '', '', [{ index: 1, id: 'toolu_01NRLabsLyVHZPKxbKvkfSMn', name: 'get_time', arguments: '' }], ''],
      // A tool called without input still gets a JSON object as its arguments.
      ['', '', '', [{ index: 1, id: '', name: '', arguments: '{}' }], ''],
      ['', '', '', [], 'tool_calls'],
    ]);
    // Every kind of delta is built with all fields at once: one hidden class for all of them.
    expect(deltas.every((delta) => sameHiddenClass(delta, deltas[0]!))).toBe(true);
    // The answer's id and model, from message_start, come with the usage (the attempt's GenAI span names them).
    expect(parts.at(-1)).toEqual({
      type: 'usage', usage: expect.objectContaining({ inputTokens: 472 + 2048, cachedInputTokens: 2048, cacheWriteTokens: 0, outputTokens: 89 }),
      response: { id: 'msg_01Ln3dbpbM9JnEPWtK4Pw4y2', model: 'claude-sonnet-4-5-20250929' },
    });
    expect(parts.filter((part) => part.type === 'usage')).toHaveLength(1);
  });

  it('sends the converted request to /v1/messages with x-api-key and anthropic-version, system in its place', async () => {
    upstream.script({});
    const chat = chatRequest([message('system', 'Be brief.'), message('user', 'Hi'), message('assistant', 'Hello.'), message('developer', 'Use French now.'), message('user', 'Again')], {
      temperature: 0.2, maxOutputTokens: 77, user: 'u-9', stop: ['END'],
    });
    const result = await adapter.chat(request(chat), signal());
    expect(result.choices[0]?.message?.content).toBe('Hello from the fake upstream.');
    const received = upstream.requests[0]!;
    expect(received.path).toBe('/v1/messages');
    expect(received.headers['x-api-key']).toBe('sk-ant-test');
    expect(received.headers['anthropic-version']).toBe('2023-06-01');
    expect(received.headers.authorization).toBeUndefined();
    expect(received.body).toEqual({
      model: 'claude-fake', max_tokens: 77, temperature: 0.2, stop_sequences: ['END'], metadata: { user_id: 'u-9' },
      system: [{ type: 'text', text: 'Be brief.' }],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Hi' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'Hello.' }] },
        { role: 'user', content: [{ type: 'text', text: '<system>\nUse French now.\n</system>' }, { type: 'text', text: 'Again' }] },
      ],
    });

    // A base URL written like an `openai` kind's (ending in /v1) reaches the same path.
    const withV1 = new AnthropicAdapter({ providerId: 'claude-a', baseUrl: `${upstream.url}/v1/`, apiKey: 'sk-ant-test' });
    try {
      await withV1.chat(request(chatRequest('Hi')), signal());
      expect(upstream.requests[1]!.path).toBe('/v1/messages');
    } finally {
      await withV1.close();
    }
  });

  it('streams thinking with its signature, text and tool input from the fake, each piece as its own delta before the finish', async () => {
    const thinking = 'The user wants a forecast; call the tool.';
    const toolArguments = '{"city":"Paris","days":3}';
    upstream.script({ thinking, text: 'Looking it up.', toolCalls: [{ name: 'get_weather', arguments: toolArguments }], chunkCount: 3 });
    const chat = chatRequest('Forecast for Paris?', { tools: [weatherTool], thinkingBudgetTokens: 2048, maxOutputTokens: 4096 });
    const parts = await collect(adapter.chatStream(request(chat), signal()));
    const deltas = deltasOf(parts);
    expect(upstream.requests[0]!.body).toMatchObject({ stream: true, thinking: { type: 'enabled', budget_tokens: 2048 }, max_tokens: 4096 });

    expect(deltas.map((delta) => delta.reasoning).join('')).toBe(thinking);
    expect(deltas.filter((delta) => delta.reasoning).length).toBe(3);
    expect(deltas.filter((delta) => delta.reasoningSignature).map((delta) => delta.reasoningSignature)).toEqual([upstream.signThinking(thinking)]);
    expect(deltas.map((delta) => delta.content).join('')).toBe('Looking it up.');
    const argumentDeltas = deltas.filter((delta) => delta.toolCalls.some((call) => call.arguments));
    expect(argumentDeltas.length).toBe(3);
    expect(argumentDeltas.map((delta) => delta.toolCalls[0]!.arguments).join('')).toBe(toolArguments);
    const finishAt = deltas.findIndex((delta) => delta.finishReason);
    expect(finishAt).toBe(deltas.length - 1);
    expect(deltas[finishAt]!.finishReason).toBe('tool_calls');
    // Order: reasoning, then text, then the tool call (start with id and name, then its input).
    const firstText = deltas.findIndex((delta) => delta.content);
    const toolStart = deltas.findIndex((delta) => delta.toolCalls[0]?.name === 'get_weather');
    expect(deltas.findLastIndex((delta) => delta.reasoning || delta.reasoningSignature)).toBeLessThan(firstText);
    expect(firstText).toBeLessThan(toolStart);
    expect(deltas[toolStart]!.toolCalls[0]!.id).toMatch(/^toolu_/);
    expect(deltas.indexOf(argumentDeltas[0]!)).toBeGreaterThan(toolStart);
  });

  it('hands tool input on as it arrives: a stream that stalls mid-input has already delivered the pieces before', async () => {
    const toolArguments = '{"city":"Paris","days":3}';
    upstream.script({ toolCalls: [{ name: 'get_weather', arguments: toolArguments }], chunkCount: 3, stallAfterChunks: 2 });
    const controller = new AbortController();
    const iterator = adapter.chatStream(request(chatRequest('Forecast?', { tools: [weatherTool] })), controller.signal)[Symbol.asyncIterator]();
    const seen: ChatStreamDelta[] = [];
    while (seen.filter((delta) => delta.toolCalls[0]?.arguments).length < 2) {
      const next = await iterator.next();
      expect(next.done).toBe(false);
      if (next.value.type === 'delta') seen.push(next.value.delta);
    }
    const pieces = seen.map((delta) => delta.toolCalls[0]?.arguments ?? '');
    // The start (id and name), then two pieces of input: two thirds of it, the rest never sent.
    expect(pieces).toHaveLength(3);
    expect(pieces[0]).toBe('');
    expect(pieces[1]!.length).toBeGreaterThan(0);
    expect(toolArguments.startsWith(pieces[1]! + pieces[2]!)).toBe(true);
    expect((pieces[1]! + pieces[2]!).length).toBeLessThan(toolArguments.length);
    controller.abort(new Error('test is done'));
    expect((await failureOf(iterator.next())).kind).toBe('connection');
  });

  it('sends a conversation that starts with the assistant as the API takes it (the fake refuses an assistant first message, as Anthropic does)', async () => {
    const chat = chatRequest([message('system', 'Be brief.'), message('assistant', 'Hello! What can I do?'), message('user', 'Tell me a joke.')]);
    const whole = await adapter.chat(request(chat), signal());
    expect(whole.choices[0]!.finishReason).toBe('stop');
    const streamed = deltasOf(await collect(adapter.chatStream(request(chat), signal())));
    expect(streamed.at(-1)!.finishReason).toBe('stop');
    for (const sent of upstream.requests) {
      expect(sent.body.messages.map((turn: { role: string }) => turn.role)).toEqual(['user', 'assistant', 'user']);
      expect(sent.body.messages[1].content).toEqual([{ type: 'text', text: 'Hello! What can I do?' }]);
    }
    expect(upstream.requests).toHaveLength(2);
  });

  it('round-trips a tool loop with its signed thinking: the fake verifies pairing, order and signature', async () => {
    const tools = [weatherTool];
    upstream.script({ toolCalls: [{ name: 'get_weather', input: { city: 'Paris' } }] });
    const first = await adapter.chat(request(chatRequest('Weather in Paris?', { tools, thinkingBudgetTokens: 1024, maxOutputTokens: 2048 })), signal());
    const answer = first.choices[0]!.message!;
    expect(first.choices[0]!.finishReason).toBe('tool_calls');
    expect(answer.reasoning).toHaveLength(1);
    expect(answer.reasoning[0]!.providerId).toBe('claude-a');

    const history = [
      message('user', 'Weather in Paris?'),
      message('assistant', answer.content, { toolCalls: answer.toolCalls, reasoning: answer.reasoning }),
      message('tool', 'Sunny, 24°C', { toolCallId: answer.toolCalls[0]!.id }),
      message('user', 'Shorts weather?'),
    ];
    upstream.script({ text: 'Yes, shorts weather.' });
    const second = await adapter.chat(request(chatRequest(history, { tools, thinkingBudgetTokens: 1024, maxOutputTokens: 2048 })), signal());
    expect(second.choices[0]!.message!.content).toBe('Yes, shorts weather.');
    const sent = upstream.requests[1]!.body;
    expect(sent.thinking).toEqual({ type: 'enabled', budget_tokens: 1024 });
    expect(sent.messages[1].content[0]).toEqual({ type: 'thinking', thinking: answer.reasoning[0]!.text, signature: answer.reasoning[0]!.signature });
    expect(sent.messages[1].content.at(-1)).toEqual({ type: 'tool_use', id: answer.toolCalls[0]!.id, name: 'get_weather', input: { city: 'Paris' } });
    expect(sent.messages[2].content).toEqual([
      { type: 'tool_result', tool_use_id: answer.toolCalls[0]!.id, content: [{ type: 'text', text: 'Sunny, 24°C' }] },
      { type: 'text', text: 'Shorts weather?' },
    ]);

    // The same conversation with the thinking issued by another provider: it is not sent, and without
    // it the open tool loop goes without thinking (the fake would refuse either mistake).
    const foreign = history.map((entry) => (entry.role === 'assistant'
      ? { ...entry, reasoning: entry.reasoning.map((part) => ({ ...part, providerId: 'claude-b' })) }
      : entry));
    upstream.script({ text: 'Still shorts.' });
    const third = await adapter.chat(request(chatRequest(foreign.slice(0, 3), { tools, thinkingBudgetTokens: 1024, maxOutputTokens: 2048 })), signal());
    expect(third.choices[0]!.message!.content).toBe('Still shorts.');
    const withoutThinking = upstream.requests[2]!.body;
    expect(withoutThinking.thinking).toBeUndefined();
    expect(withoutThinking.messages[1].content.map((block: { type: string }) => block.type)).toEqual(['tool_use']);
  });

  it('reports cache usage the same way answered whole and streamed', async () => {
    const usage = { input_tokens: 10, cache_read_input_tokens: 100, cache_creation_input_tokens: 50, output_tokens: 7 };
    upstream.script({ usage }, { usage });
    const whole = await adapter.chat(request(chatRequest('cached prompt')), signal());
    const parts = await collect(adapter.chatStream(request(chatRequest('cached prompt')), signal()));
    const expected = { inputTokens: 160, cachedInputTokens: 100, cacheWriteTokens: 50, outputTokens: 7, reasoningTokens: 0, estimated: false };
    expect(whole.usage).toMatchObject(expected);
    expect(parts.at(-1)).toEqual({ type: 'usage', usage: expect.objectContaining(expected), response: { id: expect.stringMatching(/^msg_/), model: expect.any(String) } });
    expect(whole.usage).toEqual((parts.at(-1) as { usage: unknown }).usage);
    expect(whole.response).toEqual({ id: expect.stringMatching(/^msg_/), model: expect.any(String) });
  });

  it('reports the stop sequence and maps other stop reasons, whole and streamed', async () => {
    upstream.script({ text: 'one two', stopSequence: 'END' }, { text: 'one two', stopSequence: 'END' });
    const whole = await adapter.chat(request(chatRequest('count', { stop: ['END'] })), signal());
    expect(whole.choices[0]).toMatchObject({ finishReason: 'stop', stopSequence: 'END' });
    const streamed = deltasOf(await collect(adapter.chatStream(request(chatRequest('count', { stop: ['END'] })), signal())));
    expect(streamed.at(-1)).toMatchObject({ finishReason: 'stop', stopSequence: 'END' });

    upstream.script({ finishReason: 'max_tokens' }, { finishReason: 'refusal' });
    expect((await adapter.chat(request(chatRequest('x')), signal())).choices[0]!.finishReason).toBe('length');
    expect((await adapter.chat(request(chatRequest('x')), signal())).choices[0]!.finishReason).toBe('content_filter');
  });

  it('classifies failures: 529 and 429 fail over, 400 is the caller\'s with Anthropic\'s words, 401 is ours', async () => {
    const plain = request(chatRequest('x'));
    upstream.script({ status: 529 });
    const overloaded = await failureOf(adapter.chat(plain, signal()));
    expect([overloaded.kind, overloaded.httpStatus, overloaded.retryable]).toEqual(['overloaded', 529, true]);

    upstream.script({ status: 429 });
    const limited = await failureOf(adapter.chat(plain, signal()));
    expect([limited.kind, limited.retryable]).toEqual(['overloaded', true]);

    upstream.script({ status: 500 });
    expect((await failureOf(adapter.chat(plain, signal()))).kind).toBe('overloaded');

    upstream.script({ status: 400, errorBody: { type: 'error', error: { type: 'invalid_request_error', message: 'prompt is too long: 210000 tokens > 200000 maximum' } } });
    const refused = await failureOf(adapter.chat(plain, signal()));
    expect([refused.kind, refused.providerMessage, refused.retryable]).toEqual(['rejected', 'prompt is too long: 210000 tokens > 200000 maximum', false]);

    // A request the API itself finds wrong (here: a tool_result nobody asked for) is its verdict too.
    upstream.script({});
    const unpaired = await failureOf(adapter.chat(request(chatRequest([message('user', 'x'), message('tool', 'r', { toolCallId: 'toolu_nobody' })])), signal()));
    expect(unpaired.kind).toBe('rejected');
    expect(unpaired.providerMessage).toMatch(/tool_use_id/);

    const wrongKey = new AnthropicAdapter({ providerId: 'claude-a', baseUrl: upstream.url, apiKey: 'sk-ant-wrong' });
    try {
      const misconfigured = await failureOf(wrongKey.chat(plain, signal()));
      expect([misconfigured.kind, misconfigured.httpStatus, misconfigured.retryable]).toEqual(['misconfigured', 401, true]);
    } finally {
      await wrongKey.close();
    }

    upstream.script({ status: 529 });
    expect((await failureOf(collect(adapter.chatStream(plain, signal())))).kind).toBe('overloaded');

    upstream.script({ reset: true });
    expect((await failureOf(adapter.chat(plain, signal()))).kind).toBe('connection');
  });

  it('fails a cut stream and an error event mid-stream, after handing on what came before', async () => {
    const plain = request(chatRequest('x'));
    const seenUntilFailure = async () => {
      const seen: string[] = [];
      const failure = await failureOf((async () => {
        for await (const part of adapter.chatStream(plain, signal())) if (part.type === 'delta') seen.push(part.delta.content);
      })());
      return { failure, seen };
    };

    upstream.script({ text: 'abcdef', chunkCount: 3, cutAfterChunks: 1 });
    const cut = await seenUntilFailure();
    expect([cut.failure.kind, cut.seen]).toEqual(['connection', ['ab']]);

    upstream.script({ text: 'abcdef', chunkCount: 3, streamErrorAfterChunks: 2 });
    const overloaded = await seenUntilFailure();
    expect([overloaded.failure.kind, overloaded.failure.retryable, overloaded.seen]).toEqual(['overloaded', true, ['ab', 'cd']]);

    upstream.script({ text: 'abcdef', chunkCount: 3, streamErrorAfterChunks: 1, streamErrorType: 'invalid_request_error' });
    expect((await seenUntilFailure()).failure.kind).toBe('rejected');

    // Everything up to message_delta arrived, message_stop did not: still not a complete answer.
    const transcript = fixture('message-stream.sse.txt');
    upstream.script({ replay: { contentType: 'text/event-stream', body: transcript.slice(0, transcript.indexOf('event: message_stop')) } });
    const parts: AdapterStreamPart[] = [];
    const truncated = await failureOf((async () => { for await (const part of adapter.chatStream(plain, signal())) parts.push(part); })());
    expect(truncated.kind).toBe('connection');
    expect(parts.some((part) => part.type === 'usage' || (part.type === 'delta' && part.delta.finishReason))).toBe(false);

    // Content before message_start is not the Messages API.
    upstream.script({ replay: { contentType: 'text/event-stream', body: transcript.slice(transcript.indexOf('event: content_block_start')) } });
    expect((await failureOf(collect(adapter.chatStream(plain, signal())))).kind).toBe('connection');
  });

  it('rewrites tool ids and names Anthropic refuses and gives the answer back in the caller\'s names', async () => {
    const tool: Tool = { name: 'mcp.crm/find_customer', description: 'Finds a customer', parameters: '{"type":"object","properties":{"q":{"type":"string"}}}' };
    const history = [
      message('user', 'Find Ann, then Bob.'),
      message('assistant', '', { toolCalls: [{ id: 'call.1:abc', name: tool.name, arguments: '{"q":"Ann"}' }] }),
      message('tool', 'Ann: #12', { toolCallId: 'call.1:abc' }),
    ];
    // The fake calls the tool by the name it was offered (the rewritten one).
    const callOffered = (recorded: { body: any }) => ({ toolCalls: [{ name: recorded.body.tools[0].name as string, arguments: '{"q":"Bob"}' }] });
    upstream.script(callOffered, callOffered);

    const whole = await adapter.chat(request(chatRequest(history, { tools: [tool] })), signal());
    const sent = upstream.requests[0]!.body;
    expect(sent.tools[0].name).toMatch(/^mcp_crm_find_customer_[0-9a-f]{8}$/);
    expect(sent.messages[1].content[0].name).toBe(sent.tools[0].name);
    expect(sent.messages[1].content[0].id).toBe(sent.messages[2].content[0].tool_use_id);
    expect(whole.choices[0]!.message!.toolCalls).toEqual([{ id: expect.stringMatching(/^toolu_/), name: 'mcp.crm/find_customer', arguments: '{"q":"Bob"}' }]);

    const streamed = deltasOf(await collect(adapter.chatStream(request(chatRequest(history, { tools: [tool] })), signal())));
    expect(streamed.flatMap((delta) => delta.toolCalls).find((call) => call.name)?.name).toBe('mcp.crm/find_customer');
  });

  it('has no embeddings, and is registered (instructed JSON modes) for kind anthropic', async () => {
    expect((adapter as ProviderAdapter).embed).toBeUndefined();
    const registered = createAdapter(Provider.fromPartial({ id: 'claude-x', kind: 'anthropic', baseUrl: upstream.url, apiKeyEnv: 'X' }), (name) => (name === 'X' ? 'sk-ant-test' : undefined))!;
    try {
      expect([registered.kind, registered.providerId, registered.embed]).toEqual(['anthropic', 'claude-x', undefined]);
      upstream.script({ text: '{"city":"Paris"}' });
      const chat = chatRequest('Where is the Louvre?', { responseFormat: { type: 'json_schema', schemaName: 'place', schema: '{"type":"object","required":["city"]}' } });
      const result = await registered.chat(request(chat), signal());
      expect(result.choices[0]!.message!.content).toBe('{"city":"Paris"}');
      expect(upstream.requests[0]!.body.system[0].text).toMatch(/JSON Schema/);

      // An answer that does not satisfy the schema is a broken answer (the router fails over).
      upstream.script({ text: 'Paris, of course.' });
      expect((await failureOf(registered.chat(request(chat), signal()))).kind).toBe('connection');
    } finally {
      await registered.close();
    }
  });
});
