import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import WebSocket from 'ws';
import { Registry } from '@gateway/platform';
import { createTestBus, eventually, parsePrometheusText, sampleSum, type TestBus } from '@gateway/testing';
import { startEdge, type RunningEdge } from '../src/index.js';
import { logger, snapshot } from './edge-fixture.js';
import { chatResponse, deltaEvent, model, startEvent, startFakeServices, type FakeServices } from './fakes.js';

// The per-replica load the chart's autoscalers read (helm/gateway: keda, hpa.metric): requests in
// flight and streamed answers open, on a real edge in front of fake services. A stream holds a
// connection for its whole length with little CPU, so it is counted apart from the requests.
let testBus: TestBus;
let fakes: FakeServices;
let edge: RunningEdge;
const registry = new Registry();

beforeAll(async () => {
  testBus = await createTestBus('nats');
  fakes = await startFakeServices(snapshot('v1', [model({ id: 'acme/responder', offers: [{ providerId: 'acme-cloud', upstreamModel: 'up', endpoints: ['responses'] }] })]), logger);
  fakes.auth.apiKeys.set('sk-good', { accountId: 'acct_1', keyId: 'key_1', tier: 'tier-1', defaultRoutingStrategy: '' });
  fakes.ledger.available.set('acct_1', '10.5');
  edge = await startEdge({ port: 0, ...fakes.addresses, bus: testBus.bus, logger, admission: 'ledger', metrics: registry });
});

afterAll(async () => {
  await edge?.stop();
  await fakes?.stop();
  await testBus?.destroy();
});

const openai = () => new OpenAI({ baseURL: `${edge.url}/v1`, apiKey: 'sk-good', maxRetries: 0 });

async function load(): Promise<{ inFlight: number; streams: number }> {
  const samples = parsePrometheusText(await registry.metrics());
  return { inFlight: sampleSum(samples, 'gateway_http_requests_in_flight'), streams: sampleSum(samples, 'gateway_http_streams_active') };
}

/** A promise and the function that resolves it. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => { open = resolve; });
  return { opened, open };
}

describe('gateway_http_requests_in_flight and gateway_http_streams_active', () => {
  it('count a held answer in flight only, a held stream in both, until each ends or its client leaves', async () => {
    expect(await load()).toEqual({ inFlight: 0, streams: 0 });

    // A plain answer the router holds, and a stream that has started and then waits.
    const answerGate = gate();
    const streamGate = gate();
    fakes.router.chatAnswer = async (request) => { await answerGate.opened; return chatResponse(request, 'late'); };
    fakes.router.streamScript = async function* (request) {
      yield startEvent(request);
      yield deltaEvent('Hel');
      await streamGate.opened;
      yield deltaEvent('lo', 'stop');
    };
    const plain = openai().chat.completions.create({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }] });
    await eventually(async () => expect(await load()).toEqual({ inFlight: 1, streams: 0 }), 5_000);

    const stream = await openai().chat.completions.create({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }], stream: true });
    const iterator = stream[Symbol.asyncIterator]();
    expect((await iterator.next()).value?.choices[0]?.delta.content).toBe('Hel');
    expect(await load()).toEqual({ inFlight: 2, streams: 1 });

    answerGate.open();
    expect((await plain).choices[0]?.message.content).toBe('late');
    await eventually(async () => expect(await load()).toEqual({ inFlight: 1, streams: 1 }), 5_000);

    streamGate.open();
    const rest: string[] = [];
    for (let next = await iterator.next(); !next.done; next = await iterator.next()) rest.push(next.value.choices[0]?.delta.content ?? '');
    expect(rest.join('')).toBe('lo');
    await eventually(async () => expect(await load()).toEqual({ inFlight: 0, streams: 0 }), 5_000);

    // A client that leaves mid-stream gives its place back too (the response's close).
    const neverGate = gate();
    fakes.router.streamScript = async function* (request) {
      yield startEvent(request);
      yield deltaEvent('Hel');
      await neverGate.opened;
    };
    const abandoned = await openai().chat.completions.create({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }], stream: true });
    const abandonedIterator = abandoned[Symbol.asyncIterator]();
    await abandonedIterator.next();
    expect(await load()).toEqual({ inFlight: 1, streams: 1 });
    abandoned.controller.abort();
    await eventually(async () => expect(await load()).toEqual({ inFlight: 0, streams: 0 }), 5_000);
    neverGate.open();
  });

  it('count a responses WebSocket turn as a stream while it runs, not the idle socket', async () => {
    const turnGate = gate();
    fakes.router.streamScript = async function* (request) {
      yield startEvent(request);
      yield deltaEvent('Hel');
      await turnGate.opened;
      yield deltaEvent('lo', 'stop');
    };
    const ws = new WebSocket(`${edge.url.replace(/^http/, 'ws')}/v1/responses`, { headers: { authorization: 'Bearer sk-good' } });
    const types: string[] = [];
    ws.on('message', (data) => types.push((JSON.parse(data.toString()) as { type: string }).type));
    await new Promise<void>((resolve, reject) => { ws.once('open', () => resolve()); ws.once('error', reject); });
    expect(await load()).toEqual({ inFlight: 0, streams: 0 });
    ws.send(JSON.stringify({ type: 'response.create', model: 'acme/responder', input: 'Hi' }));
    await eventually(() => expect(types).toContain('response.output_text.delta'), 5_000);
    expect(await load()).toEqual({ inFlight: 1, streams: 1 });
    turnGate.open();
    await eventually(() => expect(types).toContain('response.completed'), 5_000);
    await eventually(async () => expect(await load()).toEqual({ inFlight: 0, streams: 0 }), 5_000);
    ws.close();
  });
});
