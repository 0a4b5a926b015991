import { expect } from 'vitest';
import { createClient, createMetricsRegistry, GatewayError, startGrpcServer, subjects, unary, type EventBus, type Subscription } from '@gateway/platform';
import {
  CatalogServiceService,
  RouterServiceClient,
  RouterServiceService,
  UsageEvent,
  UsageEventBatch,
  type ChatRequest,
  type ChatStreamResponse,
  type GetSnapshotResponse,
  type Model,
  Provider,
} from '@gateway/proto';
import { createTestBus, eventually, parsePrometheusText, startFakeUpstream, testLogger, uniqueName, type FakeUpstream } from '@gateway/testing';
import type { UntypedServiceImplementation } from '@grpc/grpc-js';
import { startRoutingService, type RoutingServiceOptions } from '../src/index.js';

/** A stand-in CatalogService that answers GetSnapshot from a snapshot the test can swap. */
export async function startFakeCatalog(initial: GetSnapshotResponse) {
  let snapshot = initial;
  let calls = 0;
  const logger = testLogger('fake-catalog');
  const implementation = {
    getSnapshot: unary(logger, 'GetSnapshot', async (request: { ifVersionNot: string }) => {
      calls++;
      return request.ifVersionNot === snapshot.version
        ? { version: snapshot.version, unchanged: true, models: [], providers: [], startups: [], limitGroups: [] }
        : snapshot;
    }),
  } as unknown as UntypedServiceImplementation;
  const server = await startGrpcServer({
    address: '127.0.0.1:0',
    services: [{ definition: CatalogServiceService, implementation, name: 'gateway.v1.CatalogService' }],
    logger,
  });
  return {
    address: server.address,
    get calls() { return calls; },
    replace(next: GetSnapshotResponse) { snapshot = next; },
    stop: () => server.stop(100),
  };
}

export function model(id: string, providerIds: string[], extra: Partial<Model> = {}): Model {
  return {
    id, displayName: id, description: '', created: 1767225600n, contextWindow: 128000, aliases: [], inputModalities: ['text'],
    outputModalities: ['text'], supportedParameters: ['temperature', 'max_completion_tokens', 'stop', 'tools', 'tool_choice', 'stream_options'],
    pricing: { perInputToken: '0.0000005', perOutputToken: '0.0000015' }, limitGroup: 'default',
    offers: providerIds.map((providerId) => ({ providerId, upstreamModel: `${providerId}-upstream-model`, endpoints: ['chat.completions', 'messages', 'responses'] })),
    voices: [], extraParameters: [], reasoningEfforts: [], audioFormats: [], ...extra,
  };
}

export function openaiProvider(id: string, baseUrl: string): Provider {
  return Provider.fromPartial({ id, kind: 'openai', baseUrl, apiKeyEnv: `${id.toUpperCase().replaceAll('-', '_')}_API_KEY` });
}

export function snapshot(version: string, models: Model[], providers: Provider[]): GetSnapshotResponse {
  return { version, unchanged: false, models, providers, startups: [], limitGroups: [], moderationModel: '', defaultModels: {} };
}

