import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMetricsRegistry, GatewayError, type Registry } from '@gateway/platform';
import { createTestBus, eventually, parsePrometheusText, sampleSum, startFakeUpstream, testLogger, type FakeUpstream, type TestBus } from '@gateway/testing';
import { startRoutingService } from '../src/index.js';
import { chatRequest, model, openaiProvider, routerClient, snapshot, startFakeCatalog } from './harness.js';

// Routing's metrics over real fake upstreams: provider attempts by outcome, failovers, provider
// health per (provider, model), usage published, all on the registry the service was given.

describe('routing metrics', () => {
  let testBus: TestBus;
  let upstreamA: FakeUpstream;
  let upstreamB: FakeUpstream;
  let catalog: Awaited<ReturnType<typeof startFakeCatalog>>;
  let service: Awaited<ReturnType<typeof startRoutingService>>;
  let client: ReturnType<typeof routerClient>;
  let registry: Registry;

  beforeAll(async () => {
    testBus = await createTestBus('nats');
    upstreamA = await startFakeUpstream();
    upstreamB = await startFakeUpstream();
    catalog = await startFakeCatalog(snapshot('v1', [model('acme/pair', ['prov-a', 'prov-b'])], [
      openaiProvider('prov-a', upstreamA.url),
      openaiProvider('prov-b', upstreamB.url),
    ]));
    registry = createMetricsRegistry();
    service = await startRoutingService({
      listenAddress: '127.0.0.1:0', catalogAddress: catalog.address, bus: testBus.bus, logger: testLogger('routing'),
      providerSecrets: { PROV_A_API_KEY: 'sk-a', PROV_B_API_KEY: 'sk-b' }, attemptTimeoutMs: 2_000, maxAttempts: 3, metrics: registry,
    });
    client = routerClient(service.address);
  });

  afterAll(async () => {
    client?.close();
    await service?.stop();
    await catalog?.stop();
    await upstreamA?.close();
    await upstreamB?.close();
    await testBus?.destroy();
  });

  const scrape = async () => parsePrometheusText(await registry.metrics());

  it('counts each provider attempt by outcome and each failover', async () => {
    // Both offers fail with a retryable 500: two attempts, one failover between them, no upstream.
    upstreamA.script({ status: 500 });
    upstreamB.script({ status: 500 });
    const failed = await client.chat(chatRequest('acme/pair', 'hello')).catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(GatewayError);
    let samples = await scrape();
    expect(sampleSum(samples, 'gateway_upstream_attempts_total', { provider: 'prov-a', outcome: 'error' })).toBe(1);
    expect(sampleSum(samples, 'gateway_upstream_attempts_total', { provider: 'prov-b', outcome: 'error' })).toBe(1);
    expect(sampleSum(samples, 'gateway_upstream_failovers_total')).toBe(1);

    // A provider's verdict on the request: rejected, no failover.
    upstreamA.script({ status: 400 });
    upstreamB.script({ status: 400 });
    await client.chat(chatRequest('acme/pair', 'bad request')).catch(() => undefined);
    // Only the first candidate was asked: drop the other one's unused script.
    upstreamA.reset();
    upstreamB.reset();
    samples = await scrape();
    expect(sampleSum(samples, 'gateway_upstream_attempts_total', { outcome: 'rejected' })).toBe(1);
    expect(sampleSum(samples, 'gateway_upstream_failovers_total')).toBe(1);

    // A stream served: success, and its usage published and stored.
    const messages = [];
    for await (const message of client.chatStream({ chat: chatRequest('acme/pair', 'stream please'), combinedStart: true })) messages.push(message);
    expect(messages.at(-1)?.event?.$case).toBe('usage');
    samples = await scrape();
    expect(sampleSum(samples, 'gateway_upstream_attempts_total', { outcome: 'success' })).toBe(1);
    // The usage event is published after the stream's last message reached the caller (the caller never
    // waits for the bus): wait for the publish to be counted, not for a time.
    await eventually(async () => expect(sampleSum(await scrape(), 'gateway_usage_events_published_total', { result: 'stored' })).toBe(1));
    // The failures' releases went the background way.
    await eventually(async () => expect(sampleSum(await scrape(), 'gateway_usage_events_background_total')).toBe(2));
    await eventually(async () => expect(sampleSum(await scrape(), 'gateway_usage_backlog_events')).toBe(0));
    // Provider health per (provider, model): both seen, neither circuit open after one failure each.
    expect(sampleSum(samples, 'gateway_provider_circuit_open', { model: 'acme/pair' })).toBe(0);
    expect(samples.filter((sample) => sample.name === 'gateway_provider_success_ratio').map((sample) => sample.labels.provider).sort())
      .toEqual(['prov-a', 'prov-b']);
    expect(sampleSum(samples, 'gateway_dependency_up', { server: 'gateway.v1.RouterService', dependency: 'nats' })).toBe(1);
  });
});
