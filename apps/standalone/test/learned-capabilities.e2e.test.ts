import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createClient, parseCredits } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { eventually, startFakeUpstream, testLogger, type FakeUpstream, type RecordedRequest } from '@gateway/testing';
import { startRoutingReplica, type RunningEdge, type RunningRoutingService } from '../src/index.js';
import { rawPost } from './messages-e2e-harness.js';
import { ctlJson, startSecondEdge, startStackOnCatalog, type StackOnCatalog } from './configured-stack.js';
import { openSharedLearnedMap } from './learned-map.js';

// Issue 27, item 8, through the whole stack (Postgres, NATS, the real `openai` client): an OpenAI model
// that refuses `temperature` with OpenAI's own 400. The first request is served after one retry on the
// same provider without it (two upstream calls), its answer names it in x-gateway-dropped-params and it
// is charged once; later requests go without it in one call; a second routing replica on the same NATS
// namespace (behind a second edge) knows it too. /v1/models is the catalog's truth throughout.

const MODEL = 'testco/reasoner';
const UPSTREAM_MODEL = 'reasoner-2026';
const MESSAGES_MODEL = 'testco/reasoner-messages';
const RESPONSES_MODEL = 'testco/reasoner-responses';
const USAGE = { prompt_tokens: 11, completion_tokens: 7 };
/** 11 × 0.000001 + 7 × 0.000002 = 0.000025 credits, in pico-credits. */
const CHARGE_PICO = 25_000_000n;

/** OpenAI's answer to a temperature sent to a reasoning model (its real body). */
const TEMPERATURE_REFUSAL = {
  status: 400,
  errorBody: {
    error: { message: "Unsupported parameter: 'temperature' is not supported with this model.", type: 'invalid_request_error', param: 'temperature', code: 'unsupported_parameter' },
  },
};

// Issue 35 item 2: a refused VALUE teaches nothing, and one account's refusals never change another's body.
const VALUED_MODEL = 'testco/valued';
const VALUED_UPSTREAM = 'valued-2026';
const GENUINE_MODEL = 'testco/genuine';
const GENUINE_UPSTREAM = 'genuine-2026';
const openaiRefusal = (message: string, param: string, code: string) => ({ status: 400, errorBody: { error: { message, type: 'invalid_request_error', param, code } } });

/** One provider, five models with their own upstream models (the map is per provider × upstream model). */
function catalog(upstream: FakeUpstream): string {
  const model = (id: string, upstreamModel: string) => `
  - id: ${id}
    owned_by: testco
    created: 1767225600
    input_modalities: [text]
    output_modalities: [text]
    supported_parameters: [temperature, top_p, reasoning_effort, max_completion_tokens, max_tokens, stream_options]
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002" }
    limit_group: default
    offers:
      - { provider: upstream-one, upstream_model: ${upstreamModel}, endpoints: [chat.completions, messages, responses] }`;
  return `
startups:
  - { id: testco, display_name: Test Co }
providers:
  - { id: upstream-one, kind: openai, base_url: ${upstream.url}, api_key_env: LEARNED_KEY }
limit_groups:
  - id: default
    tiers: { tier-1: { minute: 600 } }
models:${model(MODEL, UPSTREAM_MODEL)}${model(MESSAGES_MODEL, 'reasoner-m')}${model(RESPONSES_MODEL, 'reasoner-r')}${model(VALUED_MODEL, VALUED_UPSTREAM)}${model(GENUINE_MODEL, GENUINE_UPSTREAM)}
`;
}

