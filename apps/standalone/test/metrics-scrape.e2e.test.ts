import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { labelValues, sampleSum } from '@gateway/testing';
import { chat, eventually, OBSERVED_MODEL, startObservedStack, type ObservedStack } from './observability-harness.js';

// /metrics scraped and parsed after real traffic through the whole stack: the counters move by the
// right amounts with the right labels, route labels are templates (an unknown path adds no label
// value), and every service reports its own part (provider attempts, usage published and settled,
// Postgres pools, dependency health, event-loop lag).

const PER_MINUTE = 3;

describe('metrics after real requests', () => {
  let fixture: ObservedStack;

  beforeAll(async () => {
    fixture = await startObservedStack({ name: 'metrics', perMinute: PER_MINUTE });
  }, 120_000);

  afterAll(async () => {
    await fixture?.stop();
  });

  it('counts requests by route template, status and dialect, upstream attempts by outcome, and usage end to end', async () => {
    const { stack, upstream } = fixture;
    const { accountId, apiKey, provisioningKey } = await fixture.account('metrics');
    const chatRoute = { route: '/v1/chat/completions', method: 'POST', dialect: 'chat.completions' };

    expect((await chat(stack.url, apiKey)).status).toBe(200);
    expect((await chat(stack.url, apiKey, { stream: true })).status).toBe(200);
    expect((await chat(stack.url, 'sk-wrong-key-000000000000000000000000')).status).toBe(401);
    // The only offer fails with a retryable 500: no upstream left, 503.
    upstream.script({ status: 500 });
    const refused = await chat(stack.url, apiKey);
    expect(refused.status).toBe(503);
    expect((await fetch(`${stack.url}/v1/models`)).status).toBe(200);
    expect((await fetch(`${stack.url}/v1/models/${encodeURIComponent(OBSERVED_MODEL)}`)).status).toBe(200);
    expect((await fetch(`${stack.url}/v1/account/balance`, { headers: { authorization: `Bearer ${provisioningKey}` } })).status).toBe(200);

    const samples = await fixture.scrape();
    const requests = (labels: Record<string, string>) => sampleSum(samples, 'gateway_http_requests_total', labels);
    expect(requests({ ...chatRoute, status: '200' })).toBe(2);
    expect(requests({ ...chatRoute, status: '401' })).toBe(1);
    expect(requests({ ...chatRoute, status: '503' })).toBe(1);
    expect(requests({ route: '/v1/models', method: 'GET', status: '200', dialect: 'none' })).toBe(1);
    expect(requests({ route: '/v1/models/*id', method: 'GET', status: '200', dialect: 'none' })).toBe(1);
    expect(requests({ route: '/v1/account/balance', method: 'GET', status: '200', dialect: 'none' })).toBe(1);
    // Latency histograms: one observation per answered request, the stream's first byte before its end.
    expect(sampleSum(samples, 'gateway_http_request_duration_seconds_count', { ...chatRoute, status: '200' })).toBe(2);
    expect(sampleSum(samples, 'gateway_http_time_to_first_byte_seconds_count', { ...chatRoute, status: '200' })).toBe(2);
    expect(sampleSum(samples, 'gateway_http_request_duration_seconds_bucket', { ...chatRoute, status: '200', le: '+Inf' })).toBe(2);
    expect(sampleSum(samples, 'gateway_http_requests_in_flight')).toBe(0);

    // Routing: two successful attempts, one retryable failure that left no candidate (no failover).
    expect(sampleSum(samples, 'gateway_upstream_attempts_total', { provider: 'upstream', outcome: 'success' })).toBe(2);
    expect(sampleSum(samples, 'gateway_upstream_attempts_total', { provider: 'upstream', outcome: 'error' })).toBe(1);
    expect(sampleSum(samples, 'gateway_upstream_failovers_total')).toBe(0);
    expect(sampleSum(samples, 'gateway_provider_circuit_open', { provider: 'upstream', model: OBSERVED_MODEL })).toBe(0);
    // Both answers' usage was published and awaited; the failure's release went the background way.
    expect(sampleSum(samples, 'gateway_usage_events_published_total', { result: 'stored' })).toBe(2);
    expect(sampleSum(samples, 'gateway_usage_events_background_total')).toBeGreaterThanOrEqual(1);
    // No durable outbox configured here: nothing in it, nothing waiting.
    expect(samples.find((sample) => sample.name === 'gateway_usage_outbox_records')?.value).toBe(0);

    // The ledger settles both answers (once each) and the failure's release.
    await eventually(async () => {
      const settled = await fixture.scrape();
      expect(sampleSum(settled, 'gateway_usage_events_settled_total', { outcome: 'served' })).toBe(2);
      expect(sampleSum(settled, 'gateway_usage_events_settled_total', { outcome: 'failed' })).toBeGreaterThanOrEqual(1);
    }, 15_000);
    const charged = await fixture.charges(accountId);
    expect(charged.requests).toBe(2);
    // What the ledger charged, as the dashboard reads it: the credits are the charges' sum, the tokens moved.
    const settled = await fixture.scrape();
    expect(sampleSum(settled, 'gateway_usage_spend_credits_total', { model: OBSERVED_MODEL })).toBeCloseTo(Number(charged.costPico) / 1e12, 12);
    expect(Number(charged.costPico)).toBeGreaterThan(0);
    expect(sampleSum(settled, 'gateway_usage_tokens_total', { model: OBSERVED_MODEL, type: 'input' })).toBeGreaterThan(0);
    expect(sampleSum(settled, 'gateway_usage_tokens_total', { model: OBSERVED_MODEL, type: 'output' })).toBeGreaterThan(0);
    expect(sampleSum(settled, 'gateway_usage_settlement_backlog_messages')).toBe(0);
    // Every answer is over: no request in flight and no stream open, at the edge or in routing.
    for (const gauge of ['gateway_http_streams_active', 'gateway_routing_requests_in_flight', 'gateway_routing_streams_active']) {
      expect(settled.some((sample) => sample.name === gauge), gauge).toBe(true);
      expect(sampleSum(settled, gauge), gauge).toBe(0);
    }

    // Postgres pools of the three Postgres services, their dependency health, Node's event-loop lag.
    expect(labelValues(samples, 'gateway_db_pool_connections', 'pool')).toEqual(expect.arrayContaining(['auth', 'catalog', 'ledger']));
    for (const server of ['gateway.v1.AuthService', 'gateway.v1.CatalogService', 'gateway.v1.LedgerService']) {
      expect(sampleSum(samples, 'gateway_dependency_up', { server, dependency: 'postgres' })).toBe(1);
      expect(sampleSum(samples, 'gateway_dependency_up', { server, dependency: 'nats' })).toBe(1);
    }
    expect(sampleSum(samples, 'gateway_dependency_up', { server: 'gateway.v1.RouterService', dependency: 'nats' })).toBe(1);
    expect(samples.some((sample) => sample.name === 'nodejs_eventloop_lag_seconds')).toBe(true);
    expect(samples.some((sample) => sample.name === 'gateway_ledger_open_reservations')).toBe(true);
    expect(samples.some((sample) => sample.name === 'gateway_ledger_open_leases')).toBe(true);
  });

  it('labels every unknown path `unmatched`: raw paths never become label values', async () => {
    const before = labelValues(await fixture.scrape(), 'gateway_http_requests_total', 'route');
    const beforeUnmatched = sampleSum(await fixture.scrape(), 'gateway_http_requests_total', { route: 'unmatched' });
    for (const path of ['/no/such/route', '/v1/chat/completions/extra', `/v1/${'x'.repeat(40)}`, '/favicon.ico?x=1']) {
      expect((await fetch(`${fixture.stack.url}${path}`)).status).toBe(404);
    }
    const samples = await fixture.scrape();
    const after = labelValues(samples, 'gateway_http_requests_total', 'route');
    expect(after.filter((route) => !before.includes(route))).toEqual(before.includes('unmatched') ? [] : ['unmatched']);
    expect(after.every((route) => route === 'unmatched' || route === 'other' || route.startsWith('/'))).toBe(true);
    expect(after.some((route) => route.includes('no/such') || route.includes('xxxx') || route.includes('favicon'))).toBe(false);
    expect(sampleSum(samples, 'gateway_http_requests_total', { route: 'unmatched', status: '404' }) - beforeUnmatched).toBe(4);
  });

  it('counts a rate-limit refusal once, and no request, key or account id is a label', async () => {
    const { apiKey, accountId } = await fixture.account('limited');
    // All inside one minute window (the limit is per minute).
    const secondsLeft = 60 - new Date().getUTCSeconds();
    if (secondsLeft < 10) await new Promise((resolve) => setTimeout(resolve, secondsLeft * 1000 + 200));
    const before = sampleSum(await fixture.scrape(), 'gateway_rate_limit_refusals_total');
    const statuses: number[] = [];
    for (let index = 0; index <= PER_MINUTE; index++) statuses.push((await chat(fixture.stack.url, apiKey)).status);
    expect(statuses).toEqual([...Array(PER_MINUTE).fill(200), 429]);
    const samples = await fixture.scrape();
    expect(sampleSum(samples, 'gateway_rate_limit_refusals_total') - before).toBe(1);
    expect(sampleSum(samples, 'gateway_http_requests_total', { route: '/v1/chat/completions', status: '429' })).toBe(1);
    const labelText = samples.flatMap((sample) => Object.values(sample.labels)).join('\n');
    expect(labelText).not.toContain(accountId);
    expect(labelText).not.toMatch(/req_|key_|acct_/);
  });
});
