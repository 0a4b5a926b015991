import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningEdge } from '../src/index.js';
import { eventually, type FakeUpstream } from '@gateway/testing';
import { startConfiguredStack, type ConfiguredStack } from './configured-stack.js';
import { refusedUpgrade, WsClient } from './responses-websocket-client.js';
import { catalogYaml, tokenPricing, type CatalogModel } from './catalog-yaml.js';

// Issue 35 items 3: the responses WebSocket is bounded per key and account before any work — sockets per
// key and per account, one cache budget across every socket of an edge (oldest out first), warm-ups
// (`generate: false`) counted in the key's rate window, and a key that cannot pay refused at the upgrade.

const MODEL = 'testco/ws-bounds';
const TIGHT_MODEL = 'testco/ws-tight';
const TIGHT_PER_MINUTE = 3;
const CACHE_CHARS = 200_000;
const PROVIDER_KEY_ENV = 'WS_BOUNDS_KEY';

function catalog(upstream: FakeUpstream): string {
  const model = (id: string, limitGroup: string): CatalogModel => ({
    id,
    supportedParameters: ['temperature', 'max_completion_tokens', 'stream_options'],
    pricing: tokenPricing('0.000001', '0.000002'),
    limitGroup,
    offers: [{ provider: 'upstream-one', upstreamModel: 'ws-bounds-upstream', endpoints: ['chat.completions', 'responses'] }],
  });
  return catalogYaml({
    providers: [{ id: 'upstream-one', kind: 'openai', url: upstream.url, keyEnv: PROVIDER_KEY_ENV }],
    limitGroups: [
      { id: 'default', tiers: '{ tier-1: { minute: 600 } }' },
      { id: 'tight', tiers: `{ tier-1: { minute: ${TIGHT_PER_MINUTE} } }` },
    ],
    models: [model(MODEL, 'default'), model(TIGHT_MODEL, 'tight')],
  });
}

