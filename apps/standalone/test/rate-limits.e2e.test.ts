import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningEdge } from '../src/index.js';
import type { FakeUpstream } from '@gateway/testing';
import { startConfiguredStack, testCatalog, type ConfiguredStack } from './configured-stack.js';

// A tier's requests-per-minute limit over two edge replicas, in either admission mode: the window is
// the account's, shared by both edges (with leases, requests one edge holds but has not used are
// recalled), and the request over the limit is a 429 `rate_limit_exceeded` with Retry-After = the
// seconds left in the minute.

const MODEL = 'testco/limited';
const PER_MINUTE = 6;

function config(upstream: FakeUpstream): string {
  return testCatalog(upstream, {
    apiKeyEnv: 'LIMITED_KEY',
    perMinute: PER_MINUTE,
    models: [{ id: MODEL, upstreamModel: 'limited', inputPrice: '0.000001', outputPrice: '0.000002' }],
  });
}

describe('rate limits across edge replicas', () => {
  let fixture: ConfiguredStack | undefined;
  let second: RunningEdge | undefined;

  beforeAll(async () => {
    fixture = await startConfiguredStack({
      name: 'rate', config, keyHashSecret: 'rate-e2e-secret-rate-e2e-secret-rate-01', providerSecrets: { LIMITED_KEY: 'sk-limited' },
    });
    second = await fixture.startSecondEdge();
  }, 120_000);

  afterAll(async () => {
    await fixture?.stop();
  });

  it(`admits ${PER_MINUTE} requests a minute over both edges, then 429 with Retry-After on either`, async () => {
    const { ctl, stack } = fixture!;
    const created = await ctl('accounts', 'create', '--name', 'limited', '--credits', '10', '--tier', 'tier-1', '--json');
    // Two keys: the window is the account's, not the key's.
    const keys = [
      (await ctl('keys', 'create', created.account_id!, '--name', 'one', '--json')).api_key!,
      (await ctl('keys', 'create', created.account_id!, '--name', 'two', '--json')).api_key!,
    ];
    const chat = (baseUrl: string, apiKey: string) => fetch(`${baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }] }),
    });
    // All of it inside one minute window: start just after a minute begins if this one is nearly over.
    const secondsLeft = 60 - new Date().getUTCSeconds();
    if (secondsLeft < 15) await new Promise((resolve) => setTimeout(resolve, secondsLeft * 1000 + 200));

    const urls = [stack.url, second!.url];
    for (let index = 0; index < PER_MINUTE; index++) {
      const response = await chat(urls[index % 2]!, keys[Math.floor(index / 2) % 2]!);
      expect(response.status, await response.clone().text()).toBe(200);
      await response.arrayBuffer();
    }
    for (const url of urls) {
      for (const apiKey of keys) {
        const response = await chat(url, apiKey);
        expect(response.status).toBe(429);
        const body = (await response.json()) as { error: { code: string; message: string } };
        expect(body.error.code).toBe('rate_limit_exceeded');
        const retryAfter = Number(response.headers.get('retry-after'));
        expect(retryAfter).toBeGreaterThanOrEqual(1);
        expect(retryAfter).toBeLessThanOrEqual(60);
        expect(body.error.message).toBe(`Rate limit reached. Please try again in ${retryAfter}s.`);
      }
    }
  }, 120_000);
});
