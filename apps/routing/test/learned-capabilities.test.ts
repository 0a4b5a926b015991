import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { GatewayError, GrpcStatus } from '@gateway/platform';
import { UsageOutcome, type ChatStreamResponse } from '@gateway/proto';
import { createTestBus, eventually, startFakeUpstream, testLogger, type FakeUpstream, type RecordedRequest, type TestBus } from '@gateway/testing';
import { LearnedCapabilities, startRoutingService } from '../src/index.js';
import { chatRequest, collectUsageEvents, model, openaiProvider, routerClient, snapshot, startFakeCatalog } from './harness.js';

// Issue 27, item 8: the learned capability map in routing's one failover loop, on two routing replicas
// that share one NATS namespace. A provider's 400 that names a parameter the request set: learned for the
// provider × upstream model, the same provider tried once more without it, the answer's dropped_params
// naming it; later requests (on either replica) go without it at once.

/** OpenAI's answer for a reasoning model sent a temperature (its real body). */
const TEMPERATURE_REFUSAL = {
  status: 400,
  errorBody: {
    error: { message: "Unsupported parameter: 'temperature' is not supported with this model.", type: 'invalid_request_error', param: 'temperature', code: 'unsupported_parameter' },
  },
};
const TOP_P_REFUSAL = {
  status: 400,
  errorBody: {
    error: { message: "Unsupported parameter: 'top_p' is not supported with this model.", type: 'invalid_request_error', param: 'top_p', code: 'unsupported_parameter' },
  },
};

/** A fake that refuses temperature (and top_p when `refuseTopP`) the way OpenAI does, and answers anything else. */
function refusing(upstream: FakeUpstream, options: { refuseTopP?: boolean } = {}): void {
  upstream.setFallback((request: RecordedRequest) => {
    if (request.body?.temperature !== undefined) return TEMPERATURE_REFUSAL;
    if (options.refuseTopP && request.body?.top_p !== undefined) return TOP_P_REFUSAL;
    return { usage: { prompt_tokens: 5, completion_tokens: 3 } };
  });
}

