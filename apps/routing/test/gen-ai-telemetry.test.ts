import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMetricsRegistry, startTelemetry, type GatewayError, type Registry } from '@gateway/platform';
import { ModerationInputForm, Provider, type ChatStreamResponse } from '@gateway/proto';
import {
  createTestBus, createTestServiceAccount, eventually, parsePrometheusText, SPAN_KIND, startFakeAnthropicUpstream, startFakeAzureOpenAIUpstream,
  startFakeBedrockUpstream, startFakeGeminiUpstream, startFakeUpstream, startFakeVertexUpstream, startOtlpCollector, testLogger,
  type CollectedMetricPoint, type CollectedSpan, type OtlpCollector, type TestBus,
} from '@gateway/testing';
import { startRoutingService, type RunningRoutingService } from '../src/index.js';
import { chatRequest, model, routerClient, snapshot, startFakeCatalog } from './harness.js';

/*
 * Issue 40 item 1: the OpenTelemetry GenAI semantic conventions. A routing service with every provider
 * kind behind its fake upstream, its OpenTelemetry SDK exporting OTLP/HTTP (JSON) to a real receiver run
 * here, and its Prometheus registry: each upstream attempt must come out as one CLIENT span named
 * `chat {upstream model}` with the conventions' attributes, and as the client metrics (names, units,
 * bucket boundaries, attributes) both over OTLP and on the scrape; a failover is two attempt spans, the
 * failed one with error.type.
 */

// The conventions' advisory boundaries, written out here (not imported: the test checks the module).
const DURATION_BOUNDS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
const TOKEN_BOUNDS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864];

/** The kinds whose chats are also served with message content recorded. */
const CONTENT_KINDS = ['openai', 'anthropic'] as const;

/** The upstream kinds whose adapters generate images and transcribe. */
const MEDIA_KINDS = ['openai', 'azure-openai'] as const;
const BEDROCK_MODEL = 'us.anthropic.claude-sonnet-4-5-20250929-v1:0';
const VERTEX = { project: 'genai-project', location: 'us-east5' };

interface Upstream {
  kind: string;
  /** The conventions' gen_ai.provider.name for it. */
  providerName: string;
  upstreamModel: string;
  /** The id the kind's fake gives its answers (gen_ai.response.id); undefined: the API names none (Bedrock's Converse). */
  responseId: RegExp | undefined;
  url: string;
  close(): Promise<void>;
  provider: Partial<Provider>;
  secrets: Record<string, string>;
}

async function drain(stream: AsyncIterable<ChatStreamResponse>): Promise<{ text: string; error: GatewayError | undefined }> {
  let text = '';
  let error: GatewayError | undefined;
  try {
    for await (const item of stream) {
      if (item.event?.$case === 'delta') text += item.event.value.content;
    }
  } catch (caught) {
    error = caught as GatewayError;
  }
  return { text, error };
}

const portOf = (url: string) => Number(new URL(url).port);