describe('responses WebSocket bounds (issue 35 item 3)', () => {
  let gateway: ConfiguredStack;
  let edge: RunningEdge;
  let wsUrl: string;
  let accounts = 0;

  /** A new account (so rate windows and socket counts of tests stay apart) with one or more keys. */
  async function account(credits: string, keys = 1, keyArgs: string[] = []): Promise<{ accountId: string; keys: string[] }> {
    const created = await gateway.ctl('accounts', 'create', '--name', `ws-bounds-${++accounts}`, '--credits', credits, '--tier', 'tier-1', '--json');
    const made: string[] = [];
    for (let index = 0; index < keys; index++) {
      made.push((await gateway.ctl('keys', 'create', created.account_id!, '--name', `k${index}`, ...keyArgs, '--json')).api_key!);
    }
    return { accountId: created.account_id!, keys: made };
  }

  beforeAll(async () => {
    gateway = await startConfiguredStack({
      name: 'ws-bounds',
      config: catalog,
      keyHashSecret: 'ws-bounds-e2e-secret-0123456789abcdef',
      providerSecrets: { [PROVIDER_KEY_ENV]: 'sk-ws-bounds' },
    });
    edge = await gateway.startSecondEdge({
      name: 'edge-ws-bounds',
      responsesWebSocket: { maxSocketsPerKey: 2, maxSocketsPerAccount: 3, maxCachedCharsTotal: CACHE_CHARS, maxChars: 150_000 },
    });
    wsUrl = `${edge.url.replace(/^http/, 'ws')}/v1/responses`;
  }, 120_000);

  afterAll(async () => {
    await gateway?.stop();
  });

  it('sockets beyond the per-key and per-account bounds are refused at the upgrade with 429 websocket_limit_reached; a closed one frees its place; other accounts are untouched', async () => {
    const alice = await account('10', 2);
    const [key1, key2] = alice.keys as [string, string];
    const open = [await WsClient.open(wsUrl, key1), await WsClient.open(wsUrl, key1)];
    const perKey = await refusedUpgrade(wsUrl, { authorization: `Bearer ${key1}` });
    expect(perKey.status).toBe(429);
    expect(perKey.body.error).toMatchObject({ type: 'rate_limit_exceeded', code: 'websocket_limit_reached' });
    expect(perKey.body.error.message).toContain('API key already has 2');
    expect(perKey.retryAfter).toBe('1');
    // Another key of the account: the account's third socket opens, its fourth is refused.
    open.push(await WsClient.open(wsUrl, key2));
    const perAccount = await refusedUpgrade(wsUrl, { authorization: `Bearer ${key2}` });
    expect(perAccount.status).toBe(429);
    expect(perAccount.body.error.message).toContain('account already has 3');
    // Concurrent upgrades past the bound: still at most the bound open.
    const bob = await account('10');
    const racing = await Promise.allSettled(Array.from({ length: 6 }, () => WsClient.open(wsUrl, bob.keys[0]!)));
    expect(racing.filter((outcome) => outcome.status === 'fulfilled')).toHaveLength(2);
    for (const outcome of racing) if (outcome.status === 'fulfilled') await outcome.value.close();
    // A closed socket gives its place back.
    await open[0]!.close();
    await eventually(async () => {
      const again = await WsClient.open(wsUrl, key2);
      open.push(again);
    }, 5_000);
    for (const client of open) await client.close();
  });

  it('one cache budget across every socket: the edge never remembers more than it, the oldest socket\'s response goes first and its continuation is previous_response_not_found', async () => {
    const { upstream } = gateway;
    upstream.reset();
    upstream.setFallback({ usage: { prompt_tokens: 5, completion_tokens: 3 }, text: 'continued' });
    const big = 'x'.repeat(60_000);
    const clients: WsClient[] = [];
    const ids: string[] = [];
    for (let index = 0; index < 4; index++) {
      const owner = await account('10');
      const client = await WsClient.open(wsUrl, owner.keys[0]!);
      clients.push(client);
      client.send({ model: MODEL, input: big, generate: false });
      const events = await client.turn();
      const completed = events.at(-1)!;
      expect(completed.type).toBe('response.completed');
      ids.push(completed.response.id as string);
      expect(edge.webSocketCache.totalChars).toBeLessThanOrEqual(CACHE_CHARS);
    }
    // Three of ~60,000 fit in 200,000; the fourth pushed out the first socket's (the oldest of all).
    expect(edge.webSocketCache.entries).toBe(3);
    expect(edge.webSocketCache.totalChars).toBeGreaterThan(150_000);
    clients[0]!.send({ model: MODEL, previous_response_id: ids[0], input: 'and then?' });
    const [evicted] = await clients[0]!.turn();
    expect(evicted).toMatchObject({ type: 'error', status: 400, error: { code: 'previous_response_not_found', param: 'previous_response_id' } });
    expect(upstream.requests).toHaveLength(0);
    // The newest socket's warm-up is still there: its continuation carries the warmed input upstream.
    clients[3]!.send({ model: MODEL, previous_response_id: ids[3], input: 'and then?' });
    expect((await clients[3]!.turn()).at(-1)!.type).toBe('response.completed');
    expect(upstream.requests).toHaveLength(1);
    expect(JSON.stringify(upstream.requests[0]!.body)).toContain(big);
    expect(edge.webSocketCache.totalChars).toBeLessThanOrEqual(CACHE_CHARS);
    // Closed sockets give their share back.
    for (const client of clients) await client.close();
    await eventually(() => expect(edge.webSocketCache.totalChars).toBe(0), 5_000);
    expect(edge.webSocketCache.entries).toBe(0);
  });

  it(`a warm-up takes a slot of the key's rate window: a model limited to ${TIGHT_PER_MINUTE}/min answers warm-up ${TIGHT_PER_MINUTE + 1} with 429`, async () => {
    const owner = await account('10');
    // All inside one minute window.
    const secondsLeft = 60 - new Date().getUTCSeconds();
    if (secondsLeft < 15) await new Promise((resolve) => setTimeout(resolve, secondsLeft * 1000 + 200));
    const client = await WsClient.open(wsUrl, owner.keys[0]!);
    for (let index = 0; index < TIGHT_PER_MINUTE; index++) {
      client.send({ model: TIGHT_MODEL, input: `warm ${index}`, generate: false });
      expect((await client.turn()).at(-1)!.type).toBe('response.completed');
    }
    client.send({ model: TIGHT_MODEL, input: 'one too many', generate: false });
    const [limited] = await client.turn();
    expect(limited).toMatchObject({ type: 'error', status: 429, error: { type: 'rate_limit_exceeded', code: 'rate_limit_exceeded' } });
    // The window is the account's: a paid request over HTTP is refused too.
    const response = await fetch(`${edge.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${owner.keys[0]}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: TIGHT_MODEL, input: 'Hi' }),
    });
    expect(response.status).toBe(429);
    await client.close();
  });

  it('a key that cannot pay is refused at the upgrade with 402: no credits available, or its credit limit used up', async () => {
    const broke = await account('0');
    const refused = await refusedUpgrade(wsUrl, { authorization: `Bearer ${broke.keys[0]!}` });
    expect(refused.status).toBe(402);
    expect(refused.body.error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_quota' });
    const limited = await account('10', 1, ['--credit-limit', '0']);
    const overLimit = await refusedUpgrade(wsUrl, { authorization: `Bearer ${limited.keys[0]!}` });
    expect(overLimit.status).toBe(402);
    expect(overLimit.body.error).toMatchObject({ type: 'insufficient_quota', code: 'key_limit_exceeded' });
    // A key with a little credit opens (each paid turn is still admitted on its own).
    const some = await account('0.01');
    const client = await WsClient.open(wsUrl, some.keys[0]!);
    client.send({ model: MODEL, input: 'Charge me.' });
    expect((await client.turn())[0]).toMatchObject({ type: 'error', status: 402 });
    await client.close();
  });
});
