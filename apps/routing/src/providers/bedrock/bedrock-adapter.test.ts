import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { minimalPdf, startFakeBedrockUpstream, type FakeBedrockUpstream } from '@gateway/testing';
import { Provider, type ChatRequest, type ChatStreamDelta } from '@gateway/proto';
import type { AdapterStreamPart, ProviderAdapter } from '../provider-adapter.js';
import { createAdapter } from '../create-adapter.js';
import { BedrockAdapter } from './bedrock-adapter.js';
import { adapterRequest, chatRequest, collect, deltasOf, failureOf, message, signal, weatherTool } from '../../../test/adapter-test-support.js';

const KEY_ID = 'AKIATESTBEDROCK00001';
const SECRET = 'test-secret-access-key';
const CLAUDE = 'anthropic.claude-sonnet-4-20250514-v1:0';
const PROFILE_ARN = 'arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-20250514-v1:0';

const request = (chat: ChatRequest, upstreamModel = CLAUDE) => adapterRequest(upstreamModel, chat);

const textOf = (parts: AdapterStreamPart[]) => deltasOf(parts).map((delta) => delta.content).join('');

function adapterFor(upstream: FakeBedrockUpstream, extra: Partial<ConstructorParameters<typeof BedrockAdapter>[0]> = {}) {
  return new BedrockAdapter({ providerId: 'bdr', region: upstream.region, baseUrl: upstream.url, accessKeyId: KEY_ID, secretAccessKey: SECRET, ...extra });
}

