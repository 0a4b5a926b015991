import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Anthropic from '@anthropic-ai/sdk';
import type OpenAI from 'openai';
import { pricedTokens, startSimulatedHarness, type ChatHarness } from './chat-e2e-harness.js';

// Issue 30: the built-in simulated provider (what `npm start` serves) calls a tool under tool_choice auto,
// so an agent's tool loop can be exercised without any upstream: the tool the user names (else the first),
// arguments satisfying its schema, then text once the tool's result is back. Through the real `openai`
// and `@anthropic-ai/sdk` clients, each round charged exactly the usage it answered with.

const MODEL = 'testco/sim-agent';
const INPUT_PRICE = '0.000001';
const OUTPUT_PRICE = '0.000002';

/** The Open Responses compliance suite's `tool-calling` request: one function tool, no tool_choice. */
const WEATHER = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Get the current weather for a location',
  parameters: { type: 'object', properties: { location: { type: 'string', description: 'The city and state' } }, required: ['location'] },
  strict: false,
};

describe('the simulated provider calls tools under tool_choice auto, end to end', () => {
  let harness: ChatHarness;

  beforeAll(async () => {
    harness = await startSimulatedHarness({
      model: MODEL,
      supportedParameters: ['tools', 'tool_choice', 'max_completion_tokens'],
      endpoints: ['chat.completions', 'messages', 'responses'],
      inputPrice: INPUT_PRICE,
      outputPrice: OUTPUT_PRICE,
    });
  }, 120_000);

  afterAll(() => harness?.stop());

  const charged = (usages: { input: number; output: number }[]) =>
    usages.reduce((sum, usage) => sum + pricedTokens(usage.input, usage.output, INPUT_PRICE, OUTPUT_PRICE), 0n);

  it('responses: a function_call with schema-valid arguments, then text after function_call_output; both charged exactly', async () => {
    const before = await harness.charges(MODEL);
    const input: OpenAI.Responses.ResponseInputItem[] = [{ type: 'message', role: 'user', content: "What's the weather like in San Francisco?" }];
    const first = await harness.client.responses.create({ model: MODEL, input, tools: [WEATHER] });
    expect(first.status).toBe('completed');
    expect(first.output).toHaveLength(1);
    const call = first.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call).toMatchObject({ type: 'function_call', name: 'get_weather', status: 'completed' });
    expect(call.call_id).toMatch(/^call_/);
    const args = JSON.parse(call.arguments);
    expect(Object.keys(args)).toEqual(['location']);
    expect(typeof args.location).toBe('string');
    expect(args.location.length).toBeGreaterThan(0);

    const second = await harness.client.responses.create({
      model: MODEL,
      tools: [WEATHER],
      input: [...input, { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments }, { type: 'function_call_output', call_id: call.call_id, output: '18 C, fog' }],
    });
    expect(second.output.map((item) => item.type)).toEqual(['message']);
    expect(second.output_text).toMatch(/^Simulated reply to "What's the weather like in San Francisco\?":/);

    const after = await harness.chargesSettleAt(MODEL, before.requests + 2);
    expect(after.costPico - before.costPico).toBe(
      charged([first, second].map((response) => ({ input: response.usage!.input_tokens, output: response.usage!.output_tokens }))),
    );
  });

  it('chat completions, streamed: the tool the user names is called, then the answer; tool_choice none answers text', async () => {
    const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
      { type: 'function', function: { name: 'search_docs', parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } } },
      { type: 'function', function: { name: 'get_weather', parameters: WEATHER.parameters } },
    ];
    const question = { role: 'user' as const, content: 'Use get_weather for Oslo.' };
    const stream = await harness.client.chat.completions.create({ model: MODEL, messages: [question], tools, stream: true });
    const calls: { id?: string; name?: string; arguments: string }[] = [];
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      for (const delta of chunk.choices[0]?.delta.tool_calls ?? []) {
        calls[delta.index] ??= { arguments: '' };
        if (delta.id) calls[delta.index]!.id = delta.id;
        if (delta.function?.name) calls[delta.index]!.name = delta.function.name;
        calls[delta.index]!.arguments += delta.function?.arguments ?? '';
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(finish).toBe('tool_calls');
    expect(calls.map((item) => item.name)).toEqual(['get_weather']);
    expect(typeof JSON.parse(calls[0]!.arguments).location).toBe('string');

    const answer = await harness.client.chat.completions.create({
      model: MODEL,
      tools,
      messages: [
        question,
        { role: 'assistant', content: null, tool_calls: [{ id: calls[0]!.id!, type: 'function', function: { name: 'get_weather', arguments: calls[0]!.arguments } }] },
        { role: 'tool', tool_call_id: calls[0]!.id!, content: 'sunny' },
      ],
    });
    expect(answer.choices[0]!.finish_reason).toBe('stop');
    expect(answer.choices[0]!.message.tool_calls ?? []).toEqual([]);
    expect(answer.choices[0]!.message.content).toMatch(/^Simulated reply to "Use get_weather for Oslo\.":/);

    const none = await harness.client.chat.completions.create({ model: MODEL, messages: [question], tools, tool_choice: 'none' });
    expect(none.choices[0]!.finish_reason).toBe('stop');
  });

  it('messages (Anthropic SDK): tool_use with stop_reason tool_use, then end_turn after the tool_result', async () => {
    const anthropic = new Anthropic({ baseURL: harness.stack.url, apiKey: harness.apiKey, maxRetries: 0 });
    const tools: Anthropic.Tool[] = [{ name: 'get_weather', description: 'Weather.', input_schema: { type: 'object', properties: { location: { type: 'string' } }, required: ['location'] } }];
    const question: Anthropic.MessageParam = { role: 'user', content: 'How is the weather in Bergen?' };
    const first = await anthropic.messages.create({ model: MODEL, max_tokens: 200, tools, messages: [question] });
    expect(first.stop_reason).toBe('tool_use');
    const use = first.content.find((block) => block.type === 'tool_use') as Anthropic.ToolUseBlock;
    expect(use.name).toBe('get_weather');
    expect(typeof (use.input as { location?: unknown }).location).toBe('string');
    const second = await anthropic.messages.create({
      model: MODEL,
      max_tokens: 200,
      tools,
      messages: [question, { role: 'assistant', content: first.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'rain' }] }],
    });
    expect(second.stop_reason).toBe('end_turn');
    expect(second.content.map((block) => block.type)).toEqual(['text']);
  });
});
