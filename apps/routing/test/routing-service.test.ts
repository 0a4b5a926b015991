import { createServer, type AddressInfo, type Server } from 'node:net';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { encode } from 'gpt-tokenizer';
import { ErrorReason, GatewayError, GrpcStatus, openDuplexCall, subjects, type EventBus } from '@gateway/platform';
import { CatalogChanged, Provider, ExchangeRequest, ExchangeResponse, RouterServiceService, UsageOutcome, type ChatStreamResponse } from '@gateway/proto';
import { createTestBus, eventually, startFakeUpstream, testLogger, type FakeUpstream, type TestBus } from '@gateway/testing';
import { startRoutingService } from '../src/index.js';
import { countInputTokens } from '../src/usage/token-counter.js';
import { chatRequest, collectUsageEvents, drain, model, openaiProvider, rejection, routerClient, snapshot, startFakeCatalog, startRoutingRig, type RoutingRig } from './harness.js';

const PRICING = { perInputToken: '0.0000005', perOutputToken: '0.0000015' };

describe('routing service', () => {
  let testBus: TestBus;
  let upstreamA: FakeUpstream;
  let upstreamB: FakeUpstream;
  let catalog: Awaited<ReturnType<typeof startFakeCatalog>>;
  let usage: Awaited<ReturnType<typeof collectUsageEvents>>;
  let service: { address: string; stop(): Promise<void> } | undefined;
  let client: ReturnType<typeof routerClient>;

  const baseSnapshot = () =>
    snapshot('v1', [
      model('acme/sim', ['sim']),
      model('acme/pair', ['prov-a', 'prov-b'], { pricing: PRICING }),
      model('acme/only-a', ['prov-a']),
      model('acme/embed-pair', ['prov-a', 'prov-b'], {
        supportedParameters: ['dimensions'],
        offers: ['prov-a', 'prov-b'].map((providerId) => ({ providerId, upstreamModel: 'text-embed', endpoints: ['embeddings'] })),
      }),
      model('acme/embed-sim', ['sim'], { offers: [{ providerId: 'sim', upstreamModel: 'sim-embed', endpoints: ['embeddings'] }] }),
    ], [
      Provider.fromPartial({ id: 'sim', kind: 'simulated' }),
      openaiProvider('prov-a', upstreamA.url),
      openaiProvider('prov-b', upstreamB.url),
    ]);

  async function startService(bus: EventBus = testBus.bus, attemptTimeoutMs = 1_000) {
    service = await startRoutingService({
      listenAddress: '127.0.0.1:0', catalogAddress: catalog.address, bus, logger: testLogger('routing'),
      providerSecrets: { PROV_A_API_KEY: 'sk-a', PROV_B_API_KEY: 'sk-b' }, attemptTimeoutMs, maxAttempts: 3,
    });
    client = routerClient(service.address);
  }

  beforeAll(async () => {
    testBus = await createTestBus('nats');
    upstreamA = await startFakeUpstream();
    upstreamB = await startFakeUpstream();
    catalog = await startFakeCatalog(baseSnapshot());
    usage = await collectUsageEvents(testBus.bus);
  });
  afterAll(async () => {
    await usage.stop();
    await catalog.stop();
    await upstreamA.close();
    await upstreamB.close();
    await testBus.destroy();
  });
  beforeEach(async () => {
    upstreamA.reset();
    upstreamB.reset();
    catalog.replace(baseSnapshot());
    await startService();
  });
  afterEach(async () => {
    client.close();
    await service?.stop();
    service = undefined;
  });

  const eventFor = (requestId: string) => usage.collected(requestId);

  it('answers from the simulated provider deterministically, with honest counts, and publishes one usage event', async () => {
    const request = chatRequest('acme/sim', 'Explain routing in one line');
    const first = await client.chat(request);
    const second = await client.chat(chatRequest('acme/sim', 'Explain routing in one line'));
    const content = first.choices[0]!.message!.content;
    expect(content).toBe(second.choices[0]!.message!.content);
    expect(first.usage!.outputTokens).toBe(encode(content).length);
    expect(first.usage!.inputTokens).toBeGreaterThan(encode('Explain routing in one line').length);
    expect(first).toMatchObject({ modelId: 'acme/sim', providerId: 'sim', routingStrategy: 'reliability' });
    expect(first.id).toMatch(/^chatcmpl-/);

    const { event, msgId, batchId, count } = await eventFor(request.context!.requestId);
    // Group commit (the default): the message's msg-id is its batch id; a single event's is the request id.
    expect(msgId).toBe(batchId ?? request.context!.requestId);
    expect(count).toBe(1);
    expect(event).toMatchObject({
      outcome: UsageOutcome.USAGE_OUTCOME_SERVED, accountId: 'acc_test', keyId: 'key_test', modelId: 'acme/sim', providerId: 'sim',
      endpoint: 'chat.completions', streamed: false, prices: { perInputToken: '0.0000005', perOutputToken: '0.0000015' },
    });
    expect(event.usage).toEqual(first.usage);
  });

  it('streams the simulated answer: start, several deltas, usage', async () => {
    const whole = await client.chat(chatRequest('acme/sim', 'Stream this'));
    const request = chatRequest('acme/sim', 'Stream this');
    const { messages, error, text } = await drain(client.chatStream({ chat: request, combinedStart: false }));
    expect(error).toBeUndefined();
    expect(messages[0]?.event?.$case).toBe('start');
    expect(messages.filter((m) => m.event?.$case === 'delta').length).toBeGreaterThan(2);
    expect(text).toBe(whole.choices[0]!.message!.content);
    const last = messages.at(-1)!;
    expect(last.event?.$case).toBe('usage');
    const { event } = await eventFor(request.context!.requestId);
    expect(event).toMatchObject({ outcome: UsageOutcome.USAGE_OUTCOME_SERVED, streamed: true });
    expect(last.event?.$case === 'usage' && last.event.value).toEqual(event.usage);
  });

  it('carries the first delta inside the start when the caller asks for combined_start', async () => {
    upstreamA.script({ text: 'One two three.', usage: { prompt_tokens: 5, completion_tokens: 3 } });
    const { messages, error, text } = await drain(client.chatStream({ chat: chatRequest('acme/only-a', 'Count'), combinedStart: true }));
    expect(error).toBeUndefined();
    expect(text).toBe('One two three.');
    const start = messages[0]?.event;
    expect(start?.$case).toBe('start');
    expect(start?.$case === 'start' && start.value.firstDelta?.content).toBeTruthy();
    // The separate stream does not repeat it: the first delta message holds the next piece.
    const firstDelta = messages.find((m) => m.event?.$case === 'delta')?.event;
    expect(firstDelta?.$case === 'delta' && firstDelta.value.content).not.toBe(start?.$case === 'start' && start.value.firstDelta?.content);
    expect(messages.at(-1)?.event).toMatchObject({ $case: 'usage', value: { inputTokens: 5, outputTokens: 3 } });
  });

  it('reports interactive load to the jobs service: low-priority calls are left out of it (GetLoad)', async () => {
    const before = await client.getLoad({});
    upstreamA.script({ text: 'slow', latencyMs: 400, usage: { prompt_tokens: 1, completion_tokens: 1 } });
    upstreamA.script({ text: 'slow', latencyMs: 400, usage: { prompt_tokens: 1, completion_tokens: 1 } });
    const batchLine = chatRequest('acme/only-a', 'a batch line');
    batchLine.context = { ...batchLine.context!, batch: true, lowPriority: true };
    const lowPriority = client.chat(batchLine);
    await eventually(async () => expect(upstreamA.requests.length).toBe(1));
    const duringLow = await client.getLoad({});
    expect(duringLow.interactiveInFlight).toBe(0);
    expect(duringLow.interactiveStarted).toBe(before.interactiveStarted);
    const interactive = client.chat(chatRequest('acme/only-a', 'an interactive call'));
    await eventually(async () => expect(upstreamA.requests.length).toBe(2));
    const during = await client.getLoad({});
    expect(during.interactiveInFlight).toBe(1);
    expect(during.interactiveStarted).toBe(before.interactiveStarted + 1n);
    await Promise.all([lowPriority, interactive]);
    const after = await client.getLoad({});
    expect(after.interactiveInFlight).toBe(0);
    expect(after.eventLoopUtilization).toBeGreaterThanOrEqual(0);
    expect(after.eventLoopUtilization).toBeLessThanOrEqual(1);
  });

  it('calls an OpenAI-compatible upstream with the upstream model name and the provider secret', async () => {
    upstreamA.script({ text: 'Paris.', usage: { prompt_tokens: 12, completion_tokens: 2 } });
    const request = chatRequest('acme/only-a', 'Capital of France?');
    const response = await client.chat(request);
    expect(response.choices[0]!.message!.content).toBe('Paris.');
    expect(response.usage).toMatchObject({ inputTokens: 12, outputTokens: 2, estimated: false });
    expect(upstreamA.requests[0]!.body.model).toBe('prov-a-upstream-model');
    expect(upstreamA.requests[0]!.headers.authorization).toBe('Bearer sk-a');
    expect((await eventFor(request.context!.requestId)).event.usage).toMatchObject({ inputTokens: 12, outputTokens: 2 });
  });

  it('forwards upstream stream chunks and ends with the provider usage', async () => {
    upstreamA.script({ text: 'alpha beta gamma delta', chunkCount: 4, usage: { prompt_tokens: 9, completion_tokens: 4 } });
    const { messages, error, text } = await drain(client.chatStream({ chat: chatRequest('acme/only-a', 'words'), combinedStart: false }));
    expect(error).toBeUndefined();
    expect(text).toBe('alpha beta gamma delta');
    expect(messages.filter((m) => m.event?.$case === 'delta' && m.event.value.content).length).toBe(4);
    expect(messages.at(-1)?.event).toMatchObject({ $case: 'usage', value: { inputTokens: 9, outputTokens: 4, estimated: false } });
  });

  it.each([
    ['connection reset', { reset: true }],
    ['500', { status: 500 }],
    ['429', { status: 429 }],
    ['timeout', { latencyMs: 3_000 }],
  ])('fails over on %s to the second provider (Chat)', async (_name, behaviour) => {
    upstreamA.script(behaviour);
    upstreamB.script({ text: 'from b' });
    const request = chatRequest('acme/pair', 'hello');
    const response = await client.chat(request);
    expect(response.providerId).toBe('prov-b');
    expect(response.choices[0]!.message!.content).toBe('from b');
    expect(upstreamA.requests).toHaveLength(1);
    const { event } = await eventFor(request.context!.requestId);
    expect(event).toMatchObject({ providerId: 'prov-b', outcome: UsageOutcome.USAGE_OUTCOME_SERVED });
  });

  it.each([
    ['stall before the first chunk', { stallAfterChunks: 0 }],
    ['cut before the first chunk', { cutAfterChunks: 0 }],
    ['500', { status: 500 }],
    ['reset', { reset: true }],
  ])('fails over inside a stream on %s', async (_name, behaviour) => {
    upstreamA.script(behaviour);
    upstreamB.script({ text: 'streamed by b' });
    const { messages, error, text } = await drain(client.chatStream({ chat: chatRequest('acme/pair', 'hello'), combinedStart: false }));
    expect(error).toBeUndefined();
    expect(messages[0]?.event).toMatchObject({ $case: 'start', value: { providerId: 'prov-b' } });
    expect(text).toBe('streamed by b');
    expect(upstreamA.requests).toHaveLength(1);
  });

  it('ends the stream with an error after a cut following the first chunk, and still bills what was delivered', async () => {
    upstreamA.script({ text: 'first second third', chunkCount: 3, cutAfterChunks: 1 });
    const request = chatRequest('acme/pair', 'hello');
    const { messages, error, text } = await drain(client.chatStream({ chat: request, combinedStart: false }));
    expect(messages[0]?.event?.$case).toBe('start');
    expect(text.length).toBeGreaterThan(0);
    expect(error?.status).toBe(GrpcStatus.UNAVAILABLE);
    expect(messages.some((m) => m.event?.$case === 'usage')).toBe(false);
    expect(upstreamB.requests).toHaveLength(0);
    const { event } = await eventFor(request.context!.requestId);
    expect(event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_SERVED);
    expect(event.usage).toMatchObject({ outputTokens: encode(text).length, estimated: true });
    expect(event.usage!.inputTokens).toBeGreaterThan(0);
  });

  it('ends the stream with an error when the upstream stalls after the first chunk (idle timeout)', async () => {
    upstreamA.script({ text: 'one two three', chunkCount: 3, stallAfterChunks: 1 });
    const request = chatRequest('acme/pair', 'hello');
    const { messages, error, text } = await drain(client.chatStream({ chat: request, combinedStart: false }));
    expect(messages[0]?.event?.$case).toBe('start');
    expect(text.length).toBeGreaterThan(0);
    expect(error?.status).toBe(GrpcStatus.UNAVAILABLE);
    expect(upstreamB.requests).toHaveLength(0);
    expect((await eventFor(request.context!.requestId)).event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_SERVED);
  });

  it('embeds through an OpenAI-compatible upstream with failover, dimensions passed, usage published', async () => {
    upstreamA.script({ status: 500 });
    const context = chatRequest('acme/embed-pair', '').context;
    const response = await client.embed({ context, modelId: 'acme/embed-pair', routingStrategy: 'reliability', texts: ['first', 'second'], tokenInputs: [], dimensions: 4 });
    expect(response.providerId).toBe('prov-b');
    expect(response.embeddings.map((embedding) => embedding.values.length)).toEqual([4, 4]);
    expect(upstreamB.requests[0]!.body).toMatchObject({ model: 'text-embed', input: ['first', 'second'], dimensions: 4 });
    expect(response.usage!.inputTokens).toBeGreaterThan(0);
    const { event } = await eventFor(context!.requestId);
    expect(event).toMatchObject({ endpoint: 'embeddings', outcome: UsageOutcome.USAGE_OUTCOME_SERVED, providerId: 'prov-b' });
  });

  it('embeds with the simulated provider deterministically and counts token inputs', async () => {
    const request = { context: undefined, modelId: 'acme/embed-sim', routingStrategy: '', texts: [], tokenInputs: [{ ids: [1, 2, 3] }, { ids: [4] }], dimensions: 16 };
    const first = await client.embed(request);
    const second = await client.embed(request);
    expect(first.embeddings).toEqual(second.embeddings);
    // Routing passes on the dimensions the edge forwarded (the edge alone decides by the model's list:
    // libs/platform ENDPOINT_PARAMETERS; media-endpoints.e2e.test.ts).
    expect(first.embeddings[0]!.values.length).toBe(16);
    expect(first.usage!.inputTokens).toBe(4);
  });

  it('counts tokens itself when the provider reports no usage', async () => {
    upstreamA.script({ text: 'an answer without usage', usage: 'absent' }, { text: 'streamed without usage', usage: 'absent' });
    const request = chatRequest('acme/only-a', 'count for me');
    const response = await client.chat(request);
    expect(response.usage).toMatchObject({ outputTokens: encode('an answer without usage').length, estimated: true });
    expect(response.usage!.inputTokens).toBeGreaterThan(0);
    expect((await eventFor(request.context!.requestId)).event.usage).toEqual(response.usage);

    const streamed = await drain(client.chatStream({ chat: chatRequest('acme/only-a', 'count for me'), combinedStart: false }));
    expect(streamed.messages.at(-1)?.event).toMatchObject({ $case: 'usage', value: { outputTokens: encode('streamed without usage').length, estimated: true } });
  });

  it('answers NO_UPSTREAM when every attempt fails, and releases the reservation with a FAILED event', async () => {
    upstreamA.script({ status: 503 });
    upstreamB.script({ reset: true });
    const request = chatRequest('acme/pair', 'hello');
    const error = await rejection(client.chat(request));
    expect([error.status, error.reason, error.message]).toEqual([GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'No upstream available.']);
    expect(error.retryAfterSeconds).toBeGreaterThan(0);
    const { event } = await eventFor(request.context!.requestId);
    expect(event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_FAILED);
  });

  it('ends a stream with NO_UPSTREAM (and no start) when every attempt fails before content', async () => {
    upstreamA.script({ cutAfterChunks: 0 });
    upstreamB.script({ status: 502 });
    const request = chatRequest('acme/pair', 'hello');
    const { messages, error } = await drain(client.chatStream({ chat: request, combinedStart: false }));
    expect(messages).toEqual([]);
    expect([error?.status, error?.reason, error?.message]).toEqual([GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'No upstream available.']);
    expect((await eventFor(request.context!.requestId)).event).toMatchObject({ outcome: UsageOutcome.USAGE_OUTCOME_FAILED, streamed: true });
  });

  it('returns a refusal inside a stream as UPSTREAM_REJECTED before any content', async () => {
    upstreamA.script({ status: 422, errorBody: { error: { message: 'bad tool schema' } } });
    const { messages, error } = await drain(client.chatStream({ chat: chatRequest('acme/pair', 'hello'), combinedStart: false }));
    expect(messages).toEqual([]);
    expect([error?.reason, error?.message]).toEqual([ErrorReason.ERROR_REASON_UPSTREAM_REJECTED, 'Upstream returned an error: bad tool schema']);
    expect(upstreamB.requests).toHaveLength(0);
  });

  it('returns a provider refusal as UPSTREAM_REJECTED without failing over', async () => {
    upstreamA.script({ status: 400, errorBody: { error: { message: 'max_tokens is too large', type: 'invalid_request_error' } } });
    const error = await rejection(client.chat(chatRequest('acme/pair', 'hello')));
    expect([error.status, error.reason, error.message]).toEqual([
      GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_UPSTREAM_REJECTED, 'Upstream returned an error: max_tokens is too large',
    ]);
    expect(upstreamB.requests).toHaveLength(0);
  });

  it('returns an upstream content filter as CONTENT_MODERATION', async () => {
    upstreamA.script({ status: 400, errorBody: { error: { message: 'flagged', code: 'content_filter' } } });
    const error = await rejection(client.chat(chatRequest('acme/only-a', 'hello')));
    expect([error.status, error.reason, error.message, error.code]).toEqual([
      GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_CONTENT_MODERATION, 'Request rejected by upstream content moderation.', 'content_moderation',
    ]);
  });

  it('forwards the parameters as the edge sent them: the edge is the one place that drops (apps/edge/src/canonical/parameters.ts)', async () => {
    const response = await client.chat(chatRequest('acme/only-a', 'hello', { temperature: 0.5, topP: 0.9, presencePenalty: 1 }));
    expect(response.droppedParams).toEqual([]);
    const body = upstreamA.requests[0]!.body;
    expect([body.temperature, body.top_p, body.presence_penalty]).toEqual([0.5, 0.9, 1]);
  });

  it('rejects an unknown model with MODEL_NOT_FOUND', async () => {
    const error = await rejection(client.chat(chatRequest('acme/nope', 'hello')));
    expect([error.status, error.reason]).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_MODEL_NOT_FOUND]);
  });

  it('picks up a catalog change announced on catalog.changed', async () => {
    const next = baseSnapshot();
    next.version = 'v2';
    next.models.push(model('acme/new', ['sim']));
    catalog.replace(next);
    testBus.bus.broadcast(subjects.catalogChanged, CatalogChanged.encode({ version: 'v2' }).finish());
    const response = await eventually(() => client.chat(chatRequest('acme/new', 'hi')), 5_000);
    expect(response.modelId).toBe('acme/new');
  });

  /** Two more routing replicas on the test bus and catalog, publishing their provider stats every 50 ms. */
  async function twoReplicas() {
    const options = {
      catalogAddress: catalog.address, bus: testBus.bus, logger: testLogger('routing'), listenAddress: '127.0.0.1:0',
      providerSecrets: { PROV_A_API_KEY: 'sk-a', PROV_B_API_KEY: 'sk-b' }, statsIntervalMs: 50,
    };
    const replicaOne = await startRoutingService(options);
    const replicaTwo = await startRoutingService(options);
    const one = routerClient(replicaOne.address);
    const two = routerClient(replicaTwo.address);
    const stop = async () => {
      one.close();
      two.close();
      await replicaOne.stop();
      await replicaTwo.stop();
    };
    return { one, two, stop };
  }

  it('shares provider health between replicas over provider.stats', async () => {
    const { one, two, stop } = await twoReplicas();
    try {
      upstreamA.setFallback({ status: 500 });
      for (let request = 0; request < 5; request++) expect((await one.chat(chatRequest('acme/pair', 'x'))).providerId).toBe('prov-b');
      // prov-a answers again: replica two, on its own, would keep choosing it (first in catalog order,
      // never failed there). It moves to prov-b only by learning of replica one's open circuit.
      upstreamA.setFallback({});
      await eventually(async () => {
        expect((await two.chat(chatRequest('acme/pair', 'x'))).providerId).toBe('prov-b');
      }, 5_000, 100);
    } finally {
      await stop();
    }
  });

  it("answers GetProviderHealth with every catalog offer, sorted, another replica's failures merged in", async () => {
    const { one, two, stop } = await twoReplicas();
    try {
      const before = (await two.getProviderHealth({})).stats;
      expect(before.map((stat) => `${stat.providerId} ${stat.modelId}`)).toEqual([
        'prov-a acme/embed-pair', 'prov-a acme/only-a', 'prov-a acme/pair', 'prov-b acme/embed-pair', 'prov-b acme/pair', 'sim acme/embed-sim', 'sim acme/sim',
      ]);
      expect(before.every((stat) => stat.samples === 0 && stat.errorRate === 0 && !stat.circuitOpen)).toBe(true);
      upstreamA.setFallback({ status: 500 });
      for (let request = 0; request < 5; request++) expect((await one.chat(chatRequest('acme/pair', 'x'))).providerId).toBe('prov-b');
      // Replica two saw none of it: its answer carries replica one's figures once they arrived over provider.stats.
      // prov-a failed the first request only (reliability then puts prov-b first); prov-b served all five.
      await eventually(async () => {
        const stats = (await two.getProviderHealth({})).stats;
        const failing = stats.find((stat) => stat.providerId === 'prov-a' && stat.modelId === 'acme/pair');
        expect(failing).toMatchObject({ samples: 1, circuitOpen: false });
        expect(failing!.errorRate).toBeCloseTo(0.2, 9);
        expect(stats.find((stat) => stat.providerId === 'prov-b' && stat.modelId === 'acme/pair')).toMatchObject({ samples: 5, errorRate: 0, circuitOpen: false });
        expect(stats).toHaveLength(7);
      }, 5_000, 100);
    } finally {
      upstreamA.setFallback({});
      await stop();
    }
  });

  /** Router.Exchange at the frame level: what arrived, per exchange id; `closed` once the call ended. */
  function openExchange(options: { batched?: boolean } = {}) {
    const call = openDuplexCall(client.raw, RouterServiceService.exchange.path, ExchangeResponse.decode, undefined, options.batched ? { 'x-gateway-exchange-batch': '1' } : {});
    const frames = new Map<number, ExchangeResponse['frame'][]>();
    const state = { drains: 0, closed: false, error: undefined as unknown, batches: 0, batchedFrames: 0 };
    const receive = (response: ExchangeResponse) => {
      if (response.frame?.$case === 'drain') state.drains++;
      else frames.set(response.exchangeId, [...(frames.get(response.exchangeId) ?? []), response.frame]);
    };
    call.on('data', (response: ExchangeResponse) => {
      if (response.batch.length === 0) return receive(response);
      state.batches++;
      state.batchedFrames += response.batch.length;
      expect(response.frame).toBeUndefined();
      for (const inner of response.batch) {
        expect(inner.batch).toHaveLength(0);
        receive(inner);
      }
    });
    call.on('error', (error: unknown) => { state.error = error; state.closed = true; });
    call.on('end', () => { state.closed = true; });
    const send = (request: Omit<ExchangeRequest, 'traceParent'>) => call.write(ExchangeRequest.encode({ traceParent: '', ...request }).finish());
    return { call, frames, state, send };
  }

  it('answers chat and stream exchanges interleaved on one call, as Chat and ChatStream would', async () => {
    upstreamA.script({ text: 'one two three four', chunkCount: 4, chunkDelayMs: 20 });
    const exchange = openExchange();
    const streamed = chatRequest('acme/only-a', 'stream it');
    const plain = chatRequest('acme/sim', 'plain please');
    exchange.send({ exchangeId: 7, frame: { $case: 'chatStream', value: { chat: streamed, combinedStart: true } } });
    exchange.send({ exchangeId: 8, frame: { $case: 'chat', value: plain } });
    exchange.send({ exchangeId: 9, frame: { $case: 'chat', value: chatRequest('acme/nope', 'unknown model') } });
    await eventually(() => expect(exchange.frames.get(7)?.at(-1)?.$case).toBe('end'));
    const direct = await client.chat(plain);
    const answer = exchange.frames.get(8)!;
    expect(answer).toHaveLength(1);
    expect(answer[0]!.$case === 'chat' && answer[0]!.value.choices[0]!.message!.content).toBe(direct.choices[0]!.message!.content);
    const failure = exchange.frames.get(9)![0]!;
    expect(failure.$case === 'failure' && [failure.value.status, failure.value.detail!.reason]).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_MODEL_NOT_FOUND]);
    const stream = exchange.frames.get(7)!.flatMap((frame) => (frame?.$case === 'stream' ? [frame.value] : []));
    expect(stream[0]!.event?.$case).toBe('start');
    expect(stream.at(-1)!.event?.$case).toBe('usage');
    const text = stream.map((message) => (message.event?.$case === 'delta' ? message.event.value.content : message.event?.$case === 'start' ? message.event.value.firstDelta?.content ?? '' : '')).join('');
    expect(text).toBe('one two three four');
    expect((await eventFor(streamed.context!.requestId)).event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_SERVED);
    // The caller half-closes: the call ends once nothing is open.
    exchange.call.end();
    await eventually(() => expect(exchange.state.closed).toBe(true));
    expect(exchange.state.error).toBeUndefined();
    // It did not ask for batches.
    expect(exchange.state.batches).toBe(0);
  });

  it('sends the frames of one turn as one batch to a caller that asks, in order and complete', async () => {
    upstreamA.script({ text: 'one two three four', chunkCount: 4, chunkDelayMs: 20 });
    const exchange = openExchange({ batched: true });
    const streamed = chatRequest('acme/only-a', 'stream it in batches');
    exchange.send({ exchangeId: 21, frame: { $case: 'chatStream', value: { chat: streamed, combinedStart: true } } });
    // Chats sent in one write are answered by the simulated provider in the same turns: batches too.
    for (let index = 0; index < 8; index++) exchange.send({ exchangeId: 30 + index, frame: { $case: 'chat', value: chatRequest('acme/sim', `plain ${index}`) } });
    await eventually(() => expect(exchange.frames.get(21)?.at(-1)?.$case).toBe('end'));
    await eventually(() => expect(Array.from({ length: 8 }, (_, index) => exchange.frames.get(30 + index)?.[0]?.$case)).toEqual(Array(8).fill('chat')));
    const stream = exchange.frames.get(21)!;
    const events = stream.map((frame) => (frame?.$case === 'stream' ? frame.value.event?.$case : frame?.$case));
    expect(events[0]).toBe('start');
    expect(events.slice(-2)).toEqual(['usage', 'end']);
    const text = stream.map((frame) => (frame?.$case !== 'stream' ? '' : frame.value.event?.$case === 'delta' ? frame.value.event.value.content : frame.value.event?.$case === 'start' ? frame.value.event.value.firstDelta?.content ?? '' : '')).join('');
    expect(text).toBe('one two three four');
    // The stream's usage and end leave in one turn at least: one batch, never a batch of one.
    expect(exchange.state.batches).toBeGreaterThanOrEqual(1);
    expect(exchange.state.batchedFrames).toBeGreaterThanOrEqual(2 * exchange.state.batches);
    exchange.call.end();
    await eventually(() => expect(exchange.state.closed).toBe(true));
    expect(exchange.state.error).toBeUndefined();
  });

  it('stops an exchange\'s upstream work on its cancel frame and answers nothing more for it', async () => {
    upstreamA.script({ text: 'a b c d e f g h', chunkCount: 8, chunkDelayMs: 300 });
    const exchange = openExchange();
    const request = chatRequest('acme/only-a', 'slow please');
    exchange.send({ exchangeId: 1, frame: { $case: 'chatStream', value: { chat: request, combinedStart: false } } });
    await eventually(() => expect(exchange.frames.get(1)?.some((frame) => frame?.$case === 'stream' && frame.value.event?.$case === 'delta')).toBe(true));
    exchange.send({ exchangeId: 1, frame: { $case: 'cancel', value: {} } });
    const { event } = await eventFor(request.context!.requestId);
    expect(event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_SERVED);
    expect(event.usage!.outputTokens).toBeLessThan(encode('a b c d e f g h').length);
    const framesAtCancel = exchange.frames.get(1)!.length;
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(exchange.frames.get(1)!.length).toBe(framesAtCancel);
    expect(exchange.frames.get(1)!.some((frame) => frame?.$case === 'end' || frame?.$case === 'failure')).toBe(false);
    exchange.call.end();
  });

  it('tells open exchange calls to drain when it stops, and lets the exchanges in flight finish', async () => {
    upstreamA.script({ text: 'late answer', chunkCount: 1, chunkDelayMs: 300 });
    const exchange = openExchange();
    exchange.send({ exchangeId: 3, frame: { $case: 'chat', value: chatRequest('acme/only-a', 'take your time') } });
    await eventually(() => expect(upstreamA.requests.length).toBe(1));
    const stopping = service!.stop();
    service = undefined;
    await eventually(() => expect(exchange.state.drains).toBe(1));
    await eventually(() => expect(exchange.frames.get(3)?.[0]?.$case).toBe('chat'));
    // Nothing open any more: the caller ends the call, and the server's stop completes.
    exchange.call.end();
    await stopping;
  });

  it('aborts the upstream request when the caller cancels a stream, and bills what was generated', async () => {
    upstreamA.script({ text: 'a b c d e f g h', chunkCount: 8, chunkDelayMs: 300 });
    const request = chatRequest('acme/only-a', 'slow please');
    const controller = new AbortController();
    const received: string[] = [];
    await (async () => {
      for await (const message of client.chatStream({ chat: request, combinedStart: false }, { signal: controller.signal })) {
        if (message.event?.$case === 'delta' && message.event.value.content) {
          received.push(message.event.value.content);
          controller.abort();
        }
      }
    })().catch(() => undefined);
    expect(received.length).toBeGreaterThan(0);
    const { event } = await eventFor(request.context!.requestId);
    expect(event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_SERVED);
    expect(event.usage!.outputTokens).toBeGreaterThan(0);
    expect(event.usage!.outputTokens).toBeLessThan(encode('a b c d e f g h').length);
  });
});

