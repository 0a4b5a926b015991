import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFakeAnthropicUpstream, type FakeAnthropicUpstream } from './fake-anthropic-upstream.js';
import type { FakeUpstream } from './fake-upstream.js';

const weatherTool = {
  name: 'get_weather',
  description: 'Weather for a city',
  input_schema: { type: 'object' as const, properties: { city: { type: 'string' }, days: { type: 'integer' } } },
};

interface SseEvent { event: string; data: any }

function parseEvents(text: string): SseEvent[] {
  return text.split('\n\n').filter((frame) => frame.trim() !== '').map((frame) => {
    const lines = frame.split('\n');
    const event = lines.find((line) => line.startsWith('event: '))!.slice('event: '.length);
    const data = JSON.parse(lines.find((line) => line.startsWith('data: '))!.slice('data: '.length));
    return { event, data };
  });
}

/** Reads an SSE body until it ends, fails, or `enough` holds; returns the complete events and the failure. */
async function readEvents(reader: ReadableStreamDefaultReader<Uint8Array>, enough: (events: SseEvent[]) => boolean = () => false) {
  const decoder = new TextDecoder();
  let text = '';
  for (;;) {
    let chunk: Awaited<ReturnType<typeof reader.read>>;
    try { chunk = await reader.read(); } catch (error) { return { events: parseEvents(text), failure: error, ended: false }; }
    if (chunk.done) return { events: parseEvents(text), failure: undefined, ended: true };
    text += decoder.decode(chunk.value, { stream: true });
    const complete = parseEvents(text.slice(0, text.lastIndexOf('\n\n') + 2));
    if (enough(complete)) return { events: complete, failure: undefined, ended: false };
  }
}

