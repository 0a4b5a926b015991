import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { sameHiddenClass, startFakeGeminiUpstream, type FakeGeminiUpstream } from '@gateway/testing';
import { Provider, type ChatMessage, type ChatRequest, type Tool, type ToolCall } from '@gateway/proto';
import { ProviderError, type AdapterChatRequest, type ProviderAdapter } from '../provider-adapter.js';
import { createAdapter } from '../create-adapter.js';
import { GeminiAdapter } from './gemini-adapter.js';
import { stripForeignReasoning } from '../../routing/reasoning-provenance.js';
import { adapterRequest, chatRequest, collect, deltasOf, failureOf, message, signal } from '../../../test/adapter-test-support.js';

const KEY = 'gemini-test-key';
const fixture = (name: string) => readFileSync(new URL(`./__fixtures__/${name}`, import.meta.url), 'utf8');

const weatherTool: Tool = {
  name: 'get_weather', description: 'Weather for a city',
  parameters: '{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}',
};

const on = (model: string) => (chat: ChatRequest) => adapterRequest(model, chat);
const flash = on('gemini-2.5-flash');
const pro3 = on('gemini-3-pro-preview');

describe('GeminiAdapter against the fake Gemini API', () => {
  let upstream: FakeGeminiUpstream;
  let adapter: ProviderAdapter;
  const env: Record<string, string> = { GEMINI_KEY: KEY, WRONG_KEY: 'not-the-key' };
  const build = (id: string, keyEnv: string) =>
    createAdapter(Provider.fromPartial({ id, kind: 'gemini', baseUrl: upstream.url, apiKeyEnv: keyEnv, headers: { 'x-team': 'core' } }), (name) => env[name])!;

  beforeAll(async () => {
    upstream = await startFakeGeminiUpstream({ apiKey: KEY });
    adapter = build('gem', 'GEMINI_KEY');
  });
  afterAll(async () => {
    await upstream.close();
    await adapter.close();
  });
  beforeEach(() => upstream.reset());

  it('sends text with the system instruction, key and configured headers; reads text, finish and usage', async () => {
    upstream.script({ text: 'Paris.', usage: { promptTokenCount: 120, candidatesTokenCount: 3, thoughtsTokenCount: 40, cachedContentTokenCount: 100 } });
    const chat = chatRequest([message('system', 'Be brief.'), message('user', 'Capital of France?')], { temperature: 0.2, maxOutputTokens: 50, stop: ['END'] });
    const result = await adapter.chat(flash(chat), signal());
    const sent = upstream.requests[0]!;
    expect(sent.path).toBe('/v1beta/models/gemini-2.5-flash:generateContent');
    expect(sent.headers['x-goog-api-key']).toBe(KEY);
    expect(sent.headers['x-team']).toBe('core');
    expect(sent.body).toEqual({
      contents: [{ role: 'user', parts: [{ text: 'Capital of France?' }] }],
      systemInstruction: { parts: [{ text: 'Be brief.' }] },
      generationConfig: { temperature: 0.2, maxOutputTokens: 50, stopSequences: ['END'] },
    });
    expect(result.choices[0]!.message!.content).toBe('Paris.');
    expect(result.choices[0]!.finishReason).toBe('stop');
    // Output counts the thinking (Gemini's candidatesTokenCount does not); the cached part is reported.
    expect(result.usage).toMatchObject({ inputTokens: 120, cachedInputTokens: 100, outputTokens: 43, reasoningTokens: 40, estimated: false });
  });

  it('streams over SSE (?alt=sse), text in order, finish last, then the usage', async () => {
    upstream.script({ text: 'one two three four', chunkCount: 4, usage: { promptTokenCount: 9, candidatesTokenCount: 4 } });
    const parts = await collect(adapter.chatStream(flash(chatRequest('Count')), signal()));
    expect(upstream.requests[0]!.path).toBe('/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse');
    expect(upstream.requests[0]!.headers.accept).toBe('text/event-stream');
    const deltas = deltasOf(parts);
    expect(deltas.map((delta) => delta.content).join('')).toBe('one two three four');
    expect(deltas.filter((delta) => delta.content).length).toBe(4);
    expect(deltas.at(-1)!.finishReason).toBe('stop');
    expect(parts.at(-1)).toEqual({
      type: 'usage', usage: expect.objectContaining({ inputTokens: 9, outputTokens: 4 }), response: { id: expect.stringMatching(/^fakeResp\d+$/), model: 'gemini-2.5-flash' },
    });
    // The text answer's signature comes as this provider's reasoning (placed on the text).
    expect(deltas.some((delta) => delta.reasoningSignature.startsWith('tx:'))).toBe(true);
  });

  it('n as candidateCount: each candidate a choice at its index, usage as Gemini counts every candidate; logprobs in OpenAI shape', async () => {
    upstream.script({ text: 'Oui merci', usage: { promptTokenCount: 9, candidatesTokenCount: 12 } });
    const result = await adapter.chat(flash(chatRequest('Hi', { n: 3, logprobs: true, topLogprobs: 2 })), signal());
    expect(upstream.requests[0]!.body.generationConfig).toEqual({ candidateCount: 3, responseLogprobs: true, logprobs: 2 });
    expect(result.choices.map((choice) => choice.index)).toEqual([0, 1, 2]);
    expect(result.choices.map((choice) => choice.message!.content)).toEqual(['Oui merci', 'Oui merci (candidate 1)', 'Oui merci (candidate 2)']);
    // Charged as reported: candidatesTokenCount already holds all three.
    expect(result.usage).toMatchObject({ inputTokens: 9, outputTokens: 12 });
    const logprobs = JSON.parse(result.choices[1]!.logprobs!) as { content: { token: string; logprob: number; bytes: number[]; top_logprobs: { token: string }[] }[]; refusal: null };
    expect(logprobs.refusal).toBeNull();
    expect(logprobs.content.map((entry) => entry.token).join('')).toBe('Oui merci (candidate 1)');
    expect(logprobs.content[0]).toEqual({
      token: 'Oui ', logprob: -0.5, bytes: [...Buffer.from('Oui ')],
      top_logprobs: [{ token: 'Oui ', logprob: -0.5, bytes: [...Buffer.from('Oui ')] }, { token: 'Oui ~1', logprob: -1.5, bytes: [...Buffer.from('Oui ~1')] }],
    });
    // Not asked: none.
    upstream.script({ text: 'plain' });
    expect((await adapter.chat(flash(chatRequest('Hi')), signal())).choices[0]!.logprobs).toBeUndefined();
  });

  it('streams logprobs chunk by chunk, each on the text it scores', async () => {
    upstream.script({ text: 'one two three four', chunkCount: 2 });
    const deltas = deltasOf(await collect(adapter.chatStream(flash(chatRequest('Count', { logprobs: true })), signal())));
    expect(upstream.requests[0]!.body.generationConfig).toEqual({ responseLogprobs: true });
    const scored = deltas.filter((delta) => delta.logprobs !== undefined);
    const tokens = scored.flatMap((delta) => (JSON.parse(delta.logprobs!) as { content: { token: string; top_logprobs: unknown[] }[] }).content);
    expect(tokens.map((entry) => entry.token).join('')).toBe('one two three four');
    expect(tokens.every((entry) => entry.top_logprobs.length === 0)).toBe(true);
    for (const delta of scored.filter((candidate) => candidate.content)) {
      expect((JSON.parse(delta.logprobs!) as { content: { token: string }[] }).content.map((entry) => entry.token).join('')).toBe(delta.content);
    }
  });

  it('normalises a recorded answer (fixture): a thought, text, a signed call, usage with thinking and cache', async () => {
    upstream.script({ replay: { contentType: 'application/json', body: fixture('generate-content.json') } });
    const result = await adapter.chat(flash(chatRequest('Weather in Paris?', { tools: [weatherTool] })), signal());
    const choice = result.choices[0]!;
    expect(choice.finishReason).toBe('tool_calls');
    expect(choice.message!.content).toBe('Let me look that up.');
    const [call] = choice.message!.toolCalls;
    expect(call).toMatchObject({ name: 'get_weather', signature: 'CiQBcsjafDBXZ0hpZ2hseVNpZ25lZA==', signatureProviderId: 'gem' });
    expect(JSON.parse(call!.arguments)).toEqual({ city: 'Paris' });
    expect(choice.message!.reasoning[0]).toEqual({ text: 'The user wants the weather in Paris; I should call the tool.', signature: '', encryptedData: '', providerId: 'gem' });
    expect(choice.message!.reasoning[1]!.signature).toContain('CiQBcsjafDBXZ0hpZ2hseVNpZ25lZA==');
    expect(result.usage).toMatchObject({ inputTokens: 61, cachedInputTokens: 32, outputTokens: 80, reasoningTokens: 58 });
    expect(result.response).toEqual({ id: 'yT0qafGzIp2Wvr0PqY6-8Qc', model: 'gemini-2.5-flash' });
  });

  it('streams a recorded SSE transcript (fixture): the thought, the text in order, its signature, finish, then the usage', async () => {
    upstream.script({ replay: { contentType: 'text/event-stream', body: fixture('stream-generate-content.sse.txt') } });
    const parts = await collect(adapter.chatStream(flash(chatRequest('Count to three.')), signal()));
    const deltas = deltasOf(parts);
    expect(deltas.map((delta) => delta.reasoning).join('')).toBe('Counting slowly.');
    expect(deltas.map((delta) => delta.content).join('')).toBe('One, two, three.');
    expect(deltas.some((delta) => delta.reasoningSignature.includes('CiIBcsjafGF0ZXh0U2lnbmF0dXJl'))).toBe(true);
    expect(deltas.at(-1)!.finishReason).toBe('stop');
    // The last chunk's responseId and modelVersion name the answer.
    expect(parts.at(-1)).toEqual({
      type: 'usage', usage: expect.objectContaining({ inputTokens: 8, outputTokens: 18, reasoningTokens: 12 }), response: { id: 'zT0qaY2fLsKnvr0P5ZmX2Ak', model: 'gemini-2.5-flash' },
    });
  });

  for (const streamed of [false, true]) {
    const mode = streamed ? 'streamed' : 'whole';
    const answer = async (request: AdapterChatRequest) => {
      if (!streamed) return (await adapter.chat(request, signal())).choices[0]!;
      const deltas = deltasOf(await collect(adapter.chatStream(request, signal())));
      const calls: ToolCall[] = [];
      // A streamed call's signature comes from the stream's provider.
      for (const delta of deltas) for (const call of delta.toolCalls) calls[call.index] = { id: call.id, name: call.name, arguments: call.arguments, signature: call.signature, signatureProviderId: call.signature ? 'gem' : undefined };
      // As the dialects gather a stream's reasoning: text accumulates into one part until a signature closes it.
      const reasoning: { text: string; signature: string; encryptedData: string; providerId: string }[] = [];
      let open: (typeof reasoning)[number] | undefined;
      for (const delta of deltas) {
        if (!delta.reasoning && !delta.reasoningSignature) continue;
        if (!open) reasoning.push(open = { text: '', signature: '', encryptedData: '', providerId: 'gem' });
        open.text += delta.reasoning;
        if (delta.reasoningSignature) {
          open.signature = delta.reasoningSignature;
          open = undefined;
        }
      }
      return {
        index: 0, stopSequence: '', finishReason: deltas.at(-1)!.finishReason,
        message: { content: deltas.map((delta) => delta.content).join(''), toolCalls: calls, reasoning, images: [] },
      };
    };

    it(`${mode}: tools as parametersJsonSchema, tool choice, parallel calls with ids and tool_calls finish`, async () => {
      upstream.script({ functionCalls: [{ name: 'get_weather', args: { city: 'Paris' } }, { name: 'get_weather', args: { city: 'Rome' } }] });
      const choice = await answer(flash(chatRequest('Weather in Paris and Rome?', { tools: [weatherTool], toolChoice: { mode: 'tool', toolName: 'get_weather', disableParallel: false } })));
      const sent = upstream.requests[0]!.body;
      expect(sent.tools).toEqual([{ functionDeclarations: [{ name: 'get_weather', description: 'Weather for a city', parametersJsonSchema: JSON.parse(weatherTool.parameters) }] }]);
      expect(sent.toolConfig).toEqual({ functionCallingConfig: { mode: 'ANY', allowedFunctionNames: ['get_weather'] } });
      expect(choice.finishReason).toBe('tool_calls');
      const calls = choice.message!.toolCalls;
      expect(calls.map((call) => [call.name, JSON.parse(call.arguments)])).toEqual([['get_weather', { city: 'Paris' }], ['get_weather', { city: 'Rome' }]]);
      expect(calls[0]!.id).not.toBe('');
      expect(calls[0]!.id).not.toBe(calls[1]!.id);
    });

    it(`${mode}: a signed thought goes back as a thought part with its signature, the call's signature on the call`, async () => {
      upstream.script({ thought: 'Look it up.', thoughtSigned: true, functionCalls: [{ name: 'get_weather', args: { city: 'Oslo' } }] });
      const first = await answer(pro3(chatRequest('Weather?', { tools: [weatherTool], reasoningEffort: 'low' })));
      const history = [
        message('user', 'Weather?'),
        message('assistant', '', { toolCalls: first.message!.toolCalls, reasoning: first.message!.reasoning }),
        message('tool', '-3', { toolCallId: first.message!.toolCalls[0]!.id }),
      ];
      upstream.script({ text: 'Cold.' });
      await answer(pro3(chatRequest(history, { tools: [weatherTool], reasoningEffort: 'low' })));
      const model = upstream.requests[1]!.body.contents[1];
      const thoughtParts = model.parts.filter((part: any) => part.thought);
      expect(thoughtParts.map((part: any) => part.text).join('')).toBe('Look it up.');
      expect(thoughtParts.every((part: any) => typeof part.thoughtSignature === 'string')).toBe(true);
      const call = model.parts.find((part: any) => part.functionCall);
      expect(typeof call.thoughtSignature).toBe('string');
      expect(call.thoughtSignature).not.toBe(thoughtParts[0].thoughtSignature);
    });

    it(`${mode}: a signed call carries its own signature; the call alone (as chat clients echo it) takes it back to Gemini 3`, async () => {
      upstream.script({ functionCalls: [{ name: 'get_weather', args: { city: 'Paris' } }, { name: 'get_weather', args: { city: 'Rome' } }] });
      const first = await answer(pro3(chatRequest('Weather?', { tools: [weatherTool] })));
      const [signed, unsigned] = first.message!.toolCalls;
      expect(signed!.signature).toMatch(/^[A-Za-z0-9+/]+=*$/);
      expect(signed!.signatureProviderId).toBe('gem');
      expect(unsigned!.signature).toBeUndefined();
      // The same signature as the reasoning record of the first call.
      expect(first.message!.reasoning.map((part) => part.signature).join('')).toContain(`fc0:${signed!.signature};`);
      const history = [
        message('user', 'Weather?'),
        message('assistant', '', { toolCalls: first.message!.toolCalls }),
        message('tool', '21', { toolCallId: signed!.id }),
        message('tool', '19', { toolCallId: unsigned!.id }),
      ];
      upstream.script({ text: 'Warm in both.' });
      const second = await answer(pro3(chatRequest(stripForeignReasoning(history, 'gem'), { tools: [weatherTool] })));
      expect(second.message!.content).toBe('Warm in both.');
      expect(upstream.requests[1]!.body.contents[1].parts.map((part: any) => part.thoughtSignature)).toEqual([signed!.signature, undefined]);
    });

    it(`${mode}: a tool name Gemini refuses is rewritten on the way out and given back as the caller wrote it`, async () => {
      const name = '1password lookup';
      upstream.script((recorded) => ({ functionCalls: [{ name: recorded.body.tools[0].functionDeclarations[0].name, args: {} }] }));
      const choice = await answer(flash(chatRequest('Find it', { tools: [{ ...weatherTool, name }] })));
      expect(upstream.requests[0]!.body.tools[0].functionDeclarations[0].name).not.toBe(name);
      expect(choice.message!.toolCalls.map((call) => call.name)).toEqual([name]);
    });

    it(`${mode}: the Gemini 3 tool round trip sends the call's thoughtSignature back and wraps non-object results`, async () => {
      upstream.script({ functionCalls: [{ name: 'get_weather', args: { city: 'Paris' } }, { name: 'get_weather', args: { city: 'Rome' } }] });
      const first = await answer(pro3(chatRequest('Weather?', { tools: [weatherTool] })));
      const history = [
        message('user', 'Weather?'),
        message('assistant', '', { toolCalls: first.message!.toolCalls, reasoning: first.message!.reasoning }),
        message('tool', 'sunny, 21°C', { toolCallId: first.message!.toolCalls[0]!.id }),
        message('tool', '{"sky":"clear"}', { toolCallId: first.message!.toolCalls[1]!.id }),
      ];
      upstream.script({ text: 'Sunny in Paris, clear in Rome.' });
      const second = await answer(pro3(chatRequest(stripForeignReasoning(history, 'gem'), { tools: [weatherTool] })));
      expect(second.message!.content).toBe('Sunny in Paris, clear in Rome.');
      const contents = upstream.requests[1]!.body.contents;
      expect(contents[1].role).toBe('model');
      expect(typeof contents[1].parts[0].thoughtSignature).toBe('string');
      expect(contents[1].parts[0].thoughtSignature).not.toBe('skip_thought_signature_validator');
      expect(contents[1].parts[1].thoughtSignature).toBeUndefined();
      expect(contents[2]).toEqual({
        role: 'user',
        parts: [
          { functionResponse: { name: 'get_weather', response: { output: 'sunny, 21°C' } } },
          { functionResponse: { name: 'get_weather', response: { sky: 'clear' } } },
        ],
      });
    });
  }

  it('every streamed delta (text, thought, signature, call, finish) has one hidden class', async () => {
    upstream.script({ thought: 'Hmm.', thoughtSigned: true, text: 'Calling.', functionCalls: [{ name: 'get_weather', args: { city: 'Paris' } }] });
    const deltas = deltasOf(await collect(adapter.chatStream(flash(chatRequest('x', { tools: [weatherTool], reasoningEffort: 'low' })), signal())));
    expect(new Set(deltas.map((delta) => (delta.reasoning ? 'thought' : delta.reasoningSignature ? 'signature' : delta.content ? 'text' : delta.toolCalls.length ? 'call' : 'finish')))).toEqual(new Set(['thought', 'signature', 'text', 'call', 'finish']));
    expect(deltas.every((delta) => sameHiddenClass(delta, deltas[0]!))).toBe(true);
  });

  it('a chat-completions history without the signature (client dropped it) still reaches Gemini 3', async () => {
    const history = [
      message('user', 'Weather?'),
      message('assistant', '', { toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }] }),
      message('tool', '21', { toolCallId: 'call_1' }),
    ];
    const result = await adapter.chat(pro3(chatRequest(history, { tools: [weatherTool] })), signal());
    expect(result.choices[0]!.finishReason).toBe('stop');
    expect(upstream.requests[0]!.body.contents[1].parts[0].thoughtSignature).toBe('skip_thought_signature_validator');
  });

  it('signatures of another provider never go out: the router strips them, and so does the adapter', async () => {
    const foreign = { text: '', signature: `fc0:${upstream.signature()};`, encryptedData: '', providerId: 'other-gemini' };
    const assistant = message('assistant', '', { toolCalls: [{ id: 'c1', name: 'get_weather', arguments: '{}' }], reasoning: [foreign] });
    const history = [message('user', 'Weather?'), assistant, message('tool', '{}', { toolCallId: 'c1' })];
    await adapter.chat(pro3(chatRequest(history)), signal());
    expect(upstream.requests[0]!.body.contents[1].parts[0].thoughtSignature).toBe('skip_thought_signature_validator');
    expect(stripForeignReasoning(history, 'gem')[1]!.reasoning).toEqual([]);
  });

  it("a call's signature of another provider never goes out either: stripped by the router, ignored by the adapter", async () => {
    const signed = { id: 'c1', name: 'get_weather', arguments: '{}', signature: upstream.signature(), signatureProviderId: 'other-gemini' };
    const history = [message('user', 'Weather?'), message('assistant', '', { toolCalls: [signed] }), message('tool', '{}', { toolCallId: 'c1' })];
    await adapter.chat(pro3(chatRequest(history)), signal());
    expect(upstream.requests[0]!.body.contents[1].parts[0].thoughtSignature).toBe('skip_thought_signature_validator');
    const stripped = stripForeignReasoning(history, 'gem');
    expect(stripped[1]!.toolCalls).toEqual([{ id: 'c1', name: 'get_weather', arguments: '{}' }]);
    expect(history[1]!.toolCalls[0]!.signature, 'the history given is not changed').toBe(signed.signature);
    expect(stripForeignReasoning(history, 'other-gemini')[1]!.toolCalls[0]).toBe(signed);
    // Nothing signed: the same array goes on.
    const plain = [message('user', 'hi')];
    expect(stripForeignReasoning(plain, 'gem')).toBe(plain);
  });

  it('thinking: reasoning_effort asks for thoughts; thought parts come back as reasoning of this provider, streamed and whole', async () => {
    upstream.script({ thought: 'Consider the capital.', text: 'Paris.' }, { thought: 'Consider the capital.', text: 'Paris.' });
    const chat = chatRequest('Capital?', { reasoningEffort: 'low' });
    const whole = await adapter.chat(flash(chat), signal());
    expect(upstream.requests[0]!.body.generationConfig).toEqual({ thinkingConfig: { includeThoughts: true, thinkingBudget: 1024 } });
    const reasoning = whole.choices[0]!.message!.reasoning;
    expect(reasoning[0]).toEqual({ text: 'Consider the capital.', signature: '', encryptedData: '', providerId: 'gem' });
    expect(reasoning.at(-1)!.signature).toMatch(/^tx:.+;$/);
    const deltas = deltasOf(await collect(adapter.chatStream(flash(chat), signal())));
    expect(deltas.map((delta) => delta.reasoning).join('')).toBe('Consider the capital.');
    expect(deltas.map((delta) => delta.content).join('')).toBe('Paris.');
  });

  it('reasoning_effort none turns thinking off where the model can, and asks a Pro model for its smallest budget', async () => {
    await adapter.chat(flash(chatRequest('x', { reasoningEffort: 'none' })), signal());
    await adapter.chat(pro3(chatRequest('x', { reasoningEffort: 'none' })), signal());
    expect(upstream.requests.map((recorded) => recorded.body.generationConfig.thinkingConfig)).toEqual([{ thinkingBudget: 0 }, { thinkingBudget: 128 }]);
  });

  it('images (data: inline, URLs as fileData), PDFs inline and JSON schema output', async () => {
    const png = 'iVBORw0KGgo=';
    const user: ChatMessage = {
      ...message('user', 'Describe'),
      content: [
        { part: { $case: 'text', value: 'Describe' } },
        { part: { $case: 'image', value: { url: `data:image/png;base64,${png}`, detail: '' } } },
        { part: { $case: 'image', value: { url: 'https://example.com/cat.webp', detail: '' } } },
        { part: { $case: 'file', value: { filename: 'a.pdf', data: Buffer.from('%PDF-1.4'), url: '', mediaType: 'application/pdf', context: '', fileId: '' } } },
      ],
    };
    const schema = '{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"],"additionalProperties":false}';
    upstream.script({ text: '{"answer":"a cat"}' });
    const result = await adapter.chat(flash(chatRequest([user], { responseFormat: { type: 'json_schema', schemaName: 'a', schema } })), signal());
    const sent = upstream.requests[0]!.body;
    expect(sent.contents[0].parts).toEqual([
      { text: 'Describe' },
      { inlineData: { mimeType: 'image/png', data: png } },
      { fileData: { mimeType: 'image/webp', fileUri: 'https://example.com/cat.webp' } },
      { inlineData: { mimeType: 'application/pdf', data: Buffer.from('%PDF-1.4').toString('base64') } },
    ]);
    expect(sent.generationConfig).toEqual({ responseMimeType: 'application/json', responseJsonSchema: JSON.parse(schema) });
    expect(JSON.parse(result.choices[0]!.message!.content)).toEqual({ answer: 'a cat' });
  });

  it('images the model makes come back as data: URLs, streamed and whole; image_aspect_ratio goes as imageConfig', async () => {
    const image = { mimeType: 'image/png', data: 'iVBORw0KGgoAAAANSUhEUg==' };
    upstream.script({ text: 'Here.', image }, { text: 'Here.', image });
    const chat = chatRequest('Draw a cat', { imageAspectRatio: '16:9' });
    const whole = await adapter.chat(on('gemini-2.5-flash-image')(chat), signal());
    expect(upstream.requests[0]!.body.generationConfig).toEqual({ imageConfig: { aspectRatio: '16:9' } });
    expect(whole.choices[0]!.message!.images).toEqual([{ url: `data:image/png;base64,${image.data}` }]);
    const deltas = deltasOf(await collect(adapter.chatStream(on('gemini-2.5-flash-image')(chat), signal())));
    expect(deltas.flatMap((delta) => delta.images)).toEqual([{ url: `data:image/png;base64,${image.data}` }]);
    expect(deltas.map((delta) => delta.content).join('')).toBe('Here.');
  });

  it('safety blocks are content_filter refusals, streamed and whole; MAX_TOKENS is length', async () => {
    upstream.script({ blockPrompt: 'PROHIBITED_CONTENT' }, { finishReason: 'SAFETY', text: '' }, { blockPrompt: 'SAFETY' }, { finishReason: 'MAX_TOKENS' });
    expect((await failureOf(adapter.chat(flash(chatRequest('x')), signal()))).kind).toBe('content_filter');
    expect((await failureOf(adapter.chat(flash(chatRequest('x')), signal()))).kind).toBe('content_filter');
    const streamed = await failureOf(collect(adapter.chatStream(flash(chatRequest('x')), signal())));
    expect(streamed.kind).toBe('content_filter');
    expect(streamed.retryable).toBe(false);
    expect((await adapter.chat(flash(chatRequest('x')), signal())).choices[0]!.finishReason).toBe('length');
  });

  it('errors: wrong key misconfigured, 400 rejected in its words, 404 misconfigured, 429/503 overloaded, reset connection', async () => {
    const wrong = build('gem-wrong', 'WRONG_KEY');
    const keyError = await failureOf(wrong.chat(flash(chatRequest('x')), signal()));
    expect(keyError.kind).toBe('misconfigured');
    expect(keyError.providerMessage).toBe('API key not valid. Please pass a valid API key.');
    await wrong.close();
    // A request the API refuses (a tool result for a call no assistant message made is ours to refuse; an
    // unknown field in extra_body is the API's).
    const refused = await failureOf(adapter.chat(flash(chatRequest('x', { extraBody: '{"bogusField":1}' })), signal()));
    expect(refused.kind).toBe('rejected');
    expect(refused.providerMessage).toContain('Unknown name "bogusField"');
    upstream.script({ status: 404 }, { status: 429 }, { status: 503 }, { reset: true }, { status: 403 });
    expect((await failureOf(adapter.chat(flash(chatRequest('x')), signal()))).kind).toBe('misconfigured');
    expect((await failureOf(adapter.chat(flash(chatRequest('x')), signal()))).kind).toBe('overloaded');
    expect((await failureOf(collect(adapter.chatStream(flash(chatRequest('x')), signal())))).kind).toBe('overloaded');
    expect((await failureOf(adapter.chat(flash(chatRequest('x')), signal()))).kind).toBe('connection');
    expect((await failureOf(collect(adapter.chatStream(flash(chatRequest('x')), signal())))).kind).toBe('misconfigured');
  });

  it('a cut stream and an error inside the stream fail instead of ending cleanly', async () => {
    upstream.script({ text: 'abcdef', chunkCount: 3, cutAfterChunks: 2 }, { text: 'abcdef', chunkCount: 3, streamErrorAfterChunks: 1 });
    const seen: string[] = [];
    const cut = await failureOf((async () => { for await (const part of adapter.chatStream(flash(chatRequest('x')), signal())) if (part.type === 'delta') seen.push(part.delta.content); })());
    expect(cut.kind).toBe('connection');
    expect(seen.join('')).toBe('abcd');
    const inStream = await failureOf(collect(adapter.chatStream(flash(chatRequest('x')), signal())));
    expect(inStream.kind).toBe('overloaded');
  });

  it('cancellation ends a stalled stream at once', async () => {
    upstream.script({ text: 'abcdef', chunkCount: 3, stallAfterChunks: 1 });
    const controller = new AbortController();
    const stream = adapter.chatStream(flash(chatRequest('x')), controller.signal)[Symbol.asyncIterator]();
    expect((await stream.next()).value).toMatchObject({ type: 'delta' });
    const started = Date.now();
    setTimeout(() => controller.abort(), 20);
    const error = await failureOf(stream.next());
    expect(error.kind).toBe('connection');
    expect(Date.now() - started).toBeLessThan(1_000);
  });

  it('embeds more than 100 inputs as several batches (the API takes 100 at most), vectors in input order', async () => {
    const texts = Array.from({ length: 230 }, (_unused, index) => 'x'.repeat(index % 7));
    const result = await adapter.embed!({ upstreamModel: 'gemini-embedding-001', texts, tokenInputs: [], dimensions: 3 }, signal());
    expect(upstream.requests.map((recorded) => recorded.body.requests.length).sort((a: number, b: number) => a - b)).toEqual([30, 100, 100]);
    expect(result.embeddings).toHaveLength(230);
    // The fake's vectors depend on the text and its place in the batch: each answer lands at its input.
    const sent = upstream.requests.flatMap((recorded) => recorded.body.requests.map((item: any, index: number) => [item.content.parts[0].text, index]));
    const expected = new Map(sent.map(([text, index]) => [`${text}|${index}`, Array.from({ length: 3 }, (_u, position) => ((text.length + index + position) % 7) / 7)]));
    texts.forEach((text, index) => expect(result.embeddings[index]).toEqual(expected.get(`${text}|${index % 100}`)));
    await expect(adapter.embed!({ upstreamModel: 'gemini-embedding-001', texts: [], tokenInputs: [[1, 2]], dimensions: undefined }, signal())).rejects.toMatchObject({ kind: 'rejected' });
  });

  it('the constructor vertex reuses: its own model paths and asynchronous auth headers, fetched for every request', async () => {
    let grants = 0;
    const custom = new GeminiAdapter({
      providerId: 'custom', kind: 'vertex', baseUrl: upstream.url,
      modelPath: (model, method) => `/v1beta/models/${model}:${method}`,
      authHeaders: async () => ({ 'x-goog-api-key': KEY, authorization: `Bearer token-${++grants}` }),
      headers: { 'x-goog-api-key': 'overridden', 'x-extra': '1' },
      httpError: (status, bodyText) => {
        refused.push(status);
        return new ProviderError('misconfigured', bodyText, status);
      },
    });
    const refused: number[] = [];
    try {
      upstream.script({ status: 401 }, { status: 401 });
      expect((await failureOf(custom.chat(flash(chatRequest('a')), signal()))).kind).toBe('misconfigured');
      expect((await failureOf(collect(custom.chatStream(flash(chatRequest('a')), signal())))).kind).toBe('misconfigured');
      expect(refused).toEqual([401, 401]);
      upstream.reset();
      await custom.chat(flash(chatRequest('a')), signal());
      await collect(custom.chatStream(flash(chatRequest('b')), signal()));
      expect(custom.kind).toBe('vertex');
      expect(upstream.requests.map((recorded) => [recorded.path, recorded.headers.authorization, recorded.headers['x-goog-api-key'], recorded.headers['x-extra']])).toEqual([
        ['/v1beta/models/gemini-2.5-flash:generateContent', 'Bearer token-3', KEY, '1'],
        ['/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse', 'Bearer token-4', KEY, '1'],
      ]);
    } finally {
      await custom.close();
    }
  });

  it('a caller that gives up while asynchronous auth headers are fetched is released at once, before any request', async () => {
    const slow = new GeminiAdapter({
      providerId: 'slow-auth', kind: 'vertex', baseUrl: upstream.url,
      modelPath: (model, method) => `/v1beta/models/${model}:${method}`,
      authHeaders: () => new Promise((resolve) => setTimeout(() => resolve({ 'x-goog-api-key': KEY }), 600)),
    });
    try {
      for (const streamed of [false, true]) {
        const controller = new AbortController();
        const started = Date.now();
        setTimeout(() => controller.abort(), 50);
        const attempt = streamed ? collect(slow.chatStream(flash(chatRequest('x')), controller.signal)) : slow.chat(flash(chatRequest('x')), controller.signal);
        expect((await failureOf(attempt)).kind).toBe('connection');
        expect(Date.now() - started).toBeLessThan(500);
      }
      expect(upstream.requests).toHaveLength(0);
    } finally {
      await slow.close();
    }
  });

  it('embeds a batch with batchEmbedContents, one vector per input in order', async () => {
    const result = await adapter.embed!({ upstreamModel: 'gemini-embedding-001', texts: ['a', 'bb', 'ccc'], tokenInputs: [], dimensions: 5 }, signal());
    const sent = upstream.requests[0]!;
    expect(sent.path).toBe('/v1beta/models/gemini-embedding-001:batchEmbedContents');
    expect(sent.body.requests[1]).toEqual({ model: 'models/gemini-embedding-001', content: { parts: [{ text: 'bb' }] }, outputDimensionality: 5 });
    expect(result.embeddings).toHaveLength(3);
    expect(result.embeddings[0]).toHaveLength(5);
    expect(result.usage).toBeUndefined();
  });
});