describe('BedrockAdapter', () => {
  let upstream: FakeBedrockUpstream;
  let adapter: BedrockAdapter;

  beforeAll(async () => {
    upstream = await startFakeBedrockUpstream({ accessKeyId: KEY_ID, secretAccessKey: SECRET });
    adapter = adapterFor(upstream, { headers: { 'x-team': 'ml' } });
  });
  afterAll(async () => {
    await upstream.close();
    await adapter.close();
  });
  beforeEach(() => upstream.reset());

  it('answers text through a signed Converse call, the model ARN encoded in the path and signed as sent', async () => {
    upstream.script({ text: 'Paris.', usage: { inputTokens: 12, outputTokens: 3 } });
    const chat = chatRequest([message('system', 'Be brief.'), message('user', 'Capital of France?')], { temperature: 0.2, maxOutputTokens: 100, stop: ['END'] });
    const result = await adapter.chat(request(chat, PROFILE_ARN), signal());
    expect(result.choices).toEqual([{ index: 0, finishReason: 'stop', stopSequence: '', message: { content: 'Paris.', toolCalls: [], reasoning: [], images: [] } }]);
    expect(result.usage).toMatchObject({ inputTokens: 12, cachedInputTokens: 0, cacheWriteTokens: 0, outputTokens: 3 });
    const recorded = upstream.requests[0]!;
    expect(recorded.path).toBe(`/model/${encodeURIComponent(PROFILE_ARN)}/converse`);
    expect(recorded.path).toContain('%3A');
    expect(recorded.headers.authorization).toMatch(/^AWS4-HMAC-SHA256 Credential=AKIATESTBEDROCK00001\/\d{8}\/us-east-1\/bedrock\/aws4_request/);
    expect(recorded.headers['x-team']).toBe('ml');
    expect(recorded.body).toEqual({
      messages: [{ role: 'user', content: [{ text: 'Capital of France?' }] }],
      system: [{ text: 'Be brief.' }],
      inferenceConfig: { maxTokens: 100, temperature: 0.2, stopSequences: ['END'] },
      additionalModelResponseFieldPaths: ['/stop_sequence'],
    });
  });

  it('sends Anthropic betas to Claude as additionalModelRequestFields.anthropic_beta (the fake checks the flags); other models name them', async () => {
    const named: string[] = [];
    const watched = Object.assign(signal(), { parametersUnsent: (names: readonly string[]) => { named.push(...names); } });
    const chat = chatRequest([message('user', 'Hi')], { anthropicBeta: 'interleaved-thinking-2025-05-14,token-efficient-tools-2025-02-19' });
    const claude = await adapter.chat(request(chat, PROFILE_ARN), watched);
    expect(claude.choices[0]!.message!.content).not.toBe('');
    expect(upstream.requests[0]!.body.additionalModelRequestFields).toEqual({ anthropic_beta: ['interleaved-thinking-2025-05-14', 'token-efficient-tools-2025-02-19'] });
    expect(named).toEqual([]);
    // Streamed alike.
    await collect(adapter.chatStream(request(chat), watched));
    expect(upstream.requests[1]!.body.additionalModelRequestFields).toEqual({ anthropic_beta: ['interleaved-thinking-2025-05-14', 'token-efficient-tools-2025-02-19'] });
    await adapter.chat(request(chat, 'amazon.nova-pro-v1:0'), watched);
    expect(upstream.requests[2]!.body.additionalModelRequestFields).toBeUndefined();
    expect(named).toEqual(['anthropic-beta']);
  });

  it('streams text from the binary eventstream (padding ignored, no start event for text), then finish and usage', async () => {
    upstream.script({ text: 'Hello there, traveller.', chunkCount: 4, usage: { inputTokens: 7, outputTokens: 5 } });
    const parts = await collect(adapter.chatStream(request(chatRequest('Hi')), signal()));
    expect(upstream.requests[0]!.path).toBe(`/model/${encodeURIComponent(CLAUDE)}/converse-stream`);
    expect(upstream.requests[0]!.headers.accept).toBe('application/vnd.amazon.eventstream');
    const deltas = deltasOf(parts);
    expect(deltas.filter((delta) => delta.content !== '')).toHaveLength(4);
    expect(textOf(parts)).toBe('Hello there, traveller.');
    expect(deltas.at(-1)!.finishReason).toBe('stop');
    expect(parts.at(-1)).toEqual({ type: 'usage', usage: expect.objectContaining({ inputTokens: 7, outputTokens: 5 }) });
  });

  it('offers tools with a tool choice and hands on parallel calls, whole and streamed', async () => {
    const calls = [{ name: 'get_weather', input: { city: 'Paris' } }, { name: 'get_weather', input: { city: 'Oslo' } }];
    const chat = chatRequest('Weather in Paris and Oslo?', { tools: [weatherTool], toolChoice: { mode: 'required', toolName: '', disableParallel: false } });
    upstream.script({ toolCalls: calls }, { toolCalls: calls });
    const whole = await adapter.chat(request(chat), signal());
    expect(upstream.requests[0]!.body.toolConfig).toEqual({
      tools: [{ toolSpec: { name: 'get_weather', description: 'Weather for a city', inputSchema: { json: JSON.parse(weatherTool.parameters) } } }],
      toolChoice: { any: {} },
    });
    expect(whole.choices[0]!.finishReason).toBe('tool_calls');
    expect(whole.choices[0]!.message!.toolCalls.map((call) => JSON.parse(call.arguments))).toEqual([{ city: 'Paris' }, { city: 'Oslo' }]);
    const deltas = deltasOf(await collect(adapter.chatStream(request(chat), signal())));
    const toolDeltas = deltas.flatMap((delta) => delta.toolCalls);
    expect(toolDeltas.filter((call) => call.name !== '').map((call) => [call.index, call.name, call.id])).toEqual([
      [0, 'get_weather', expect.stringMatching(/^tooluse_fake\d+_0$/)], [1, 'get_weather', expect.stringMatching(/^tooluse_fake\d+_1$/)],
    ]);
    for (const index of [0, 1]) {
      expect(JSON.parse(toolDeltas.filter((call) => call.index === index).map((call) => call.arguments).join(''))).toEqual(calls[index]!.input);
    }
    expect(deltas.at(-1)!.finishReason).toBe('tool_calls');
  });

  it('round-trips a tool loop with signed reasoning (thinking in additionalModelRequestFields); the fake verifies signature and pairing', async () => {
    const chat = chatRequest('Weather in Paris?', { tools: [weatherTool], thinkingBudgetTokens: 2048, maxOutputTokens: 8000 });
    upstream.script({ toolCalls: [{ id: 'tooluse_1', name: 'get_weather', input: { city: 'Paris' } }] });
    const first = await adapter.chat(request(chat), signal());
    expect(upstream.requests[0]!.body.additionalModelRequestFields).toEqual({ thinking: { type: 'enabled', budget_tokens: 2048 } });
    const reasoning = first.choices[0]!.message!.reasoning;
    expect(reasoning).toEqual([{ text: expect.any(String), signature: upstream.signReasoning(reasoning[0]!.text), encryptedData: '', providerId: 'bdr' }]);
    const history = [
      ...chat.messages,
      message('assistant', '', { reasoning, toolCalls: first.choices[0]!.message!.toolCalls }),
      message('tool', '18°C and sunny', { toolCallId: 'tooluse_1' }),
    ];
    upstream.script({ text: 'It is sunny in Paris.' });
    const second = await collect(adapter.chatStream(request({ ...chat, messages: history }), signal()));
    expect(textOf(second)).toBe('It is sunny in Paris.');
    const sent = upstream.requests[1]!.body.messages;
    expect(sent[1].content[0]).toEqual({ reasoningContent: { reasoningText: { text: reasoning[0]!.text, signature: reasoning[0]!.signature } } });
    expect(sent[2].content).toEqual([{ toolResult: { toolUseId: 'tooluse_1', content: [{ text: '18°C and sunny' }] } }]);
  });

  it('strips reasoning another provider issued, and keeps redacted reasoning this one issued', async () => {
    upstream.script({ redactedReasoning: true, reasoning: false });
    const first = await adapter.chat(request(chatRequest('Hi')), signal());
    const redacted = first.choices[0]!.message!.reasoning;
    expect(redacted).toEqual([{ text: '', signature: '', encryptedData: expect.any(String), providerId: 'bdr' }]);
    const foreign = { text: 'other thoughts', signature: 'c2lnbmVk', encryptedData: '', providerId: 'claude-direct' };
    const chat = chatRequest([message('user', 'Hi'), message('assistant', 'Hello!', { reasoning: [foreign, ...redacted] }), message('user', 'And now?')]);
    await adapter.chat(request(chat), signal());
    expect(upstream.requests[1]!.body.messages[1].content).toEqual([{ reasoningContent: { redactedContent: redacted[0]!.encryptedData } }, { text: 'Hello!' }]);
  });

  it('declares the tools the history used when the request offers none (Converse requires toolConfig then)', async () => {
    const history = [
      message('user', 'Weather?'),
      message('assistant', '', { toolCalls: [{ id: 'call.1', name: 'mcp.weather', arguments: '{"city":"Oslo"}' }] }),
      message('tool', 'rain', { toolCallId: 'call.1' }),
    ];
    upstream.script({ text: 'It rains.' });
    const result = await adapter.chat(request(chatRequest(history)), signal());
    expect(result.choices[0]!.message!.content).toBe('It rains.');
    const body = upstream.requests[0]!.body;
    const name = body.messages[1].content[0].toolUse.name;
    expect(name).toMatch(/^mcp_weather_[0-9a-f]{8}$/);
    expect(body.toolConfig.tools).toEqual([{ toolSpec: { name, description: expect.any(String), inputSchema: { json: { type: 'object', properties: {} } } } }]);
  });

  it('sends inline images and PDFs (document names without dots) and refuses image links with a clear rejection', async () => {
    const png = Buffer.from('89504e470d0a1a0a', 'hex').toString('base64');
    const chat = chatRequest([message('user', '', {
      content: [
        { part: { $case: 'text', value: 'Compare these.' } },
        { part: { $case: 'image', value: { url: `data:image/png;base64,${png}`, detail: '' } } },
        { part: { $case: 'file', value: { filename: 'q3.report.pdf', data: minimalPdf(['Q3 numbers']), url: '', mediaType: 'application/pdf', context: '', fileId: '' } } },
      ],
    })]);
    await adapter.chat(request(chat), signal());
    const content = upstream.requests[0]!.body.messages[0].content;
    expect(content[1]).toEqual({ image: { format: 'png', source: { bytes: png } } });
    expect(content[2].document).toMatchObject({ format: 'pdf', name: 'q3-report-pdf' });
    const link = chatRequest([message('user', '', { content: [{ part: { $case: 'image', value: { url: 'https://example.com/cat.png', detail: '' } } }] })]);
    const error = await failureOf(adapter.chat(request(link), signal()));
    expect(error.kind).toBe('rejected');
    expect(error.providerMessage).toMatch(/inline data only.*data: URL/);
    expect(upstream.requests).toHaveLength(1);
  });

  it('turns cache marks into cachePoint blocks (system, message, tool) and bills cache reads and writes, whole and streamed', async () => {
    const mark = { type: 'ephemeral', ttl: '1h' };
    const chat = chatRequest([
      message('system', '', { content: [{ part: { $case: 'text', value: 'Long instructions.' }, cacheControl: mark }] }),
      message('user', '', { content: [{ part: { $case: 'text', value: 'The document.' }, cacheControl: { type: 'ephemeral', ttl: '' } }, { part: { $case: 'text', value: 'Question?' } }] }),
    ], { tools: [{ ...weatherTool, cacheControl: mark }] });
    const usage = { inputTokens: 10, outputTokens: 4, cacheReadInputTokens: 3000, cacheWriteInputTokens: 500 };
    upstream.script({ usage }, { usage });
    const whole = await adapter.chat(request(chat), signal());
    const body = upstream.requests[0]!.body;
    expect(body.system).toEqual([{ text: 'Long instructions.' }, { cachePoint: { type: 'default', ttl: '1h' } }]);
    expect(body.messages[0].content).toEqual([{ text: 'The document.' }, { cachePoint: { type: 'default' } }, { text: 'Question?' }]);
    expect(body.toolConfig.tools[1]).toEqual({ cachePoint: { type: 'default', ttl: '1h' } });
    const expected = { inputTokens: 3510, cachedInputTokens: 3000, cacheWriteTokens: 500, outputTokens: 4 };
    expect(whole.usage).toMatchObject(expected);
    const streamed = await collect(adapter.chatStream(request(chat), signal()));
    expect(streamed.at(-1)).toEqual({ type: 'usage', usage: expect.objectContaining(expected) });
  });

  it('maps stop reasons: max_tokens is length, a reported stop sequence comes back, guardrails are content_filter errors', async () => {
    upstream.script({ stopReason: 'max_tokens' }, { stopReason: 'max_tokens' });
    expect((await adapter.chat(request(chatRequest('Hi')), signal())).choices[0]!.finishReason).toBe('length');
    expect(deltasOf(await collect(adapter.chatStream(request(chatRequest('Hi')), signal()))).at(-1)!.finishReason).toBe('length');
    upstream.script({ stopSequence: 'END' });
    const stopped = await adapter.chat(request(chatRequest('Hi', { stop: ['END'] })), signal());
    expect(stopped.choices[0]).toMatchObject({ finishReason: 'stop', stopSequence: 'END' });
    for (const stopReason of ['guardrail_intervened', 'content_filtered']) {
      upstream.script({ stopReason, chunkCount: 1 }, { stopReason, toolCalls: [{ name: 'get_weather', input: {} }] });
      expect((await failureOf(adapter.chat(request(chatRequest('Bad')), signal()))).kind).toBe('content_filter');
      // A stream blocked before anything was said is an error too (a tool call was handed on: then it ends as content_filter).
      const deltas = deltasOf(await collect(adapter.chatStream(request(chatRequest('Bad', { tools: [weatherTool] })), signal())));
      expect(deltas.at(-1)!.finishReason).toBe('content_filter');
    }
    upstream.script({ stopReason: 'guardrail_intervened', text: '' });
    expect((await failureOf(collect(adapter.chatStream(request(chatRequest('Bad')), signal())))).kind).toBe('content_filter');
  });

  it('classifies HTTP errors: ValidationException is the caller\'s, access and model errors are ours, throttling and outages fail over', async () => {
    const cases: [number, string | undefined, string][] = [
      [400, undefined, 'rejected'],
      [403, undefined, 'misconfigured'],
      [404, undefined, 'misconfigured'],
      [429, undefined, 'overloaded'],
      [429, 'ModelNotReadyException', 'overloaded'],
      [400, 'ServiceQuotaExceededException', 'overloaded'],
      [500, undefined, 'overloaded'],
      [503, undefined, 'overloaded'],
    ];
    for (const [status, errorType, kind] of cases) {
      upstream.script({ status, ...(errorType ? { errorType } : {}), errorMessage: `scripted ${status}` }, { status, ...(errorType ? { errorType } : {}), errorMessage: `scripted ${status}` });
      const whole = await failureOf(adapter.chat(request(chatRequest('Hi')), signal()));
      const streamed = await failureOf(collect(adapter.chatStream(request(chatRequest('Hi')), signal())));
      for (const error of [whole, streamed]) {
        expect([status, errorType, error.kind, error.providerMessage]).toEqual([status, errorType, kind, `scripted ${status}`]);
      }
    }
    upstream.script({ reset: true });
    expect((await failureOf(adapter.chat(request(chatRequest('Hi')), signal()))).kind).toBe('connection');
  });

  it('passes a refusal of the API through with Bedrock\'s words (the fake refuses a thinking budget below 1024, as Claude on Bedrock does)', async () => {
    const error = await failureOf(adapter.chat(request(chatRequest('Hi', { thinkingBudgetTokens: 500, maxOutputTokens: 4000 })), signal()));
    expect([error.kind, error.httpStatus]).toEqual(['rejected', 400]);
    expect(error.providerMessage).toMatch(/budget_tokens.*1024/);
  });

  it('fails an exception frame and a cut stream mid-answer, after handing on what came before', async () => {
    upstream.script({ text: 'one two three', chunkCount: 3, exceptionAfterChunks: 2 });
    const seen: ChatStreamDelta[] = [];
    const error = await failureOf((async () => { for await (const part of adapter.chatStream(request(chatRequest('Hi')), signal())) if (part.type === 'delta') seen.push(part.delta); })());
    expect(error.kind).toBe('overloaded');
    expect(error.providerMessage).toMatch(/Too many requests/);
    expect(seen.map((delta) => delta.content)).toEqual(['one t', 'wo th']);
    upstream.script({ exceptionAfterChunks: 1, exceptionType: 'validationException' });
    expect((await failureOf(collect(adapter.chatStream(request(chatRequest('Hi')), signal())))).kind).toBe('rejected');
    upstream.script({ cutAfterChunks: 2 });
    expect((await failureOf(collect(adapter.chatStream(request(chatRequest('Hi')), signal())))).kind).toBe('connection');
  });

  it('closes the upstream request within a second of cancellation (stream and whole)', async () => {
    upstream.script({ stallAfterChunks: 1 }, { stall: true });
    const controller = new AbortController();
    const iterator = adapter.chatStream(request(chatRequest('Hi')), controller.signal)[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toMatchObject({ type: 'delta' });
    expect(upstream.openRequests()).toBe(1);
    const pending = iterator.next();
    controller.abort(new Error('caller went away'));
    expect((await failureOf(pending)).kind).toBe('connection');
    await expect.poll(() => upstream.openRequests(), { timeout: 1000 }).toBe(0);

    const whole = new AbortController();
    const call = adapter.chat(request(chatRequest('Hi')), whole.signal);
    await expect.poll(() => upstream.openRequests(), { timeout: 1000 }).toBe(1);
    whole.abort(new Error('caller went away'));
    expect((await failureOf(call)).kind).toBe('connection');
    await expect.poll(() => upstream.openRequests(), { timeout: 1000 }).toBe(0);
  });
});

describe('BedrockAdapter credentials', () => {
  let upstream: FakeBedrockUpstream;
  beforeAll(async () => {
    upstream = await startFakeBedrockUpstream({ region: 'eu-west-1', accessKeyId: KEY_ID, secretAccessKey: SECRET, sessionToken: 'session-token-1' });
  });
  afterAll(() => upstream.close());

  it('signs with the session token; a wrong secret or a missing token is misconfigured (the fake recomputes the signature)', async () => {
    const good = adapterFor(upstream, { sessionToken: 'session-token-1' });
    const wrongSecret = adapterFor(upstream, { secretAccessKey: 'not-the-secret', sessionToken: 'session-token-1' });
    const noToken = adapterFor(upstream);
    try {
      expect((await good.chat(request(chatRequest('Hi')), signal())).choices[0]!.message!.content).toBe('Hello from the fake upstream.');
      expect(upstream.requests.at(-1)!.headers['x-amz-security-token']).toBe('session-token-1');
      const wrong = await failureOf(wrongSecret.chat(request(chatRequest('Hi')), signal()));
      expect([wrong.kind, wrong.httpStatus]).toEqual(['misconfigured', 403]);
      expect(wrong.providerMessage).toMatch(/signature we calculated does not match/);
      const streamed = await failureOf(collect(wrongSecret.chatStream(request(chatRequest('Hi')), signal())));
      expect(streamed.kind).toBe('misconfigured');
      expect((await failureOf(noToken.chat(request(chatRequest('Hi')), signal()))).kind).toBe('misconfigured');
    } finally {
      await Promise.all([good.close(), wrongSecret.close(), noToken.close()]);
    }
  });

  it('is registered for kind bedrock: keys from the named variables, else the default AWS chain (here: its environment step)', async () => {
    const env: Record<string, string> = { BDR_KEY: KEY_ID, BDR_SECRET: SECRET, BDR_TOKEN: 'session-token-1' };
    const provider = Provider.fromPartial({
      id: 'bdr', kind: 'bedrock', region: 'eu-west-1', baseUrl: upstream.url,
      accessKeyIdEnv: 'BDR_KEY', secretAccessKeyEnv: 'BDR_SECRET', sessionTokenEnv: 'BDR_TOKEN',
    });
    const named = createAdapter(provider, (name) => env[name]) as ProviderAdapter;
    expect(named.kind).toBe('bedrock');
    expect(named.embed).toBeUndefined();
    const unset = createAdapter(provider, () => undefined) as ProviderAdapter;
    const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY, token: process.env.AWS_SESSION_TOKEN };
    process.env.AWS_ACCESS_KEY_ID = KEY_ID;
    process.env.AWS_SECRET_ACCESS_KEY = SECRET;
    process.env.AWS_SESSION_TOKEN = 'session-token-1';
    const chained = createAdapter(Provider.fromPartial({ id: 'bdr2', kind: 'bedrock', region: 'eu-west-1', baseUrl: upstream.url }), () => undefined) as ProviderAdapter;
    try {
      expect((await named.chat(request(chatRequest('Hi')), signal())).choices[0]!.message!.content).toBe('Hello from the fake upstream.');
      expect((await chained.chat(request(chatRequest('Hi')), signal())).choices[0]!.message!.content).toBe('Hello from the fake upstream.');
      // Named but unset: never the chain (which would find the keys above), but a configuration error.
      const error = await failureOf(unset.chat(request(chatRequest('Hi')), signal()));
      expect(error.kind).toBe('misconfigured');
    } finally {
      for (const [name, value] of [['AWS_ACCESS_KEY_ID', saved.id], ['AWS_SECRET_ACCESS_KEY', saved.secret], ['AWS_SESSION_TOKEN', saved.token]] as const) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
      await Promise.all([named.close(), unset.close(), chained.close()]);
    }
  });
});