describe('OpenTelemetry GenAI conventions: one CLIENT span and the client metrics per upstream attempt', () => {
  let collector: OtlpCollector;
  let stopTelemetry: () => Promise<void>;
  let testBus: TestBus;
  let catalog: Awaited<ReturnType<typeof startFakeCatalog>>;
  let service: RunningRoutingService;
  let client: ReturnType<typeof routerClient>;
  let contentService: RunningRoutingService;
  let contentClient: ReturnType<typeof routerClient>;
  let registry: Registry;
  let directory: string;
  const upstreams: Upstream[] = [];
  const savedEnv = { ...process.env };
  const deadPort = 9; // discard: nothing listens there on the test box; the connection is refused

  beforeAll(async () => {
    collector = await startOtlpCollector();
    Object.assign(process.env, {
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '50',
      OTEL_METRIC_EXPORT_INTERVAL: '200',
      OTEL_SERVICE_NAME: 'genai-test-routing',
    });
    delete process.env.OTEL_METRICS_EXPORTER;
    delete process.env.OTEL_TRACES_EXPORTER;
    stopTelemetry = await startTelemetry('routing', testLogger('telemetry'));

    directory = mkdtempSync(join(tmpdir(), 'genai-telemetry-'));
    const openai = await startFakeUpstream();
    upstreams.push({
      kind: 'openai', providerName: 'openai', upstreamModel: 'gpt-4.1-mini', responseId: /^chatcmpl-fake\d+$/, url: openai.url, close: () => openai.close(),
      provider: { kind: 'openai', baseUrl: openai.url, apiKeyEnv: 'OPENAI_KEY' }, secrets: { OPENAI_KEY: 'sk-openai' },
    });
    // Reasoning tokens reported by the OpenAI fake (completion_tokens_details.reasoning_tokens).
    openai.setFallback({ text: 'Hello from openai.', usage: { prompt_tokens: 11, completion_tokens: 7, reasoning_tokens: 3 } });
    const anthropic = await startFakeAnthropicUpstream({ apiKey: 'sk-ant' });
    // Cache reads and writes (Anthropic counts them apart from input_tokens; the gateway's input includes them).
    anthropic.setFallback({ text: 'Hello from anthropic.', usage: { input_tokens: 12, cache_read_input_tokens: 30, cache_creation_input_tokens: 4, output_tokens: 5 } });
    upstreams.push({
      kind: 'anthropic', providerName: 'anthropic', upstreamModel: 'claude-sonnet-4-5', responseId: /^msg_fake\d+$/, url: anthropic.url, close: () => anthropic.close(),
      provider: { kind: 'anthropic', baseUrl: anthropic.url, apiKeyEnv: 'ANTHROPIC_KEY' }, secrets: { ANTHROPIC_KEY: 'sk-ant' },
    });
    const gemini = await startFakeGeminiUpstream({ apiKey: 'AIza-genai' });
    upstreams.push({
      kind: 'gemini', providerName: 'gcp.gemini', upstreamModel: 'gemini-2.5-flash', responseId: /^fakeResp\d+$/, url: gemini.url, close: () => gemini.close(),
      provider: { kind: 'gemini', baseUrl: gemini.url, apiKeyEnv: 'GEMINI_KEY' }, secrets: { GEMINI_KEY: 'AIza-genai' },
    });
    const bedrock = await startFakeBedrockUpstream({ region: 'us-east-1', accessKeyId: 'AKIAGENAI', secretAccessKey: 'genai-secret' });
    upstreams.push({
      kind: 'bedrock', providerName: 'aws.bedrock', upstreamModel: BEDROCK_MODEL, responseId: undefined, url: bedrock.url, close: () => bedrock.close(),
      provider: { kind: 'bedrock', baseUrl: bedrock.url, region: 'us-east-1', accessKeyIdEnv: 'AWS_KEY_ID', secretAccessKeyEnv: 'AWS_SECRET' },
      secrets: { AWS_KEY_ID: 'AKIAGENAI', AWS_SECRET: 'genai-secret' },
    });
    const azure = await startFakeAzureOpenAIUpstream({ apiKey: 'azure-genai' });
    upstreams.push({
      kind: 'azure-openai', providerName: 'azure.ai.openai', upstreamModel: 'gpt-4o', responseId: /^chatcmpl-azure\d+$/, url: azure.url, close: () => azure.close(),
      provider: { kind: 'azure-openai', baseUrl: azure.url, apiKeyEnv: 'AZURE_KEY' }, secrets: { AZURE_KEY: 'azure-genai' },
    });
    const account = createTestServiceAccount('genai@genai-project.iam.gserviceaccount.com');
    const vertex = await startFakeVertexUpstream({ ...VERTEX, serviceAccounts: [{ clientEmail: account.clientEmail, publicKey: account.publicKey }] });
    const keyFile = join(directory, 'service-account.json');
    writeFileSync(keyFile, account.keyFile(vertex.tokenUri, VERTEX.project));
    upstreams.push({
      kind: 'vertex', providerName: 'gcp.vertex_ai', upstreamModel: 'gemini-2.5-flash', responseId: /^fakeResp\d+$/, url: vertex.url, close: () => vertex.close(),
      provider: { kind: 'vertex', baseUrl: vertex.url, ...VERTEX, credentialsFileEnv: 'VERTEX_CREDENTIALS' }, secrets: { VERTEX_CREDENTIALS: keyFile },
    });

    const providers = upstreams.map((upstream) => Provider.fromPartial({ id: `p-${upstream.kind}`, ...upstream.provider }));
    // An OpenAI-compatible provider nobody answers for: the failover's first attempt fails to connect.
    providers.push(Provider.fromPartial({ id: 'p-dead', kind: 'openai', baseUrl: `http://127.0.0.1:${deadPort}/v1`, apiKeyEnv: 'OPENAI_KEY' }));
    const offer = (providerId: string, upstreamModel: string) => ({ providerId, upstreamModel, endpoints: ['chat.completions', 'messages', 'responses'] });
    const models = upstreams.map((upstream) => model(`genai/${upstream.kind}`, [], { offers: [offer(`p-${upstream.kind}`, upstream.upstreamModel)] }));
    // Served by the second routing service only (message content recorded): its spans are told apart by model.
    for (const kind of CONTENT_KINDS) models.push(model(`genai/content-${kind}`, [], { offers: [offer(`p-${kind}`, upstreams.find((upstream) => upstream.kind === kind)!.upstreamModel)] }));
    models.push(model('genai/no-content', [], { offers: [offer('p-openai', 'gpt-4.1-mini')] }));
    models.push(model('genai/failover', [], { offers: [offer('p-dead', 'dead-model'), offer('p-openai', 'gpt-4.1-mini')] }));
    models.push(model('genai/embed', [], { offers: [{ providerId: 'p-openai', upstreamModel: 'text-embedding-3-small', endpoints: ['embeddings'] }] }));
    // The kinds with image generation and transcription (OpenAI's API and Azure's deployments), and OpenAI's moderations.
    for (const kind of MEDIA_KINDS) {
      models.push(model(`genai/images-${kind}`, [], { offers: [{ providerId: `p-${kind}`, upstreamModel: 'gpt-image-1', endpoints: ['images.generations'] }] }));
      models.push(model(`genai/transcribe-${kind}`, [], { offers: [{ providerId: `p-${kind}`, upstreamModel: 'whisper', endpoints: ['audio.transcriptions'] }] }));
    }
    models.push(model('genai/moderate', [], { offers: [{ providerId: 'p-openai', upstreamModel: 'omni-moderation-latest', endpoints: ['moderations'] }] }));
    testBus = await createTestBus('nats');
    catalog = await startFakeCatalog(snapshot('v1', models, providers));
    registry = createMetricsRegistry();
    service = await startRoutingService({
      listenAddress: '127.0.0.1:0', catalogAddress: catalog.address, bus: testBus.bus, logger: testLogger('routing'), metrics: registry,
      providerSecrets: Object.assign({}, ...upstreams.map((upstream) => upstream.secrets)), attemptTimeoutMs: 10_000, maxAttempts: 3,
    });
    client = routerClient(service.address);
    // The operator's opt-in, as the option (the variable is read when the option is unset: gen-ai-content.test.ts).
    contentService = await startRoutingService({
      listenAddress: '127.0.0.1:0', catalogAddress: catalog.address, bus: testBus.bus, logger: testLogger('routing-content'), captureMessageContent: true,
      providerSecrets: Object.assign({}, ...upstreams.map((upstream) => upstream.secrets)), attemptTimeoutMs: 10_000, maxAttempts: 3,
    });
    contentClient = routerClient(contentService.address);
  }, 60_000);

  afterAll(async () => {
    client?.close();
    contentClient?.close();
    await service?.stop();
    await contentService?.stop();
    await catalog?.stop();
    await testBus?.destroy();
    await stopTelemetry?.();
    await Promise.all(upstreams.map((upstream) => upstream.close()));
    await collector?.close();
    if (directory) rmSync(directory, { recursive: true, force: true });
    for (const key of Object.keys(process.env)) if (!(key in savedEnv)) delete process.env[key];
    Object.assign(process.env, savedEnv);
  }, 30_000);

  /** The attempt spans of one model's requests (streamed or not), once exported. */
  const attemptSpans = async (modelId: string, stream: boolean, count = 1): Promise<CollectedSpan[]> => {
    let found: CollectedSpan[] = [];
    await eventually(() => {
      found = collector.spans.filter((span) => span.attributes['gateway.model'] === modelId && span.attributes['gen_ai.request.stream'] === stream);
      expect(found, `${count} attempt span(s) of ${modelId}`).toHaveLength(count);
    }, 10_000, 50);
    return found.sort((a, b) => Number(a.attributes['gateway.attempt']) - Number(b.attributes['gateway.attempt']));
  };

  /** The latest exported point of a metric whose attributes include `attributes`. */
  const latestPoint = async (name: string, attributes: Record<string, unknown>, check: (point: CollectedMetricPoint) => void = () => {}) => {
    let point: CollectedMetricPoint | undefined;
    await eventually(() => {
      const points = collector.metrics.filter((candidate) => candidate.name === name && Object.entries(attributes).every(([key, value]) => candidate.attributes[key] === value));
      point = points.at(-1);
      expect(point, `${name} ${JSON.stringify(attributes)} exported`).toBeDefined();
      check(point!);
    }, 10_000, 50);
    return point!;
  };

  const kinds = () => upstreams.map((upstream) => [upstream.kind, upstream] as const);

  /** gen_ai.response.id and gen_ai.response.model: the provider's own names of its answer, where its API has them. */
  const expectResponseNames = (span: CollectedSpan, upstream: Upstream) => {
    if (upstream.responseId === undefined) {
      // Bedrock's Converse answers name neither an id nor a model.
      expect(span.attributes['gen_ai.response.id']).toBeUndefined();
      expect(span.attributes['gen_ai.response.model']).toBeUndefined();
      return;
    }
    expect(span.attributes['gen_ai.response.id'], upstream.kind).toMatch(upstream.responseId);
    // Every fake answers with the model it was asked for (Azure: the deployment's name).
    expect(span.attributes['gen_ai.response.model'], upstream.kind).toBe(upstream.upstreamModel);
  };

  it.each(['openai', 'anthropic', 'gemini', 'bedrock', 'azure-openai', 'vertex'])('%s: a unary chat is one CLIENT span with the conventions\' attributes, under routing\'s span, parent of the HTTP call', async (kind) => {
    const upstream = upstreams.find((candidate) => candidate.kind === kind)!;
    const response = await client.chat(chatRequest(`genai/${kind}`, 'Say hello.', { temperature: 0.5, maxOutputTokens: 64, topP: 0.9, stop: ['END'] }));
    expect(response.choices[0]!.message?.content.length).toBeGreaterThan(0);
    const [span] = await attemptSpans(`genai/${kind}`, false);
    expect(span!.name).toBe(`chat ${upstream.upstreamModel}`);
    expect(span!.kind).toBe(SPAN_KIND.client);
    expect(span!.statusCode).not.toBe(2);
    expect(span!.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': upstream.providerName,
      'gen_ai.request.model': upstream.upstreamModel,
      'gen_ai.request.stream': false,
      'gen_ai.request.temperature': 0.5,
      'gen_ai.request.max_tokens': 64,
      'gen_ai.request.top_p': 0.9,
      'gen_ai.request.stop_sequences': ['END'],
      'gen_ai.response.finish_reasons': ['stop'],
      'gen_ai.usage.input_tokens': response.usage!.inputTokens,
      'gen_ai.usage.output_tokens': response.usage!.outputTokens,
      'server.address': '127.0.0.1',
      'server.port': portOf(upstream.url),
      'gateway.provider': `p-${kind}`,
      'gateway.attempt': 1,
    });
    expect(span!.attributes['error.type']).toBeUndefined();
    expect(span!.attributes['gen_ai.response.time_to_first_chunk']).toBeUndefined();
    expectResponseNames(span!, upstream);
    // No content on spans: nothing of the prompt or the answer.
    expect(JSON.stringify(span!.attributes)).not.toContain('Say hello.');
    expect(Object.keys(span!.attributes).some((key) => /messages|instructions|content/.test(key))).toBe(false);
    // Under the request's routing span (the RPC's server span), and the upstream HTTP call under it.
    // The server span ends after the answer went out, so it may reach the collector in a later export batch.
    const parent = await eventually(() => {
      const found = collector.spans.find((candidate) => candidate.spanId === span!.parentSpanId);
      expect(found).toBeDefined();
      return found!;
    }, 10_000, 50);
    expect(parent.name).toBe('gateway.v1.RouterService/Chat');
    expect(parent.attributes['gen_ai.provider.name'], 'GenAI attributes only on the attempt span').toBeUndefined();
    expect(collector.spans.some((candidate) => candidate.parentSpanId === span!.spanId && candidate.name === 'POST upstream' && candidate.kind === SPAN_KIND.client)).toBe(true);
  });

  it.each(['openai', 'anthropic', 'gemini', 'bedrock', 'azure-openai', 'vertex'])('%s: a streamed chat is one CLIENT span with gen_ai.request.stream and its time to first chunk', async (kind) => {
    const upstream = upstreams.find((candidate) => candidate.kind === kind)!;
    const { text, error } = await drain(client.chatStream({ chat: chatRequest(`genai/${kind}`, 'Stream hello.', { maxOutputTokens: 64 }), combinedStart: false }));
    expect(error).toBeUndefined();
    expect(text.length).toBeGreaterThan(0);
    const [span] = await attemptSpans(`genai/${kind}`, true);
    expect(span!.name).toBe(`chat ${upstream.upstreamModel}`);
    expect(span!.kind).toBe(SPAN_KIND.client);
    expect(span!.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': upstream.providerName,
      'gen_ai.request.model': upstream.upstreamModel,
      'gen_ai.request.stream': true,
      'gen_ai.request.max_tokens': 64,
      'gen_ai.response.finish_reasons': ['stop'],
      'server.address': '127.0.0.1',
      'server.port': portOf(upstream.url),
    });
    expect(span!.attributes['gen_ai.response.time_to_first_chunk']).toBeGreaterThan(0);
    expect(span!.attributes['gen_ai.usage.input_tokens']).toBeGreaterThan(0);
    expect(span!.attributes['gen_ai.usage.output_tokens']).toBeGreaterThan(0);
    expect(span!.attributes['error.type']).toBeUndefined();
    // Read from the stream's usage part (Anthropic: from message_start), not from every frame.
    expectResponseNames(span!, upstream);
  });

  /** A conversation with every kind of message: instructions, a tool call, its result, a tool definition. */
  const conversation = (modelId: string, question: string) => chatRequest(modelId, question, {
    messages: [
      { role: 'system', content: [{ part: { $case: 'text', value: 'You are terse.' } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false },
      { role: 'user', content: [{ part: { $case: 'text', value: 'Weather in Paris?' } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false },
      { role: 'assistant', content: [], toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }], toolCallId: '', reasoning: [], isError: false },
      { role: 'tool', content: [{ part: { $case: 'text', value: 'sunny, 21C' } }], toolCalls: [], toolCallId: 'call_1', reasoning: [], isError: false },
      { role: 'user', content: [{ part: { $case: 'text', value: question } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false },
    ],
    tools: [{ name: 'get_weather', description: 'The weather in a city.', parameters: '{"type":"object","properties":{"city":{"type":"string"}}}' }],
  });

  /** The content attributes of a span recorded with the opt-in: each a JSON string in the conventions' schema. */
  const expectContent = (span: CollectedSpan, question: string, answer: string, finishReason: string) => {
    const parse = (name: string): unknown => {
      const value = span.attributes[name];
      expect(typeof value, name).toBe('string');
      return JSON.parse(value as string);
    };
    expect(parse('gen_ai.system_instructions')).toEqual([{ type: 'text', content: 'You are terse.' }]);
    expect(parse('gen_ai.input.messages')).toEqual([
      { role: 'user', parts: [{ type: 'text', content: 'Weather in Paris?' }] },
      { role: 'assistant', parts: [{ type: 'tool_call', id: 'call_1', name: 'get_weather', arguments: { city: 'Paris' } }] },
      { role: 'tool', parts: [{ type: 'tool_call_response', id: 'call_1', response: 'sunny, 21C' }] },
      { role: 'user', parts: [{ type: 'text', content: question }] },
    ]);
    expect(parse('gen_ai.tool.definitions')).toEqual([
      { type: 'function', name: 'get_weather', description: 'The weather in a city.', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
    ]);
    expect(parse('gen_ai.output.messages')).toEqual([{ role: 'assistant', parts: [{ type: 'text', content: answer }], finish_reason: finishReason }]);
  };

  it.each(CONTENT_KINDS)('%s: with the operator\'s opt-in, a unary chat\'s span carries its messages, instructions, tools and answer', async (kind) => {
    const modelId = `genai/content-${kind}`;
    const response = await contentClient.chat(conversation(modelId, 'Unary content?'));
    const answer = response.choices[0]!.message!.content;
    expect(answer.length).toBeGreaterThan(0);
    const [span] = await attemptSpans(modelId, false);
    expectContent(span!, 'Unary content?', answer, 'stop');
  });

  it.each(CONTENT_KINDS)('%s: with the operator\'s opt-in, a streamed chat\'s span carries the answer it delivered, once at its end', async (kind) => {
    const modelId = `genai/content-${kind}`;
    const { text, error } = await drain(contentClient.chatStream({ chat: conversation(modelId, 'Streamed content?'), combinedStart: false }));
    expect(error).toBeUndefined();
    expect(text.length).toBeGreaterThan(0);
    const [span] = await attemptSpans(modelId, true);
    expectContent(span!, 'Streamed content?', text, 'stop');
  });

  it('without the opt-in, the same conversation leaves no content on the span', async () => {
    const response = await client.chat(conversation('genai/no-content', 'No content here?'));
    expect(response.choices[0]!.message!.content.length).toBeGreaterThan(0);
    const [span] = await attemptSpans('genai/no-content', false);
    expect(Object.keys(span!.attributes).some((key) => /messages|instructions|definitions|content/.test(key))).toBe(false);
    expect(JSON.stringify(span!.attributes)).not.toMatch(/No content here|get_weather|You are terse|sunny/);
  });

  it('reports cache reads, cache writes and reasoning tokens with the conventions\' names', async () => {
    const anthropic = await attemptSpans('genai/anthropic', false);
    expect(anthropic[0]!.attributes).toMatchObject({
      'gen_ai.usage.input_tokens': 46, 'gen_ai.usage.cache_read.input_tokens': 30, 'gen_ai.usage.cache_write.input_tokens': 4, 'gen_ai.usage.output_tokens': 5,
    });
    const openai = await attemptSpans('genai/openai', false);
    expect(openai[0]!.attributes).toMatchObject({ 'gen_ai.usage.input_tokens': 11, 'gen_ai.usage.output_tokens': 7, 'gen_ai.usage.reasoning.output_tokens': 3 });
  });

  it('a failover is two attempt spans in one trace, the failed one with error.type and an error status', async () => {
    const response = await client.chat(chatRequest('genai/failover', 'Fail over, please.'));
    expect(response.providerId).toBe('p-openai');
    const [failed, served] = await attemptSpans('genai/failover', false, 2);
    expect(failed!.traceId).toBe(served!.traceId);
    expect(failed!.parentSpanId).toBe(served!.parentSpanId);
    expect(failed!).toMatchObject({ name: 'chat dead-model', kind: SPAN_KIND.client, statusCode: 2 });
    expect(failed!.attributes).toMatchObject({
      'gen_ai.provider.name': 'openai', 'gen_ai.request.model': 'dead-model', 'error.type': 'connection', 'server.port': deadPort, 'gateway.attempt': 1,
    });
    expect(served!).toMatchObject({ name: 'chat gpt-4.1-mini', kind: SPAN_KIND.client });
    expect(served!.statusCode).not.toBe(2);
    expect(served!.attributes['error.type']).toBeUndefined();
    expect(served!.attributes['gateway.attempt']).toBe(2);
    // Only the attempt that answered names an answer.
    expect(failed!.attributes['gen_ai.response.id']).toBeUndefined();
    expect(served!.attributes['gen_ai.response.id']).toMatch(/^chatcmpl-fake\d+$/);
    // The failed attempt's duration carries its error.type (OTLP).
    await latestPoint('gen_ai.client.operation.duration', { 'gen_ai.request.model': 'dead-model', 'error.type': 'connection' }, (point) => {
      expect(point.count).toBeGreaterThanOrEqual(1);
    });
  });

  it('an embeddings attempt is an `embeddings` span with its input tokens and no output tokens', async () => {
    const response = await client.embed({
      context: { requestId: 'req_genai_embed', accountId: 'acc_test', keyId: 'key_test' }, modelId: 'genai/embed', routingStrategy: 'reliability',
      texts: ['embed me'], tokenInputs: [],
    });
    expect(response.embeddings).toHaveLength(1);
    const [span] = await attemptSpans('genai/embed', false);
    expect(span!).toMatchObject({ name: 'embeddings text-embedding-3-small', kind: SPAN_KIND.client });
    expect(span!.attributes).toMatchObject({ 'gen_ai.operation.name': 'embeddings', 'gen_ai.provider.name': 'openai', 'gateway.endpoint': 'embeddings' });
    expect(span!.attributes['gen_ai.usage.input_tokens']).toBe(response.usage!.inputTokens);
    expect(span!.attributes['gen_ai.usage.output_tokens']).toBeUndefined();
    await latestPoint('gen_ai.client.token.usage', { 'gen_ai.operation.name': 'embeddings', 'gen_ai.token.type': 'input' }, (point) => expect(point.count).toBe(1));
    expect(collector.metrics.some((point) => point.name === 'gen_ai.client.token.usage' && point.attributes['gen_ai.operation.name'] === 'embeddings'
      && point.attributes['gen_ai.token.type'] === 'output')).toBe(false);
    await latestPoint('gen_ai.client.inference.operation.input_tokens', { 'gen_ai.operation.name': 'embeddings' }, (point) => expect(point).toMatchObject({ count: 1, sum: response.usage!.inputTokens }));
    expect(collector.metrics.some((point) => point.name === 'gen_ai.client.inference.operation.output_tokens' && point.attributes['gen_ai.operation.name'] === 'embeddings')).toBe(false);
  });

  it.each(MEDIA_KINDS)('%s: an image generation reports the provider\'s usage: span attributes, token usage by type and the usage counters by modality', async (kind) => {
    const providerName = upstreams.find((upstream) => upstream.kind === kind)!.providerName;
    const response = await client.generateImages({
      context: { requestId: `req_genai_images_${kind}`, accountId: 'acc_test', keyId: 'key_test' }, modelId: `genai/images-${kind}`, routingStrategy: '',
      prompt: 'a red square', n: 1, responseFormat: 'b64_json',
    });
    expect(response.data).toHaveLength(1);
    const [span] = await attemptSpans(`genai/images-${kind}`, false);
    expect(span!).toMatchObject({ name: 'generate_content gpt-image-1', kind: SPAN_KIND.client });
    // The fakes' gpt-image usage: 50 in (20 text, 30 image), 1056 image tokens out; the adapter reports the parts, the span their sums.
    expect(span!.attributes).toMatchObject({
      'gen_ai.operation.name': 'generate_content', 'gen_ai.provider.name': providerName, 'gateway.endpoint': 'images.generations',
      'gen_ai.usage.input_tokens': 50, 'gen_ai.usage.output_tokens': 1_056,
    });
    const base = { 'gen_ai.operation.name': 'generate_content', 'gen_ai.provider.name': providerName, 'gen_ai.request.model': 'gpt-image-1' };
    await latestPoint('gen_ai.client.token.usage', { ...base, 'gen_ai.token.type': 'input' }, (point) => expect(point).toMatchObject({ count: 1, sum: 50 }));
    await latestPoint('gen_ai.client.token.usage', { ...base, 'gen_ai.token.type': 'output' }, (point) => expect(point).toMatchObject({ count: 1, sum: 1_056 }));
    await latestPoint('gen_ai.client.inference.operation.input_tokens', base, (point) => expect(point).toMatchObject({ count: 1, sum: 50 }));
    await latestPoint('gen_ai.client.inference.operation.output_tokens', base, (point) => expect(point).toMatchObject({ count: 1, sum: 1_056 }));
    await latestPoint('gen_ai.client.inference.usage.input_tokens', { ...base, 'gen_ai.token.modality': 'image' }, (point) => expect(point.value).toBe(30));
    await latestPoint('gen_ai.client.inference.usage.input_tokens', { ...base, 'gen_ai.token.modality': 'text' }, (point) => expect(point.value).toBe(20));
    await latestPoint('gen_ai.client.inference.usage.output_tokens', { ...base, 'gen_ai.token.modality': 'image' }, (point) => expect(point.value).toBe(1_056));
    const samples = parsePrometheusText(await registry.metrics());
    const labels = { gen_ai_operation_name: 'generate_content', gen_ai_provider_name: providerName, gen_ai_request_model: 'gpt-image-1' };
    const value = (name: string, extra: Record<string, string>) => samples.find((sample) => sample.name === name
      && Object.entries({ ...labels, ...extra }).every(([key, wanted]) => sample.labels[key] === wanted))?.value;
    expect(value('gen_ai_client_token_usage_sum', { gen_ai_token_type: 'output' })).toBe(1_056);
    expect(value('gen_ai_client_inference_operation_input_tokens_sum', {})).toBe(50);
    expect(value('gen_ai_client_inference_operation_output_tokens_sum', {})).toBe(1_056);
    expect(value('gen_ai_client_inference_usage_input_tokens_total', { gen_ai_token_modality: 'image' })).toBe(30);
    expect(value('gen_ai_client_inference_usage_output_tokens_total', { gen_ai_token_modality: 'image' })).toBe(1_056);
  });

  it.each(MEDIA_KINDS)('%s: a transcription the provider bills in seconds (no tokens) has its span and duration, and no usage', async (kind) => {
    const response = await client.transcribe({
      context: { requestId: `req_genai_transcribe_${kind}`, accountId: 'acc_test', keyId: 'key_test' }, modelId: `genai/transcribe-${kind}`, routingStrategy: '',
      audio: Buffer.from('RIFF....WAVEfmt '), filename: 'a.wav', mediaType: 'audio/wav', prompt: '', language: '', translate: false, responseFormat: '', audioDurationMs: 1_000,
    });
    expect(response.text.length).toBeGreaterThan(0);
    const [span] = await attemptSpans(`genai/transcribe-${kind}`, false);
    expect(span!).toMatchObject({ name: 'generate_content whisper', kind: SPAN_KIND.client });
    expect(span!.attributes['gen_ai.usage.input_tokens']).toBeUndefined();
    expect(span!.attributes['gen_ai.usage.output_tokens']).toBeUndefined();
    await latestPoint('gen_ai.client.operation.duration', { 'gen_ai.request.model': 'whisper', 'gen_ai.provider.name': span!.attributes['gen_ai.provider.name'] }, (point) => expect(point.count).toBe(1));
    expect(collector.metrics.some((point) => point.name === 'gen_ai.client.token.usage' && point.attributes['gen_ai.request.model'] === 'whisper')).toBe(false);
  });

  it('a moderation reports input tokens only (none here: OpenAI\'s moderations report no usage)', async () => {
    const response = await client.moderate({
      context: { requestId: 'req_genai_moderate', accountId: 'acc_test', keyId: 'key_test' }, modelId: 'genai/moderate', routingStrategy: '',
      inputs: [{ input: { $case: 'text', value: 'tea' } }], inputForm: ModerationInputForm.MODERATION_INPUT_FORM_STRING,
    });
    expect(response.results).toHaveLength(1);
    const [span] = await attemptSpans('genai/moderate', false);
    expect(span!).toMatchObject({ name: 'generate_content omni-moderation-latest', kind: SPAN_KIND.client });
    expect(span!.attributes['gen_ai.usage.input_tokens']).toBeUndefined();
    expect(span!.attributes['gen_ai.usage.output_tokens']).toBeUndefined();
    expect(collector.metrics.some((point) => point.name === 'gen_ai.client.token.usage' && point.attributes['gen_ai.request.model'] === 'omni-moderation-latest')).toBe(false);
  });

  it('exports the client metrics over OTLP: names, units, bucket boundaries and attributes for every upstream kind', async () => {
    for (const [kind, upstream] of kinds()) {
      const base = { 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': upstream.providerName, 'gen_ai.request.model': upstream.upstreamModel };
      const duration = await latestPoint('gen_ai.client.operation.duration', base, (point) => expect(point.count, kind).toBeGreaterThanOrEqual(2));
      expect(duration).toMatchObject({ type: 'histogram', unit: 's', bounds: DURATION_BOUNDS, attributes: { 'server.address': '127.0.0.1', 'server.port': portOf(upstream.url) } });
      expect(duration.attributes['error.type']).toBeUndefined();
      // Streams only: one time to first chunk per streamed attempt (the content service's streams add theirs:
      // both services export through this process's one meter provider, with the same attributes).
      const streams = (CONTENT_KINDS as readonly string[]).includes(kind) ? 2 : 1;
      const firstChunk = await latestPoint('gen_ai.client.operation.time_to_first_chunk', base, (point) => expect(point.count, kind).toBe(streams));
      expect(firstChunk).toMatchObject({ type: 'histogram', unit: 's', bounds: DURATION_BOUNDS, count: streams });
      expect(firstChunk.sum).toBeGreaterThan(0);
      for (const type of ['input', 'output']) {
        const tokens = await latestPoint('gen_ai.client.token.usage', { ...base, 'gen_ai.token.type': type }, (point) => expect(point.count).toBeGreaterThanOrEqual(2));
        expect(tokens).toMatchObject({ type: 'histogram', unit: '{token}', bounds: TOKEN_BOUNDS });
        expect(tokens.sum).toBeGreaterThan(0);
        // The newest draft's per-operation histogram: the same attempts' tokens, without gen_ai.token.type.
        const perOperation = await latestPoint(`gen_ai.client.inference.operation.${type}_tokens`, base, (point) => expect(point.count, kind).toBe(tokens.count));
        expect(perOperation).toMatchObject({ type: 'histogram', unit: '{token}', bounds: TOKEN_BOUNDS, sum: tokens.sum });
        expect(perOperation.attributes['gen_ai.token.type']).toBeUndefined();
        expect(perOperation.attributes['error.type']).toBeUndefined();
      }
      const input = await latestPoint('gen_ai.client.inference.usage.input_tokens', base);
      expect(input).toMatchObject({ type: 'sum', monotonic: true, unit: '{token}' });
      expect(['text', 'unknown']).toContain(input.attributes['gen_ai.token.modality']);
      expect(input.value).toBeGreaterThan(0);
      await latestPoint('gen_ai.client.inference.usage.output_tokens', base, (point) => expect(point).toMatchObject({ type: 'sum', monotonic: true, unit: '{token}' }));
    }
    // Time per output chunk: from the streams that sent more than one chunk (the OpenAI fake streams word by word).
    const perChunk = await latestPoint('gen_ai.client.operation.time_per_output_chunk', { 'gen_ai.provider.name': 'openai', 'gen_ai.request.model': 'gpt-4.1-mini' });
    expect(perChunk).toMatchObject({ type: 'histogram', unit: 's', bounds: DURATION_BOUNDS });
    expect(perChunk.count).toBeGreaterThanOrEqual(1);
    // Cache and reasoning counters, as subsets of input and output.
    await latestPoint('gen_ai.client.inference.usage.cache_read.input_tokens', { 'gen_ai.provider.name': 'anthropic' }, (point) => expect(point.value).toBeGreaterThanOrEqual(30));
    await latestPoint('gen_ai.client.inference.usage.cache_write.input_tokens', { 'gen_ai.provider.name': 'anthropic' }, (point) => expect(point.value).toBeGreaterThanOrEqual(4));
    await latestPoint('gen_ai.client.inference.usage.reasoning.output_tokens', { 'gen_ai.provider.name': 'openai' }, (point) => expect(point.value).toBeGreaterThanOrEqual(3));
  });

  it('serves the same metrics on the Prometheus scrape under their translated names', async () => {
    const samples = parsePrometheusText(await registry.metrics());
    const find = (name: string, labels: Record<string, string>) =>
      samples.filter((sample) => sample.name === name && Object.entries(labels).every(([key, value]) => sample.labels[key] === value));
    for (const [kind, upstream] of kinds()) {
      const labels = { gen_ai_operation_name: 'chat', gen_ai_provider_name: upstream.providerName, gen_ai_request_model: upstream.upstreamModel, server_address: '127.0.0.1', server_port: String(portOf(upstream.url)) };
      const served = find('gen_ai_client_operation_duration_seconds_count', labels).filter((sample) => sample.labels.error_type === undefined);
      expect(served.reduce((sum, sample) => sum + sample.value, 0), kind).toBeGreaterThanOrEqual(2);
      expect(find('gen_ai_client_operation_duration_seconds_bucket', { ...labels, le: '81.92' }).length, kind).toBeGreaterThan(0);
      expect(find('gen_ai_client_operation_time_to_first_chunk_seconds_count', labels)[0]?.value, kind).toBe(1);
      expect(find('gen_ai_client_token_usage_count', { ...labels, gen_ai_token_type: 'input' })[0]?.value, kind).toBeGreaterThanOrEqual(2);
      expect(find('gen_ai_client_token_usage_bucket', { ...labels, gen_ai_token_type: 'output', le: '67108864' }).length, kind).toBe(1);
      for (const type of ['input', 'output']) {
        const usageSum = find('gen_ai_client_token_usage_sum', { ...labels, gen_ai_token_type: type })[0]?.value;
        expect(find(`gen_ai_client_inference_operation_${type}_tokens_count`, labels)[0]?.value, kind).toBeGreaterThanOrEqual(2);
        expect(find(`gen_ai_client_inference_operation_${type}_tokens_sum`, labels)[0]?.value, kind).toBe(usageSum);
        expect(find(`gen_ai_client_inference_operation_${type}_tokens_bucket`, { ...labels, le: '67108864' }).length, kind).toBe(1);
      }
      expect(find('gen_ai_client_inference_usage_input_tokens_total', labels).reduce((sum, sample) => sum + sample.value, 0), kind).toBeGreaterThan(0);
      expect(find('gen_ai_client_inference_usage_output_tokens_total', labels).reduce((sum, sample) => sum + sample.value, 0), kind).toBeGreaterThan(0);
    }
    expect(find('gen_ai_client_operation_duration_seconds_count', { gen_ai_request_model: 'dead-model', error_type: 'connection' })[0]?.value).toBe(1);
    expect(find('gen_ai_client_operation_time_per_output_chunk_seconds_count', { gen_ai_provider_name: 'openai' })[0]?.value).toBeGreaterThanOrEqual(1);
    expect(find('gen_ai_client_inference_usage_cache_read_input_tokens_total', { gen_ai_provider_name: 'anthropic' })[0]?.value).toBeGreaterThanOrEqual(30);
    expect(find('gen_ai_client_inference_usage_reasoning_output_tokens_total', { gen_ai_provider_name: 'openai' })[0]?.value).toBeGreaterThanOrEqual(3);
  });
});
