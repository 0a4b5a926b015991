import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sampleSum } from '@gateway/testing';
import { chat, eventually, startObservedStack, type ObservedStack } from './observability-harness.js';

// Load shedding (spec §7): an edge bounded to 4 requests in flight, driven with many concurrent slow
// streams, answers only 200 (streams complete) or 503 `overloaded` with Retry-After; a shed request is
// refused before its body is read and before admission, so it never reaches a provider and is never
// charged, and every admitted one is charged exactly once.

const BOUND = 4;
const CONCURRENT = 24;

describe('load shedding at the edge', () => {
  let fixture: ObservedStack;

  beforeAll(async () => {
    fixture = await startObservedStack({ name: 'shedding', edge: { overload: { maxInFlightRequests: BOUND } } });
  }, 120_000);

  afterAll(async () => {
    await fixture?.stop();
  });

  it(`answers ${CONCURRENT} concurrent streams with 200 or 503 overloaded + Retry-After; only the admitted ones are charged, once`, async () => {
    const { stack, upstream } = fixture;
    const { accountId, apiKey } = await fixture.account('shed');
    // Each stream takes ~0.6 s upstream: 4 chunks 200 ms apart.
    upstream.setFallback({ chunkCount: 4, chunkDelayMs: 200 });
    upstream.reset();
    const answers = await Promise.all(Array.from({ length: CONCURRENT }, () => chat(stack.url, apiKey, { stream: true })));

    const statuses = answers.map((answer) => answer.status);
    expect(statuses.every((status) => status === 200 || status === 503), statuses.join(',')).toBe(true);
    const admitted = answers.filter((answer) => answer.status === 200);
    const shed = answers.filter((answer) => answer.status === 503);
    expect(admitted.length).toBeGreaterThanOrEqual(BOUND);
    expect(shed.length).toBeGreaterThan(0);
    for (const answer of admitted) expect(answer.text).toContain('data: [DONE]');
    for (const answer of shed) {
      expect(answer.headers.get('retry-after')).toBe('1');
      expect(answer.headers.get('x-gateway-request-id')).toMatch(/^req_/);
      expect(JSON.parse(answer.text)).toEqual({
        error: { type: 'service_unavailable', code: 'overloaded', message: 'The gateway is overloaded; retry after 1 second.' },
      });
    }
    // Admitted ones finish in about a stream's time, not queued behind the others.
    for (const answer of admitted) expect(answer.endedAt - answer.startedAt).toBeLessThan(5_000);
    // Shed requests never reached a provider; every admitted one did, once.
    expect(upstream.requests).toHaveLength(admitted.length);

    // Charges: exactly the admitted requests, each once.
    await eventually(async () => expect((await fixture.charges(accountId)).requests).toBe(admitted.length), 15_000);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect((await fixture.charges(accountId)).requests).toBe(admitted.length);

    const samples = await fixture.scrape();
    expect(sampleSum(samples, 'gateway_http_requests_shed_total', { reason: 'in_flight' })).toBe(shed.length);
    expect(sampleSum(samples, 'gateway_http_requests_total', { route: '/v1/chat/completions', status: '503' })).toBe(shed.length);
    expect(sampleSum(samples, 'gateway_http_requests_in_flight')).toBe(0);
  });

  it('never sheds the probes: /livez and /readyz answer while the edge is full', async () => {
    const { stack, upstream } = fixture;
    const { apiKey } = await fixture.account('probe');
    upstream.setFallback({ chunkCount: 4, chunkDelayMs: 500 });
    const streams = Array.from({ length: BOUND }, () => chat(stack.url, apiKey, { stream: true }));
    // Wait until the edge is full, then probe it.
    await eventually(async () => expect(sampleSum(await fixture.scrape(), 'gateway_http_requests_in_flight')).toBe(BOUND), 10_000);
    expect((await chat(stack.url, apiKey)).status).toBe(503);
    expect((await fetch(`${stack.url}/livez`)).status).toBe(200);
    expect((await fetch(`${stack.url}/readyz`)).status).toBe(200);
    expect((await Promise.all(streams)).map((answer) => answer.status)).toEqual(Array(BOUND).fill(200));
  });
});
