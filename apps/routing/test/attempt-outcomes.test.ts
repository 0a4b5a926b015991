import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayError, GrpcStatus } from '@gateway/platform';
import { ModerationInputForm, type ProviderStat, type RequestContext } from '@gateway/proto';
import { createTestBus, startFakeUpstream, uniqueName, type FakeUpstream, type TestBus } from '@gateway/testing';
import { chatRequest, model, openaiProvider, snapshot, startFakeCatalog, startRouterUnderTest } from './harness.js';

/**
 * Provider health counts every attempt's outcome, whatever the endpoint family: a provider that failed
 * five times in a row has its circuit open, and once it answers again the circuit closes and its error
 * rate falls. (Issue 38: only chat, chat streams and speech recorded successes, so an embeddings provider
 * that had ever failed five times stayed open, its error rate only rising.)
 */
describe('provider health: every endpoint family records its attempts', () => {
  let testBus: TestBus;
  let upstream: FakeUpstream;
  let catalog: Awaited<ReturnType<typeof startFakeCatalog>>;
  let router: Awaited<ReturnType<typeof startRouterUnderTest>>;

  /**
   * One model per family, each served by its own provider (health is kept per provider × model). The
   * streams (chat streams, speech) are ended by their own `finish`, the others by the failover loop.
   */
  const families = ['embeddings', 'moderations', 'images.generations', 'audio.transcriptions', 'chat.completions', 'chat stream', 'audio.speech'] as const;
  type Family = (typeof families)[number];
  const endpointOf = (family: Family) => (family === 'chat stream' ? 'chat.completions' : family);
  const providerOf = (family: Family) => `up-${family.replace(/[. ]/, '-')}`;
  const modelOf = (family: Family) => `acme/${family.replace(/[. ]/, '-')}`;

  beforeAll(async () => {
    testBus = await createTestBus('nats');
    upstream = await startFakeUpstream();
    catalog = await startFakeCatalog(snapshot(
      'v1',
      families.map((family) => model(modelOf(family), [providerOf(family)], {
        offers: [{ providerId: providerOf(family), upstreamModel: 'upstream-model', endpoints: [endpointOf(family)] }],
      })),
      families.map((family) => openaiProvider(providerOf(family), upstream.url)),
    ));
    const secrets = Object.fromEntries(families.map((family) => [`${providerOf(family).toUpperCase().replaceAll('-', '_')}_API_KEY`, 'sk-test']));
    router = await startRouterUnderTest(testBus.bus, catalog.address, { providerSecrets: secrets, attemptTimeoutMs: 5_000, maxAttempts: 2 });
  });
  afterAll(async () => {
    await router.stop();
    await catalog.stop();
    await upstream.close();
    await testBus.destroy();
  });

  const context = (): RequestContext => ({ requestId: `req_${uniqueName('health')}`, accountId: 'acc_health', keyId: 'key_health' });

  /** One request of the family's kind, to its model. */
  function call(family: Family): Promise<unknown> {
    const { client } = router;
    const modelId = modelOf(family);
    switch (family) {
      case 'embeddings':
        return client.embed({ context: context(), modelId, routingStrategy: '', texts: ['hello'], tokenInputs: [] });
      case 'moderations':
        return client.moderate({
          context: context(), modelId, routingStrategy: '', inputs: [{ input: { $case: 'text', value: 'tea' } }],
          inputForm: ModerationInputForm.MODERATION_INPUT_FORM_STRING,
        });
      case 'images.generations':
        return client.generateImages({ context: context(), modelId, routingStrategy: '', prompt: 'a red square', n: 1, responseFormat: 'b64_json' });
      case 'audio.transcriptions':
        return client.transcribe({
          context: context(), modelId, routingStrategy: '', audio: Buffer.from('RIFF....WAVEfmt '), filename: 'a.wav', mediaType: 'audio/wav',
          prompt: '', language: '', translate: false, responseFormat: '', audioDurationMs: 1_000,
        });
      case 'chat.completions':
        return client.chat(chatRequest(modelId, 'hello'));
      case 'chat stream':
        return drain(client.chatStream({ chat: chatRequest(modelId, 'hello'), combinedStart: false }));
      case 'audio.speech':
        return drain(client.speak({ context: context(), modelId, routingStrategy: '', input: 'hello', voice: 'alloy', responseFormat: 'mp3' }));
    }
  }

  async function drain(stream: AsyncIterable<unknown>): Promise<number> {
    let messages = 0;
    for await (const _ of stream) messages++;
    return messages;
  }

  async function statOf(family: Family): Promise<ProviderStat> {
    const stats = (await router.client.getProviderHealth({})).stats;
    const stat = stats.find((entry) => entry.providerId === providerOf(family) && entry.modelId === modelOf(family));
    expect(stat, `no health figures for ${family}`).toBeDefined();
    return stat!;
  }

  it.each(families)('%s: six failures open the circuit; answers again close it and lower the error rate', async (family) => {
    upstream.setFallback({ status: 503 });
    for (let failure = 0; failure < 6; failure++) {
      const error = await call(family).then(() => undefined, (caught: unknown) => caught);
      expect(error).toBeInstanceOf(GatewayError);
      expect((error as GatewayError).status).toBe(GrpcStatus.UNAVAILABLE);
    }
    const failing = await statOf(family);
    expect(failing).toMatchObject({ samples: 6, circuitOpen: true });
    // 1 − 0.8⁶: every failure weighs 0.2 in the moving average.
    expect(failing.errorRate).toBeCloseTo(1 - 0.8 ** 6, 9);

    upstream.setFallback({});
    await call(family);
    await call(family);
    const recovered = await statOf(family);
    expect(recovered.circuitOpen).toBe(false);
    expect(recovered.samples).toBe(8);
    // Each success keeps 0.8 of the error rate.
    expect(recovered.errorRate).toBeCloseTo((1 - 0.8 ** 6) * 0.8 ** 2, 9);
    expect(recovered.errorRate).toBeLessThan(failing.errorRate);
  });

  it.each(['chat stream', 'audio.speech'] as const)('%s: a stream cut after content counts once against its provider', async (family) => {
    const before = await statOf(family);
    upstream.setFallback({ cutAfterChunks: 2, chunkCount: 4, chunkDelayMs: 100 });
    try {
      const error = await call(family).then(() => undefined, (caught: unknown) => caught);
      expect(error).toBeInstanceOf(GatewayError);
      expect((error as GatewayError).status).toBe(GrpcStatus.UNAVAILABLE);
    } finally {
      upstream.setFallback({});
    }
    const after = await statOf(family);
    expect(after.samples).toBe(before.samples + 1);
    // A failure weighs 0.2 in the moving average.
    expect(after.errorRate).toBeCloseTo(0.2 + 0.8 * before.errorRate, 9);
  });
});

