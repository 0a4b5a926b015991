import { describe, expect, it } from 'vitest';
import { encode } from 'gpt-tokenizer';
import type { ChatRequest } from '@gateway/proto';
import { countInputTokens } from '../../usage/token-counter.js';
import type { AdapterStreamPart } from '../provider-adapter.js';
import { GatewayError } from '@gateway/platform';
import { InstructedStructuredOutput, structuredOutputViolation } from '../structured-output.js';
import { SimulatedAdapter } from './simulated-adapter.js';
import { sampleJsonForSchema } from './simulate-json.js';

function request(text: string, extra: Partial<ChatRequest> = {}): ChatRequest {
  return {
    context: undefined, modelId: 'm', routingStrategy: '', endpoint: 'chat.completions', tools: [], stop: [], includeUsage: false, timeoutMs: 0,
    messages: [{ role: 'user', content: [{ part: { $case: 'text', value: text } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false }],
    ...extra,
  };
}

describe('SimulatedAdapter', () => {
  const adapter = new SimulatedAdapter('sim');
  const signal = new AbortController().signal;

  it('answers deterministically from the prompt with honest token counts', async () => {
    const first = await adapter.chat({ upstreamModel: 'sim-1', chat: request('Tell me about gateways') }, signal);
    const again = await adapter.chat({ upstreamModel: 'sim-1', chat: request('Tell me about gateways') }, signal);
    const other = await adapter.chat({ upstreamModel: 'sim-1', chat: request('Something else entirely') }, signal);
    const content = first.choices[0]!.message!.content;
    expect(content).toBe(again.choices[0]!.message!.content);
    expect(content).not.toBe(other.choices[0]!.message!.content);
    expect(first.usage!.outputTokens).toBe(encode(content).length);
    expect(first.usage!.inputTokens).toBe(countInputTokens(request('Tell me about gateways').messages));
    expect(first.choices[0]!.finishReason).toBe('stop');
  });

  it('honours max_output_tokens with finish_reason length', async () => {
    const result = await adapter.chat({ upstreamModel: 'sim-1', chat: request('Tell me about gateways', { maxOutputTokens: 5 }) }, signal);
    expect(result.usage!.outputTokens).toBe(5);
    expect(result.choices[0]!.finishReason).toBe('length');
  });

  it('streams the same text in several chunks, then usage', async () => {
    const chat = request('Stream it please');
    const whole = await adapter.chat({ upstreamModel: 'sim-1', chat }, signal);
    const parts: AdapterStreamPart[] = [];
    for await (const part of adapter.chatStream({ upstreamModel: 'sim-1', chat }, signal)) parts.push(part);
    const deltas = parts.flatMap((part) => (part.type === 'delta' ? [part.delta] : []));
    expect(deltas.length).toBeGreaterThan(2);
    expect(deltas.map((delta) => delta.content).join('')).toBe(whole.choices[0]!.message!.content);
    expect(deltas.at(-1)?.finishReason).toBe('stop');
    expect(parts.at(-1)).toEqual({ type: 'usage', usage: whole.usage });
  });
});

describe('SimulatedAdapter tool calls under tool_choice auto (issue 30)', () => {
  const adapter = new SimulatedAdapter('sim');
  const signal = new AbortController().signal;
  const weatherSchema = {
    type: 'object',
    properties: { location: { type: 'string', minLength: 2 }, days: { type: 'integer', minimum: 1, maximum: 7 }, unit: { enum: ['c', 'f'] } },
    required: ['location', 'days', 'unit'],
    additionalProperties: false,
  };
  const tools: ChatRequest['tools'] = [
    { name: 'search_docs', description: 'Search.', parameters: JSON.stringify({ type: 'object', properties: { query: { type: 'string' } }, required: ['query'] }) },
    { name: 'get_weather', description: 'Weather.', parameters: JSON.stringify(weatherSchema) },
    { name: 'ping', description: 'No arguments.', parameters: '' },
  ];
  const message = (role: string, text: string, extra: Partial<ChatRequest['messages'][number]> = {}): ChatRequest['messages'][number] => ({
    role, content: text ? [{ part: { $case: 'text', value: text } }] : [], toolCalls: [], toolCallId: '', reasoning: [], isError: false, ...extra,
  });
  const call = async (chat: ChatRequest) => (await adapter.chat({ upstreamModel: 'sim-1', chat }, signal)).choices[0]!;

  it('calls the tool the user names (else the first), with arguments that satisfy its schema, when the choice is auto or absent', async () => {
    for (const toolChoice of [undefined, { mode: 'auto', toolName: '', disableParallel: false }]) {
      const named = await call(request('Please use get_weather for Oslo tomorrow', { tools, toolChoice }));
      expect(named.finishReason).toBe('tool_calls');
      expect(named.message!.content).toBe('');
      expect(named.message!.toolCalls).toHaveLength(1);
      expect(named.message!.toolCalls[0]!.name).toBe('get_weather');
      expect(named.message!.toolCalls[0]!.id).toMatch(/^call_[0-9a-f]{16}$/);
      const args = JSON.parse(named.message!.toolCalls[0]!.arguments);
      expect(Object.keys(args).sort()).toEqual(['days', 'location', 'unit']);
      expect(args.location).toEqual(expect.stringContaining('Please'));
      expect(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7).toBe(true);
      expect(args.unit).toBe('c');
      const format = { type: 'json_schema', schemaName: 'weather', schema: JSON.stringify(weatherSchema), strict: true } as ChatRequest['responseFormat'];
      expect(structuredOutputViolation(format, named.message!.toolCalls[0]!.arguments)).toBeUndefined();
      const first = await call(request('What is the weather like?', { tools, toolChoice }));
      expect(first.message!.toolCalls.map((item) => item.name)).toEqual(['search_docs']);
      expect(Object.keys(JSON.parse(first.message!.toolCalls[0]!.arguments))).toEqual(['query']);
    }
    const bare = await call(request('ping the server', { tools }));
    expect(bare.message!.toolCalls[0]).toMatchObject({ name: 'ping', arguments: '{}' });
  });

  it('answers text after a tool result, under none, and without tools', async () => {
    const afterResult = await call({
      ...request('', { tools }),
      messages: [
        message('user', 'get_weather for Oslo'),
        message('assistant', '', { toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{}' }] }),
        message('tool', 'sunny', { toolCallId: 'call_1' }),
      ],
    });
    expect(afterResult.finishReason).toBe('stop');
    expect(afterResult.message!.toolCalls).toEqual([]);
    expect(afterResult.message!.content).toMatch(/^Simulated reply to "get_weather for Oslo":/);
    // A tool result followed by the user's own text in the same turn (as Claude Code sends) still ends the loop.
    const resultThenText = await call({
      ...request('', { tools }),
      messages: [
        message('user', 'get_weather for Oslo'),
        message('assistant', '', { toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{}' }] }),
        message('tool', 'sunny', { toolCallId: 'call_1' }),
        message('user', 'a reminder'),
      ],
    });
    expect(resultThenText.message!.toolCalls).toEqual([]);
    // A new user turn after the assistant answered calls again.
    const nextTurn = await call({
      ...request('', { tools }),
      messages: [message('user', 'hello'), message('assistant', 'hi'), message('user', 'now ping')],
    });
    expect(nextTurn.message!.toolCalls.map((item) => item.name)).toEqual(['ping']);
    const none = await call(request('get_weather please', { tools, toolChoice: { mode: 'none', toolName: '', disableParallel: false } }));
    expect(none.message!.toolCalls).toEqual([]);
    expect((await call(request('get_weather please'))).message!.toolCalls).toEqual([]);
  });

  it('streams the same tool call, and counts it as output', async () => {
    const chat = request('use get_weather', { tools });
    const whole = await adapter.chat({ upstreamModel: 'sim-1', chat }, signal);
    const parts: AdapterStreamPart[] = [];
    for await (const part of adapter.chatStream({ upstreamModel: 'sim-1', chat }, signal)) parts.push(part);
    const last = parts.flatMap((part) => (part.type === 'delta' ? [part.delta] : [])).at(-1)!;
    expect(last.finishReason).toBe('tool_calls');
    const wholeCall = whole.choices[0]!.message!.toolCalls[0]!;
    expect(last.toolCalls).toEqual([{ index: 0, id: wholeCall.id, name: 'get_weather', arguments: wholeCall.arguments }]);
    expect(whole.usage!.outputTokens).toBe(encode('get_weather').length + encode(wholeCall.arguments).length);
  });
});

describe('SimulatedAdapter under a schema it cannot satisfy (issue 29)', () => {
  const adapter = new InstructedStructuredOutput(new SimulatedAdapter('sim'));
  const signal = new AbortController().signal;
  const withSchema = (schema: unknown) =>
    request('hi', { responseFormat: { type: 'json_schema', schemaName: 's', schema: JSON.stringify(schema), strict: true } as ChatRequest['responseFormat'] });

  it.each([
    ['a string longer than the simulator writes', { type: 'object', properties: { a: { type: 'string', minLength: 100_000 } }, required: ['a'] }],
    ['an integer in an empty range', { type: 'object', properties: { n: { type: 'integer', minimum: 5, maximum: 1 } }, required: ['n'] }],
    ['a top-level string', { type: 'string' }],
  ])('%s: a client 400 naming the schema, not a provider failure to fail over from', async (_name, schema) => {
    for (const call of [
      () => adapter.chat({ upstreamModel: 'sim-1', chat: withSchema(schema) }, signal),
      async () => {
        for await (const _part of adapter.chatStream({ upstreamModel: 'sim-1', chat: withSchema(schema) }, signal)) void _part;
      },
    ]) {
      const error = await call().then(() => undefined, (caught: unknown) => caught);
      expect(error).toBeInstanceOf(GatewayError);
      expect(error).toMatchObject({ code: 'unsatisfiable_json_schema', param: 'body.response_format.json_schema.schema' });
    }
  });

  it('a satisfiable schema is still answered', async () => {
    const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
    const result = await adapter.chat({ upstreamModel: 'sim-1', chat: withSchema(schema) }, signal);
    expect(JSON.parse(result.choices[0]!.message!.content)).toHaveProperty('city');
  });
});

describe('sampleJsonForSchema under hostile schemas', () => {
  it('bounds a string whatever minLength asks for', () => {
    const value = sampleJsonForSchema({ type: 'string', minLength: 100_000_000 }, ['word']) as string;
    expect(value.length).toBeGreaterThanOrEqual(65_536);
    expect(value.length).toBeLessThan(65_600);
  });

  it('bounds the values of one answer when recursive references fan out', () => {
    const properties = Object.fromEntries(Array.from({ length: 10 }, (_, index) => [`p${index}`, { $ref: '#/$defs/node' }]));
    const schema = { $defs: { node: { type: 'object', properties } }, $ref: '#/$defs/node' };
    const text = JSON.stringify(sampleJsonForSchema(schema, ['word']));
    // Unbounded, this is 10^8 values; bounded, about 10,000 of a few bytes each.
    expect(text.length).toBeLessThan(200_000);
  });
});
