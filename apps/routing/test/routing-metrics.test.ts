import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayError } from '@gateway/platform';
import { eventually, sampleSum, type FakeUpstream } from '@gateway/testing';
import { chatRequest, model, routerClient, startMeteredRouting, type MeteredRouting } from './harness.js';

// Routing's metrics over real fake upstreams: provider attempts by outcome, failovers, provider
// health per (provider, model), usage published, all on the registry the service was given.

describe('routing metrics', () => {
  let routing: MeteredRouting<readonly [string, string]>;
  let upstreamA: FakeUpstream;
  let upstreamB: FakeUpstream;
  let client: ReturnType<typeof routerClient>;

  beforeAll(async () => {
    routing = await startMeteredRouting([model('acme/pair', ['prov-a', 'prov-b'])], ['prov-a', 'prov-b'], { attemptTimeoutMs: 2_000, maxAttempts: 3 });
    [upstreamA, upstreamB] = routing.upstreams;
    client = routing.client;
  });

  afterAll(async () => {
    await routing?.stop();
  });

  const scrape = () => routing.scrape();

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