/**
 * A moderation answer whose result count does not match the inputs is the provider's failure: it counts
 * against that provider's health (not as a success followed by a 503) and the loop moves on to the next
 * provider. (Before: the check ran after the failover loop had recorded the attempt as a success.)
 */
describe('provider health: a moderation answer with the wrong number of results', () => {
  let testBus: TestBus;
  let broken: FakeUpstream;
  let healthy: FakeUpstream;
  let catalog: Awaited<ReturnType<typeof startFakeCatalog>>;
  let router: Awaited<ReturnType<typeof startRouterUnderTest>>;
  const wrongCount = { replay: { contentType: 'application/json', body: JSON.stringify({ id: 'modr-x', model: 'm', results: [] }) } };

  beforeAll(async () => {
    testBus = await createTestBus('nats');
    broken = await startFakeUpstream();
    healthy = await startFakeUpstream();
    broken.setFallback(wrongCount);
    catalog = await startFakeCatalog(snapshot(
      'v1',
      [
        model('acme/moderate-alone', ['up-broken'], { offers: [{ providerId: 'up-broken', upstreamModel: 'm', endpoints: ['moderations'] }] }),
        model('acme/moderate-pair', ['up-broken', 'up-healthy'], {
          offers: [
            { providerId: 'up-broken', upstreamModel: 'm', endpoints: ['moderations'] },
            { providerId: 'up-healthy', upstreamModel: 'm', endpoints: ['moderations'] },
          ],
        }),
      ],
      [openaiProvider('up-broken', broken.url), openaiProvider('up-healthy', healthy.url)],
    ));
    router = await startRouterUnderTest(testBus.bus, catalog.address, {
      providerSecrets: { UP_BROKEN_API_KEY: 'sk-test', UP_HEALTHY_API_KEY: 'sk-test' }, attemptTimeoutMs: 5_000, maxAttempts: 2,
    });
  });
  afterAll(async () => {
    await router.stop();
    await catalog.stop();
    await broken.close();
    await healthy.close();
    await testBus.destroy();
  });

  // `reliability` keeps the catalog's order while both are unmeasured: the broken provider is tried first.
  const moderate = (modelId: string) => router.client.moderate({
    context: { requestId: `req_${uniqueName('modcount')}`, accountId: 'acc_health', keyId: 'key_health' }, modelId, routingStrategy: 'reliability',
    inputs: [{ input: { $case: 'text', value: 'tea' } }, { input: { $case: 'text', value: 'coffee' } }],
    inputForm: ModerationInputForm.MODERATION_INPUT_FORM_STRINGS,
  });
  const statOf = async (providerId: string, modelId: string) =>
    (await router.client.getProviderHealth({})).stats.find((entry) => entry.providerId === providerId && entry.modelId === modelId);

  it('counts as a failure of the provider that sent it', async () => {
    for (let attempt = 0; attempt < 3; attempt++) {
      const error = await moderate('acme/moderate-alone').then(() => undefined, (caught: unknown) => caught);
      expect(error).toBeInstanceOf(GatewayError);
      expect((error as GatewayError).status).toBe(GrpcStatus.UNAVAILABLE);
    }
    const stat = await statOf('up-broken', 'acme/moderate-alone');
    expect(stat).toMatchObject({ samples: 3 });
    // Three failures: 1 − 0.8³ (a success would have kept the rate at 0).
    expect(stat!.errorRate).toBeCloseTo(1 - 0.8 ** 3, 9);
  });

  it('moves on to the next provider, which answers', async () => {
    const brokenBefore = broken.requests.length;
    for (let request = 0; request < 4; request++) {
      const answer = await moderate('acme/moderate-pair');
      expect(answer.providerId).toBe('up-healthy');
      expect(answer.results).toHaveLength(2);
    }
    const brokenStat = await statOf('up-broken', 'acme/moderate-pair');
    // Each time the broken provider was tried it was counted as failing, never as serving.
    if (brokenStat) expect(brokenStat.errorRate).toBeCloseTo(1 - 0.8 ** brokenStat.samples, 9);
    expect(healthy.requests.filter((request) => request.path === '/v1/moderations')).toHaveLength(4);
    // The broken provider was tried first at least once (else nothing here tested the failover).
    expect(broken.requests.length).toBeGreaterThan(brokenBefore);
  });
});
