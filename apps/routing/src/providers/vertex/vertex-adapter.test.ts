import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestServiceAccount, fakeVertexEmbedding, startFakeVertexUpstream, type FakeVertexUpstream, type TestServiceAccount } from '@gateway/testing';
import { Provider, type ChatRequest } from '@gateway/proto';
import { ProviderError, type ProviderAdapter } from '../provider-adapter.js';
import { createAdapter } from '../create-adapter.js';
import { adapterRequest as request, chatRequest, collect, deltasOf, failureOf, message, signal, weatherTool } from '../../../test/adapter-test-support.js';

const PROJECT = 'gateway-test-project';
const LOCATION = 'us-east5';
const CLAUDE = 'claude-sonnet-4-5@20250929';
const GEMINI = 'gemini-2.5-flash';
const CREDENTIALS_ENV = 'VERTEX_TEST_CREDENTIALS';

describe('Vertex adapter (kind vertex) against the fake Vertex upstream', () => {
  let dir: string;
  let account: TestServiceAccount;
  let stranger: TestServiceAccount;
  let upstream: FakeVertexUpstream;
  const env: Record<string, string> = {};
  const secretFor = (name: string) => env[name];
  const adapters: ProviderAdapter[] = [];

  /** A vertex provider as the catalog gives it, its adapter built by createAdapter. */
  function vertexAdapter(id = 'vtx', fields: Partial<Provider> = {}): ProviderAdapter {
    const provider = Provider.fromPartial({
      id, kind: 'vertex', baseUrl: upstream.url, project: PROJECT, location: LOCATION,
      credentialsFileEnv: CREDENTIALS_ENV, headers: { 'x-team': 'search' }, ...fields,
    });
    const adapter = createAdapter(provider, secretFor);
    expect(adapter).toBeDefined();
    adapters.push(adapter!);
    return adapter!;
  }

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'vertex-adapter-'));
    account = createTestServiceAccount();
    stranger = createTestServiceAccount(account.clientEmail); // same account name, another key: Google does not know it
    upstream = await startFakeVertexUpstream({ project: PROJECT, location: LOCATION, serviceAccounts: [{ clientEmail: account.clientEmail, publicKey: account.publicKey }] });
    const file = join(dir, 'service-account.json');
    writeFileSync(file, account.keyFile(upstream.tokenUri));
    env[CREDENTIALS_ENV] = file;
    const wrongFile = join(dir, 'wrong-key.json');
    writeFileSync(wrongFile, stranger.keyFile(upstream.tokenUri));
    env.VERTEX_WRONG_KEY = wrongFile;
  });
  afterAll(async () => {
    await upstream.close();
    await Promise.all(adapters.map((adapter) => adapter.close()));
    rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    upstream.reset();
    upstream.setTokenLifetime(3_600);
  });

  it('sends Claude to rawPredict: model in the path, anthropic_version in the body, the bearer token and the provider headers; one token for many requests', async () => {
    const adapter = vertexAdapter();
    expect(adapter.kind).toBe('vertex');
    const before = upstream.tokensIssued;
    for (let round = 0; round < 3; round++) {
      const result = await adapter.chat(request(CLAUDE, chatRequest('Hi', { maxOutputTokens: 64 })), signal());
      expect(result.choices[0]!.message!.content).toBe('Hello from the fake upstream.');
      expect(result.usage?.outputTokens).toBeGreaterThan(0);
    }
    expect(upstream.tokensIssued - before).toBe(1);
    const first = upstream.requests[0]!;
    expect(first.path).toBe(`/v1/projects/${PROJECT}/locations/${LOCATION}/publishers/anthropic/models/${CLAUDE}:rawPredict`);
    expect(first.headers.authorization).toMatch(/^Bearer ya29\.fake-/);
    expect(first.headers['x-team']).toBe('search');
    expect(first.headers['x-api-key']).toBeUndefined();
    expect(first.body).toEqual({
      anthropic_version: 'vertex-2023-10-16', max_tokens: 64,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }],
    });
    expect(new Set(upstream.requests.map((recorded) => recorded.headers.authorization)).size).toBe(1);
    // What Anthropic's side saw: the same request with the model from the path.
    expect(upstream.anthropic.requests[0]!.body).toMatchObject({ model: CLAUDE, max_tokens: 64 });
  });

  it('streams Claude from streamRawPredict: thinking with its signature, text, a tool call, finish and usage', async () => {
    const adapter = vertexAdapter();
    const thinking = 'The user wants a forecast; call the tool.';
    upstream.anthropic.script({ thinking, text: 'Looking it up.', toolCalls: [{ name: 'get_weather', arguments: '{"city":"Paris"}' }] });
    const chat = chatRequest('Forecast for Paris?', { tools: [weatherTool], thinkingBudgetTokens: 2048, maxOutputTokens: 4096 });
    const parts = await collect(adapter.chatStream(request(CLAUDE, chat), signal()));
    const received = upstream.requests[0]!;
    expect(received.path).toBe(`/v1/projects/${PROJECT}/locations/${LOCATION}/publishers/anthropic/models/${CLAUDE}:streamRawPredict`);
    expect(received.headers.accept).toBe('text/event-stream');
    expect(received.body).toMatchObject({ anthropic_version: 'vertex-2023-10-16', stream: true, thinking: { type: 'enabled', budget_tokens: 2048 } });
    expect(received.body.model).toBeUndefined();
    const deltas = deltasOf(parts);
    expect(deltas.map((delta) => delta.reasoning).join('')).toBe(thinking);
    expect(deltas.filter((delta) => delta.reasoningSignature).map((delta) => delta.reasoningSignature)).toEqual([upstream.anthropic.signThinking(thinking)]);
    expect(deltas.map((delta) => delta.content).join('')).toBe('Looking it up.');
    const calls = deltas.flatMap((delta) => delta.toolCalls);
    expect(calls[0]).toMatchObject({ name: 'get_weather' });
    expect(calls.map((call) => call.arguments).join('')).toBe('{"city":"Paris"}');
    expect(deltas.at(-1)!.finishReason).toBe('tool_calls');
    expect(parts.at(-1)).toMatchObject({ type: 'usage', usage: { outputTokens: expect.any(Number) } });
  });

  it('answers Claude tools with signed thinking, tagged with the vertex provider, and takes that thinking back (the fake verifies the signature)', async () => {
    const adapter = vertexAdapter('vtx-east');
    const tools = [weatherTool];
    upstream.anthropic.script({ toolCalls: [{ name: 'get_weather', input: { city: 'Paris' } }] });
    const first = await adapter.chat(request(CLAUDE, chatRequest('Weather in Paris?', { tools, thinkingBudgetTokens: 1024, maxOutputTokens: 2048 })), signal());
    const answer = first.choices[0]!.message!;
    expect(first.choices[0]!.finishReason).toBe('tool_calls');
    expect(answer.toolCalls).toEqual([{ id: expect.any(String), name: 'get_weather', arguments: '{"city":"Paris"}' }]);
    expect(answer.reasoning).toEqual([{ text: expect.any(String), signature: upstream.anthropic.signThinking(answer.reasoning[0]!.text), encryptedData: '', providerId: 'vtx-east' }]);

    const history = [
      message('user', 'Weather in Paris?'),
      message('assistant', answer.content, { toolCalls: answer.toolCalls, reasoning: answer.reasoning }),
      message('tool', 'Sunny, 24°C', { toolCallId: answer.toolCalls[0]!.id }),
    ];
    upstream.anthropic.script({ text: 'Sunny.' });
    const second = await adapter.chat(request(CLAUDE, chatRequest(history, { tools, thinkingBudgetTokens: 1024, maxOutputTokens: 2048 })), signal());
    expect(second.choices[0]!.message!.content).toBe('Sunny.');
    expect(upstream.requests[1]!.body.messages[1].content[0]).toEqual({ type: 'thinking', thinking: answer.reasoning[0]!.text, signature: answer.reasoning[0]!.signature });

    // Another vertex provider (same fake, other id) does not send thinking this one issued.
    upstream.anthropic.script({ text: 'Sunny again.' });
    const other = vertexAdapter('vtx-west');
    await other.chat(request(CLAUDE, chatRequest(history, { tools, thinkingBudgetTokens: 1024, maxOutputTokens: 2048 })), signal());
    expect(upstream.requests[2]!.body.messages[1].content.map((block: { type: string }) => block.type)).toEqual(['tool_use']);
  });

  it('sends Gemini models to publishers/google generateContent with the bearer token and provider headers', async () => {
    const adapter = vertexAdapter();
    upstream.gemini.script({ text: 'Paris.', usage: { promptTokenCount: 12, candidatesTokenCount: 2, cachedContentTokenCount: 8 } });
    const result = await adapter.chat(request(GEMINI, chatRequest([message('system', 'Be brief.'), message('user', 'Capital of France?')])), signal());
    expect(result.choices[0]!.message!.content).toBe('Paris.');
    expect(result.choices[0]!.finishReason).toBe('stop');
    expect(result.usage).toMatchObject({ inputTokens: 12, cachedInputTokens: 8, outputTokens: 2 });
    const received = upstream.requests[0]!;
    expect(received.path).toBe(`/v1/projects/${PROJECT}/locations/${LOCATION}/publishers/google/models/${GEMINI}:generateContent`);
    expect(received.headers.authorization).toMatch(/^Bearer ya29\.fake-/);
    expect(received.headers['x-team']).toBe('search');
    expect(received.headers['x-goog-api-key']).toBeUndefined();
    expect(received.body.systemInstruction).toEqual({ parts: [{ text: 'Be brief.' }] });
    expect(received.body.contents).toEqual([{ role: 'user', parts: [{ text: 'Capital of France?' }] }]);
  });

  it('streams Gemini from streamGenerateContent?alt=sse: text in order, finish, usage', async () => {
    const adapter = vertexAdapter();
    upstream.gemini.script({ text: 'one two three four', chunkCount: 4, usage: { promptTokenCount: 9, candidatesTokenCount: 4 } });
    const parts = await collect(adapter.chatStream(request(GEMINI, chatRequest('Count.')), signal()));
    expect(upstream.requests[0]!.path).toBe(`/v1/projects/${PROJECT}/locations/${LOCATION}/publishers/google/models/${GEMINI}:streamGenerateContent?alt=sse`);
    const deltas = deltasOf(parts);
    expect(deltas.map((delta) => delta.content).join('')).toBe('one two three four');
    expect(deltas.filter((delta) => delta.content).length).toBeGreaterThan(1);
    expect(deltas.at(-1)!.finishReason).toBe('stop');
    expect(parts.at(-1)).toMatchObject({ type: 'usage', usage: { inputTokens: 9, outputTokens: 4 } });
  });

  for (const mode of ['whole', 'streamed'] as const) {
    it(`${mode}: a Gemini 3 tool round trip on Vertex carries the call's thoughtSignature back (the fake verifies it), tagged with the vertex provider`, async () => {
      const adapter = vertexAdapter('vtx-gem');
      const answer = async (chat: ChatRequest) => {
        if (mode === 'whole') return (await adapter.chat(request('gemini-3-pro-preview', chat), signal())).choices[0]!.message!;
        const deltas = deltasOf(await collect(adapter.chatStream(request('gemini-3-pro-preview', chat), signal())));
        const calls = deltas.flatMap((delta) => delta.toolCalls);
        return {
          content: deltas.map((delta) => delta.content).join(''),
          toolCalls: calls.filter((call) => call.id !== '').map((call) => ({ id: call.id, name: call.name, arguments: calls.filter((other) => other.index === call.index).map((other) => other.arguments).join('') })),
          reasoning: deltas.filter((delta) => delta.reasoning || delta.reasoningSignature)
            .map((delta) => ({ text: delta.reasoning, signature: delta.reasoningSignature, encryptedData: '', providerId: 'vtx-gem' })),
        };
      };
      upstream.gemini.script({ functionCalls: [{ name: 'get_weather', args: { city: 'Paris' } }] });
      const first = await answer(chatRequest('Weather?', { tools: [weatherTool] }));
      // A whole answer's call carries its own signature, issued by this vertex provider (the stream's rides on its first delta).
      const own = mode === 'whole' ? { signature: expect.stringMatching(/.+/), signatureProviderId: 'vtx-gem' } : {};
      expect(first.toolCalls).toEqual([{ id: expect.any(String), name: 'get_weather', arguments: '{"city":"Paris"}', ...own }]);
      expect(first.reasoning.length).toBeGreaterThan(0);
      if (mode === 'whole') expect(first.reasoning.every((part) => part.providerId === 'vtx-gem')).toBe(true);
      const history = [
        message('user', 'Weather?'),
        message('assistant', '', { toolCalls: first.toolCalls, reasoning: first.reasoning }),
        message('tool', 'sunny', { toolCallId: first.toolCalls[0]!.id }),
      ];
      upstream.gemini.script({ text: 'Sunny in Paris.' });
      const second = await answer(chatRequest(history, { tools: [weatherTool] }));
      expect(second.content).toBe('Sunny in Paris.');
      const sent = upstream.requests[1]!.body.contents[1].parts[0];
      expect(sent.functionCall).toEqual({ name: 'get_weather', args: { city: 'Paris' } });
      expect(typeof sent.thoughtSignature).toBe('string');
      expect(sent.thoughtSignature).not.toBe('skip_thought_signature_validator');
    });
  }

  it('maps Gemini errors on Vertex: 429 overloaded, 400 rejected, a revoked token 401 misconfigured', async () => {
    const adapter = vertexAdapter();
    upstream.gemini.script({ status: 429 }, { status: 400 });
    expect((await failureOf(adapter.chat(request(GEMINI, chatRequest('Hi')), signal()))).kind).toBe('overloaded');
    expect((await failureOf(collect(adapter.chatStream(request(GEMINI, chatRequest('Hi')), signal())))).kind).toBe('rejected');
    // A revoked token: refused once (streamed or not), then a fresh one is fetched.
    for (const streamed of [false, true]) {
      upstream.revokeTokens();
      const issued = upstream.tokensIssued;
      const unauthenticated = await failureOf(streamed
        ? collect(adapter.chatStream(request(GEMINI, chatRequest('Hi')), signal()))
        : adapter.chat(request(GEMINI, chatRequest('Hi')), signal()));
      expect(unauthenticated.kind).toBe('misconfigured');
      expect(unauthenticated.httpStatus).toBe(401);
      const parts = await collect(adapter.chatStream(request(GEMINI, chatRequest('Hi again')), signal()));
      expect(deltasOf(parts).map((delta) => delta.content).join('')).toBe('Hello from the fake upstream.');
      expect(upstream.tokensIssued).toBe(issued + 1);
    }
  });

  it('embeds with :predict on publishers/google: text-embedding in one call, gemini-embedding one call per input, order and token counts kept', async () => {
    const adapter = vertexAdapter();
    const texts = ['alpha', 'beta beta', 'gamma gamma gamma'];
    const batched = await adapter.embed!({ upstreamModel: 'text-embedding-005', texts, tokenInputs: [], dimensions: 5 }, signal());
    expect(batched.embeddings).toEqual(texts.map((text) => fakeVertexEmbedding(text, 5)));
    expect(batched.usage).toMatchObject({ inputTokens: 2 + 3 + 5, outputTokens: 0, estimated: false });
    expect(upstream.requests).toHaveLength(1);
    expect(upstream.requests[0]!.path).toBe(`/v1/projects/${PROJECT}/locations/${LOCATION}/publishers/google/models/text-embedding-005:predict`);
    expect(upstream.requests[0]!.body).toEqual({ instances: texts.map((content) => ({ content })), parameters: { outputDimensionality: 5 } });
    expect(upstream.requests[0]!.headers.authorization).toMatch(/^Bearer ya29\.fake-/);

    const single = await adapter.embed!({ upstreamModel: 'gemini-embedding-001', texts, tokenInputs: [], dimensions: undefined }, signal());
    expect(single.embeddings).toEqual(texts.map((text) => fakeVertexEmbedding(text, 8)));
    expect(upstream.requests.slice(1).map((recorded) => recorded.body.instances.length)).toEqual([1, 1, 1]);

    expect((await failureOf(adapter.embed!({ upstreamModel: 'text-embedding-005', texts: [], tokenInputs: [[1, 2]], dimensions: undefined }, signal()))).kind).toBe('rejected');
    expect((await failureOf(adapter.embed!({ upstreamModel: CLAUDE, texts: ['x'], tokenInputs: [], dimensions: undefined }, signal()))).kind).toBe('misconfigured');
    upstream.revokeTokens();
    const refused = await failureOf(adapter.embed!({ upstreamModel: 'text-embedding-005', texts: ['x'], tokenInputs: [], dimensions: undefined }, signal()));
    expect(refused).toMatchObject({ kind: 'misconfigured', httpStatus: 401 });
    expect((await adapter.embed!({ upstreamModel: 'text-embedding-005', texts: ['x'], tokenInputs: [], dimensions: undefined }, signal())).embeddings).toHaveLength(1);
  });

  it('a caller that gives up while the token is fetched is released at once; the token still serves the next request', async () => {
    const adapter = vertexAdapter('vtx-slow-token');
    upstream.scriptToken({ delayMs: 600 });
    const controller = new AbortController();
    const started = Date.now();
    const pending = adapter.chat(request(CLAUDE, chatRequest('Hi')), controller.signal).then(() => 'answered', (error: unknown) => error);
    setTimeout(() => controller.abort(), 50);
    expect(await pending).toBeInstanceOf(ProviderError);
    expect(Date.now() - started).toBeLessThan(500);
    expect(upstream.requests).toHaveLength(0);
    const before = upstream.tokenRequests;
    await new Promise((resolve) => setTimeout(resolve, 700));
    await adapter.chat(request(CLAUDE, chatRequest('again')), signal());
    expect(upstream.tokenRequests).toBe(before);
  });

  it('a token endpoint that fails (503) is a transient failure, not a misconfiguration', async () => {
    const adapter = vertexAdapter('vtx-token-down');
    upstream.scriptToken({ status: 503 }, { status: 503 }, { status: 503 }, { status: 503 }, { status: 503 });
    const started = Date.now();
    const failure = await failureOf(adapter.chat(request(CLAUDE, chatRequest('Hi')), signal()));
    expect(failure.kind).toBe('overloaded');
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(upstream.requests).toHaveLength(0);
  });

  it('renews the token when it nears expiry, and reuses it until then', async () => {
    // A token of 301 s is due for renewal 1 s after it is issued (the margin is 5 minutes).
    upstream.setTokenLifetime(301);
    const adapter = vertexAdapter();
    const before = upstream.tokensIssued;
    await adapter.chat(request(CLAUDE, chatRequest('one')), signal());
    await adapter.chat(request(CLAUDE, chatRequest('two')), signal());
    expect(upstream.tokensIssued - before).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    await adapter.chat(request(CLAUDE, chatRequest('three')), signal());
    expect(upstream.tokensIssued - before).toBe(2);
    const [one, two, three] = upstream.requests.map((recorded) => recorded.headers.authorization);
    expect(one).toBe(two);
    expect(three).not.toBe(one);
  });

  it('asks for one token however many first requests arrive together', async () => {
    const adapter = vertexAdapter();
    const before = upstream.tokenRequests;
    const results = await Promise.all(Array.from({ length: 8 }, (_, index) => adapter.chat(request(index % 2 ? CLAUDE : GEMINI, chatRequest(`q${index}`)), signal())));
    expect(results).toHaveLength(8);
    expect(upstream.tokenRequests - before).toBe(1);
    expect(new Set(upstream.requests.map((recorded) => recorded.headers.authorization)).size).toBe(1);
  });

  it('without credentials_file_env uses Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS), token_uri honoured', async () => {
    const saved = process.env.GOOGLE_APPLICATION_CREDENTIALS;
    process.env.GOOGLE_APPLICATION_CREDENTIALS = env[CREDENTIALS_ENV];
    try {
      const adapter = vertexAdapter('vtx-adc', { credentialsFileEnv: '' });
      const before = upstream.tokensIssued;
      const result = await adapter.chat(request(CLAUDE, chatRequest('Hi')), signal());
      expect(result.choices[0]!.message!.content).toBe('Hello from the fake upstream.');
      expect(upstream.tokensIssued - before).toBe(1);
    } finally {
      if (saved === undefined) delete process.env.GOOGLE_APPLICATION_CREDENTIALS;
      else process.env.GOOGLE_APPLICATION_CREDENTIALS = saved;
    }
  });

  it('cancellation ends a stalled Claude stream and a stalled Gemini stream at once', async () => {
    const adapter = vertexAdapter();
    await adapter.chat(request(CLAUDE, chatRequest('warm the token')), signal());
    upstream.anthropic.script({ text: 'abcdef', chunkCount: 3, stallAfterChunks: 1 });
    upstream.gemini.script({ text: 'abcdef', chunkCount: 3, stallAfterChunks: 1 });
    for (const model of [CLAUDE, GEMINI]) {
      const controller = new AbortController();
      const iterator = adapter.chatStream(request(model, chatRequest('Hi')), controller.signal)[Symbol.asyncIterator]();
      const first = await iterator.next();
      expect(first.done).toBe(false);
      const started = Date.now();
      const pending = iterator.next().then(() => 'ended', (error: unknown) => error);
      setTimeout(() => controller.abort(), 50);
      const outcome = await pending;
      expect(outcome).toBeInstanceOf(ProviderError);
      expect(Date.now() - started).toBeLessThan(1_000);
    }
  });

  it('gets a fresh token after Vertex refuses a revoked one (401 UNAUTHENTICATED, misconfigured)', async () => {
    const adapter = vertexAdapter();
    await adapter.chat(request(CLAUDE, chatRequest('one')), signal());
    const issued = upstream.tokensIssued;
    upstream.revokeTokens();
    const failure = await failureOf(adapter.chat(request(CLAUDE, chatRequest('two')), signal()));
    expect(failure.kind).toBe('misconfigured');
    expect(failure.httpStatus).toBe(401);
    expect(failure.providerMessage).toMatch(/^Request had invalid authentication credentials/);
    const result = await adapter.chat(request(CLAUDE, chatRequest('three')), signal());
    expect(result.choices[0]!.message!.content).toBe('Hello from the fake upstream.');
    expect(upstream.tokensIssued).toBe(issued + 1);
  });

  it('a key Google does not know fails as misconfigured at the token endpoint, before any model request', async () => {
    const adapter = vertexAdapter('vtx-wrong', { credentialsFileEnv: 'VERTEX_WRONG_KEY' });
    const tokenRequests = upstream.tokenRequests;
    const issued = upstream.tokensIssued;
    const failure = await failureOf(adapter.chat(request(CLAUDE, chatRequest('Hi')), signal()));
    expect(failure.kind).toBe('misconfigured');
    expect(failure.providerMessage).toMatch(/invalid_grant/);
    const streamed = await failureOf(collect(adapter.chatStream(request(CLAUDE, chatRequest('Hi')), signal())));
    expect(streamed.kind).toBe('misconfigured');
    expect(upstream.tokenRequests).toBeGreaterThan(tokenRequests);
    expect(upstream.tokensIssued).toBe(issued);
    expect(upstream.requests).toHaveLength(0);
  });

  it('a credentials variable that is named but unset, or a file that is missing, fails as misconfigured', async () => {
    const unset = vertexAdapter('vtx-unset', { credentialsFileEnv: 'VERTEX_NOT_SET' });
    const failure = await failureOf(unset.chat(request(CLAUDE, chatRequest('Hi')), signal()));
    expect(failure.kind).toBe('misconfigured');
    expect(failure.providerMessage).toContain('VERTEX_NOT_SET is not set');
    env.VERTEX_MISSING_FILE = join(dir, 'no-such-file.json');
    const missing = vertexAdapter('vtx-missing', { credentialsFileEnv: 'VERTEX_MISSING_FILE' });
    expect((await failureOf(missing.chat(request(CLAUDE, chatRequest('Hi')), signal()))).kind).toBe('misconfigured');
    expect(upstream.requests).toHaveLength(0);
  });

  it('the project and location of the config are the ones in the path (the fake refuses others)', async () => {
    const wrongProject = vertexAdapter('vtx-other-project', { project: 'someone-else' });
    const failure = await failureOf(wrongProject.chat(request(CLAUDE, chatRequest('Hi')), signal()));
    expect(failure.kind).toBe('misconfigured');
    expect(failure.httpStatus).toBe(403);
  });

  it('maps Claude errors relayed by Vertex: 429 and 529 overloaded, a 400 rejected in the provider words', async () => {
    const adapter = vertexAdapter();
    upstream.anthropic.script({ status: 429 }, { status: 529 });
    expect((await failureOf(adapter.chat(request(CLAUDE, chatRequest('Hi')), signal()))).kind).toBe('overloaded');
    expect((await failureOf(collect(adapter.chatStream(request(CLAUDE, chatRequest('Hi')), signal())))).kind).toBe('overloaded');
    upstream.anthropic.script({ status: 400 });
    const rejected = await failureOf(adapter.chat(request(CLAUDE, chatRequest('Hi')), signal()));
    expect(rejected.kind).toBe('rejected');
    expect(rejected.httpStatus).toBe(400);
    expect(rejected.providerMessage).toBe('fake upstream error 400');
    expect(upstream.requests).toHaveLength(3);
  });
});
