import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { OpenAIAdapter } from './openai-adapter.js';
import { chatRequest, collect, failureOf } from '../../../test/adapter-test-support.js';

const fixture = (name: string) => readFileSync(new URL(`./__fixtures__/${name}`, import.meta.url), 'utf8');

describe('OpenAIAdapter', () => {
  let upstream: FakeUpstream;
  let adapter: OpenAIAdapter;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    adapter = new OpenAIAdapter({ providerId: 'fake', baseUrl: upstream.url, apiKey: 'sk-test-secret' });
  });
  afterAll(async () => {
    await adapter.close();
    await upstream.close();
  });
  beforeEach(() => upstream.reset());

  it('sends moderation input in the form the client wrote it and reads OpenAI\'s answer (one result for an array of objects)', async () => {
    const live = new AbortController().signal;
    const single = await adapter.moderate({ upstreamModel: 'omni', input: { form: 'string', text: 'plan the attack' } }, live);
    expect(upstream.requests.at(-1)!.body).toEqual({ model: 'omni', input: 'plan the attack' });
    expect(single.results.map((result) => result.flagged)).toEqual([true]);
    const many = await adapter.moderate({ upstreamModel: 'omni', input: { form: 'strings', texts: ['tea', 'plan the attack'] } }, live);
    expect(upstream.requests.at(-1)!.body).toEqual({ model: 'omni', input: ['tea', 'plan the attack'] });
    expect(many.results.map((result) => result.flagged)).toEqual([false, true]);
    const mixed = await adapter.moderate(
      { upstreamModel: 'omni', input: { form: 'multimodal', parts: [{ type: 'text', text: 'tea' }, { type: 'image_url', url: 'data:image/png;base64,AAAA' }] } },
      live,
    );
    expect(upstream.requests.at(-1)!.body).toEqual({
      model: 'omni',
      input: [{ type: 'text', text: 'tea' }, { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }],
    });
    expect(mixed.results).toHaveLength(1);
    expect(mixed.results[0]!.categoryAppliedInputTypes.sexual).toEqual(['text', 'image']);
    expect(mixed.results[0]!.categoryAppliedInputTypes.hate).toEqual(['text']);
  });

  it('normalises a recorded JSON answer (fixture)', async () => {
    upstream.script({ replay: { contentType: 'application/json', body: fixture('chat-completion.json') } });
    const result = await adapter.chat({ upstreamModel: 'gpt-4o-mini', chat: chatRequest('Capital of France?') }, new AbortController().signal);
    expect(result.choices[0]?.message?.content).toBe('The capital of France is Paris.');
    expect(result.choices[0]?.finishReason).toBe('stop');
    expect(result.usage).toMatchObject({ inputTokens: 24, outputTokens: 8, estimated: false });
    // The provider's id and model of its answer (the attempt's gen_ai.response.id / .model).
    expect(result.response).toEqual({ id: 'chatcmpl-CJ9mZx2fJ4ZLqk3b7gQfH1nS0Xy8d', model: 'gpt-4o-mini-2024-07-18' });
  });

  it('normalises recorded tool calls (fixture)', async () => {
    upstream.script({ replay: { contentType: 'application/json', body: fixture('chat-completion-tool-calls.json') } });
    const result = await adapter.chat({ upstreamModel: 'gpt-4o-mini', chat: chatRequest('Weather?') }, new AbortController().signal);
    expect(result.choices[0]?.finishReason).toBe('tool_calls');
    expect(result.choices[0]?.message?.toolCalls).toEqual([{ id: 'call_Qm3vZ9kL2xN8pR4tW6yB1cDf', name: 'get_weather', arguments: '{"city":"Paris"}' }]);
    expect(result.choices[0]?.message?.content).toBe('');
  });

  it('streams a recorded SSE transcript (fixture) without the role-only chunk', async () => {
    upstream.script({ replay: { contentType: 'text/event-stream', body: fixture('chat-completion-stream.sse.txt') } });
    const parts = await collect(adapter.chatStream({ upstreamModel: 'gpt-4o-mini', chat: chatRequest('Capital?') }, new AbortController().signal));
    const deltas = parts.flatMap((part) => (part.type === 'delta' ? [part.delta] : []));
    expect(deltas.map((delta) => delta.content)).toEqual(['The capital', ' of France', ' is Paris.', '']);
    expect(deltas.at(-1)?.finishReason).toBe('stop');
    expect(parts.at(-1)).toMatchObject({
      type: 'usage', usage: { inputTokens: 24, outputTokens: 8 }, response: { id: 'chatcmpl-CJ9oB7hT2kW9mY4xQ1rN8sV3uZ6pD', model: 'gpt-4o-mini-2024-07-18' },
    });
  });

  it('sends the converted request with the secret, and always asks for stream usage', async () => {
    upstream.script({});
    await collect(adapter.chatStream({ upstreamModel: 'up-model', chat: chatRequest('Hi', { temperature: 0.2, maxOutputTokens: 7 }) }, new AbortController().signal));
    const received = upstream.requests[0]!;
    expect(received.path).toBe('/v1/chat/completions');
    expect(received.headers.authorization).toBe('Bearer sk-test-secret');
    expect(received.body).toMatchObject({
      model: 'up-model', stream: true, stream_options: { include_usage: true }, temperature: 0.2, max_completion_tokens: 7,
      messages: [{ role: 'user', content: 'Hi' }],
    });
  });

  it('streams fake-upstream chunks as they come and reports its usage', async () => {
    upstream.script({ text: 'one two three four', chunkCount: 4, usage: { prompt_tokens: 11, completion_tokens: 4 } });
    const parts = await collect(adapter.chatStream({ upstreamModel: 'm', chat: chatRequest('count') }, new AbortController().signal));
    const text = parts.map((part) => (part.type === 'delta' ? part.delta.content : '')).join('');
    expect(text).toBe('one two three four');
    expect(parts.filter((part) => part.type === 'delta').length).toBeGreaterThanOrEqual(4);
    expect(parts.at(-1)).toMatchObject({ type: 'usage', usage: { inputTokens: 11, outputTokens: 4 } });
  });

  it('classifies failures: refusal, overload, content filter, reset, cut stream', async () => {
    const signal = new AbortController().signal;
    const request = { upstreamModel: 'm', chat: chatRequest('x') };
    upstream.script({ status: 400, errorBody: { error: { message: 'temperature too high', type: 'invalid_request_error' } } });
    const rejected = await failureOf(adapter.chat(request, signal));
    expect([rejected.kind, rejected.providerMessage, rejected.retryable]).toEqual(['rejected', 'temperature too high', false]);

    upstream.script({ status: 503 });
    expect((await failureOf(adapter.chat(request, signal))).kind).toBe('overloaded');
    upstream.script({ status: 429 });
    expect((await failureOf(adapter.chat(request, signal))).retryable).toBe(true);

    upstream.script({ status: 400, errorBody: { error: { message: 'flagged', code: 'content_filter' } } });
    expect((await failureOf(adapter.chat(request, signal))).kind).toBe('content_filter');

    upstream.script({ reset: true });
    expect((await failureOf(adapter.chat(request, signal))).kind).toBe('connection');

    upstream.script({ text: 'abcdef', chunkCount: 3, cutAfterChunks: 1 });
    const seen: string[] = [];
    const cut = await failureOf((async () => {
      for await (const part of adapter.chatStream(request, signal)) if (part.type === 'delta') seen.push(part.delta.content);
    })());
    expect(cut.kind).toBe('connection');
    expect(seen).toEqual(['ab']);
  });
  it('stops a stalled answer when the signal aborts, as a timeout, and keeps serving after it', async () => {
    const request = { upstreamModel: 'm', chat: chatRequest('x') };
    upstream.script({ stall: true });
    const controller = new AbortController();
    const pending = failureOf(adapter.chat(request, controller.signal));
    await new Promise((resolve) => setTimeout(resolve, 20));
    controller.abort(Object.assign(new Error('no answer in time'), { name: 'TimeoutError' }));
    expect((await pending).kind).toBe('timeout');

    const aborted = new AbortController();
    aborted.abort(new Error('caller went away'));
    expect((await failureOf(adapter.chat(request, aborted.signal))).kind).toBe('connection');

    const result = await adapter.chat(request, new AbortController().signal);
    expect(result.choices[0]?.message?.content).toBe('Hello from the fake upstream.');
  });
});
