import Anthropic from '@anthropic-ai/sdk';
import { beforeAll, describe, expect, it } from 'vitest';
import type { FakeBehaviour, FakeUpstream } from '@gateway/testing';
import { expectWellFormedStream, rawPost, UPSTREAM_KINDS } from './messages-e2e-harness.js';
import { CHAT, DUAL, messagesSuite, QUIET } from './messages-e2e-suite.js';
import type { ChatHarness } from './chat-e2e-harness.js';

/*
 * POST /v1/messages and /v1/messages/count_tokens through the whole stack, driven by the real
 * `@anthropic-ai/sdk` (baseURL = the gateway root) and by raw HTTP where the wire itself is the point
 * (SSE event order, headers). Every test runs against each upstream kind behind the gateway
 * (messages-e2e-harness.ts); what the fake upstream received is what the assertions read.
 */

describe.each(UPSTREAM_KINDS)('messages dialect over the $kind fake upstream', (kind) => {
  const suite = messagesSuite(kind);
  const { pdfText, messagesUrl, keyHeaders, received, oneCharge } = suite;
  let primary: FakeUpstream;
  let secondary: FakeUpstream;
  let harness: ChatHarness;
  let client: Anthropic;
  let filesUrl = '';
  beforeAll(() => {
    ({ primary, secondary, harness, client, filesUrl } = suite);
  });

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
});