describe('routing service: a caller who leaves before the first content (issue 35 item 4)', () => {
  let upstream: FakeUpstream;
  let hole: Server;
  const holeSockets = new Set<import('node:net').Socket>();
  let rig: RoutingRig;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    // An https upstream that accepts TCP connections and never answers the TLS handshake: the request is
    // never written to it (undici writes a request only once its connection is established).
    hole = createServer((socket) => { holeSockets.add(socket); socket.pause(); });
    await new Promise<void>((resolve) => hole.listen(0, '127.0.0.1', resolve));
    const holeUrl = `https://127.0.0.1:${(hole.address() as AddressInfo).port}/v1`;
    rig = await startRoutingRig(snapshot('v1', [model('acme/slow', ['prov-a']), model('acme/hole', ['prov-hole'])], [
      openaiProvider('prov-a', upstream.url), openaiProvider('prov-hole', holeUrl),
    ]), { providerSecrets: { PROV_A_API_KEY: 'sk-a', PROV_HOLE_API_KEY: 'sk-hole' }, attemptTimeoutMs: 5_000, maxAttempts: 1 });
  });
  afterAll(async () => {
    await rig.stop();
    await upstream.close();
    await new Promise((resolve) => { hole.close(resolve); for (const socket of holeSockets) socket.destroy(); });
  });

  /** Calls with a signal aborted after `ms`; the call must end by that abort. */
  async function cancelledAfter(ms: number, call: (signal: AbortSignal) => Promise<unknown>) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), ms);
    const outcome = await call(controller.signal).then(() => 'answered', (error: unknown) => error);
    clearTimeout(timer);
    expect(outcome).not.toBe('answered');
  }

  for (const streamed of [false, true]) {
    it(`${streamed ? 'a stream' : 'a unary chat'} cancelled while the upstream has its request: one SERVED event, its prompt only, cancelled, never insured`, async () => {
      upstream.script({ latencyMs: 2_000 });
      const request = chatRequest('acme/slow', 'a prompt the upstream received in full');
      await cancelledAfter(500, async (signal) => {
        if (!streamed) return rig.client.chat(request, { signal });
        for await (const _message of rig.client.chatStream({ chat: request, combinedStart: false }, { signal })) { /* none before the abort */ }
      });
      expect(upstream.requests).toHaveLength(1);
      const { event, msgId } = await rig.usage.collected(request.context!.requestId);
      expect(event).toMatchObject({
        outcome: UsageOutcome.USAGE_OUTCOME_SERVED, providerId: 'prov-a', cancelled: true, finishReason: 'cancelled', insuredReason: '', streamed,
      });
      expect(event.usage).toMatchObject({ inputTokens: countInputTokens(request.messages), outputTokens: 0, estimated: true });
      // Exactly one event, under the request's id (the group-commit publisher's batch carries it).
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(rig.usage.events.get(request.context!.requestId)!.count).toBe(1);
      expect(msgId).toBeTruthy();
      upstream.reset();
    });
  }

  it('a caller who leaves before its request was written to the upstream (still connecting) pays nothing: FAILED', async () => {
    for (const streamed of [true, false]) {
      const request = chatRequest('acme/hole', 'a prompt no upstream ever received');
      await cancelledAfter(800, async (signal) => {
        if (!streamed) return rig.client.chat(request, { signal });
        for await (const _message of rig.client.chatStream({ chat: request, combinedStart: false }, { signal })) { /* none */ }
      });
      expect(holeSockets.size).toBeGreaterThan(0);
      const { event } = await rig.usage.collected(request.context!.requestId);
      expect(event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_FAILED);
      expect(event.usage).toMatchObject({ inputTokens: 0, outputTokens: 0 });
    }
  });
});

