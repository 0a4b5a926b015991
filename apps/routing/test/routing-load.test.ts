import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDuplexCall } from '@gateway/platform';
import { ExchangeRequest, ExchangeResponse, RouterServiceService } from '@gateway/proto';
import { eventually, sampleSum, type FakeUpstream } from '@gateway/testing';
import { chatRequest, model, routerClient, startMeteredRouting, type MeteredRouting } from './harness.js';

// The per-replica load the chart's autoscalers read (helm/gateway: keda, hpa.metric): Router calls and
// exchanges in flight, and the streamed ones among them, on a real routing service in front of fake
// upstreams that hold their answers. Each count goes back to zero when its call ends or is cancelled.
describe('gateway_routing_requests_in_flight and gateway_routing_streams_active', () => {
  let routing: MeteredRouting<readonly [string, string]>;
  let streaming: FakeUpstream;
  let plain: FakeUpstream;
  let client: ReturnType<typeof routerClient>;

  beforeAll(async () => {
    routing = await startMeteredRouting([model('acme/streams', ['prov-s']), model('acme/plain', ['prov-p'])], ['prov-s', 'prov-p'], { attemptTimeoutMs: 60_000, maxAttempts: 1 });
    [streaming, plain] = routing.upstreams;
    client = routing.client;
  });

  afterAll(async () => {
    await routing?.stop();
  });

  const load = async () => {
    const samples = await routing.scrape();
    return { requests: sampleSum(samples, 'gateway_routing_requests_in_flight'), streams: sampleSum(samples, 'gateway_routing_streams_active') };
  };

  it('counts exchanges from their frame to their end: a held chat in flight, a held stream in both', async () => {
    expect(await load()).toEqual({ requests: 0, streams: 0 });
    streaming.script({ stallAfterChunks: 1 });
    plain.script({ stall: true });
    const call = openDuplexCall(client.raw, RouterServiceService.exchange.path, ExchangeResponse.decode, undefined, {});
    const frames = new Map<number, string[]>();
    call.on('data', (response: ExchangeResponse) => frames.set(response.exchangeId, [...(frames.get(response.exchangeId) ?? []), response.frame?.$case ?? '']));
    call.on('error', () => undefined);
    const send = (request: Omit<ExchangeRequest, 'traceParent'>) => call.write(ExchangeRequest.encode({ traceParent: '', ...request }).finish());
    send({ exchangeId: 1, frame: { $case: 'chatStream', value: { chat: chatRequest('acme/streams', 'stream'), combinedStart: true } } });
    send({ exchangeId: 2, frame: { $case: 'chat', value: chatRequest('acme/plain', 'plain') } });
    // The stream has started (its first content came back); the chat waits on its stalled upstream.
    await eventually(() => expect(frames.get(1)).toContain('stream'));
    await eventually(() => expect(plain.requests).toHaveLength(1));
    expect(await load()).toEqual({ requests: 2, streams: 1 });

    send({ exchangeId: 2, frame: { $case: 'cancel', value: {} } });
    await eventually(async () => expect(await load()).toEqual({ requests: 1, streams: 1 }));
    send({ exchangeId: 1, frame: { $case: 'cancel', value: {} } });
    await eventually(async () => expect(await load()).toEqual({ requests: 0, streams: 0 }));
    call.end();
  });

  it('counts the direct ChatStream and Chat calls until they end or their caller cancels', async () => {
    streaming.reset();
    plain.reset();
    streaming.script({ stallAfterChunks: 1 });
    const controller = new AbortController();
    const stream = client.chatStream({ chat: chatRequest('acme/streams', 'direct stream'), combinedStart: true }, { signal: controller.signal });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    expect(await load()).toEqual({ requests: 1, streams: 1 });
    controller.abort();
    await iterator.next().catch(() => undefined);
    await eventually(async () => expect(await load()).toEqual({ requests: 0, streams: 0 }));

    // A direct stream that runs to its end gives its place back too (the call's finish).
    streaming.script({});
    const messages = [];
    for await (const message of client.chatStream({ chat: chatRequest('acme/streams', 'whole stream'), combinedStart: true })) messages.push(message);
    expect(messages.at(-1)?.event?.$case).toBe('usage');
    await eventually(async () => expect(await load()).toEqual({ requests: 0, streams: 0 }));

    // A plain call held by its upstream until its caller cancels.
    plain.script({ latencyMs: 60_000 });
    const chatController = new AbortController();
    const answer = client.chat(chatRequest('acme/plain', 'direct plain'), { signal: chatController.signal }).catch((error: unknown) => error);
    await eventually(() => expect(plain.requests.length).toBeGreaterThan(0));
    expect(await load()).toEqual({ requests: 1, streams: 0 });
    chatController.abort();
    await answer;
    await eventually(async () => expect(await load()).toEqual({ requests: 0, streams: 0 }));
  });
});
