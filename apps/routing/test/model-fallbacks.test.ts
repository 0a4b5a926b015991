import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { GatewayError, GrpcStatus } from '@gateway/platform';
import { UsageOutcome, type RoutingChoices } from '@gateway/proto';
import { startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { chatRequest, model, openaiProvider, snapshot, startRoutingRig, type RoutingRig } from './harness.js';

// Model fallbacks and provider preferences in routing's one failover loop (model × provider): the edge
// sends the fallbacks and preferences in ChatRequest.routing_choices; routing walks them in order.

const CHEAP = { perInputToken: '0.000001', perOutputToken: '0.000002' };
const DEAR = { perInputToken: '0.000003', perOutputToken: '0.000004' };

function choices(extra: Partial<RoutingChoices>): RoutingChoices {
  return { fallbackModels: [], order: [], orderOnly: false, only: [], ignore: [], sort: '', ...extra };
}

describe('routing: model fallbacks and provider preferences', () => {
  let one: FakeUpstream;
  let two: FakeUpstream;
  let rig: RoutingRig;

  beforeAll(async () => {
    [one, two] = await Promise.all([startFakeUpstream(), startFakeUpstream()]);
    rig = await startRoutingRig(snapshot('v1', [
      model('acme/first', ['one'], { pricing: DEAR }),
      model('acme/second', ['two'], { pricing: CHEAP, supportedParameters: ['max_completion_tokens'] }),
      model('acme/both', ['one', 'two'], { pricing: CHEAP }),
    ], [openaiProvider('one', one.url), openaiProvider('two', two.url)]), {
      providerSecrets: { ONE_API_KEY: 'sk-one', TWO_API_KEY: 'sk-two' }, attemptTimeoutMs: 2_000, maxAttempts: 3,
    });
  });
  afterAll(async () => {
    await rig.stop();
    await one.close();
    await two.close();
  });
  beforeEach(() => {
    one.reset();
    two.reset();
    one.setFallback({});
    two.setFallback({});
  });

  it('moves to the next model when the first one’s only provider answers 503; the answer, the event and its prices are the second’s', async () => {
    one.setFallback({ status: 503 });
    const request = chatRequest('acme/first', 'hello', {
      temperature: 0.5,
      routingChoices: choices({ fallbackModels: [{ modelId: 'acme/second', unsupportedFields: ['temperature'] }] }),
    });
    const answer = await rig.client.chat(request);
    expect(answer.modelId).toBe('acme/second');
    expect(answer.providerId).toBe('two');
    expect(one.requests).toHaveLength(1);
    expect(one.requests[0]!.body.temperature).toBe(0.5);
    // The fallback model lacks temperature: the field the edge named is cleared for it.
    expect(two.requests).toHaveLength(1);
    expect(two.requests[0]!.body.model).toBe('two-upstream-model');
    expect(two.requests[0]!.body.temperature).toBeUndefined();
    const { event, count } = await rig.usage.collected(request.context!.requestId);
    expect(count).toBe(1);
    expect(event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_SERVED);
    expect(event.modelId).toBe('acme/second');
    expect(event.prices).toMatchObject(CHEAP);
  });

  it('streams: the start names the fallback model that served', async () => {
    one.setFallback({ status: 429 });
    const request = chatRequest('acme/first', 'stream', { routingChoices: choices({ fallbackModels: [{ modelId: 'acme/second', unsupportedFields: [] }] }) });
    let startModel = '';
    let text = '';
    for await (const message of rig.client.chatStream({ chat: request, combinedStart: false })) {
      if (message.event?.$case === 'start') startModel = message.event.value.modelId;
      if (message.event?.$case === 'delta') text += message.event.value.content;
    }
    expect(startModel).toBe('acme/second');
    expect(text.length).toBeGreaterThan(0);
    const { event } = await rig.usage.collected(request.context!.requestId);
    expect(event.modelId).toBe('acme/second');
    expect(event.prices).toMatchObject(CHEAP);
  });

  it('a moderation refusal of the first model moves on to the next model; another verdict does not', async () => {
    one.setFallback({ status: 400, errorBody: { error: { message: 'flagged by moderation', type: 'invalid_request_error', code: 'content_filter' } } });
    const moderated = await rig.client.chat(chatRequest('acme/first', 'x', { routingChoices: choices({ fallbackModels: [{ modelId: 'acme/second', unsupportedFields: [] }] }) }));
    expect(moderated.modelId).toBe('acme/second');
    expect(one.requests).toHaveLength(1);
    expect(two.requests).toHaveLength(1);
    one.reset();
    two.reset();
    one.setFallback({ status: 400, errorBody: { error: { message: "This model's maximum context length is 10 tokens.", type: 'invalid_request_error', code: 'context_length_exceeded' } } });
    const longer = await rig.client.chat(chatRequest('acme/first', 'x', { routingChoices: choices({ fallbackModels: [{ modelId: 'acme/second', unsupportedFields: [] }] }) }));
    expect(longer.modelId).toBe('acme/second');
    one.reset();
    two.reset();
    one.setFallback({ status: 400, errorBody: { error: { message: 'messages: bad role', type: 'invalid_request_error' } } });
    const verdict = await rig.client.chat(chatRequest('acme/first', 'x', { routingChoices: choices({ fallbackModels: [{ modelId: 'acme/second', unsupportedFields: [] }] }) }))
      .then(() => undefined, (error: unknown) => error);
    expect((verdict as GatewayError).status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(two.requests).toHaveLength(0);
  });

  it('provider.order picks the named provider first; allow_fallbacks: false calls no other provider', async () => {
    for (let run = 0; run < 4; run++) {
      const answer = await rig.client.chat(chatRequest('acme/both', 'x', { routingChoices: choices({ order: ['two'] }) }));
      expect(answer.providerId).toBe('two');
    }
    expect(one.requests).toHaveLength(0);
    two.setFallback({ status: 503 });
    const failed = await rig.client.chat(chatRequest('acme/both', 'x', { routingChoices: choices({ order: ['two'], orderOnly: true }) }))
      .then(() => undefined, (error: unknown) => error);
    expect((failed as GatewayError).status).toBe(GrpcStatus.UNAVAILABLE);
    expect(one.requests).toHaveLength(0);
    // With fallbacks allowed the other provider answers.
    const rescued = await rig.client.chat(chatRequest('acme/both', 'x', { routingChoices: choices({ order: ['two'] }) }));
    expect(rescued.providerId).toBe('one');
  });

  it('only / ignore leave out providers', async () => {
    for (let run = 0; run < 3; run++) {
      expect((await rig.client.chat(chatRequest('acme/both', 'x', { routingChoices: choices({ only: ['one'] }) }))).providerId).toBe('one');
      expect((await rig.client.chat(chatRequest('acme/both', 'x', { routingChoices: choices({ ignore: ['one'] }) }))).providerId).toBe('two');
    }
  });
});
