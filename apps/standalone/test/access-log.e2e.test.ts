import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chat, OBSERVED_MODEL, startObservedStack, type ObservedStack } from './observability-harness.js';

// The edge's access log and the secrets rule, over every line the whole stack logs at debug: one
// `http request` line per request with route, status, model, provider, latency and both request ids;
// no API key, provisioning key or Authorization value anywhere; no line with a repeated key; and an
// ordinary 503 (no upstream) is a warning without a stack, not an error.

/** The top-level keys of a JSON object line, in order and with repeats (JSON.parse would merge them). */
function topLevelKeys(line: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  for (let index = 0; index < line.length; index++) {
    const char = line[index];
    if (char === '"') {
      let end = index + 1;
      while (line[end] !== '"') end += line[end] === '\\' ? 2 : 1;
      if (depth === 1 && line[end + 1] === ':') keys.push(JSON.parse(line.slice(index, end + 1)) as string);
      index = end;
    } else if (char === '{' || char === '[') depth++;
    else if (char === '}' || char === ']') depth--;
  }
  return keys;
}

describe('access log and secrets in logs', () => {
  let fixture: ObservedStack;

  beforeAll(async () => {
    fixture = await startObservedStack({ name: 'access-log', logLevel: 'debug' });
  }, 120_000);

  afterAll(async () => {
    await fixture?.stop();
  });

  it('writes one access line per request with its route, status, model, provider, latency and ids, and never a key', async () => {
    const { stack, upstream, log } = fixture;
    const { apiKey, provisioningKey } = await fixture.account('logged');
    const wrongKey = `sk-gw-${'q'.repeat(40)}`;

    const answered = await chat(stack.url, apiKey, { headers: { 'x-request-id': 'client-correlation-1' } });
    expect(answered.status).toBe(200);
    const streamed = await chat(stack.url, apiKey, { stream: true, keyHeader: 'x-api-key' });
    expect(streamed.status).toBe(200);
    expect((await chat(stack.url, wrongKey)).status).toBe(401);
    expect((await fetch(`${stack.url}/v1/account/balance`, { headers: { authorization: `Bearer ${provisioningKey}` } })).status).toBe(200);
    const created = await fetch(`${stack.url}/v1/account/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${provisioningKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'made-over-http', credit_limit: null }),
    });
    expect(created.status).toBe(201);
    const createdKey = ((await created.json()) as { key: string }).key;
    expect((await fetch(`${stack.url}/not/a/route`, { headers: { authorization: `Bearer ${apiKey}` } })).status).toBe(404);
    upstream.script({ status: 503 });
    const refused = await chat(stack.url, apiKey);
    expect(refused.status).toBe(503);

    // Lines of requests still closing are written right after the answer.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const records = log.records();
    const access = records.filter((record) => record.msg === 'http request');
    const lineOf = (gatewayRequestId: string | null) => {
      const lines = access.filter((record) => record.request_id === gatewayRequestId);
      expect(lines).toHaveLength(1);
      return lines[0]!;
    };

    const answeredLine = lineOf(answered.headers.get('x-gateway-request-id'));
    expect(answeredLine).toMatchObject({
      level: 30, service: 'edge', route: '/v1/chat/completions', method: 'POST', status: 200, dialect: 'chat.completions',
      model: OBSERVED_MODEL, provider: 'upstream', client_request_id: 'client-correlation-1',
    });
    expect(typeof answeredLine.latency_ms).toBe('number');
    expect(typeof answeredLine.ttfb_ms).toBe('number');
    const streamedLine = lineOf(streamed.headers.get('x-gateway-request-id'));
    expect(streamedLine).toMatchObject({ status: 200, model: OBSERVED_MODEL, provider: 'upstream' });
    expect(streamedLine.ttfb_ms as number).toBeLessThanOrEqual(streamedLine.latency_ms as number);
    expect(access.filter((record) => record.status === 401)).toHaveLength(1);
    expect(access.filter((record) => record.route === '/v1/account/balance' && record.status === 200)).toHaveLength(1);
    expect(access.filter((record) => record.route === 'unmatched' && record.status === 404)).toHaveLength(1);
    const refusedLine = lineOf(refused.headers.get('x-gateway-request-id'));
    expect(refusedLine).toMatchObject({ level: 30, status: 503, model: OBSERVED_MODEL });

    // An ordinary 503 (no upstream): warnings without a stack, nothing at error level for it.
    const refusedId = refused.headers.get('x-gateway-request-id')!;
    const aboutRefused = records.filter((record) => JSON.stringify(record).includes(refusedId) && record.msg !== 'http request');
    expect(aboutRefused.length).toBeGreaterThan(0);
    for (const record of aboutRefused) {
      expect(record.level as number).toBeLessThan(50);
      expect(JSON.stringify(record)).not.toContain('"stack"');
    }

    // No secret in any line of any service, at debug.
    for (const secret of [apiKey, provisioningKey, wrongKey, createdKey, 'sk-upstream-observed']) {
      expect(log.text.includes(secret), `a log line contains ${secret.slice(0, 8)}…`).toBe(false);
    }
    // No line repeats a key (e.g. `service` from a parent logger and again from a child).
    for (const line of log.lines) {
      const keys = topLevelKeys(line);
      expect(keys.filter((key, index) => keys.indexOf(key) !== index), line).toEqual([]);
    }
    // Every service logged through its own logger, naming itself once.
    expect(new Set(records.map((record) => record.service))).toEqual(new Set(['gateway', 'auth', 'catalog', 'ledger', 'media', 'jobs', 'routing', 'edge']));
  });
});
