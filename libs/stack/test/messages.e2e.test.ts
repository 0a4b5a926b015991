import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { formatCredits, parseCredits } from '@gateway/platform';
import { minimalPdf, type FakeBehaviour, type FakeUpstream } from '@gateway/testing';
import { ctlJson } from './configured-stack.js';
import { startChatHarness, type ChatHarness } from './chat-e2e-harness.js';
import { anthropicClient, expectWellFormedStream, rawPost, UPSTREAM_KINDS, type UpstreamKind } from './messages-e2e-harness.js';

/*
 * POST /v1/messages and /v1/messages/count_tokens through the whole stack, driven by the real
 * `@anthropic-ai/sdk` (baseURL = the gateway root) and by raw HTTP where the wire itself is the point
 * (SSE event order, headers). Every test runs against each upstream kind behind the gateway
 * (messages-e2e-harness.ts); what the fake upstream received is what the assertions read.
 */

const CHAT = 'testco/chat';
const DUAL = 'testco/dual';
/** Models whose charges the tests count: only requests wrapped in `oneCharge` use them, one at a time. */
const BILLED = 'testco/billed';
const QUIET = 'testco/quiet';
const INPUT_PRICE = '0.000001';
const CACHED_PRICE = '0.0000002';
const OUTPUT_PRICE = '0.000002';
/** Long enough that no ordinary answer meets it; the ping tests wait past it. */
const PING_INTERVAL_MS = 1_500;

function catalog(kind: UpstreamKind, primary: FakeUpstream, secondary: FakeUpstream, down: FakeUpstream): string {
  const model = (id: string, offers: string[], extra = '') => `
  - id: ${id}
    owned_by: testco
    created: 1767225600
    input_modalities: [text, image]
    output_modalities: [text]
    supported_parameters: [tools, tool_choice, temperature, top_p, stop, max_tokens, max_completion_tokens, reasoning, response_format, stream_options]
    reasoning_efforts: [low, medium, high]
    pricing: { per_input_token: "${INPUT_PRICE}", per_cached_input_token: "${CACHED_PRICE}", per_output_token: "${OUTPUT_PRICE}" }${extra}
    offers:${offers.map((provider) => `
      - { provider: ${provider}, upstream_model: ${id.split('/')[1]}-upstream, endpoints: [chat.completions, messages] }`).join('')}`;
  return `
startups:
  - { id: testco, display_name: Test Co }
providers:
${kind.provider('primary', primary, 'MESSAGES_E2E_KEY')}
${kind.provider('secondary', secondary, 'MESSAGES_E2E_KEY')}
${kind.provider('down', down, 'MESSAGES_E2E_KEY')}
limit_groups:
  - id: default
    tiers: { tier-1: { minute: 1000 } }
  - id: premium
    tiers: { tier-4: { minute: 1000 } }
  - id: tight
    tiers: { tier-1: { minute: 1 } }
models:${model(CHAT, ['primary'], '\n    limit_group: default')}${model(BILLED, ['primary'], '\n    limit_group: default')}${model(QUIET, ['primary'], '\n    limit_group: default')}${model(DUAL, ['primary', 'secondary'], '\n    limit_group: default')}${model(
    'testco/premium',
    ['primary'],
    '\n    limit_group: premium',
  )}${model('testco/tight', ['primary'], '\n    limit_group: tight')}${model('testco/nowhere', ['down'], '\n    limit_group: default')}${model(
    'testco/retired',
    ['primary'],
    '\n    limit_group: default\n    expires_at: 1700000000',
  )}
`;
}

