import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayError, GrpcStatus } from '@gateway/platform';
import { ModerationInputForm, Provider, UsageOutcome, type Model, type RequestContext } from '@gateway/proto';
import { createTestBus, eventually, startFakeUpstream, uniqueName, type FakeUpstream, type TestBus } from '@gateway/testing';
import { chatRequest, collectUsageEvents, model, openaiProvider, routerClient, snapshot, startFakeCatalog, startRouterUnderTest } from './harness.js';

/**
 * Every request that reaches the Router was admitted by the edge with a hold (a ledger reservation or a
 * lease's share). Whatever way the Router refuses or fails it, the request's one usage event must go out:
 * FAILED releases the hold. A refusal path that throws without it leaves the hold to the ledger's sweeper.
 */
describe('reservation lifecycle: every refusal and failure releases the hold', () => {
  let testBus: TestBus;
  let upstream: FakeUpstream;
  let catalog: Awaited<ReturnType<typeof startFakeCatalog>>;
  let usage: Awaited<ReturnType<typeof collectUsageEvents>>;
  let service: { address: string; stop(): Promise<void> };
  let client: ReturnType<typeof routerClient>;
  let router: Awaited<ReturnType<typeof startRouterUnderTest>>;

  const simOffer = (endpoints: string[]) => [{ providerId: 'sim', upstreamModel: 'sim-model', endpoints }];
  const simModel = (id: string, endpoints: string[], extra: Partial<Model> = {}) => model(id, ['sim'], { offers: simOffer(endpoints), ...extra });

  beforeAll(async () => {
    testBus = await createTestBus('nats');
    upstream = await startFakeUpstream();
    upstream.setFallback({ status: 503 });
    catalog = await startFakeCatalog({ ...snapshot('v1', [
      simModel('sim/embed', ['embeddings']),
      simModel('sim/moderate', ['moderations']),
      simModel('sim/image', ['images.generations', 'images.edits'], { maxImages: 2 }),
      simModel('sim/speech', ['audio.speech']),
      simModel('sim/whisper', ['audio.transcriptions', 'audio.translations']),
      model('down/chat', ['down']),
      model('down/embed', ['down'], { offers: [{ providerId: 'down', upstreamModel: 'e', endpoints: ['embeddings'] }] }),
    ], [
      Provider.fromPartial({ id: 'sim', kind: 'simulated' }),
      openaiProvider('down', upstream.url),
    ]), moderationModel: 'sim/moderate' });
    router = await startRouterUnderTest(testBus.bus, catalog.address, {
      providerSecrets: { DOWN_API_KEY: 'sk-down' }, attemptTimeoutMs: 2_000, maxAttempts: 2,
    });
    ({ usage, service, client } = router);
  });
  afterAll(async () => {
    await router.stop();
    await catalog.stop();
    await upstream.close();
    await testBus.destroy();
  });

  const context = (): RequestContext => ({ requestId: `req_${uniqueName('hold')}`, accountId: 'acc_hold', keyId: 'key_hold' });

  /** The call is refused with `status`, and the request's one usage event is FAILED (the hold released). */
  async function expectReleased(requestContext: RequestContext, call: () => Promise<unknown>, status: GrpcStatus) {
    const error = await call().then(() => undefined, (caught: unknown) => caught);
    expect(error).toBeInstanceOf(GatewayError);
    expect((error as GatewayError).status).toBe(status);
    const found = await eventually(() => {
      const seen = usage.events.get(requestContext.requestId);
      if (!seen) throw new Error(`no usage event for ${requestContext.requestId}: its hold is left open`);
      return seen;
    });
    expect(found.event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_FAILED);
    expect(found.event.accountId).toBe('acc_hold');
    expect(found.count).toBe(1);
  }

  async function drain(stream: AsyncIterable<unknown>) {
    for await (const _ of stream) { /* read to the end */ }
  }

  const embed = (requestContext: RequestContext, modelId: string, texts: string[]) =>
    client.embed({ context: requestContext, modelId, routingStrategy: '', texts, tokenInputs: [] });
  const image = (requestContext: RequestContext, extra: { n?: number; size?: string; prompt?: string } = {}) => ({
    context: requestContext, modelId: 'sim/image', routingStrategy: '', prompt: 'a red square', n: 1, responseFormat: 'b64_json', ...extra,
  });

  it('embeddings: empty input', async () => {
    const c = context();
    await expectReleased(c, () => embed(c, 'sim/embed', []), GrpcStatus.INVALID_ARGUMENT);
  });

  it('embeddings: too many inputs', async () => {
    const c = context();
    await expectReleased(c, () => embed(c, 'sim/embed', Array.from({ length: 2_049 }, () => 'x')), GrpcStatus.INVALID_ARGUMENT);
  });

  it('embeddings: every provider down', async () => {
    const c = context();
    await expectReleased(c, () => embed(c, 'down/embed', ['hello']), GrpcStatus.UNAVAILABLE);
  });

  it('embeddings: unknown model', async () => {
    const c = context();
    await expectReleased(c, () => embed(c, 'sim/nope', ['hello']), GrpcStatus.INVALID_ARGUMENT);
  });

  it('moderations: empty input', async () => {
    const c = context();
    await expectReleased(c, () => client.moderate({ context: c, modelId: 'sim/moderate', routingStrategy: '', inputs: [], inputForm: ModerationInputForm.MODERATION_INPUT_FORM_UNSPECIFIED }), GrpcStatus.INVALID_ARGUMENT);
  });

  it('images: n over the model bound, a malformed size, an empty prompt', async () => {
    for (const extra of [{ n: 3 }, { size: 'big' }, { prompt: '' }]) {
      const c = context();
      await expectReleased(c, () => client.generateImages(image(c, extra)), GrpcStatus.INVALID_ARGUMENT);
    }
  });

  it('images: a prompt the moderation screen flags', async () => {
    const c = context();
    await expectReleased(c, () => client.generateImages(image(c, { prompt: 'a weapon on a table' })), GrpcStatus.PERMISSION_DENIED);
  });

  it('image edits: no image', async () => {
    const c = context();
    await expectReleased(c, () => client.editImages({ generation: image(c), images: [] }), GrpcStatus.INVALID_ARGUMENT);
  });

  it('speech: empty input', async () => {
    const c = context();
    await expectReleased(c, () => drain(client.speak({ context: c, modelId: 'sim/speech', routingStrategy: '', input: '', voice: 'alloy', responseFormat: '' })), GrpcStatus.INVALID_ARGUMENT);
  });

  it('transcriptions: empty audio', async () => {
    const c = context();
    await expectReleased(c, () => client.transcribe({
      context: c, modelId: 'sim/whisper', routingStrategy: '', audio: Buffer.alloc(0), filename: 'a.wav', mediaType: 'audio/wav',
      prompt: '', language: '', translate: false, responseFormat: '', audioDurationMs: 0,
    }), GrpcStatus.INVALID_ARGUMENT);
  });

  it('chat streams: an unknown model is released unstreamed (it was routed nowhere)', async () => {
    const streamed = chatRequest('sim/nope', 'hello', { context: { ...context() } });
    await expectReleased(streamed.context!, () => drain(client.chatStream({ chat: streamed, combinedStart: false })), GrpcStatus.INVALID_ARGUMENT);
    expect(usage.events.get(streamed.context!.requestId)?.event.streamed).toBe(false);
  });

  it('chat and chat streams: every provider down', async () => {
    const unary = chatRequest('down/chat', 'hello', { context: { ...context() } });
    await expectReleased(unary.context!, () => client.chat(unary), GrpcStatus.UNAVAILABLE);
    const streamed = chatRequest('down/chat', 'hello', { context: { ...context() } });
    await expectReleased(streamed.context!, () => drain(client.chatStream({ chat: streamed, combinedStart: false })), GrpcStatus.UNAVAILABLE);
  });
});
