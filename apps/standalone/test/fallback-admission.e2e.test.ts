import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { createClient, parseCredits } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { eventually, startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { resetFakes, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { ctlJson } from './configured-stack.js';
import { testAdmission } from './admission-mode.js';
import { catalogYaml, tokenPricing, type CatalogModel } from './catalog-yaml.js';

// Issue 35, item 1: admission covers every model that may serve, not only the one named. A free model
// named first with a paid fallback (`models`) used to be admitted as free — no hold, no balance check,
// no key credit limit, the free model's rate window — and then served by the paid fallback, leaving a
// 0-credit account negative without bound. Here the free model is on upstream-one, and the caller
// ignores that provider (or it fails), so the paid fallback on upstream-two serves. Runs in the suite's
// admission mode (GATEWAY_TEST_ADMISSION: leased or ledger).

const FREE = 'testco/free'; // upstream-one; no prices; limit group `free`
const FREE_OPEN = 'testco/free-open'; // upstream-one; no prices; limit group `open` (no rate limits)
const PAID = 'testco/paid'; // upstream-two; 0.000003 / 0.00003 credits per token; limit group `default`
const SCARCE = 'testco/scarce'; // upstream-two; same prices; limit group `scarce`: 3 requests a minute

/** Every fake answer reports these counts. */
const USAGE = { prompt_tokens: 1000, completion_tokens: 1000 };
/** 1,000 × 0.000003 + 1,000 × 0.00003 = 0.003 + 0.03 = 0.033 credits per paid request, in pico-credits. */
const PAID_CHARGE_PICO = 33_000_000_000n;

function catalog(one: FakeUpstream, two: FakeUpstream): string {
  const model = (id: string, pricing: string | undefined, provider: string, limitGroup: string): CatalogModel => ({
    id, contextWindow: 8000, maxOutputTokens: 1000, supportedParameters: ['temperature', 'max_completion_tokens', 'max_tokens', 'stream_options'], pricing, limitGroup,
    offers: [{ provider, upstreamModel: `${id.split('/')[1]}-upstream`, endpoints: ['chat.completions', 'messages', 'responses'] }],
  });
  const prices = tokenPricing('0.000003', '0.00003');
  return catalogYaml({
    providers: [
      { id: 'upstream-one', kind: 'openai', url: one.url, keyEnv: 'ADMISSION_KEY' },
      { id: 'upstream-two', kind: 'openai', url: two.url, keyEnv: 'ADMISSION_KEY' },
    ],
    limitGroups: [
      { id: 'free', tiers: '{ tier-1: { minute: 6000 } }' },
      { id: 'default', tiers: '{ tier-1: { minute: 6000 } }' },
      { id: 'scarce', tiers: '{ tier-1: { minute: 3 } }' },
      { id: 'open', tiers: '{}' },
    ],
    models: [
      model(FREE, undefined, 'upstream-one', 'free'),
      model(FREE_OPEN, undefined, 'upstream-one', 'open'),
      model(PAID, prices, 'upstream-two', 'default'),
      model(SCARCE, prices, 'upstream-two', 'scarce'),
    ],
  });
}

type Surface = 'chat' | 'chat-stream' | 'messages' | 'messages-stream' | 'responses' | 'responses-stream' | 'compact' | 'websocket';
const SURFACES: readonly Surface[] = ['chat', 'chat-stream', 'messages', 'messages-stream', 'responses', 'responses-stream', 'compact', 'websocket'];

/** The free model named, the paid one as fallback, the free model's provider ignored: only the paid one can serve. */
const FREE_THEN_PAID = { model: FREE, models: [PAID], provider: { ignore: ['upstream-one'] } };

describe(`a free model with a paid fallback is admitted as paid (issue 35, ${testAdmission} admission)`, () => {
  let one: FakeUpstream;
  let two: FakeUpstream;
  let harness: ChatHarness;
  let ledger: ReturnType<typeof createClient<LedgerServiceClient>>;

  beforeAll(async () => {
    [one, two] = await Promise.all([startFakeUpstream(), startFakeUpstream()]);
    harness = await startChatHarness({ configYaml: catalog(one, two), providerSecrets: { ADMISSION_KEY: 'sk-admission' }, credits: '10' });
    ledger = createClient(LedgerServiceClient, LedgerServiceService, harness.stack.addresses.ledger);
  }, 120_000);
  afterAll(async () => {
    ledger?.close();
    await stopHarnessAndFakes(harness, [one, two]);
  });
  beforeEach(() => resetFakes([one, two], { usage: USAGE }));

  /** A new account of tier-1 with `credits` and one key (with `creditLimit` when given). */
  async function account(name: string, credits: string, creditLimit?: string): Promise<{ accountId: string; apiKey: string; provisioningKey: string }> {
    const created = await ctlJson(harness.stack, 'accounts', 'create', '--name', name, '--credits', credits, '--tier', 'tier-1', '--json');
    const limit = creditLimit === undefined ? [] : ['--credit-limit', creditLimit];
    const key = await ctlJson(harness.stack, 'keys', 'create', created.account_id!, '--name', `${name}-key`, ...limit, '--json');
    return { accountId: created.account_id!, apiKey: key.api_key!, provisioningKey: created.provisioning_key! };
  }

  async function balancePico(provisioningKey: string): Promise<bigint> {
    const response = await fetch(`${harness.stack.url}/v1/account/balance`, { headers: { authorization: `Bearer ${provisioningKey}` } });
    expect(response.status).toBe(200);
    return parseCredits(((await response.json()) as { balance: string }).balance);
  }

  /** What the ledger charged the account, per model: requests and pico-credits. */
  async function charged(accountId: string): Promise<Map<string, { requests: number; costPico: bigint }>> {
    const activity = await ledger.getActivity({ accountId, days: 30, keyId: '' });
    const byModel = new Map<string, { requests: number; costPico: bigint }>();
    for (const row of activity.rows) {
      const seen = byModel.get(row.modelId) ?? { requests: 0, costPico: 0n };
      byModel.set(row.modelId, { requests: seen.requests + row.requests, costPico: seen.costPico + parseCredits(row.credits) });
    }
    return byModel;
  }

  /** One request on a surface with `fields` in its body: its status and the model that answered (200 only). */
  async function ask(surface: Surface, apiKey: string, fields: Record<string, unknown>): Promise<{ status: number; model: string | undefined; body: string }> {
    const url = harness.stack.url;
    const auth = { authorization: `Bearer ${apiKey}` };
    if (surface === 'websocket') return websocketTurn(`${url.replace(/^http/, 'ws')}/v1/responses`, apiKey, { input: 'Say hello', ...fields });
    const stream = surface.endsWith('-stream');
    let answer: Posted;
    if (surface.startsWith('chat')) {
      answer = await rawPost(`${url}/v1/chat/completions`, auth, { messages: [{ role: 'user', content: 'Say hello' }], ...(stream ? { stream: true } : {}), ...fields });
    } else if (surface.startsWith('messages')) {
      answer = await rawPost(`${url}/v1/messages`, { ...auth, 'anthropic-version': '2023-06-01' }, { max_tokens: 200, messages: [{ role: 'user', content: 'Say hello' }], ...(stream ? { stream: true } : {}), ...fields });
    } else if (surface === 'compact') {
      answer = await rawPost(`${url}/v1/responses/compact`, auth, { input: [{ type: 'message', role: 'user', content: 'Compact this conversation.' }], ...fields });
    } else {
      answer = await rawPost(`${url}/v1/responses`, auth, { input: 'Say hello', ...(stream ? { stream: true } : {}), ...fields });
    }
    const body = answer.json === undefined ? JSON.stringify(answer.events.slice(0, 3)) : JSON.stringify(answer.json);
    if (answer.status !== 200) return { status: answer.status, model: undefined, body };
    if (answer.json !== undefined) return { status: 200, model: answer.json.model, body };
    // Streams: the model the first event that names one names; an error event inside the stream fails the request.
    for (const data of answer.events) {
      if (data?.type === 'error' || data?.error) return { status: 500, model: undefined, body: JSON.stringify(data) };
    }
    const named = answer.events.find((data) => data?.model ?? data?.message?.model ?? data?.response?.model);
    return { status: 200, model: named?.model ?? named?.message?.model ?? named?.response?.model, body };
  }

  it('a 0-credit key is refused 402 on every surface (three dialects, streamed and not, compact, WebSocket): no upstream call, the balance stays exactly 0, no charge', async () => {
    const broke = await account('fallback-broke', '0');
    for (const surface of SURFACES) {
      const outcome = await ask(surface, broke.apiKey, FREE_THEN_PAID);
      expect(outcome.status, `${surface}: ${outcome.body}`).toBe(402);
    }
    // A WebSocket turn itself: a key with 0.01 credits opens a socket (it can pay something), and the
    // turn whose fallback is paid is still refused 402 in an error event (the hold is 0.05 at least).
    const little = await account('fallback-little', '0.01');
    const turn = await ask('websocket', little.apiKey, FREE_THEN_PAID);
    expect(turn.status, turn.body).toBe(402);
    expect(turn.body).toContain('"type":"error"');
    expect((await ask('websocket', little.apiKey, { model: FREE })).status).toBe(200);
    // The free model failing (rather than being filtered out) does not let the paid fallback serve either.
    one.setFallback({ status: 503 });
    expect((await ask('chat', broke.apiKey, { model: FREE, models: [PAID] })).status).toBe(402);
    expect(two.requests).toHaveLength(0);
    // The free model alone is still free.
    one.setFallback({ usage: USAGE });
    expect((await ask('chat', broke.apiKey, { model: FREE })).status).toBe(200);
    expect(two.requests).toHaveLength(0);
    // Give a wrongly admitted request time to be charged before looking.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await balancePico(broke.provisioningKey)).toBe(0n);
    expect((await charged(broke.accountId)).get(PAID)).toBeUndefined();
  }, 90_000);

  it('a key with a 0.1 credit limit, 10 parallel requests served by the paid fallback: never charged past its limit', async () => {
    const limited = await account('fallback-limited', '10', '0.1');
    const outcomes = await Promise.all(Array.from({ length: 10 }, (_, index) => ask(index % 2 === 0 ? 'chat' : 'responses', limited.apiKey, FREE_THEN_PAID)));
    const served = outcomes.filter((outcome) => outcome.status === 200);
    for (const outcome of outcomes) expect([200, 402], outcome.body).toContain(outcome.status);
    expect(served.every((outcome) => outcome.model === PAID)).toBe(true);
    // Each charge is 0.033: at most three fit under 0.1.
    expect(served.length).toBeGreaterThanOrEqual(1);
    expect(served.length).toBeLessThanOrEqual(3);
    let paid = { requests: 0, costPico: 0n };
    await eventually(async () => {
      paid = (await charged(limited.accountId)).get(PAID) ?? { requests: 0, costPico: 0n };
      expect(paid.requests).toBe(served.length);
    }, 15_000);
    expect(paid.costPico).toBe(PAID_CHARGE_PICO * BigInt(served.length));
    expect(paid.costPico).toBeLessThanOrEqual(parseCredits('0.1'));
  }, 90_000);

  it('a paid fallback whose limit group allows 3 requests a minute serves at most 3 of 5; the rest are 429 (the free model’s group limited or not)', async () => {
    // Two accounts (a window is per account): the free model's own group limited too (two windows to
    // count in), and unlimited (the paid fallback's group is the only window).
    const callers = [await account('fallback-scarce', '10'), await account('fallback-scarce-open', '10')];
    // All of it inside one minute window.
    const secondsLeft = 60 - new Date().getUTCSeconds();
    if (secondsLeft < 15) await new Promise((resolve) => setTimeout(resolve, secondsLeft * 1000 + 200));
    for (const [index, first] of [FREE, FREE_OPEN].entries()) {
      two.reset();
      two.setFallback({ usage: USAGE });
      const outcomes = [];
      for (let attempt = 0; attempt < 5; attempt++) outcomes.push(await ask('chat', callers[index]!.apiKey, { model: first, models: [SCARCE], provider: { ignore: ['upstream-one'] } }));
      for (const outcome of outcomes) expect([200, 429], outcome.body).toContain(outcome.status);
      const served = outcomes.filter((outcome) => outcome.status === 200);
      expect(served.every((outcome) => outcome.model === SCARCE)).toBe(true);
      expect(served.length, first).toBe(3);
      expect(two.requests).toHaveLength(3);
    }
  }, 90_000);

  it('an account with credits is served by the paid fallback on every surface and charged exactly the paid model’s prices × usage', async () => {
    const funded = await account('fallback-funded', '10');
    const before = await balancePico(funded.provisioningKey);
    for (const surface of SURFACES) {
      const outcome = await ask(surface, funded.apiKey, FREE_THEN_PAID);
      expect(outcome.status, `${surface}: ${outcome.body}`).toBe(200);
      // A compaction names no model; the upstream counts below say which one served.
      if (surface !== 'compact') expect(outcome.model, surface).toBe(PAID);
    }
    expect(one.requests).toHaveLength(0);
    expect(two.requests).toHaveLength(SURFACES.length);
    let paid = { requests: 0, costPico: 0n };
    await eventually(async () => {
      paid = (await charged(funded.accountId)).get(PAID) ?? { requests: 0, costPico: 0n };
      expect(paid.requests).toBe(SURFACES.length);
    }, 15_000);
    expect(paid.costPico).toBe(PAID_CHARGE_PICO * BigInt(SURFACES.length));
    expect((await charged(funded.accountId)).get(FREE)).toBeUndefined();
    await eventually(async () => expect(before - (await balancePico(funded.provisioningKey))).toBe(PAID_CHARGE_PICO * BigInt(SURFACES.length)), 15_000);
  }, 90_000);
});

interface Posted {
  status: number;
  /** The JSON body of an answer that is not a stream. */
  json: any;
  /** The data of every SSE frame of a stream (any dialect's framing), `[DONE]` left out. */
  events: any[];
}

async function rawPost(url: string, headers: Record<string, string>, body: unknown): Promise<Posted> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await response.text();
  if (!(response.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    return { status: response.status, json: text ? JSON.parse(text) : undefined, events: [] };
  }
  const events: any[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    events.push(JSON.parse(line.slice('data: '.length)));
  }
  return { status: response.status, json: undefined, events };
}

/**
 * One response.create on a new socket: 200 and the model of response.completed, or the error event's
 * status; a refused upgrade (a key that cannot pay gets no socket) answers its HTTP status.
 */
async function websocketTurn(url: string, apiKey: string, message: Record<string, unknown>): Promise<{ status: number; model: string | undefined; body: string }> {
  const ws = new WebSocket(url, { headers: { authorization: `Bearer ${apiKey}` } });
  const refused = await new Promise<{ status: number; model: undefined; body: string } | undefined>((resolve, reject) => {
    ws.once('open', () => resolve(undefined));
    ws.once('unexpected-response', (_request, response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => { body += chunk.toString(); });
      response.on('end', () => resolve({ status: response.statusCode ?? 500, model: undefined, body }));
    });
    ws.once('error', reject);
  });
  if (refused) return refused;
  try {
    const terminal = await new Promise<any>((resolve, reject) => {
      ws.on('message', (data) => {
        const event = JSON.parse(data.toString());
        if (['response.completed', 'response.incomplete', 'response.failed', 'error'].includes(event.type)) resolve(event);
      });
      ws.once('close', () => reject(new Error('socket closed before a terminal event')));
      ws.send(JSON.stringify({ type: 'response.create', ...message }));
    });
    const body = JSON.stringify(terminal);
    if (terminal.type === 'response.completed') return { status: 200, model: terminal.response?.model, body };
    return { status: terminal.status ?? 500, model: undefined, body };
  } finally {
    ws.close();
  }
}
