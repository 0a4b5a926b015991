import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { eventually, SPAN_KIND, startOtlpCollector, type CollectedSpan, type OtlpCollector } from '@gateway/testing';
import { CRASH_MODEL, UPSTREAM_KEY_ENV } from './crash-streams.js';
import { createAccountKey, paidModelFixture, startProcessStack, type PaidModelFixture, type ProcessStack } from './process-stack.js';

// Issue 16: one trace per request across the multi-process stack. Every process exports OTLP/HTTP (JSON)
// to a collector this test runs; a paid streamed chat must come back as ONE trace: the edge's HTTP span →
// auth (key cache miss) → ledger admission → routing's span for the exchange (GenAI attributes) →
// the upstream HTTP call (traceparent sent to the provider) → the usage publish; and the ledger's
// settlement span, in its own trace, links to the request.

const APPS = ['auth', 'catalog', 'ledger', 'routing', 'media', 'edge'] as const;

describe('one trace per request across every process', () => {
  let fixture: PaidModelFixture;
  let collector: OtlpCollector;
  let stack: ProcessStack;
  let apiKey = '';

  beforeAll(async () => {
    fixture = await paidModelFixture('tracing-');
    collector = await startOtlpCollector();
    const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '100', OTEL_METRIC_EXPORT_INTERVAL: '500' };
    const env = Object.fromEntries(APPS.map((app) => [app, { ...otel } as Record<string, string>])) as Record<(typeof APPS)[number], Record<string, string>>;
    env.catalog.GATEWAY_CONFIG = fixture.configPath;
    env.routing[UPSTREAM_KEY_ENV] = 'tracing-test-key';
    env.edge.LOG_LEVEL = 'info';
    stack = await startProcessStack(fixture.database, fixture.testBus, env);
    ({ apiKey } = await createAccountKey(stack, 'traced', '5'));
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
    await collector?.close();
    await fixture?.dispose();
  }, 30_000);

  const streamOnce = async (content: string) => {
    const client = new OpenAI({ baseURL: `${stack.edgeUrl}/v1`, apiKey, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: CRASH_MODEL, messages: [{ role: 'user', content }], stream: true, stream_options: { include_usage: true },
    }).withResponse();
    let text = '';
    for await (const chunk of stream.data) text += chunk.choices[0]?.delta?.content ?? '';
    return { text, requestId: stream.response.headers.get('x-gateway-request-id') ?? '' };
  };

  const traceOf = async (requestId: string) => {
    // The edge's span names the gateway's request id; the rest of its trace follows from its trace id.
    let edge: CollectedSpan | undefined;
    await eventually(async () => {
      edge = collector.spans.find((span) => span.service === 'gateway-edge' && span.attributes['gateway.request_id'] === requestId);
      expect(edge, 'the edge exported the request span').toBeDefined();
      // The settlement happens after the answer: wait until the ledger's span linked to this trace came in.
      expect(collector.spans.some((span) => span.name === 'usage settle' && span.links.some((link) => link.traceId === edge!.traceId))).toBe(true);
    }, 20_000, 100);
    const traceId = edge!.traceId;
    return { edge: edge!, spans: collector.spans.filter((span) => span.traceId === traceId) };
  };

  it('exports a paid streamed chat as one trace, edge to upstream to usage, and links the settlement to it', async () => {
    const { text, requestId } = await streamOnce('trace me');
    expect(text.length).toBeGreaterThan(0);
    const { edge, spans } = await traceOf(requestId);
    const find = (service: string, predicate: (span: CollectedSpan) => boolean, what: string) => {
      const found = spans.filter((span) => span.service === service && predicate(span));
      expect(found.length, `${what} in the trace; got ${spans.map((span) => `${span.service}:${span.name}`).join(', ')}`).toBeGreaterThan(0);
      return found[0]!;
    };
    const childOf = (span: CollectedSpan, parent: CollectedSpan, what: string) => expect(span.parentSpanId, what).toBe(parent.spanId);

    // The edge's request span is the root (the client sent no traceparent).
    expect(edge.kind).toBe(SPAN_KIND.server);
    expect(edge.parentSpanId).toBe('');
    expect(edge.name).toBe('POST /v1/chat/completions');
    expect(edge.attributes['http.response.status_code']).toBe(200);
    expect(edge.attributes['gateway.model']).toBe(CRASH_MODEL);

    // Auth on the key cache's miss: the edge's client span, auth's server span under it.
    const verifyClient = find('gateway-edge', (span) => span.name === 'gateway.v1.AuthService/VerifyApiKey' && span.kind === SPAN_KIND.client, 'the edge calling auth');
    childOf(verifyClient, edge, 'VerifyApiKey client span under the request');
    childOf(find('gateway-auth', (span) => span.name === 'gateway.v1.AuthService/VerifyApiKey' && span.kind === SPAN_KIND.server, 'auth serving it'), verifyClient, 'auth server span');

    // Admission at the ledger (a lease in the default mode, a reservation per request in ledger mode).
    const admit = find('gateway-ledger', (span) => /LedgerService\/(AcquireLease|Admit)$/.test(span.name) && span.kind === SPAN_KIND.server, 'ledger admission');
    expect(spans.find((span) => span.spanId === admit.parentSpanId)?.service).toBe('gateway-edge');

    // Routing: a span for THIS exchange (the shared Router.Exchange call has none), child of the request span.
    const routing = find('gateway-routing', (span) => span.name === 'gateway.v1.RouterService/ChatStream' && span.kind === SPAN_KIND.server, 'routing span');
    childOf(routing, edge, 'routing span under the edge request span');
    expect(routing.attributes).toMatchObject({
      'gateway.model': CRASH_MODEL,
      'gateway.provider': 'crash-upstream',
      'gateway.routing.strategy': expect.any(String),
      'gateway.attempts': 1,
      'gateway.usage.outcome': 'USAGE_OUTCOME_SERVED',
    });
    expect(routing.attributes['gateway.usage.input_tokens']).toBeGreaterThan(0);
    expect(routing.attributes['gateway.usage.output_tokens']).toBeGreaterThan(0);

    // The upstream attempt: a GenAI CLIENT span (OpenTelemetry GenAI conventions) under routing's span.
    const attempt = find('gateway-routing', (span) => span.name === 'chat crash-model' && span.kind === SPAN_KIND.client, 'the attempt span');
    childOf(attempt, routing, 'attempt span under routing');
    expect(attempt.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openai', 'gen_ai.request.model': 'crash-model', 'gen_ai.request.stream': true,
      'gen_ai.response.finish_reasons': ['stop'], 'gateway.provider': 'crash-upstream',
    });
    expect(attempt.attributes['gen_ai.usage.output_tokens']).toBeGreaterThan(0);

    // The upstream call under the attempt, and the provider saw the trace context.
    const upstreamSpan = find('gateway-routing', (span) => span.name === 'POST upstream' && span.kind === SPAN_KIND.client, 'upstream HTTP span');
    childOf(upstreamSpan, attempt, 'upstream span under the attempt');
    const recorded = fixture.upstream.requests.filter((request) => typeof request.headers.traceparent === 'string' && String(request.headers.traceparent).includes(edge.traceId));
    expect(recorded, 'the provider received a traceparent of this trace').toHaveLength(1);
    expect(String(recorded[0]!.headers.traceparent)).toBe(`00-${edge.traceId}-${upstreamSpan.spanId}-01`);

    // The usage publish, under the routing span; the settlement span (its own trace) links to the request.
    childOf(find('gateway-routing', (span) => span.name === 'usage publish' && span.kind === SPAN_KIND.producer, 'usage publish'), routing, 'publish under routing');
    const settle = collector.spans.find((span) => span.name === 'usage settle' && span.links.some((link) => link.traceId === edge.traceId))!;
    expect(settle.service).toBe('gateway-ledger');
    expect(settle.kind).toBe(SPAN_KIND.consumer);
    expect(settle.links.find((link) => link.traceId === edge.traceId)).toMatchObject({ spanId: routing.spanId, attributes: { 'gateway.request_id': requestId } });

    // The access log line of the request names its trace and span.
    await eventually(async () => {
      const line = stack.logs.join('').split('\n').find((entry) => entry.includes('"http request"') && entry.includes(requestId));
      expect(line).toBeDefined();
      expect(JSON.parse(line!.slice(line!.indexOf('{')))).toMatchObject({ trace_id: edge.traceId, span_id: edge.spanId, request_id: requestId });
    }, 5_000);
  });

  it('exports the GenAI client metrics over OTLP from the routing process (OTEL_EXPORTER_OTLP_ENDPOINT alone turns them on)', async () => {
    await streamOnce('metrics please');
    await eventually(async () => {
      const duration = collector.metrics.filter((point) => point.service === 'gateway-routing' && point.name === 'gen_ai.client.operation.duration'
        && point.attributes['gen_ai.request.model'] === 'crash-model');
      expect(duration.length, 'routing exported gen_ai.client.operation.duration').toBeGreaterThan(0);
      expect(duration.at(-1)).toMatchObject({ type: 'histogram', unit: 's', attributes: { 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openai' } });
    }, 20_000, 100);
  });

  it('gives every request over the shared exchange call its own trace and its own routing span', async () => {
    const [first, second] = await Promise.all([streamOnce('one'), streamOnce('two')]);
    const [a, b] = await Promise.all([traceOf(first.requestId), traceOf(second.requestId)]);
    expect(a.edge.traceId).not.toBe(b.edge.traceId);
    for (const { edge, spans } of [a, b]) {
      const routing = spans.filter((span) => span.service === 'gateway-routing' && span.name === 'gateway.v1.RouterService/ChatStream');
      expect(routing).toHaveLength(1);
      expect(routing[0]!.parentSpanId).toBe(edge.spanId);
    }
  });
});