describe('routing: learned capability map', () => {
  let testBus: TestBus;
  let one: FakeUpstream;
  let two: FakeUpstream;
  let three: FakeUpstream;
  let catalog: Awaited<ReturnType<typeof startFakeCatalog>>;
  let usage: Awaited<ReturnType<typeof collectUsageEvents>>;
  let first: { address: string; stop(): Promise<void> };
  let second: { address: string; stop(): Promise<void> };
  let clientA: ReturnType<typeof routerClient>;
  let clientB: ReturnType<typeof routerClient>;

  beforeAll(async () => {
    testBus = await createTestBus('nats');
    [one, two, three] = await Promise.all([startFakeUpstream(), startFakeUpstream(), startFakeUpstream()]);
    catalog = await startFakeCatalog(snapshot('v1', [
      model('acme/reasoner', ['one']),
      model('acme/streamer', ['two']),
      model('acme/plain', ['three']),
    ], [openaiProvider('one', one.url), openaiProvider('two', two.url), openaiProvider('three', three.url)]));
    usage = await collectUsageEvents(testBus.bus);
    const start = async (name: string) => startRoutingService({
      listenAddress: '127.0.0.1:0', catalogAddress: catalog.address, bus: name === 'a' ? testBus.bus : await testBus.connectAnother(), logger: testLogger(`routing-${name}`),
      providerSecrets: { ONE_API_KEY: 'sk-one', TWO_API_KEY: 'sk-two', THREE_API_KEY: 'sk-three' }, attemptTimeoutMs: 2_000, maxAttempts: 3,
    });
    [first, second] = [await start('a'), await start('b')];
    clientA = routerClient(first.address);
    clientB = routerClient(second.address);
  }, 60_000);
  afterAll(async () => {
    clientA?.close();
    clientB?.close();
    await first?.stop();
    await second?.stop();
    await usage?.stop();
    await catalog?.stop();
    for (const upstream of [one, two, three]) await upstream?.close();
    await testBus?.destroy();
  });
  beforeEach(() => {
    for (const upstream of [one, two, three]) upstream.reset();
  });

  const served = (requestId: string) => usage.collected(requestId);

  it('a refused temperature: one retry without it on the same provider, named in dropped_params, one SERVED event; then never sent again, on either replica', async () => {
    refusing(one);
    const request = chatRequest('acme/reasoner', 'hello', { temperature: 0.3, topP: 0.9 });
    const answer = await clientA.chat(request);
    expect(answer.providerId).toBe('one');
    expect(answer.droppedParams).toEqual(['temperature']);
    expect(one.requests).toHaveLength(2);
    expect(one.requests[0]!.body.temperature).toBe(0.3);
    expect(one.requests[1]!.body.temperature).toBeUndefined();
    // Only the refused parameter goes: the rest of the request is as it was.
    expect(one.requests[1]!.body.top_p).toBe(0.9);
    const { event, count } = await served(request.context!.requestId);
    expect(count).toBe(1);
    expect(event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_SERVED);
    expect(event.usage?.outputTokens).toBe(3);

    // The same replica: one call, without temperature, no failure first.
    one.reset();
    refusing(one);
    const again = await clientA.chat(chatRequest('acme/reasoner', 'again', { temperature: 0.7 }));
    expect(again.droppedParams).toEqual(['temperature']);
    expect(one.requests).toHaveLength(1);
    expect(one.requests[0]!.body.temperature).toBeUndefined();

    // The bucket has it (a third reader on its own connection sees it), so the other replica has it too:
    // its very first request goes without temperature, in one call.
    const probe = new LearnedCapabilities({ bus: await testBus.connectAnother(), logger: testLogger('probe') });
    await probe.start();
    await eventually(() => expect(probe.droppedFor('one', 'one-upstream-model', 'acc_test')).toEqual(['temperature']), 5_000);
    // One account's refusal is that account's evidence only (issue 35 item 2): nobody else's yet.
    expect(probe.droppedFor('one', 'one-upstream-model', 'acc_other')).toEqual([]);
    await probe.stop();
    await new Promise((resolve) => setTimeout(resolve, 200));
    one.reset();
    refusing(one);
    const elsewhere = await clientB.chat(chatRequest('acme/reasoner', 'elsewhere', { temperature: 0.7 }));
    expect(elsewhere.droppedParams).toEqual(['temperature']);
    expect(one.requests).toHaveLength(1);
    expect(one.requests[0]!.body.temperature).toBeUndefined();

    // Another account on the other replica still sends its temperature: the first call carries it.
    one.reset();
    refusing(one);
    const other = chatRequest('acme/reasoner', 'another account', { temperature: 0.3 });
    other.context!.accountId = 'acc_other';
    const otherAnswer = await clientB.chat(other);
    expect(one.requests[0]!.body.temperature).toBe(0.3);
    expect(one.requests).toHaveLength(2);
    expect(otherAnswer.droppedParams).toEqual(['temperature']);

    // A request without temperature names nothing: dropped_params says what this request went without.
    one.reset();
    refusing(one);
    const plain = await clientB.chat(chatRequest('acme/reasoner', 'plain'));
    expect(plain.droppedParams).toEqual([]);
    expect(one.requests).toHaveLength(1);
  });

  it('streams: the retry happens before the first content; the start names the dropped parameter', async () => {
    refusing(two);
    const request = chatRequest('acme/streamer', 'stream me', { temperature: 1.2 });
    const parts: ChatStreamResponse[] = [];
    for await (const part of clientA.chatStream({ chat: request, combinedStart: false })) parts.push(part);
    const start = parts.find((part) => part.event?.$case === 'start');
    expect(start?.event?.$case === 'start' && start.event.value.droppedParams).toEqual(['temperature']);
    expect(parts.filter((part) => part.event?.$case === 'delta').length).toBeGreaterThan(0);
    expect(two.requests).toHaveLength(2);
    expect(two.requests[1]!.body.temperature).toBeUndefined();
    const { event, count } = await served(request.context!.requestId);
    expect(count).toBe(1);
    expect(event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_SERVED);
  });

  it('at most one retry per request: a second refused parameter is learned but ends the request as the provider’s verdict', async () => {
    refusing(three, { refuseTopP: true });
    const request = chatRequest('acme/plain', 'both', { temperature: 0.2, topP: 0.5 });
    const refused = await clientA.chat(request).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(GatewayError);
    expect((refused as GatewayError).status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect((refused as GatewayError).message).toContain('top_p');
    expect(three.requests).toHaveLength(2);
    const { event, count } = await served(request.context!.requestId);
    expect(count).toBe(1);
    expect(event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_FAILED);
    // Both were learned: the next request goes without either, in one call.
    three.reset();
    refusing(three, { refuseTopP: true });
    const answer = await clientA.chat(chatRequest('acme/plain', 'both again', { temperature: 0.2, topP: 0.5 }));
    expect(answer.droppedParams).toEqual(['temperature', 'top_p']);
    expect(three.requests).toHaveLength(1);
  });

  it('a refusal naming a parameter the request did not send is the provider’s verdict (no retry, nothing learned)', async () => {
    const request = chatRequest('acme/reasoner', 'no top_p here');
    one.setFallback(TOP_P_REFUSAL);
    const refused = await clientA.chat(request).catch((error: unknown) => error);
    expect((refused as GatewayError).status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(one.requests).toHaveLength(1);
  });
});
