import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatMessage } from '@gateway/proto';
import { startFakeAzureOpenAIUpstream, type FakeAzureOpenAIUpstream } from '@gateway/testing';
import { AzureOpenAIAdapter } from './azure-openai-adapter.js';
import { chatRequest, collect, deltasOf, failureOf, signal, userText } from '../../../test/adapter-test-support.js';
import { URL_STYLES, azureRig } from '../../../test/azure-openai-url-styles.js';

const WEATHER_TOOL = { name: 'get_weather', description: 'Weather of a city', parameters: JSON.stringify({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }) };

describe.each(URL_STYLES)('AzureOpenAIAdapter chat over $style', ({ apiVersion, pathOf }) => {
  const rig = azureRig(apiVersion);

  it('sends the key in api-key (never as a bearer token) to the right URL and reads text, usage and cached tokens', async () => {
    rig.azure.script({ text: 'Paris.', usage: { prompt_tokens: 40, completion_tokens: 3, cached_tokens: 32, reasoning_tokens: 0 } });
    const result = await rig.adapter.chat({ upstreamModel: 'gpt-4o', chat: chatRequest([userText('Capital of France?')], { temperature: 0.3 }) }, signal());
    const sent = rig.azure.requests[0]!;
    expect(sent.path).toBe(pathOf('chat/completions', 'gpt-4o'));
    expect(sent.headers['api-key']).toBe(rig.azure.apiKey);
    expect(sent.headers.authorization).toBeUndefined();
    // The body is OpenAI's, model included (openai-node's AzureOpenAI leaves it in; deployment URLs ignore it).
    expect(sent.body).toMatchObject({ model: 'gpt-4o', temperature: 0.3, messages: [{ role: 'user', content: 'Capital of France?' }] });
    expect(result.choices[0]!.message!.content).toBe('Paris.');
    expect(result.choices[0]!.finishReason).toBe('stop');
    expect(result.usage).toMatchObject({ inputTokens: 40, cachedInputTokens: 32, outputTokens: 3 });
  });

  it('streams past Azure\'s prompt_filter_results chunk and reports usage with reasoning tokens', async () => {
    rig.azure.script({ text: 'one two three', chunkCount: 3, usage: { prompt_tokens: 12, completion_tokens: 30, reasoning_tokens: 27 } });
    const parts = await collect(rig.adapter.chatStream({ upstreamModel: 'o4-mini', chat: chatRequest([userText('count')], { reasoningEffort: 'low' }) }, signal()));
    expect(rig.azure.requests[0]!.path).toBe(pathOf('chat/completions', 'o4-mini'));
    expect(rig.azure.requests[0]!.body).toMatchObject({ stream: true, stream_options: { include_usage: true }, reasoning_effort: 'low' });
    const deltas = deltasOf(parts);
    expect(deltas.map((delta) => delta.content).join('')).toBe('one two three');
    expect(deltas.at(-1)!.finishReason).toBe('stop');
    // The answer's id and model from the usage chunk (the prompt filter chunk before the content has neither).
    expect(parts.at(-1)).toEqual({
      type: 'usage', usage: expect.objectContaining({ inputTokens: 12, outputTokens: 30, reasoningTokens: 27 }),
      response: { id: expect.stringMatching(/^chatcmpl-azure\d+$/), model: 'o4-mini' },
    });
  });

  it('sends tool definitions and choice, reads tool calls streamed and not, and sends the round trip back', async () => {
    const calls = [{ id: 'call_a', name: 'get_weather', arguments: '{"city":"Paris"}' }, { id: 'call_b', name: 'get_weather', arguments: '{"city":"Rome"}' }];
    const request = chatRequest([userText('Weather in Paris and Rome?')], { tools: [WEATHER_TOOL], toolChoice: { mode: 'required', toolName: '', disableParallel: false }, parallelToolCalls: true });
    rig.azure.script({ toolCalls: calls });
    const answer = await rig.adapter.chat({ upstreamModel: 'gpt-4o', chat: request }, signal());
    expect(rig.azure.requests[0]!.body).toMatchObject({
      tool_choice: 'required', parallel_tool_calls: true,
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', required: ['city'] } } }],
    });
    expect(answer.choices[0]!.finishReason).toBe('tool_calls');
    expect(answer.choices[0]!.message!.toolCalls).toEqual(calls);

    rig.azure.script({ toolCalls: calls });
    const streamed = deltasOf(await collect(rig.adapter.chatStream({ upstreamModel: 'gpt-4o', chat: request }, signal())));
    const byIndex = new Map<number, { id: string; name: string; arguments: string }>();
    for (const call of streamed.flatMap((delta) => delta.toolCalls)) {
      const seen = byIndex.get(call.index) ?? { id: '', name: '', arguments: '' };
      byIndex.set(call.index, { id: seen.id || call.id, name: seen.name || call.name, arguments: seen.arguments + call.arguments });
    }
    expect([...byIndex.values()]).toEqual(calls);
    expect(streamed.at(-1)!.finishReason).toBe('tool_calls');

    const roundTrip = chatRequest([
      userText('Weather in Paris?'),
      ChatMessage.fromPartial({ role: 'assistant', toolCalls: [calls[0]!] }),
      ChatMessage.fromPartial({ role: 'tool', toolCallId: 'call_a', content: [{ part: { $case: 'text', value: '18°C, sunny' } }] }),
    ], { tools: [WEATHER_TOOL] });
    rig.azure.script({ text: 'It is 18°C and sunny in Paris.' });
    const final = await rig.adapter.chat({ upstreamModel: 'gpt-4o', chat: roundTrip }, signal());
    expect(rig.azure.requests.at(-1)!.body.messages.slice(1)).toEqual([
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', content: '18°C, sunny', tool_call_id: 'call_a' },
    ]);
    expect(final.choices[0]!.message!.content).toBe('It is 18°C and sunny in Paris.');
  });

  it('sends images (inline and by URL) and a JSON schema as OpenAI\'s chat format has them', async () => {
    const schema = { type: 'object', properties: { colour: { type: 'string' } }, required: ['colour'], additionalProperties: false };
    const request = chatRequest([ChatMessage.fromPartial({
      role: 'user',
      content: [
        { part: { $case: 'text', value: 'Colours?' } },
        { part: { $case: 'image', value: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' } } },
        { part: { $case: 'image', value: { url: 'https://example.com/cat.png', detail: '' } } },
      ],
    })], { responseFormat: { type: 'json_schema', schemaName: 'colours', schema: JSON.stringify(schema), strict: true } });
    rig.azure.script({ text: '{"colour":"red"}' });
    const result = await rig.adapter.chat({ upstreamModel: 'gpt-4o', chat: request }, signal());
    expect(rig.azure.requests[0]!.body).toMatchObject({
      messages: [{ role: 'user', content: [
        { type: 'text', text: 'Colours?' },
        { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' } },
        { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } },
      ] }],
      response_format: { type: 'json_schema', json_schema: { name: 'colours', schema, strict: true } },
    });
    expect(JSON.parse(result.choices[0]!.message!.content)).toEqual({ colour: 'red' });
  });

  it('fails as content_filter when Azure blocks the prompt, or withholds the answer (streamed and not)', async () => {
    const request = { upstreamModel: 'gpt-4o', chat: chatRequest([userText('something nasty')]) };
    rig.azure.script({ contentFilter: 'prompt' });
    const blocked = await failureOf(rig.adapter.chat(request, signal()));
    expect([blocked.kind, blocked.httpStatus, blocked.retryable]).toEqual(['content_filter', 400, false]);
    rig.azure.script({ contentFilter: 'prompt' });
    expect((await failureOf(collect(rig.adapter.chatStream(request, signal())))).kind).toBe('content_filter');

    rig.azure.script({ contentFilter: 'output' });
    expect((await failureOf(rig.adapter.chat(request, signal()))).kind).toBe('content_filter');
    rig.azure.script({ contentFilter: 'output', text: 'abcdefghi', chunkCount: 3, filterAfterChunks: 1 });
    const seen: string[] = [];
    const cut = await failureOf((async () => {
      for await (const part of rig.adapter.chatStream(request, signal())) if (part.type === 'delta') seen.push(part.delta.content);
    })());
    expect(cut.kind).toBe('content_filter');
    expect(seen).toEqual(['abc']);
    // The connection went back cleanly: the next request is served.
    expect((await rig.adapter.chat(request, signal())).choices[0]!.finishReason).toBe('stop');
  });

  it('maps Azure\'s errors: unknown deployment and wrong operation misconfigured, 429/5xx overloaded, 400 rejected, resets and cut streams', async () => {
    const ask = (model: string) => rig.adapter.chat({ upstreamModel: model, chat: chatRequest([userText('x')]) }, signal());
    const unknown = await failureOf(ask('gpt-5-nowhere'));
    expect([unknown.kind, unknown.httpStatus]).toEqual(['misconfigured', 404]);
    const wrongOperation = await failureOf(ask('text-embedding-3-small'));
    expect([wrongOperation.kind, wrongOperation.httpStatus, wrongOperation.retryable]).toEqual(['misconfigured', 400, true]);
    rig.azure.script({ status: 429, errorBody: { error: { code: '429', message: 'Requests to the ChatCompletions_Create Operation have exceeded the token rate limit.' } } });
    expect((await failureOf(ask('gpt-4o'))).kind).toBe('overloaded');
    rig.azure.script({ status: 500 });
    expect((await failureOf(ask('gpt-4o'))).kind).toBe('overloaded');
    rig.azure.script({ status: 400, errorBody: { error: { message: "Invalid value for 'temperature'.", type: 'invalid_request_error', param: 'temperature', code: null } } });
    const rejected = await failureOf(ask('gpt-4o'));
    expect([rejected.kind, rejected.providerMessage]).toEqual(['rejected', "Invalid value for 'temperature'."]);
    rig.azure.script({ reset: true });
    expect((await failureOf(ask('gpt-4o'))).kind).toBe('connection');
    rig.azure.script({ text: 'abcdef', chunkCount: 3, cutAfterChunks: 1 });
    expect((await failureOf(collect(rig.adapter.chatStream({ upstreamModel: 'gpt-4o', chat: chatRequest([userText('x')]) }, signal())))).kind).toBe('connection');
  });
});

describe('AzureOpenAIAdapter keys, api-versions and cancellation', () => {
  let azure: FakeAzureOpenAIUpstream;
  beforeAll(async () => { azure = await startFakeAzureOpenAIUpstream(); });
  afterAll(() => azure.close());

  it('a wrong or missing key is misconfigured (401), an api-version Azure does not serve too (not the caller\'s 400)', async () => {
    const request = { upstreamModel: 'gpt-4o', chat: chatRequest([userText('x')]) };
    for (const config of [{ apiKey: 'wrong', apiVersion: '2024-10-21' }, { apiKey: undefined, apiVersion: undefined }, { apiKey: azure.apiKey, apiVersion: '2019-01-01' }]) {
      const adapter = new AzureOpenAIAdapter({ providerId: 'az', baseUrl: azure.url, ...config });
      const failure = await failureOf(adapter.chat(request, signal()));
      expect(failure.kind).toBe('misconfigured');
      expect(failure.retryable).toBe(true);
      await adapter.close();
    }
  });

  it('takes a base_url that already ends in /openai or /openai/v1, and keeps a deployment name inside its path segment', async () => {
    azure.reset();
    for (const suffix of ['/openai/', '/openai/v1']) {
      const adapter = new AzureOpenAIAdapter({ providerId: 'az', baseUrl: `${azure.url}${suffix}`, apiKey: azure.apiKey, apiVersion: '2024-10-21' });
      await adapter.chat({ upstreamModel: 'gpt-4o', chat: chatRequest([userText('x')]) }, signal());
      expect((await failureOf(adapter.chat({ upstreamModel: '../gpt-4o', chat: chatRequest([userText('x')]) }, signal()))).kind).toBe('misconfigured');
      await adapter.close();
    }
    expect(azure.requests.map((request) => request.path)).toEqual([
      '/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21',
      '/openai/deployments/..%2Fgpt-4o/chat/completions?api-version=2024-10-21',
      '/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21',
      '/openai/deployments/..%2Fgpt-4o/chat/completions?api-version=2024-10-21',
    ]);
  });

  it('a cancelled stream closes its upstream request at once, and a stalled answer ends as a timeout', async () => {
    const adapter = new AzureOpenAIAdapter({ providerId: 'az', baseUrl: azure.url, apiKey: azure.apiKey, apiVersion: '2024-10-21' });
    const request = { upstreamModel: 'gpt-4o', chat: chatRequest([userText('x')]) };
    azure.script({ text: 'a'.repeat(400), chunkCount: 40, chunkDelayMs: 100 });
    const controller = new AbortController();
    const startedAt = Date.now();
    const seen: string[] = [];
    const failure = await failureOf((async () => {
      for await (const part of adapter.chatStream(request, controller.signal)) {
        if (part.type === 'delta') seen.push(part.delta.content);
        if (seen.length === 2) controller.abort(new Error('caller went away'));
      }
    })());
    expect(failure.kind).toBe('connection');
    expect(seen).toHaveLength(2);
    expect(Date.now() - startedAt).toBeLessThan(1_000);

    azure.script({ stall: true });
    const timer = new AbortController();
    const pending = failureOf(adapter.chat(request, timer.signal));
    setTimeout(() => timer.abort(Object.assign(new Error('no answer in time'), { name: 'TimeoutError' })), 30);
    expect((await pending).kind).toBe('timeout');
    await adapter.close();
  });
});
