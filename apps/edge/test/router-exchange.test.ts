import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { RouterServiceClient, RouterServiceService, type ChatRequest, type ChatStreamResponse } from '@gateway/proto';
import { ErrorReason, GatewayError, GrpcStatus, createClient, startGrpcServer, type RunningGrpcServer } from '@gateway/platform';
import { eventually, testLogger } from '@gateway/testing';
import { RouterExchange, type RouterExchangeOptions } from '../src/inference/router-exchange.js';
import { FakeRouter, chatResponse, deltaEvent, startEvent, usage } from './fakes.js';

const logger = testLogger('router-exchange-test');

let router: FakeRouter;
let server: RunningGrpcServer;
const exchanges: RouterExchange[] = [];

function chatRequest(requestId: string, text = 'hello'): ChatRequest {
  return {
    context: { requestId, accountId: 'acct_1', keyId: 'key_1' },
    modelId: 'acme/chat-small',
    routingStrategy: 'balanced',
    endpoint: 'chat.completions',
    messages: [{ role: 'user', content: [{ part: { $case: 'text', value: text } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false }],
    tools: [],
    stop: [],
    includeUsage: false,
    timeoutMs: 0,
  };
}

function exchangeTo(address: string, options: RouterExchangeOptions = {}) {
  const perCall = createClient(RouterServiceClient, RouterServiceService, address, { maxAttempts: 1 });
  const exchange = new RouterExchange(perCall.raw, perCall, logger, options);
  exchanges.push(exchange);
  return exchange;
}

async function collect(stream: AsyncIterable<ChatStreamResponse>): Promise<{ text: string; error?: unknown }> {
  let text = '';
  try {
    for await (const message of stream) {
      if (message.event?.$case === 'delta') text += message.event.value.content;
      if (message.event?.$case === 'start' && message.event.value.firstDelta) text += message.event.value.firstDelta.content;
    }
    return { text };
  } catch (error) {
    return { text, error };
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A promise and its resolve: tests order events by waiting on them, not on time. */
function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((settle) => { resolve = settle; });
  return { promise, resolve };
}

/** Resolves once the fake router has received a chat with this request id. */
function routerReceived(requestId: string, fake: FakeRouter = router): Promise<void> {
  return eventually(() => expect(fake.chats.map((chat) => chat.context?.requestId)).toContain(requestId));
}

/**
 * A fake router on a server of its own, for tests that count the calls the edge ends: the shared
 * router still sees earlier tests' calls end after they finished.
 */
async function ownRouter(): Promise<{ fake: FakeRouter; address: string; stop: () => Promise<void> }> {
  const fake = new FakeRouter();
  const own = await startGrpcServer({
    address: '127.0.0.1:0',
    services: [{ definition: RouterServiceService, implementation: fake.implementation(logger), name: 'gateway.v1.RouterService' }],
    logger,
  });
  return { fake, address: own.address, stop: () => own.stop(100) };
}

beforeAll(async () => {
  router = new FakeRouter();
  server = await startGrpcServer({
    address: '127.0.0.1:0',
    services: [{ definition: RouterServiceService, implementation: router.implementation(logger), name: 'gateway.v1.RouterService' }],
    logger,
  });
});

const defaultAnswer = new FakeRouter().chatAnswer;
const defaultScript = new FakeRouter().streamScript;

afterEach(() => {
  for (const exchange of exchanges.splice(0)) exchange.close();
  router.chatAnswer = defaultAnswer;
  router.streamScript = defaultScript;
});

afterAll(async () => {
  await server?.stop(100);
});

describe('RouterExchange', () => {
  it('carries many interleaved chats and streams on one call, each answer to its own caller', async () => {
    const exchange = exchangeTo(server.address);
    const callsBefore = router.exchangeCalls;
    const perCallBefore = router.perCallChats;
    // Answers come back out of order: once the router holds all 30, it answers the last first.
    const held = new Map<number, () => void>();
    router.chatAnswer = (request) => new Promise((resolve) => {
      const index = Number(request.context!.requestId.split('_')[1]);
      held.set(index, () => resolve(chatResponse(request, `answer ${index}`)));
      if (held.size === 30) for (let last = 29; last >= 0; last--) held.get(last)!();
    });
    router.streamScript = async function* (request) {
      const words = request.messages[0]!.content[0]!.part!.$case === 'text' ? (request.messages[0]!.content[0]!.part!.value as string).split(' ') : [];
      yield startEvent(request);
      for (const word of words) {
        await sleep(1);
        yield deltaEvent(`${word} `);
      }
      yield { event: { $case: 'usage', value: usage(3, words.length) } };
    };
    const chats = Array.from({ length: 30 }, (_, index) => exchange.chat(chatRequest(`req_${index}`), {}));
    const streams = Array.from({ length: 5 }, (_, index) => collect(exchange.chatStream({ chat: chatRequest(`stream_${index}`, `s${index} one two three`), combinedStart: false })));
    const answers = await Promise.all(chats);
    expect(answers.map((answer) => answer.choices[0]!.message!.content)).toEqual(Array.from({ length: 30 }, (_, index) => `answer ${index}`));
    expect(answers.map((answer) => answer.id)).toEqual(Array.from({ length: 30 }, (_, index) => `chatcmpl-req_${index}`));
    const streamed = await Promise.all(streams);
    expect(streamed.map((result) => result.text)).toEqual(Array.from({ length: 5 }, (_, index) => `s${index} one two three `));
    expect(streamed.every((result) => result.error === undefined)).toBe(true);
    expect(router.exchangeCalls - callsBefore).toBe(1);
    expect(router.perCallChats - perCallBefore).toBe(0);
  });

  it('asks for batched answers and reads every frame of a batch in order, for chats and streams alike', async () => {
    const exchange = exchangeTo(server.address);
    const batchedBefore = router.batchedMessages;
    // Every message of a stream is produced in one turn: the router sends them as one batch.
    router.streamScript = async function* (request) {
      yield startEvent(request);
      for (const word of ['alpha', 'beta', 'gamma', 'delta']) yield deltaEvent(`${word} `);
      yield { event: { $case: 'usage', value: usage(3, 4) } };
    };
    router.chatAnswer = async (request) => chatResponse(request, `answer to ${request.context!.requestId}`);
    const streams = await Promise.all(Array.from({ length: 3 }, (_, index) => collect(exchange.chatStream({ chat: chatRequest(`batch_stream_${index}`), combinedStart: false }))));
    expect(streams).toEqual(Array.from({ length: 3 }, () => ({ text: 'alpha beta gamma delta ' })));
    const answers = await Promise.all(Array.from({ length: 20 }, (_, index) => exchange.chat(chatRequest(`batch_chat_${index}`), {})));
    expect(answers.map((answer) => answer.choices[0]!.message!.content)).toEqual(Array.from({ length: 20 }, (_, index) => `answer to batch_chat_${index}`));
    expect(router.batchedMessages - batchedBefore).toBeGreaterThanOrEqual(3);
    expect(exchange.openExchanges).toBe(0);
  });

  it('rebuilds the router error from a failure frame: status, reason, code, param, retry-after', async () => {
    const exchange = exchangeTo(server.address);
    router.chatAnswer = async () => {
      throw new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_UPSTREAM_REJECTED, 'Upstream returned an error: bad tool', { code: 'upstream_error', param: 'body.tools', retryAfterSeconds: 7 });
    };
    const error = await exchange.chat(chatRequest('req_fail'), {}).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(GatewayError);
    expect(error).toMatchObject({ status: GrpcStatus.INVALID_ARGUMENT, reason: ErrorReason.ERROR_REASON_UPSTREAM_REJECTED, message: 'Upstream returned an error: bad tool', code: 'upstream_error', param: 'body.tools', retryAfterSeconds: 7 });
    // A stream failing before its first message fails the same way.
    router.streamScript = async function* () {
      yield* [];
      throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'No upstream available.', { retryAfterSeconds: 5 });
    };
    const streamed = await collect(exchange.chatStream({ chat: chatRequest('req_fail_stream'), combinedStart: true }));
    expect(streamed.error).toMatchObject({ status: GrpcStatus.UNAVAILABLE, reason: ErrorReason.ERROR_REASON_NO_UPSTREAM, retryAfterSeconds: 5 });
  });

  it('cancels an exchange at the router when the caller aborts, and when its deadline passes', async () => {
    const exchange = exchangeTo(server.address);
    router.chatAnswer = (request) => new Promise((resolve) => setTimeout(() => resolve(chatResponse(request, 'late')), 2_000));
    const cancelsBefore = router.exchangeCancels;
    const controller = new AbortController();
    const aborted = exchange.chat(chatRequest('req_abort'), { signal: controller.signal }).catch((caught: unknown) => caught);
    await routerReceived('req_abort');
    controller.abort();
    expect(await aborted).toMatchObject({ status: GrpcStatus.CANCELLED });
    const late = await exchange.chat(chatRequest('req_deadline'), { deadlineMs: 100 }).catch((caught: unknown) => caught);
    expect(late).toMatchObject({ status: GrpcStatus.DEADLINE_EXCEEDED });
    await eventually(() => expect(router.exchangeCancels - cancelsBefore).toBe(2));

    // A stream whose reader aborts mid-way is cancelled too, and throws at once.
    router.streamScript = async function* (request) {
      yield startEvent(request);
      for (let index = 0; index < 1_000; index++) {
        await sleep(5);
        yield deltaEvent('tick ');
      }
    };
    const streamController = new AbortController();
    let received = 0;
    const reading = (async () => {
      for await (const message of exchange.chatStream({ chat: chatRequest('req_stream_abort'), combinedStart: false }, { signal: streamController.signal })) {
        if (message.event?.$case === 'delta' && ++received === 3) streamController.abort();
      }
    })().catch((caught: unknown) => caught);
    expect(await reading).toMatchObject({ status: GrpcStatus.CANCELLED });
    expect(received).toBe(3);
    await eventually(() => expect(router.exchangeCancels - cancelsBefore).toBe(3));
  });

  it('sends a request larger than maxFrameBytes on a call of its own', async () => {
    const exchange = exchangeTo(server.address, { maxFrameBytes: 2_000 });
    const perCallBefore = router.perCallChats;
    const small = await exchange.chat(chatRequest('req_small', 'short'), {});
    const large = await exchange.chat(chatRequest('req_large', 'x'.repeat(5_000)), {});
    expect(small.id).toBe('chatcmpl-req_small');
    expect(large.id).toBe('chatcmpl-req_large');
    expect(router.perCallChats - perCallBefore).toBe(1);
    const streamed = await collect(exchange.chatStream({ chat: chatRequest('req_large_stream', 'y'.repeat(5_000)), combinedStart: false }));
    expect(streamed.error).toBeUndefined();
    expect(router.perCallChats - perCallBefore).toBe(2);
  });

  it('fails a stream whose reader falls more than maxQueuedMessages behind, and cancels it at the router', async () => {
    const exchange = exchangeTo(server.address, { maxQueuedMessages: 5 });
    const cancelsBefore = router.exchangeCancels;
    router.streamScript = async function* (request) {
      yield startEvent(request);
      for (let index = 0; index < 50; index++) yield deltaEvent('word ');
    };
    const iterator = exchange.chatStream({ chat: chatRequest('req_slow_reader'), combinedStart: false })[Symbol.asyncIterator]();
    await iterator.next();
    // The reader pauses while the router keeps sending.
    await sleep(200);
    let failure: unknown;
    try {
      for (;;) if ((await iterator.next()).done) break;
    } catch (error) {
      failure = error;
    }
    expect(failure).toMatchObject({ status: GrpcStatus.RESOURCE_EXHAUSTED });
    await eventually(() => expect(router.exchangeCancels - cancelsBefore).toBe(1));
  });

  it('on a drain, finishes the exchanges in flight, opens a new call for new ones, and ends the old call', async () => {
    const { fake, address, stop } = await ownRouter();
    onTestFinished(stop);
    const exchange = exchangeTo(address);
    // The router holds these two until the test lets them go; everything else is answered at once.
    const held = new Map([['req_in_flight', deferred()], ['req_marker', deferred()]]);
    fake.chatAnswer = async (request) => {
      await held.get(request.context!.requestId)?.promise;
      return chatResponse(request, request.context!.requestId);
    };
    await exchange.chat(chatRequest('req_warm'), {});
    const inFlight = exchange.chat(chatRequest('req_in_flight'), {});
    const marker = exchange.chat(chatRequest('req_marker'), {});
    await routerReceived('req_in_flight', fake);
    await routerReceived('req_marker', fake);
    // The drain goes out before the marker's answer on the same call: once the edge has that answer,
    // it has read the drain too.
    fake.drainExchanges();
    held.get('req_marker')!.resolve();
    expect((await marker).choices[0]!.message!.content).toBe('req_marker');
    const after = await exchange.chat(chatRequest('req_after_drain'), {});
    expect(after.choices[0]!.message!.content).toBe('req_after_drain');
    expect(fake.exchangeCalls).toBe(2);
    // The drained call stays open while its last exchange is in flight, and is ended once it answers.
    expect(fake.exchangeCallsEndedByCaller).toBe(0);
    held.get('req_in_flight')!.resolve();
    expect((await inFlight).choices[0]!.message!.content).toBe('req_in_flight');
    await eventually(() => expect(fake.exchangeCallsEndedByCaller).toBe(1));
  });

  it('fails the exchanges of a call that breaks as UNAVAILABLE, and opens a new call for the next request', async () => {
    // A router of its own, stopped and started again on the same address.
    const own = new FakeRouter();
    const start = (address: string) => startGrpcServer({
      address,
      services: [{ definition: RouterServiceService, implementation: own.implementation(logger), name: 'gateway.v1.RouterService' }],
      logger,
    });
    const first = await start('127.0.0.1:0');
    const exchange = exchangeTo(first.address);
    own.chatAnswer = (request) => new Promise((resolve) => setTimeout(() => resolve(chatResponse(request, 'never')), 5_000));
    const pending = exchange.chat(chatRequest('req_broken'), {}).catch((caught: unknown) => caught);
    await eventually(() => expect(own.openExchanges.size).toBe(1));
    await first.stop(0);
    expect(await pending).toMatchObject({ status: GrpcStatus.UNAVAILABLE });
    const second = await start(first.address);
    try {
      own.chatAnswer = async (request) => chatResponse(request, 'fresh');
      const next = await eventually(() => exchange.chat(chatRequest('req_next'), {}));
      expect(next.choices[0]!.message!.content).toBe('fresh');
      expect(own.exchangeCalls).toBe(2);
    } finally {
      await second.stop(100);
    }
  });

  it('fails what is in flight when the edge closes it, and refuses new exchanges', async () => {
    const exchange = exchangeTo(server.address);
    router.chatAnswer = (request) => new Promise((resolve) => setTimeout(() => resolve(chatResponse(request, 'late')), 2_000));
    const pending = exchange.chat(chatRequest('req_closing'), {}).catch((caught: unknown) => caught);
    await routerReceived('req_closing');
    exchange.close();
    expect(await pending).toMatchObject({ status: GrpcStatus.UNAVAILABLE });
    expect(() => exchange.chat(chatRequest('req_after_close'), {})).toThrow(/edge stopping/);
  });

  it('moves new exchanges to a fresh call once the call is older than maxCallAgeMs, and ends the old one after its last answer', async () => {
    // The stream sends its first word, then waits for the test: it is provably open across the rotation.
    const rest = deferred();
    const { fake, address, stop } = await ownRouter();
    onTestFinished(async () => { rest.resolve(); await stop(); });
    fake.streamScript = async function* (request) {
      yield startEvent(request);
      yield deltaEvent('slow ');
      await rest.promise;
      for (const word of ['stream', 'across', 'rotation']) yield deltaEvent(`${word} `);
      yield { event: { $case: 'usage', value: usage(3, 4) } };
    };
    const lost: number[] = [];
    const exchange = exchangeTo(address, { maxCallAgeMs: 50, onCallLost: () => lost.push(1) });
    const stream = collect(exchange.chatStream({ chat: chatRequest('stream_rotating', 'x'), combinedStart: false }));
    await routerReceived('stream_rotating', fake);
    // Time is the trigger here, not an order of events: the call only has to be older than 50 ms.
    await sleep(60);
    const answer = await exchange.chat(chatRequest('req_after_rotation'), {});
    expect(answer.id).toBe('chatcmpl-req_after_rotation');
    expect(fake.exchangeCalls).toBe(2);
    // The retired call waits for its stream.
    expect(fake.exchangeCallsEndedByCaller).toBe(0);
    rest.resolve();
    // The stream on the retired call finished whole; then that call was ended by the edge, not broken.
    expect(await stream).toEqual({ text: 'slow stream across rotation ' });
    await eventually(() => expect(fake.exchangeCallsEndedByCaller).toBe(1), 2_000, 20);
    expect(lost).toEqual([]);
  });
});