let counter = 0;
export function chatRequest(modelId: string, text: string, extra: Partial<ChatRequest> = {}): ChatRequest {
  return {
    context: { requestId: `req_${uniqueName('t')}_${++counter}`, accountId: 'acc_test', keyId: 'key_test' },
    modelId, routingStrategy: 'reliability', endpoint: 'chat.completions',
    messages: [{ role: 'user', content: [{ part: { $case: 'text', value: text } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false }],
    tools: [], stop: [], includeUsage: true, timeoutMs: 0, ...extra,
  };
}

export function routerClient(address: string) {
  return createClient(RouterServiceClient, RouterServiceService, address, { maxAttempts: 1 });
}

/**
 * Collects every usage event on the test's namespace, by request id, from single messages and
 * group-commit batches alike. `msgId` is the message's Nats-Msg-Id; `batchId` the id inside a batch
 * (for a batch the two must agree, so a retried batch is deduplicated).
 */
export async function collectUsageEvents(bus: EventBus) {
  const events = new Map<string, { event: UsageEvent; msgId: string; batchId?: string; count: number }>();
  const record = (event: UsageEvent, msgId: string, batchId?: string) => {
    const seen = events.get(event.requestId);
    events.set(event.requestId, { event, msgId, batchId, count: (seen?.count ?? 0) + 1 });
  };
  const single: Subscription = await bus.consumeDurable(
    { subject: subjects.usageEvents, durable: uniqueName('usage_probe'), maxBatch: 100, lingerMs: 5 },
    async (batch) => {
      for (const message of batch) record(UsageEvent.decode(message.data), message.msgId);
    },
  );
  const grouped: Subscription = await bus.consumeDurable(
    { subject: subjects.usageBatches, durable: uniqueName('usage_batch_probe'), maxBatch: 100, lingerMs: 5 },
    async (batch) => {
      for (const message of batch) {
        const decoded = UsageEventBatch.decode(message.data);
        for (const event of decoded.events) record(event, message.msgId, decoded.batchId);
      }
    },
  );
  /** The event of `requestId` once it has come (the test fails if it never does). */
  const collected = (requestId: string) => eventually(() => {
    const found = events.get(requestId);
    if (!found) throw new Error(`no usage event for ${requestId}`);
    return found;
  });
  return { events, collected, stop: async () => { await Promise.all([single.stop(), grouped.stop()]); } };
}

export type FakeCatalog = Awaited<ReturnType<typeof startFakeCatalog>>;
export type UsageCollector = Awaited<ReturnType<typeof collectUsageEvents>>;

/**
 * A routing service on the test's bus and fake catalog, with its usage-event collector (started first, so
 * no event is missed) and a client; `stop` closes the three in reverse order.
 */
export async function startRouterUnderTest(
  bus: EventBus,
  catalogAddress: string,
  options: Pick<RoutingServiceOptions, 'providerSecrets' | 'attemptTimeoutMs' | 'maxAttempts'>,
) {
  const usage = await collectUsageEvents(bus);
  const service = await startRoutingService({
    listenAddress: '127.0.0.1:0', catalogAddress, bus, logger: testLogger('routing'), ...options,
  });
  const client = routerClient(service.address);
  const stop = async () => {
    client.close();
    await service.stop();
    await usage.stop();
  };
  return { usage, service, client, stop };
}

export type RouterUnderTest = Awaited<ReturnType<typeof startRouterUnderTest>>;

/**
 * A test bus of its own, a fake catalog serving `catalogSnapshot` and a routing service in front of it
 * (startRouterUnderTest); `stop` ends the three, newest first. The upstreams are the test's.
 */
export async function startRoutingRig(
  catalogSnapshot: GetSnapshotResponse,
  options: Pick<RoutingServiceOptions, 'providerSecrets' | 'attemptTimeoutMs' | 'maxAttempts'>,
) {
  const testBus = await createTestBus('nats');
  const catalog = await startFakeCatalog(catalogSnapshot);
  const router = await startRouterUnderTest(testBus.bus, catalog.address, options);
  const stop = async () => {
    await router.stop();
    await catalog.stop();
    await testBus.destroy();
  };
  return { testBus, catalog, usage: router.usage, service: router.service, client: router.client, stop };
}

export type RoutingRig = Awaited<ReturnType<typeof startRoutingRig>>;

/**
 * For a describe block that starts a fresh routing service per test (so provider health starts clean): a
 * test bus of its own, a fake catalog serving `catalogSnapshot` and the usage collector, for the block;
 * `startService` (beforeEach) starts the test's service on them and its client, `stopService` (afterEach)
 * ends both, `stop` (afterAll) ends the rest.
 */
export async function startRoutingBench(catalogSnapshot: GetSnapshotResponse) {
  const testBus = await createTestBus('nats');
  const catalog = await startFakeCatalog(catalogSnapshot);
  const usage = await collectUsageEvents(testBus.bus);
  let service: { address: string; stop(): Promise<void> } | undefined;
  let client: ReturnType<typeof routerClient> | undefined;
  const stopService = async () => {
    client?.close();
    client = undefined;
    await service?.stop();
    service = undefined;
  };
  return {
    testBus,
    catalog,
    usage,
    /** The running test's client (startService first). */
    get client() {
      if (!client) throw new Error('no routing service is running: call startService first');
      return client;
    },
    async startService(options: Pick<RoutingServiceOptions, 'providerSecrets' | 'attemptTimeoutMs' | 'maxAttempts'>) {
      service = await startRoutingService({
        listenAddress: '127.0.0.1:0', catalogAddress: catalog.address, bus: testBus.bus, logger: testLogger('routing'), ...options,
      });
      client = routerClient(service.address);
    },
    stopService,
    async stop() {
      await stopService();
      await usage.stop();
      await catalog.stop();
      await testBus.destroy();
    },
  };
}

export type RoutingBench = Awaited<ReturnType<typeof startRoutingBench>>;

/**
 * A routing service with its own metrics registry, on a fresh test bus, in front of one fake OpenAI
 * upstream per provider id (in that order; each provider's key is `sk-<id>`) and a fake catalog serving
 * `models`; `scrape` reads the registry, `stop` ends all of it.
 */
export async function startMeteredRouting<const Ids extends readonly string[]>(
  models: Model[],
  providerIds: Ids,
  options: Pick<RoutingServiceOptions, 'attemptTimeoutMs' | 'maxAttempts'>,
) {
  const testBus = await createTestBus('nats');
  const upstreams: FakeUpstream[] = [];
  for (const _ of providerIds) upstreams.push(await startFakeUpstream());
  const providers = providerIds.map((id, index) => openaiProvider(id, upstreams[index]!.url));
  const catalog = await startFakeCatalog(snapshot('v1', models, providers));
  const registry = createMetricsRegistry();
  const service = await startRoutingService({
    listenAddress: '127.0.0.1:0', catalogAddress: catalog.address, bus: testBus.bus, logger: testLogger('routing'),
    providerSecrets: Object.fromEntries(providers.map((provider) => [provider.apiKeyEnv, `sk-${provider.id}`])), ...options, metrics: registry,
  });
  const client = routerClient(service.address);
  const stop = async () => {
    client.close();
    await service.stop();
    await catalog.stop();
    for (const upstream of upstreams) await upstream.close();
    await testBus.destroy();
  };
  const scrape = async () => parsePrometheusText(await registry.metrics());
  return { upstreams: upstreams as { [Index in keyof Ids]: FakeUpstream }, client, registry, scrape, stop };
}

export type MeteredRouting<Ids extends readonly string[]> = Awaited<ReturnType<typeof startMeteredRouting<Ids>>>;

/** The GatewayError `promise` rejects with (the test fails when it resolves or rejects with anything else). */
export async function rejection(promise: Promise<unknown>): Promise<GatewayError> {
  const error = await promise.then(() => undefined, (caught: unknown) => caught);
  expect(error).toBeInstanceOf(GatewayError);
  return error as GatewayError;
}

/** A chat stream read to its end: its messages, the error that ended it (if any) and the text it carried. */
export async function drain(stream: AsyncIterable<ChatStreamResponse>) {
  const messages: ChatStreamResponse[] = [];
  let error: GatewayError | undefined;
  try {
    for await (const message of stream) messages.push(message);
  } catch (caught) {
    error = caught as GatewayError;
  }
  const content = (m: ChatStreamResponse) =>
    m.event?.$case === 'delta' ? m.event.value.content : m.event?.$case === 'start' ? m.event.value.firstDelta?.content ?? '' : '';
  return { messages, error, text: messages.map(content).join('') };
}