describe('routing service when usage cannot be recorded', () => {
  it('withholds the answer with USAGE_NOT_RECORDED', async () => {
    const testBus = await createTestBus('nats');
    const upstream = await startFakeUpstream();
    const catalog = await startFakeCatalog(snapshot('v1', [model('acme/only-a', ['prov-a'])], [openaiProvider('prov-a', upstream.url)]));
    let publishAttempts = 0;
    const failingBus: EventBus = {
      publishDurable: async () => { publishAttempts++; throw new Error('JetStream unavailable'); },
      consumeDurable: (options, handler) => testBus.bus.consumeDurable(options, handler),
      broadcast: (subject, data) => testBus.bus.broadcast(subject, data),
      subscribe: (subject, handler) => testBus.bus.subscribe(subject, handler),
      close: async () => undefined,
    };
    const service = await startRoutingService({ listenAddress: '127.0.0.1:0', catalogAddress: catalog.address, bus: failingBus, logger: testLogger('routing') });
    const client = routerClient(service.address);
    try {
      const error = await rejection(client.chat(chatRequest('acme/only-a', 'hello')));
      expect([error.status, error.reason]).toEqual([GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_USAGE_NOT_RECORDED]);
      expect(upstream.requests).toHaveLength(1);
      expect(publishAttempts).toBeGreaterThan(1);
    } finally {
      client.close();
      await service.stop();
      await catalog.stop();
      await upstream.close();
      await testBus.destroy();
    }
  });
});