describe.each(UPSTREAM_KINDS)('messages dialect over the $kind fake upstream', (kind) => {
  let primary: FakeUpstream;
  let secondary: FakeUpstream;
  let down: FakeUpstream;
  let harness: ChatHarness;
  let client: Anthropic;
  let files: Server;
  let filesUrl = '';
  let poorKey = '';
  const pdfText = 'Quarterly revenue grew by forty percent';

  beforeAll(async () => {
    primary = await kind.start();
    secondary = await kind.start();
    down = await kind.start();
    down.setFallback({ status: 500 });
    const pdf = minimalPdf([pdfText]);
    // Documents by URL: a loopback server, reachable only because this stack's media service allows loopback for tests.
    files = createServer((request, response) => {
      if (request.url === '/notes.txt') {
        response.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
        response.end('Meeting notes: ship on Friday.');
      } else if (request.url === '/report.pdf') {
        response.writeHead(200, { 'content-type': 'application/pdf', 'content-length': String(pdf.length) });
        response.end(pdf);
      } else {
        response.writeHead(404);
        response.end();
      }
    });
    await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
    filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
    harness = await startChatHarness({
      configYaml: catalog(kind, primary, secondary, down),
      providerSecrets: { MESSAGES_E2E_KEY: 'sk-messages-e2e' },
      media: { allowLoopbackUrlsForTests: true },
      edge: { streamPingIntervalMs: PING_INTERVAL_MS },
      routing: { attemptTimeoutMs: 8_000, maxAttempts: 3 },
    });
    client = anthropicClient(harness.stack.url, harness.apiKey);
    const poor = await ctlJson(harness.stack, 'accounts', 'create', '--name', 'messages-poor', '--credits', '0.01', '--tier', 'tier-1', '--json');
    poorKey = (await ctlJson(harness.stack, 'keys', 'create', poor.account_id!, '--name', 'poor-key', '--json')).api_key!;
  }, 120_000);

  afterAll(async () => {
    await harness?.stop();
    for (const upstream of [primary, secondary, down]) await upstream?.close();
    files?.closeAllConnections();
    await new Promise((resolve) => files?.close(resolve));
  });

  beforeEach(() => {
    for (const upstream of [primary, secondary]) {
      upstream.reset();
      upstream.setFallback({});
    }
  });

  const messagesUrl = () => `${harness.stack.url}/v1/messages`;
  const keyHeaders = () => ({ 'x-api-key': harness.apiKey, 'anthropic-version': '2023-06-01' });
  const received = (upstream: FakeUpstream, index = 0) => kind.conversation(upstream.requests[index]!);

  /** Runs `request` and returns the one charge it made (the ledger's own view). */
  async function oneCharge(model: string, request: () => Promise<unknown>): Promise<bigint> {
    const before = await harness.charges(model);
    await request();
    const after = await harness.chargesSettleAt(model, before.requests + 1);
    return after.costPico - before.costPico;
  }

  describe('answers', () => {
    it('create: a msg_ message with the catalog model id, end_turn, usage; request-id and x-request-id headers', async () => {
      const { data: message, response } = await client.messages
        .create({ model: CHAT, max_tokens: 200, messages: [{ role: 'user', content: 'Hello there, gateway.' }] })
        .withResponse();
      expect(message).toMatchObject({ type: 'message', role: 'assistant', model: CHAT, stop_reason: 'end_turn', stop_sequence: null });
      expect(message.id).toMatch(/^msg_[0-9a-f]{32}$/);
      expect(message.content).toEqual([{ type: 'text', text: 'Hello from the fake upstream.' }]);
      expect(message.usage.input_tokens).toBeGreaterThan(0);
      expect(message.usage.output_tokens).toBeGreaterThan(0);
      expect(message.usage).toMatchObject({ cache_read_input_tokens: 0, cache_creation_input_tokens: 0 });
      expect(response.headers.get('request-id')).toBe(response.headers.get('x-gateway-request-id'));
      expect(message.id).toBe(`msg_${response.headers.get('request-id')!.slice(4)}`);
      expect(response.headers.get('x-request-id')).toBeTruthy();
      expect(received(primary)).toEqual([expect.objectContaining({ role: 'user', text: 'Hello there, gateway.' })]);
    });

    it('x-api-key with anthropic-version and anthropic-beta headers works as well as the SDK’s Bearer', async () => {
      const answer = await rawPost(messagesUrl(), { ...keyHeaders(), 'anthropic-beta': 'prompt-caching-2024-07-31' }, {
        model: CHAT,
        max_tokens: 50,
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(answer.status).toBe(200);
      expect(answer.json).toMatchObject({ type: 'message', content: [{ type: 'text' }] });
    });

    it('stream: the SDK assembles the same message; the raw SSE has event lines in the exact order with 0-based indices', async () => {
      const stream = client.messages.stream({ model: CHAT, max_tokens: 200, messages: [{ role: 'user', content: 'Stream to me.' }] });
      const texts: string[] = [];
      stream.on('text', (text) => texts.push(text));
      const message = await stream.finalMessage();
      expect(texts.join('')).toBe('Hello from the fake upstream.');
      expect(texts.length).toBeGreaterThan(1);
      expect(message).toMatchObject({ model: CHAT, stop_reason: 'end_turn', content: [{ type: 'text', text: 'Hello from the fake upstream.' }] });
      expect(message.usage.output_tokens).toBeGreaterThan(0);
      expect(message.usage.input_tokens).toBeGreaterThan(0);

      const raw = await rawPost(messagesUrl(), keyHeaders(), { model: CHAT, max_tokens: 200, stream: true, messages: [{ role: 'user', content: 'Stream to me.' }] });
      expect(raw.status).toBe(200);
      expect(raw.headers.get('request-id')).toBeTruthy();
      expect(expectWellFormedStream(raw.events)).toEqual(['text']);
      expect(raw.events[0]!.data.message.id).toBe(`msg_${raw.headers.get('request-id')!.slice(4)}`);
      expect(raw.events.at(-2)!.data).toMatchObject({ delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: message.usage.output_tokens } });
    });

    it('tools round trip: tool_use (stop_reason tool_use, input parsed), tool_result back, then the answer', async () => {
      const tools: Anthropic.Tool[] = [
        { name: 'weather', description: 'Weather by city', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
      ];
      primary.script({ toolCalls: [{ id: 'call_paris', name: 'weather', arguments: '{"city":"Paris"}' }, { id: 'call_rome', name: 'weather', arguments: '{"city":"Rome"}' }] });
      const question: Anthropic.MessageParam = { role: 'user', content: 'Weather in Paris and Rome?' };
      const first = await client.messages.create({ model: CHAT, max_tokens: 300, tools, tool_choice: { type: 'auto' }, messages: [question] });
      expect(first.stop_reason).toBe('tool_use');
      const uses = first.content.filter((block): block is Anthropic.ToolUseBlock => block.type === 'tool_use');
      expect(uses.map((use) => [use.id, use.name, use.input])).toEqual([
        ['call_paris', 'weather', { city: 'Paris' }],
        ['call_rome', 'weather', { city: 'Rome' }],
      ]);

      primary.script({ text: 'Sunny in Paris, rain in Rome.' });
      const second = await client.messages.create({
        model: CHAT,
        max_tokens: 300,
        tools,
        messages: [
          question,
          { role: 'assistant', content: first.content },
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 'call_paris', content: 'sunny' },
              { type: 'tool_result', tool_use_id: 'call_rome', content: [{ type: 'text', text: 'rain' }], is_error: false },
              { type: 'text', text: 'Summarise both.' },
            ],
          },
        ],
      });
      expect(second).toMatchObject({ stop_reason: 'end_turn', content: [{ type: 'text', text: 'Sunny in Paris, rain in Rome.' }] });
      const conversation = received(primary, 1);
      expect(conversation.map((message) => [message.role, message.toolCallIds, message.toolResultFor])).toEqual([
        ['user', [], ''],
        ['assistant', ['call_paris', 'call_rome'], ''],
        ['tool', [], 'call_paris'],
        ['tool', [], 'call_rome'],
        ['user', [], ''],
      ]);
      expect(conversation.slice(2).map((message) => message.text)).toEqual(['sunny', 'rain', 'Summarise both.']);

      // A tool_result answering no earlier tool_use never reaches a provider.
      const unmatched = await client.messages
        .create({ model: CHAT, max_tokens: 50, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_nowhere', content: 'x' }] }] })
        .then(() => undefined, (error: unknown) => error as InstanceType<typeof Anthropic.APIError>);
      expect(unmatched).toBeInstanceOf(Anthropic.BadRequestError);
      expect(unmatched!.apiMessage).toMatch(/^body\.messages\.0\.content\.0\.tool_use_id: no earlier tool call/);
      expect(primary.requests).toHaveLength(2);
    });

    it('streamed tool calls: each its own block, input_json_delta as the pieces arrive, stop_reason tool_use', async () => {
      primary.script({ toolCalls: [{ id: 'call_a', name: 'weather', arguments: '{"city":"Oslo"}' }, { id: 'call_b', name: 'time', arguments: '{"zone":"CET"}' }] });
      const raw = await rawPost(messagesUrl(), keyHeaders(), {
        model: CHAT,
        max_tokens: 300,
        stream: true,
        tools: [
          { name: 'weather', input_schema: { type: 'object' } },
          { name: 'time', input_schema: { type: 'object' } },
        ],
        messages: [{ role: 'user', content: 'Weather and time in Oslo?' }],
      });
      expect(expectWellFormedStream(raw.events)).toEqual(['tool_use', 'tool_use']);
      const starts = raw.events.filter(({ event }) => event === 'content_block_start').map(({ data }) => data.content_block);
      expect(starts).toEqual([
        { type: 'tool_use', id: 'call_a', name: 'weather', input: {} },
        { type: 'tool_use', id: 'call_b', name: 'time', input: {} },
      ]);
      const pieces = (index: number) => raw.events.filter(({ data }) => data.index === index && data.delta?.type === 'input_json_delta').map(({ data }) => data.delta.partial_json);
      expect(pieces(0).join('')).toBe('{"city":"Oslo"}');
      expect(pieces(1).join('')).toBe('{"zone":"CET"}');
      expect(raw.events.at(-2)!.data.delta.stop_reason).toBe('tool_use');

      primary.script({ toolCalls: [{ id: 'call_c', name: 'weather', arguments: '{"city":"Bergen"}' }] });
      const message = await client.messages
        .stream({ model: CHAT, max_tokens: 300, tools: [{ name: 'weather', input_schema: { type: 'object' } }], messages: [{ role: 'user', content: 'Bergen?' }] })
        .finalMessage();
      expect(message.stop_reason).toBe('tool_use');
      expect(message.content).toEqual([{ type: 'tool_use', id: 'call_c', name: 'weather', input: { city: 'Bergen' } }]);
    });

    it('system prompt first, and a mid-conversation system message where it stands', async () => {
      await client.messages.create({
        model: CHAT,
        max_tokens: 100,
        system: [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }],
        messages: [
          { role: 'user', content: 'Hi.' },
          { role: 'assistant', content: 'Hello.' },
          { role: 'system', content: 'From now on, answer in French.' },
          { role: 'user', content: 'How are you?' },
        ],
      });
      // A chat-completions provider takes a system message anywhere; the Messages API only a leading
      // `system`, so the Anthropic adapter puts a later one, marked, into the user turn where it stands.
      const later =
        kind.kind === 'anthropic'
          ? [['user', '<system>\nFrom now on, answer in French.\n</system>\nHow are you?']]
          : [['system', 'From now on, answer in French.'], ['user', 'How are you?']];
      expect(received(primary).map((message) => [message.role, message.text])).toEqual([
        ['system', 'You are terse.'],
        ['user', 'Hi.'],
        ['assistant', 'Hello.'],
        ...later,
      ]);
    });

    it('url documents are fetched through the media service and reach a model without file input as text', async () => {
      await client.messages.create({
        model: CHAT,
        max_tokens: 100,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'document', source: { type: 'url', url: `${filesUrl}/report.pdf` }, title: 'report.pdf' },
              { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'Inline plain text.' }, title: 'inline.txt', context: 'from the wiki' },
              { type: 'text', text: 'Summarise both.' },
            ],
          },
        ],
      });
      const [user] = received(primary);
      expect(user!.text).toContain(pdfText);
      expect(user!.text).toContain('report.pdf');
      expect(user!.text).toContain('Inline plain text.');
      expect(user!.text).toContain('from the wiki');
      expect(JSON.stringify(primary.requests[0]!.body)).not.toContain(filesUrl);

      const missing = await client.messages
        .create({ model: CHAT, max_tokens: 100, messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }, { type: 'document', source: { type: 'url', url: `${filesUrl}/gone.pdf` } }] }] })
        .then(() => undefined, (error: unknown) => error as InstanceType<typeof Anthropic.APIError>);
      expect(missing?.status).toBe(400);
      expect(missing?.apiMessage).toMatch(/^body\.messages\.0\.content\.1\.source\.url: /);
      expect(primary.requests).toHaveLength(1);
    });
  });

  describe('reasoning', () => {
    const thinking = 'The user greets me; a short friendly answer fits.';

    it.each([false, true])('thinking comes back before the text (stream: %s); replayed, the provider’s own goes back and a tampered one never leaves the gateway', async (stream) => {
      primary.script(kind.withReasoning(thinking, 'Hello!', stream));
      const question: Anthropic.MessageParam = { role: 'user', content: 'Hi!' };
      const params = { model: CHAT, max_tokens: 4096, thinking: { type: 'enabled' as const, budget_tokens: 2048 }, messages: [question] };
      const answer = stream ? await client.messages.stream(params).finalMessage() : await client.messages.create(params);
      expect(answer.content.map((block) => block.type)).toEqual(['thinking', 'text']);
      const thought = answer.content[0] as Anthropic.ThinkingBlock;
      expect(thought.thinking).toBe(thinking);
      // The budget, or for a provider that takes a level the one it implies (2048 → low, which the model has).
      expect(kind.reasoningAsked(primary.requests[0]!)).toMatchObject(kind.kind === 'anthropic' ? { budget: 2048 } : { effort: 'low' });
      if (kind.signsReasoning) expect(thought.signature).toMatch(/^gw1\./);
      else expect(thought.signature).toBe('');

      const tampered: Anthropic.ThinkingBlockParam = { type: 'thinking', thinking: 'forged secret thought', signature: thought.signature ? `${thought.signature}x` : 'gw1.Zm9yZ2Vk.AAAA.forged' };
      // No thinking in this answer (the Anthropic fake would think again, thinking being enabled).
      primary.script({ text: 'Fine, thanks.', thinking: false } as FakeBehaviour);
      const replay = await client.messages.create({
        ...params,
        messages: [question, { role: 'assistant', content: [tampered, ...answer.content] }, { role: 'user', content: 'How are you?' }],
      });
      expect(replay.content).toEqual([{ type: 'text', text: 'Fine, thanks.' }]);
      const assistant = received(primary, 1).find((message) => message.role === 'assistant')!;
      expect(assistant.text).toBe('Hello!');
      // Unsigned reasoning has no issuer tag: foreign like any other, it is dropped (text included).
      expect(assistant.reasoning).toEqual(kind.signsReasoning ? [thinking] : []);
      expect(JSON.stringify(primary.requests[1]!.body)).not.toContain('forged secret thought');
    });
    // Needs an upstream that signs reasoning and checks it (the Anthropic fake): chat-completions
    // providers never receive reasoning at all, so there is nothing to observe with them.
    it.runIf(kind.signsReasoning)(
      'provenance: a tool loop whose thinking came from one provider, replayed while it is down, reaches the other without it (200); back up, it gets its own thinking intact',
      async () => {
        const params = {
          model: DUAL,
          max_tokens: 4096,
          thinking: { type: 'enabled' as const, budget_tokens: 2048 },
          tools: [{ name: 'weather', input_schema: { type: 'object' as const, properties: { city: { type: 'string' } } } }],
        };
        const question: Anthropic.MessageParam = { role: 'user', content: 'Weather in Paris?' };
        const toolTurn = { thinking, toolCalls: [{ id: 'toolu_paris', name: 'weather', arguments: '{"city":"Paris"}' }] } as FakeBehaviour;
        primary.setFallback(toolTurn);
        secondary.setFallback(toolTurn);
        const first = await client.messages.create({ ...params, messages: [question] });
        expect(first.stop_reason).toBe('tool_use');
        expect(first.content[0]).toMatchObject({ type: 'thinking', thinking });
        const issuer = primary.requests.length > 0 ? primary : secondary;
        const other = issuer === primary ? secondary : primary;
        const loop: Anthropic.MessageParam[] = [
          question,
          { role: 'assistant', content: first.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_paris', content: 'sunny' }] },
        ];

        for (const upstream of [issuer, other]) upstream.reset();
        issuer.setFallback({ status: 529 });
        other.setFallback({ text: 'Sunny in Paris.' });
        const elsewhere = await client.messages.create({ ...params, messages: loop });
        expect(elsewhere.content.at(-1)).toMatchObject({ type: 'text', text: 'Sunny in Paris.' });
        expect(other.requests.length).toBeGreaterThan(0);
        expect(kind.conversation(other.requests.at(-1)!).flatMap((message) => message.reasoning)).toEqual([]);

        for (const upstream of [issuer, other]) upstream.reset();
        issuer.setFallback({ text: 'Sunny in Paris.' });
        other.setFallback({ status: 529 });
        const home = await client.messages.create({ ...params, messages: loop });
        expect(home.content.at(-1)).toMatchObject({ type: 'text', text: 'Sunny in Paris.' });
        // The fake refuses thinking whose signature it did not make: a 200 here means it came back unchanged.
        expect(kind.conversation(issuer.requests.at(-1)!).flatMap((message) => message.reasoning)).toEqual([thinking]);
      },
    );
  });

  describe('count_tokens', () => {
    it('counts with the gateway tokenizer, free of charge; more text counts more', async () => {
      const before = await harness.charges(QUIET);
      const words = (count: number) => Array.from({ length: count }, () => 'hello').join(' ');
      const count = async (text: string, system?: string) =>
        (await client.messages.countTokens({ model: QUIET, messages: [{ role: 'user', content: text }], ...(system ? { system } : {}) })).input_tokens;
      const hundred = await count(words(100));
      const twoHundred = await count(words(200));
      expect(hundred).toBeGreaterThan(100);
      expect(twoHundred - hundred).toBeGreaterThanOrEqual(95);
      expect(twoHundred - hundred).toBeLessThanOrEqual(105);
      expect(await count(words(100), 'You are a careful assistant.')).toBeGreaterThan(hundred + 5);
      const withTool = await client.messages.countTokens({
        model: QUIET,
        tools: [{ name: 'weather', description: 'The weather of a city, today and tomorrow', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
        messages: [{ role: 'user', content: words(100) }],
      });
      expect(withTool.input_tokens).toBeGreaterThan(hundred + 10);
      expect(primary.requests).toHaveLength(0);
      // Nothing charged: a request served after the counts is the model's only new charge.
      await oneCharge(QUIET, () => client.messages.create({ model: QUIET, max_tokens: 20, messages: [{ role: 'user', content: 'after counting' }] }));
      expect((await harness.charges(QUIET)).requests).toBe(before.requests + 1);
    });

    it('needs an API key and a model that resolves; validates the body like /v1/messages', async () => {
      const url = `${harness.stack.url}/v1/messages/count_tokens`;
      const body = { model: CHAT, messages: [{ role: 'user', content: 'hi' }] };
      const anonymous = await rawPost(url, { 'anthropic-version': '2023-06-01' }, body);
      expect(anonymous.status).toBe(401);
      expect(anonymous.json).toEqual({ type: 'error', error: { type: 'authentication_error', message: expect.any(String) }, request_id: anonymous.headers.get('request-id') });
      expect((await rawPost(url, keyHeaders(), { ...body, model: 'testco/unknown' })).json.error.type).toBe('invalid_request_error');
      expect((await rawPost(url, keyHeaders(), { ...body, model: 'testco/premium' })).status).toBe(403);
      const invalid = await rawPost(url, keyHeaders(), { model: CHAT, messages: [] });
      expect(invalid.status).toBe(400);
      expect(invalid.json.error.message).toMatch(/^body\.messages: /);
    });
  });

  describe('errors, each in the messages envelope by status', () => {
    async function failure(promise: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
      const error = await promise.then(() => undefined, (caught: unknown) => caught);
      expect(error).toBeInstanceOf(Anthropic.APIError);
      return error as InstanceType<typeof Anthropic.APIError>;
    }
    const ask = (model: string, sdk = client) => sdk.messages.create({ model, max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] });

    it('400 invalid_request_error naming the field, 401 authentication_error, 402 billing_error, 403 permission_error', async () => {
      const invalid = await failure(client.messages.create({ model: CHAT, max_tokens: 50, temperature: 3, messages: [{ role: 'user', content: 'hi' }] } as never));
      expect([invalid.status, invalid.type]).toEqual([400, 'invalid_request_error']);
      expect(invalid.apiMessage).toMatch(/^body\.temperature: /);
      expect(invalid.requestID).toMatch(/^req_/);
      const unknownModel = await failure(ask('testco/unknown'));
      expect([unknownModel.status, unknownModel.type]).toEqual([400, 'invalid_request_error']);

      const unauthorized = await failure(ask(CHAT, anthropicClient(harness.stack.url, 'sk-not-a-real-key')));
      expect(unauthorized).toBeInstanceOf(Anthropic.AuthenticationError);
      expect(unauthorized.type).toBe('authentication_error');

      const broke = await failure(ask(CHAT, anthropicClient(harness.stack.url, poorKey)));
      expect([broke.status, broke.type]).toEqual([402, 'billing_error']);

      const forbidden = await failure(ask('testco/premium'));
      expect(forbidden).toBeInstanceOf(Anthropic.PermissionDeniedError);
      expect(forbidden.type).toBe('permission_error');
      expect(primary.requests).toHaveLength(0);
    });

    it('404 not_found_error for an unknown route under /v1/messages and a retired model (410)', async () => {
      const batches = await failure(client.messages.batches.list());
      expect(batches).toBeInstanceOf(Anthropic.NotFoundError);
      expect(batches.type).toBe('not_found_error');
      expect(batches.requestID).toMatch(/^req_/);
      const retired = await failure(ask('testco/retired'));
      expect([retired.status, retired.type]).toEqual([410, 'not_found_error']);
    });

    it('429 rate_limit_error with retry-after', async () => {
      await ask('testco/tight');
      const limited = await failure(ask('testco/tight'));
      expect(limited).toBeInstanceOf(Anthropic.RateLimitError);
      expect(limited.type).toBe('rate_limit_error');
      expect(Number(limited.headers?.get('retry-after'))).toBeGreaterThanOrEqual(1);
    });

    it('503 overloaded_error when no provider can answer, streamed or not, and nothing charged', async () => {
      const before = await harness.charges('testco/nowhere');
      const unary = await failure(ask('testco/nowhere'));
      expect([unary.status, unary.type]).toEqual([503, 'overloaded_error']);
      expect(unary.apiMessage).toBe('No upstream available.');
      const streamed = await failure(client.messages.stream({ model: 'testco/nowhere', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] }).finalMessage());
      expect([streamed.status, streamed.type]).toEqual([503, 'overloaded_error']);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(await harness.charges('testco/nowhere')).toEqual(before);
    });
  });

  describe('failover and failures', () => {
    /** The first attempt of the next request (whichever provider the strategy picks) meets `fault`. */
    function failFirstAttempt(fault: FakeBehaviour) {
      let used = false;
      const behaviour = () => {
        if (used) return {};
        used = true;
        return fault;
      };
      primary.setFallback(behaviour);
      secondary.setFallback(behaviour);
    }
    const attempts = () => primary.requests.length + secondary.requests.length;

    it.each<[string, FakeBehaviour]>([
      ['HTTP 500', { status: 500 }],
      ['a connection reset', { reset: true }],
    ])('before the first content (%s) the other provider answers, charged once', async (_name, fault) => {
      failFirstAttempt(fault);
      await oneCharge(DUAL, async () => {
        const message = await client.messages.create({ model: DUAL, max_tokens: 100, messages: [{ role: 'user', content: 'Fail over.' }] });
        expect(message.content).toEqual([{ type: 'text', text: 'Hello from the fake upstream.' }]);
      });
      expect(attempts()).toBe(2);
    });

    it.each<[string, FakeBehaviour]>([
      ['HTTP 500', { status: 500 }],
      ['a cut before the first chunk', { cutAfterChunks: 0 }],
    ])('streamed, before the first content (%s) the other provider answers, charged once', async (_name, fault) => {
      failFirstAttempt(fault);
      await oneCharge(DUAL, async () => {
        const message = await client.messages.stream({ model: DUAL, max_tokens: 100, messages: [{ role: 'user', content: 'Fail over.' }] }).finalMessage();
        expect(message.content).toEqual([{ type: 'text', text: 'Hello from the fake upstream.' }]);
      });
      expect(attempts()).toBe(2);
    });

    it('a slow first token: the stream is committed with message_start and pings, and still fails over before content', async () => {
      failFirstAttempt({ latencyMs: PING_INTERVAL_MS * 2 + 500, status: 500 });
      let raw!: Awaited<ReturnType<typeof rawPost>>;
      await oneCharge(DUAL, async () => {
        raw = await rawPost(messagesUrl(), keyHeaders(), { model: DUAL, max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'Take your time.' }] });
      });
      expect(raw.status).toBe(200);
      const names = raw.events.map(({ event }) => event);
      expect(names.slice(0, 3)).toEqual(['message_start', 'ping', 'ping']);
      expect(expectWellFormedStream(raw.events)).toEqual(['text']);
      expect(attempts()).toBe(2);
    });

    it('after the first content a failure ends the stream with an error event (never message_stop); the SDK throws; charged once', async () => {
      primary.setFallback({ cutAfterChunks: 1, chunkCount: 3 });
      let raw!: Awaited<ReturnType<typeof rawPost>>;
      await oneCharge(BILLED, async () => {
        raw = await rawPost(messagesUrl(), keyHeaders(), { model: BILLED, max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'Break.' }] });
      });
      const names = raw.events.map(({ event }) => event);
      expect(names).toContain('content_block_delta');
      expect(names.at(-1)).toBe('error');
      expect(names).not.toContain('message_stop');
      expect(raw.events.at(-1)!.data.error).toEqual({ type: expect.stringMatching(/^(api_error|overloaded_error)$/), message: expect.any(String) });

      await oneCharge(BILLED, async () => {
        let text = '';
        const stream = client.messages.stream({ model: BILLED, max_tokens: 100, messages: [{ role: 'user', content: 'Break again.' }] });
        stream.on('text', (piece) => (text += piece));
        const error = await stream.finalMessage().then(() => undefined, (caught: unknown) => caught);
        expect(error).toBeInstanceOf(Anthropic.APIError);
        expect(text.length).toBeGreaterThan(0);
        expect(text.length).toBeLessThan('Hello from the fake upstream.'.length);
      });
    });
  });

  describe('billing identity', () => {
    const conversation = { system: 'You are terse.', user: 'What is the capital of France?' };
    const chatParams = { model: BILLED, max_tokens: 100, messages: [{ role: 'system' as const, content: conversation.system }, { role: 'user' as const, content: conversation.user }] };
    const messagesParams = { model: BILLED, max_tokens: 100, system: conversation.system, messages: [{ role: 'user' as const, content: conversation.user }] };

    const exchanges: Record<string, () => Promise<unknown>> = {
      'chat': () => harness.client.chat.completions.create(chatParams),
      'chat streamed': async () => {
        for await (const _chunk of await harness.client.chat.completions.create({ ...chatParams, stream: true })) {
          // drained
        }
      },
      'messages': () => client.messages.create(messagesParams),
      'messages streamed': () => client.messages.stream(messagesParams).finalMessage(),
    };

    it('the same exchange costs exactly the same via chat and messages, streamed or not', async () => {
      const costs: Record<string, bigint> = {};
      for (const [name, exchange] of Object.entries(exchanges)) costs[name] = await oneCharge(BILLED, exchange);
      expect(costs.chat).toBeGreaterThan(0n);
      expect(new Set(Object.values(costs)).size, JSON.stringify(Object.fromEntries(Object.entries(costs).map(([name, cost]) => [name, formatCredits(cost)])))).toBe(1);
      // The upstream was sent the same conversation each time (its usage counts what it received).
      const sent = primary.requests.map((request) => JSON.stringify(kind.conversation(request)));
      expect(new Set(sent).size).toBe(1);
    });

    it('with prompt-cache reads: the same cost again, and messages usage reports input_tokens without the cached part', async () => {
      primary.setFallback({ usage: { prompt_tokens: 40, completion_tokens: 9, cached_tokens: 30 } });
      const costs: Record<string, bigint> = {};
      for (const [name, exchange] of Object.entries(exchanges)) costs[name] = await oneCharge(BILLED, exchange);
      expect(new Set(Object.values(costs)).size).toBe(1);
      // 10 uncached + 30 cached prompt tokens, each at its own price, and 9 output tokens.
      expect(costs.chat).toBe(10n * parseCredits(INPUT_PRICE) + 30n * parseCredits(CACHED_PRICE) + 9n * parseCredits(OUTPUT_PRICE));
      const expectedUsage = { input_tokens: 10, cache_read_input_tokens: 30, cache_creation_input_tokens: 0, output_tokens: 9 };
      const unary = await oneCharge(BILLED, async () => expect((await client.messages.create(messagesParams)).usage).toMatchObject(expectedUsage));
      const streamed = await oneCharge(BILLED, async () => expect((await client.messages.stream(messagesParams).finalMessage()).usage).toMatchObject(expectedUsage));
      expect([unary, streamed]).toEqual([costs.chat, costs.chat]);
    });
  });
});