describe('fake Anthropic upstream', () => {
  let upstream: FakeAnthropicUpstream;
  let client: Anthropic;
  const rawPost = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${upstream.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'k', 'anthropic-version': '2023-06-01', ...headers },
      body: JSON.stringify(body),
    });
  const hello = { model: 'claude-fake', max_tokens: 256, messages: [{ role: 'user' as const, content: 'hello' }] };

  beforeAll(async () => {
    upstream = await startFakeAnthropicUpstream({ apiKey: 'k' });
    client = new Anthropic({ apiKey: 'k', baseURL: upstream.url, maxRetries: 0 });
  });
  afterAll(() => upstream.close());
  beforeEach(() => upstream.reset());

  it('answers a message with the SDK at the root base URL, recording the request', async () => {
    upstream.script({ text: 'hi there', usage: { input_tokens: 7, output_tokens: 2, cache_creation_input_tokens: 5, cache_read_input_tokens: 11 } });
    const message = await client.messages.create({ ...hello, system: 'Be brief.', metadata: { user_id: 'u1' } });
    expect(message).toMatchObject({
      type: 'message', role: 'assistant', model: 'claude-fake', stop_reason: 'end_turn', stop_sequence: null,
      content: [{ type: 'text', text: 'hi there' }],
      usage: { input_tokens: 7, output_tokens: 2, cache_creation_input_tokens: 5, cache_read_input_tokens: 11 },
    });
    expect(message.id).toMatch(/^msg_/);
    expect(message._request_id).toMatch(/^req_/);
    const recorded = upstream.requests[0]!;
    expect(recorded).toMatchObject({ method: 'POST', path: '/v1/messages', body: { model: 'claude-fake', system: 'Be brief.' } });
    // SDK 1.x speaks API version 2026-10-21 and sends the key as a bearer token (0.x: x-api-key, 2023-06-01).
    expect(recorded.headers.authorization).toBe('Bearer k');
    expect(recorded.headers['anthropic-version']).toBe('2026-10-21');
  });

  it('takes an OpenAI-fake script unchanged: cached prompt tokens leave input_tokens, tool calls become tool_use', async () => {
    const asOpenAiFake: FakeUpstream = upstream;
    asOpenAiFake.script({
      toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }],
      usage: { prompt_tokens: 100, completion_tokens: 9, cached_tokens: 60 },
      finishReason: 'tool_calls',
    });
    const message = await client.messages.create({ ...hello, tools: [weatherTool] });
    expect(message.content).toEqual([{ type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } }]);
    expect(message.stop_reason).toBe('tool_use');
    expect(message.usage).toMatchObject({ input_tokens: 40, cache_read_input_tokens: 60, output_tokens: 9 });
  });

  it('streams named events in the API order that the SDK assembles into the final message', async () => {
    upstream.script({ text: 'abcdef', chunkCount: 3, usage: { input_tokens: 12, output_tokens: 4, cache_read_input_tokens: 3 } }, { text: 'abcdef', chunkCount: 3 });
    const texts: string[] = [];
    const stream = client.messages.stream(hello).on('text', (delta) => texts.push(delta));
    const message = await stream.finalMessage();
    expect(texts).toEqual(['ab', 'cd', 'ef']);
    expect(message).toMatchObject({ content: [{ type: 'text', text: 'abcdef' }], stop_reason: 'end_turn' });
    expect(message.usage).toMatchObject({ input_tokens: 12, output_tokens: 4, cache_read_input_tokens: 3 });

    const response = await rawPost({ ...hello, stream: true });
    expect(response.headers.get('content-type')).toContain('text/event-stream');
    expect(response.headers.get('request-id')).toMatch(/^req_/);
    const { events, ended } = await readEvents(response.body!.getReader());
    expect(ended).toBe(true);
    expect(events.map((event) => event.event)).toEqual([
      'message_start', 'content_block_start', 'ping', 'content_block_delta', 'content_block_delta', 'content_block_delta',
      'content_block_stop', 'message_delta', 'message_stop',
    ]);
    expect(events.every((event) => event.data.type === event.event)).toBe(true);
    expect(events[0]!.data.message).toMatchObject({ content: [], stop_reason: null, usage: { output_tokens: 1 } });
    expect(events.at(-2)!.data.delta).toEqual({ stop_reason: 'end_turn', stop_sequence: null });
  });

  it('streams signed thinking and tool input in pieces; signed thinking passes back, altered or foreign thinking is refused', async () => {
    const thinking = { type: 'enabled' as const, budget_tokens: 1024 };
    upstream.script({ text: 'Let me check.', toolCalls: [{ id: 'toolu_1', name: 'get_weather', arguments: '{"city":"Paris","days":3}' }] });
    const deltaTypes: string[] = [];
    const stream = client.messages
      .stream({ ...hello, max_tokens: 2048, thinking, tools: [weatherTool] })
      .on('streamEvent', (event) => { if (event.type === 'content_block_delta') deltaTypes.push(event.delta.type); });
    const message = await stream.finalMessage();
    expect(message.stop_reason).toBe('tool_use');
    expect(message.content.map((block) => block.type)).toEqual(['thinking', 'text', 'tool_use']);
    const [thought, , toolUse] = message.content as [Anthropic.ThinkingBlock, Anthropic.TextBlock, Anthropic.ToolUseBlock];
    expect(thought.thinking.length).toBeGreaterThan(0);
    expect(thought.signature).toBe(upstream.signThinking(thought.thinking));
    expect(toolUse).toMatchObject({ id: 'toolu_1', name: 'get_weather', input: { city: 'Paris', days: 3 } });
    expect(deltaTypes.filter((type) => type === 'input_json_delta').length).toBe(3);
    expect(deltaTypes).toContain('signature_delta');

    const toolResult = { role: 'user' as const, content: [{ type: 'tool_result' as const, tool_use_id: 'toolu_1', content: 'sunny' }] };
    const withContent = (content: unknown) => ({
      ...hello, max_tokens: 2048, thinking, tools: [weatherTool],
      messages: [hello.messages[0]!, { role: 'assistant' as const, content: content as Anthropic.ContentBlockParam[] }, toolResult],
    });
    await expect(client.messages.create(withContent(message.content))).resolves.toMatchObject({ type: 'message' });

    const altered = [{ ...thought, thinking: `${thought.thinking}!` }, toolUse];
    await expect(client.messages.create(withContent(altered))).rejects.toMatchObject({ status: 400, type: 'invalid_request_error', message: expect.stringContaining('Invalid `signature`') });

    const other = await startFakeAnthropicUpstream();
    try {
      const foreign = [{ type: 'thinking', thinking: 'elsewhere', signature: other.signThinking('elsewhere') }, toolUse];
      await expect(client.messages.create(withContent(foreign))).rejects.toBeInstanceOf(Anthropic.BadRequestError);
    } finally {
      await other.close();
    }
    // Dropping the reasoning breaks a thinking tool loop, as with the API; without thinking it is fine.
    await expect(client.messages.create(withContent([toolUse]))).rejects.toMatchObject({ status: 400, message: expect.stringContaining('Expected `thinking`') });
    const { thinking: _unused, ...withoutThinking } = withContent([toolUse]);
    await expect(client.messages.create(withoutThinking)).resolves.toMatchObject({ type: 'message' });
  });

  it('issues redacted thinking it accepts back, and refuses made-up redacted data', async () => {
    upstream.script({ redactedThinking: true, text: 'done' });
    const message = await client.messages.create(hello);
    expect(message.content.map((block) => block.type)).toEqual(['redacted_thinking', 'text']);
    const turn = (content: unknown) => ({ ...hello, messages: [hello.messages[0]!, { role: 'assistant' as const, content: content as Anthropic.ContentBlockParam[] }, { role: 'user' as const, content: 'more' }] });
    await expect(client.messages.create(turn(message.content))).resolves.toMatchObject({ type: 'message' });
    await expect(client.messages.create(turn([{ type: 'redacted_thinking', data: Buffer.alloc(56).toString('base64') }, { type: 'text', text: 'x' }])))
      .rejects.toMatchObject({ status: 400, message: expect.stringContaining('redacted_thinking') });
  });

  it('surfaces each scripted status as the SDK typed error with the API error type and a request id', async () => {
    const cases: [number, new (...args: any[]) => Error, string][] = [
      [400, Anthropic.BadRequestError, 'invalid_request_error'],
      [401, Anthropic.AuthenticationError, 'authentication_error'],
      [403, Anthropic.PermissionDeniedError, 'permission_error'],
      [404, Anthropic.NotFoundError, 'not_found_error'],
      [413, Anthropic.ContentTooLargeError, 'request_too_large'],
      [429, Anthropic.RateLimitError, 'rate_limit_error'],
      [500, Anthropic.InternalServerError, 'api_error'],
      [529, Anthropic.OverloadedError, 'overloaded_error'],
    ];
    for (const [status, errorClass, type] of cases) {
      upstream.script({ status });
      const error = (await client.messages.create(hello).catch((caught: unknown) => caught)) as InstanceType<typeof Anthropic.APIError>;
      expect(error, `status ${status}`).toBeInstanceOf(errorClass);
      expect(error).toMatchObject({ status, type, error: { type: 'error', error: { type } } });
      expect(error.requestID).toMatch(/^req_/);
      expect(error.headers?.get('retry-after') ?? null).toBe(status === 429 ? '1' : null);
    }
  });

  it('refuses an anthropic-beta value the API does not know, naming it, and takes the ones it knows', async () => {
    const refused = await rawPost(hello, { 'anthropic-beta': 'interleaved-thinking-2025-05-14,made-up-beta-2099-01-01' });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as any).error.message).toMatch(/Unexpected value\(s\) `made-up-beta-2099-01-01` for the `anthropic-beta` header/);
    expect((await rawPost(hello, { 'anthropic-beta': 'interleaved-thinking-2025-05-14, fine-grained-tool-streaming-2025-05-14' })).status).toBe(200);
  });

  it('refuses what the API refuses: headers, required fields, unknown fields, roles, tool pairing, ids and names', async () => {
    const refusal = async (body: unknown, headers?: Record<string, string>) => {
      const response = await rawPost(body, headers);
      const json = (await response.json()) as any;
      expect(response.headers.get('request-id')).toMatch(/^req_/);
      expect(json.type).toBe('error');
      return { status: response.status, type: json.error.type as string, message: json.error.message as string };
    };
    expect(await refusal(hello, { 'anthropic-version': '' })).toMatchObject({ status: 400, message: expect.stringContaining('anthropic-version') });
    expect(await refusal(hello, { 'x-api-key': 'wrong' })).toMatchObject({ status: 401, type: 'authentication_error' });
    expect(await refusal(hello, { 'x-api-key': '' })).toMatchObject({ status: 401, type: 'authentication_error' });
    const { max_tokens: _dropped, ...noMaxTokens } = hello;
    expect(await refusal(noMaxTokens)).toEqual({ status: 400, type: 'invalid_request_error', message: 'max_tokens: Field required' });
    expect((await refusal({ ...hello, n: 2 })).message).toBe('n: Extra inputs are not permitted');
    expect((await refusal({ ...hello, seed: 7 })).message).toBe('seed: Extra inputs are not permitted');
    expect((await refusal({ ...hello, output_config: { effort: 'extreme' } })).message).toContain('output_config.effort');
    expect((await refusal({ ...hello, output_config: { verbosity: 'low' } })).message).toBe('output_config.verbosity: Extra inputs are not permitted');
    expect((await refusal({ ...hello, temperature: 1.5 })).message).toContain('temperature');
    expect((await refusal({ ...hello, messages: [{ role: 'assistant', content: 'hi' }] })).message).toContain('first message');
    expect((await refusal({ ...hello, messages: [{ role: 'user', content: [{ type: 'text', text: ' ' }] }] })).message).toContain('non-whitespace');
    expect((await refusal({ ...hello, messages: [{ role: 'user', content: 'hi', name: 'bob' }] })).message).toBe('messages.0.name: Extra inputs are not permitted');
    expect((await refusal({ ...hello, tools: [{ ...weatherTool, name: 'x'.repeat(65) }] })).message).toContain('tools.0.name');
    expect((await refusal({ ...hello, tools: [{ ...weatherTool, name: 'get.weather' }] })).message).toContain('tools.0.name');
    const marked = (mark: unknown, count = 1) => ({ ...hello, messages: [{ role: 'user', content: Array.from({ length: count }, (_, index) => ({ type: 'text', text: `part ${index}`, cache_control: mark })) }] });
    expect((await refusal(marked({ type: 'ephemeral', ttl: '10m' }))).message).toBe("messages.0.content.0.cache_control.ttl: Input should be '5m' or '1h'");
    expect((await refusal(marked({ type: 'persistent' }))).message).toBe("messages.0.content.0.cache_control.type: Input should be 'ephemeral'");
    expect((await refusal(marked({ type: 'ephemeral' }, 5))).message).toBe('A maximum of 4 blocks with cache_control may be provided. Found 5.');
    expect((await rawPost(marked({ type: 'ephemeral', ttl: '1h' }, 4))).status).toBe(200);

    const call = (id: string, input: unknown = { city: 'Oslo' }) => ({ role: 'assistant', content: [{ type: 'tool_use', id, name: 'get_weather', input }] });
    const result = (id: string) => ({ type: 'tool_result', tool_use_id: id, content: 'rain' });
    const loop = (...messages: unknown[]) => ({ ...hello, tools: [weatherTool], messages: [hello.messages[0], ...messages] });
    expect((await refusal(loop(call('toolu_a'), { role: 'user', content: [result('toolu_b')] }))).message).toContain('unexpected `tool_use_id`');
    expect((await refusal(loop(call('toolu_a'), { role: 'user', content: 'no result' }))).message).toContain('without `tool_result`');
    expect((await refusal(loop(call('call.1'), { role: 'user', content: [result('call.1')] }))).message).toContain('messages.1.content.0.id');
    expect((await refusal(loop(call('toolu_a', '{"city":"Oslo"}'), { role: 'user', content: [result('toolu_a')] }))).message).toContain('input');
    expect((await refusal(loop(call('toolu_a'), { role: 'user', content: [{ type: 'text', text: 'here:' }, result('toolu_a')] }))).message).toContain('must come first');
    expect((await refusal({ ...hello, tools: [weatherTool], tool_choice: { type: 'any' }, max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 1024 } })).message).toContain('tool_choice');
    expect(upstream.requests.length).toBeGreaterThan(10);

    // Consecutive messages of one role form one turn (the API merges them): a result split from its text is fine.
    const merged = await rawPost(loop(call('toolu_a'), { role: 'user', content: [result('toolu_a')] }, { role: 'user', content: 'and tomorrow?' }));
    expect(merged.status).toBe(200);
  });

  it('cuts a stream after N deltas, stalls after N deltas, and sends an in-stream error event', async () => {
    upstream.script({ text: 'abcdef', chunkCount: 3, cutAfterChunks: 2 });
    const cut = await readEvents((await rawPost({ ...hello, stream: true })).body!.getReader());
    expect(cut.failure).toBeDefined();
    expect(cut.events.filter((event) => event.event === 'content_block_delta').map((event) => event.data.delta.text)).toEqual(['ab', 'cd']);
    expect(cut.events.some((event) => event.event === 'message_stop')).toBe(false);

    // The SDK reports a body cut after the status as a plain AnthropicError (not an APIError).
    upstream.script({ text: 'abcdef', chunkCount: 3, cutAfterChunks: 3 });
    const cutError = await client.messages.stream(hello).finalMessage().catch((caught: unknown) => caught);
    expect(cutError).toBeInstanceOf(Anthropic.AnthropicError);
    expect(cutError).not.toBeInstanceOf(Anthropic.APIError);

    upstream.script({ text: 'abcdef', chunkCount: 3, cutAfterChunks: 0 });
    const empty = await readEvents((await rawPost({ ...hello, stream: true })).body!.getReader());
    expect(empty).toMatchObject({ events: [], ended: false });

    upstream.script({ text: 'abcdef', chunkCount: 3, streamErrorAfterChunks: 1 });
    const error = await client.messages.stream(hello).finalMessage().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(Anthropic.APIError);
    expect(error).toMatchObject({ type: 'overloaded_error' });

    // A stalled stream stays open after its deltas: only closing the upstream ends the read, with a failure.
    const stalling = await startFakeAnthropicUpstream();
    try {
      stalling.script({ text: 'abcdef', chunkCount: 3, stallAfterChunks: 1 });
      const response = await fetch(`${stalling.url}/v1/messages`, {
        method: 'POST',
        headers: { 'x-api-key': 'any', 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
        body: JSON.stringify({ ...hello, stream: true }),
      });
      const reader = response.body!.getReader();
      const first = await readEvents(reader, (events) => events.some((event) => event.event === 'content_block_delta'));
      expect(first.events.map((event) => event.event)).toEqual(['message_start', 'content_block_start', 'ping', 'content_block_delta']);
      const rest = readEvents(reader);
      await stalling.close();
      expect(await rest).toMatchObject({ events: [], ended: false });
      expect((await rest).failure).toBeDefined();
    } finally {
      await stalling.close();
    }
  });

  it('stalls and resets before answering, as the SDK sees them', async () => {
    upstream.script({ stall: true }, { reset: true });
    await expect(client.messages.create(hello, { timeout: 300 })).rejects.toBeInstanceOf(Anthropic.APIConnectionTimeoutError);
    const reset = await client.messages.create(hello).catch((caught: unknown) => caught);
    expect(reset).toBeInstanceOf(Anthropic.APIConnectionError);
    expect(reset).not.toBeInstanceOf(Anthropic.APIConnectionTimeoutError);
  });

  it('leaves usage out when told, replays recorded bytes, and scripts per request', async () => {
    upstream.script({ usage: 'absent' }, { usage: 'absent' });
    const bare = (await (await rawPost(hello)).json()) as any;
    expect(bare.usage).toBeUndefined();
    const { events } = await readEvents((await rawPost({ ...hello, stream: true })).body!.getReader());
    expect(events.find((event) => event.event === 'message_start')!.data.message.usage).toBeUndefined();
    expect(events.find((event) => event.event === 'message_delta')!.data.usage).toBeUndefined();

    const recorded = [
      'event: message_start', `data: ${JSON.stringify({ type: 'message_start', message: { id: 'msg_rec', type: 'message', role: 'assistant', model: 'm', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1 } } })}`, '',
      'event: content_block_start', 'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}', '',
      'event: content_block_delta', 'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"recorded"}}', '',
      'event: content_block_stop', 'data: {"type":"content_block_stop","index":0}', '',
      'event: message_delta', 'data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":2}}', '',
      'event: message_stop', 'data: {"type":"message_stop"}', '', '',
    ].join('\r\n');
    upstream.script({ replay: { contentType: 'text/event-stream', body: recorded } });
    const replayed = await client.messages.stream(hello).finalMessage();
    expect(replayed).toMatchObject({ id: 'msg_rec', content: [{ type: 'text', text: 'recorded' }], stop_reason: 'max_tokens', usage: { output_tokens: 2 } });

    upstream.setFallback((request) => ({ text: `model was ${request.body.model}`, stopSequence: 'END' }));
    const echoed = await client.messages.create({ ...hello, stop_sequences: ['END'] });
    expect(echoed).toMatchObject({ content: [{ text: 'model was claude-fake' }], stop_reason: 'stop_sequence', stop_sequence: 'END' });
  });
});