describe('learned capability map (issue 27 item 8)', () => {
  let upstream: FakeUpstream;
  let base: StackOnCatalog;
  let apiKey: string;
  let accountId: string;
  let client: OpenAI;
  let ledger: ReturnType<typeof createClient<LedgerServiceClient>>;
  let secondRouting: RunningRoutingService;
  let secondEdge: RunningEdge;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    const configYaml = catalog(upstream);
    base = await startStackOnCatalog('learned', configYaml, { keyHashSecret: 'learned-e2e-secret-learned-e2e-0123', providerSecrets: { LEARNED_KEY: 'sk-learned' } });
    const account = await ctlJson(base.stack, 'accounts', 'create', '--name', 'learned', '--credits', '10', '--tier', 'tier-1', '--json');
    accountId = account.account_id!;
    apiKey = (await ctlJson(base.stack, 'keys', 'create', accountId, '--name', 'learned-key', '--json')).api_key!;
    client = new OpenAI({ baseURL: `${base.stack.url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
    ledger = createClient(LedgerServiceClient, LedgerServiceService, base.stack.addresses.ledger);
    // A second routing replica on the same NATS namespace, reached through its own edge.
    secondRouting = await startRoutingReplica(base.stack.addresses, {
      bus: await base.testBus.connectAnother(),
      logger: testLogger('routing-2'),
      providerSecrets: { LEARNED_KEY: 'sk-learned' },
    });
    // startSecondEdge's options go after its own addresses, so this edge talks to the second replica only.
    const toSecondRouting = { name: 'edge-2', routerAddress: secondRouting.address } as Parameters<typeof startSecondEdge>[2];
    secondEdge = await startSecondEdge(base.stack, base.testBus, toSecondRouting);
  }, 120_000);
  afterAll(async () => {
    ledger?.close();
    await secondEdge?.stop();
    await secondRouting?.stop();
    await base?.stop();
    await upstream?.close();
  });
  beforeEach(() => {
    upstream.reset();
    // The fake refuses temperature as OpenAI's reasoning models do, and serves anything else.
    upstream.setFallback((request: RecordedRequest) => (request.body?.temperature !== undefined ? TEMPERATURE_REFUSAL : { usage: USAGE }));
  });

  const charges = async () => {
    const activity = await ledger.getActivity({ accountId, days: 30, keyId: '' });
    const rows = activity.rows.filter((row) => row.modelId === MODEL);
    return { requests: rows.reduce((sum, row) => sum + row.requests, 0), costPico: rows.reduce((sum, row) => sum + parseCredits(row.credits), 0n) };
  };
  const chargedAt = async (requests: number) => {
    let seen = { requests: -1, costPico: 0n };
    await eventually(async () => {
      seen = await charges();
      expect(seen.requests).toBe(requests);
    }, 15_000);
    return seen;
  };
  const chatCalls = () => upstream.requests.filter((request) => request.path.endsWith('/chat/completions'));

  it('learns a refused temperature: one retry, named in the header, charged once; then dropped before sending, on this replica and the other', async () => {
    const before = await charges();
    const { data, response } = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'Think about it.' }], temperature: 0.4, top_p: 0.9 })
      .withResponse();
    expect(response.status).toBe(200);
    expect(response.headers.get('x-gateway-dropped-params')).toBe('temperature');
    expect(data.choices[0]!.message.content).toBeTruthy();
    const calls = chatCalls();
    expect(calls).toHaveLength(2);
    expect(calls[0]!.body.temperature).toBe(0.4);
    expect(calls[1]!.body.temperature).toBeUndefined();
    expect(calls[1]!.body.top_p).toBe(0.9);
    expect(calls[1]!.body.model).toBe(UPSTREAM_MODEL);
    const once = await chargedAt(before.requests + 1);
    expect(once.costPico - before.costPico).toBe(CHARGE_PICO);

    // The next request: one call, without temperature, and the header still says so.
    upstream.requests.length = 0;
    const again = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Again.' }], temperature: 0.4 }).withResponse();
    expect(again.response.headers.get('x-gateway-dropped-params')).toBe('temperature');
    expect(chatCalls()).toHaveLength(1);
    expect(chatCalls()[0]!.body.temperature).toBeUndefined();
    expect((await chargedAt(before.requests + 2)).costPico - before.costPico).toBe(2n * CHARGE_PICO);

    // The other routing replica (behind the other edge) learned it through the bus: once the shared bucket
    // has it (a reader on a third connection sees it), its very first request is one call without it.
    const probe = await openSharedLearnedMap(await base.testBus.connectAnother());
    await eventually(async () => expect(await probe.droppedFor('upstream-one', UPSTREAM_MODEL, accountId)).toEqual(['temperature']), 5_000);
    await new Promise((resolve) => setTimeout(resolve, 200));
    upstream.requests.length = 0;
    const other = new OpenAI({ baseURL: `${secondEdge.url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
    const elsewhere = await other.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Elsewhere.' }], temperature: 0.4 }).withResponse();
    expect(elsewhere.response.headers.get('x-gateway-dropped-params')).toBe('temperature');
    expect(chatCalls()).toHaveLength(1);
    expect(chatCalls()[0]!.body.temperature).toBeUndefined();

    // /v1/models is the catalog's truth: the model still lists temperature.
    const models = (await (await fetch(`${base.stack.url}/v1/models`, { headers: { authorization: `Bearer ${apiKey}` } })).json()) as { data: { id: string; supported_parameters?: string[] }[] };
    expect(models.data.find((model) => model.id === MODEL)?.supported_parameters).toContain('temperature');
  });

  it('a stream without temperature names nothing; with it, the learned drop is in the stream’s headers and one call is made', async () => {
    const plain = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Plain.' }], stream: true }).withResponse();
    for await (const chunk of plain.data) void chunk;
    expect(plain.response.headers.get('x-gateway-dropped-params')).toBeNull();
    upstream.requests.length = 0;
    const streamed = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'Stream.' }], temperature: 1.1, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let text = '';
    for await (const chunk of streamed.data) text += chunk.choices[0]?.delta?.content ?? '';
    expect(text.length).toBeGreaterThan(0);
    expect(streamed.response.headers.get('x-gateway-dropped-params')).toBe('temperature');
    expect(chatCalls()).toHaveLength(1);
    expect(chatCalls()[0]!.body.temperature).toBeUndefined();
  });
  it('messages: the first request retries once without temperature and names it; a stream after it makes one call', async () => {
    const headers = { authorization: `Bearer ${apiKey}`, 'anthropic-version': '2023-06-01' };
    const body = { model: MESSAGES_MODEL, max_tokens: 50, messages: [{ role: 'user', content: 'Hi.' }], temperature: 0.5 };
    const first = await rawPost(`${base.stack.url}/v1/messages`, headers, body);
    expect(first.status).toBe(200);
    expect(first.headers.get('x-gateway-dropped-params')).toBe('temperature');
    expect(first.json.type).toBe('message');
    expect(chatCalls()).toHaveLength(2);
    expect(chatCalls()[1]!.body.temperature).toBeUndefined();
    upstream.requests.length = 0;
    const streamed = await rawPost(`${base.stack.url}/v1/messages`, headers, { ...body, stream: true });
    expect(streamed.status).toBe(200);
    expect(streamed.headers.get('x-gateway-dropped-params')).toBe('temperature');
    expect(streamed.events.at(-1)?.event).toBe('message_stop');
    expect(chatCalls()).toHaveLength(1);
    expect(chatCalls()[0]!.body.temperature).toBeUndefined();
  });

  it('responses: a first streamed request retries once before any event and names it; the next plain one makes one call', async () => {
    const streamed = await client.responses.create({ model: RESPONSES_MODEL, input: 'Hi.', temperature: 0.5, stream: true }).withResponse();
    const types: string[] = [];
    for await (const event of streamed.data) types.push(event.type);
    expect(streamed.response.headers.get('x-gateway-dropped-params')).toBe('temperature');
    expect(types.at(-1)).toBe('response.completed');
    expect(chatCalls()).toHaveLength(2);
    expect(chatCalls()[1]!.body.temperature).toBeUndefined();
    upstream.requests.length = 0;
    const plain = await client.responses.create({ model: RESPONSES_MODEL, input: 'Again.', temperature: 0.5 }).withResponse();
    expect(plain.response.headers.get('x-gateway-dropped-params')).toBe('temperature');
    expect(plain.data.output_text.length).toBeGreaterThan(0);
    expect(chatCalls()).toHaveLength(1);
  });

  /** A new account with credits, and `openai` clients on both edges (each edge has its own routing replica). */
  const newAccount = async (name: string) => {
    const account = await ctlJson(base.stack, 'accounts', 'create', '--name', name, '--credits', '10', '--tier', 'tier-1', '--json');
    const key = (await ctlJson(base.stack, 'keys', 'create', account.account_id!, '--name', `${name}-key`, '--json')).api_key!;
    return {
      id: account.account_id!,
      first: new OpenAI({ baseURL: `${base.stack.url}/v1`, apiKey: key, maxRetries: 0, timeout: 30_000 }),
      second: new OpenAI({ baseURL: `${secondEdge.url}/v1`, apiKey: key, maxRetries: 0, timeout: 30_000 }),
    };
  };
  const callsTo = (upstreamModel: string) => chatCalls().filter((request) => request.body?.model === upstreamModel);

  it('issue 35 item 2: values one account had refused (temperature 1.9, reasoning_effort "minimal") never change another account\'s body', async () => {
    // The fake refuses the values as OpenAI does (`unsupported_value`) and serves anything else.
    upstream.setFallback((request: RecordedRequest) => {
      const body = request.body ?? {};
      if (typeof body.temperature === 'number' && body.temperature > 1) {
        return openaiRefusal(`Unsupported value: 'temperature' does not support ${body.temperature} with this model. Only the default (1) value is supported.`, 'temperature', 'unsupported_value');
      }
      if (body.reasoning_effort !== undefined && body.reasoning_effort !== 'medium' && body.reasoning_effort !== 'high') {
        return openaiRefusal(`Unsupported value: 'reasoning_effort' does not support '${body.reasoning_effort}' with this model. Supported values are: 'medium' and 'high'.`, 'reasoning_effort', 'unsupported_value');
      }
      return { usage: USAGE };
    });
    const hostile = await newAccount('hostile');
    const victim = await newAccount('victim');
    // The hostile account, on both replicas, again and again: each is the provider's 400, in one call.
    for (const via of [hostile.first, hostile.second, hostile.first]) {
      const hot = await via.chat.completions.create({ model: VALUED_MODEL, messages: [{ role: 'user', content: 'Hot.' }], temperature: 1.9 }).catch((error: unknown) => error);
      expect((hot as { status?: number }).status).toBe(400);
      const minimal = await via.chat.completions
        .create({ model: VALUED_MODEL, messages: [{ role: 'user', content: 'Quick.' }], reasoning_effort: 'minimal' })
        .catch((error: unknown) => error);
      expect((minimal as { status?: number }).status).toBe(400);
    }
    expect(callsTo(VALUED_UPSTREAM)).toHaveLength(6);
    // Not even the hostile account learned anything: its own temperature 0.3 still goes as it is.
    upstream.requests.length = 0;
    const own = await hostile.first.chat.completions.create({ model: VALUED_MODEL, messages: [{ role: 'user', content: 'Mild.' }], temperature: 0.3 }).withResponse();
    expect(own.response.headers.get('x-gateway-dropped-params')).toBeNull();
    expect(callsTo(VALUED_UPSTREAM)[0]!.body.temperature).toBe(0.3);

    // The victim, on either replica: its body reaches the upstream unchanged, in one call, and no header.
    for (const via of [victim.first, victim.second]) {
      upstream.requests.length = 0;
      const answer = await via.chat.completions
        .create({ model: VALUED_MODEL, messages: [{ role: 'user', content: 'Calm.' }], temperature: 0.3, reasoning_effort: 'high' })
        .withResponse();
      expect(answer.response.status).toBe(200);
      expect(answer.response.headers.get('x-gateway-dropped-params')).toBeNull();
      const calls = callsTo(VALUED_UPSTREAM);
      expect(calls).toHaveLength(1);
      expect(calls[0]!.body.temperature).toBe(0.3);
      expect(calls[0]!.body.reasoning_effort).toBe('high');
    }
  });

  it('issue 35 item 2: a parameter refusal drops it for the refused account at once and for everyone only after three accounts, across replicas', async () => {
    // The fake refuses top_p as a parameter (`unsupported_parameter`) and serves anything else.
    upstream.setFallback((request: RecordedRequest) =>
      request.body?.top_p !== undefined ? openaiRefusal("Unsupported parameter: 'top_p' is not supported with this model.", 'top_p', 'unsupported_parameter') : { usage: USAGE });
    const [first, second, third, later] = [await newAccount('genuine-1'), await newAccount('genuine-2'), await newAccount('genuine-3'), await newAccount('genuine-4')];
    const ask = (via: OpenAI) => via.chat.completions.create({ model: GENUINE_MODEL, messages: [{ role: 'user', content: 'Sample.' }], top_p: 0.5 }).withResponse();

    // The first account: refused, retried without top_p, served; its next request goes without it in one call.
    upstream.requests.length = 0;
    expect((await ask(first.first)).response.headers.get('x-gateway-dropped-params')).toBe('top_p');
    expect(callsTo(GENUINE_UPSTREAM).map((call) => call.body.top_p)).toEqual([0.5, undefined]);
    upstream.requests.length = 0;
    expect((await ask(first.first)).response.headers.get('x-gateway-dropped-params')).toBe('top_p');
    expect(callsTo(GENUINE_UPSTREAM).map((call) => call.body.top_p)).toEqual([undefined]);

    // The second account still sends it (one account is no evidence for another), on the other replica too.
    upstream.requests.length = 0;
    expect((await ask(second.second)).response.headers.get('x-gateway-dropped-params')).toBe('top_p');
    expect(callsTo(GENUINE_UPSTREAM).map((call) => call.body.top_p)).toEqual([0.5, undefined]);
    // The third account, on the first replica: the third distinct account confirms it for everyone.
    upstream.requests.length = 0;
    expect((await ask(third.first)).response.headers.get('x-gateway-dropped-params')).toBe('top_p');
    expect(callsTo(GENUINE_UPSTREAM).map((call) => call.body.top_p)).toEqual([0.5, undefined]);

    const probe = await openSharedLearnedMap(await base.testBus.connectAnother());
    await eventually(async () => expect(await probe.droppedFor('upstream-one', GENUINE_UPSTREAM, 'acc_nobody')).toEqual(['top_p']), 5_000);
    await new Promise((resolve) => setTimeout(resolve, 200));
    // A fourth account, never refused, on either replica: one call without top_p, named in the header.
    for (const via of [later.first, later.second]) {
      upstream.requests.length = 0;
      expect((await ask(via)).response.headers.get('x-gateway-dropped-params')).toBe('top_p');
      expect(callsTo(GENUINE_UPSTREAM).map((call) => call.body.top_p)).toEqual([undefined]);
    }
  });
});
