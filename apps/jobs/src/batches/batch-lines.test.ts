import { describe, expect, it } from 'vitest';
import { parseCredits } from '@gateway/platform';
import type { Model } from '@gateway/proto';
import { chatMessages, parseLine } from './batch-lines.js';
import { attemptRequestId } from './batch-runner.js';
import { batchPrices, lineHold } from './line-hold.js';

const line = (value: unknown) => JSON.stringify(value);
const chat = (body: Record<string, unknown>) => line({ custom_id: 'c1', method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: 'hi' }], ...body } });

describe('batch input lines', () => {
  it('accepts the text subset of chat completions and converts it for the router', () => {
    const parsed = parseLine(chat({
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
        { role: 'assistant', content: null, tool_calls: [{ id: 't1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
        { role: 'tool', tool_call_id: 't1', content: 'result' },
      ],
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
      tool_choice: { type: 'function', function: { name: 'f' } },
      temperature: 0.5,
    }), '/v1/chat/completions');
    if ('code' in parsed) throw new Error(parsed.message);
    expect(parsed.customId).toBe('c1');
    const converted = chatMessages(parsed.body as Parameters<typeof chatMessages>[0]);
    expect(converted.messages.map((message) => message.role)).toEqual(['system', 'user', 'assistant', 'tool']);
    expect(converted.messages[1]!.content.map((part) => part.part?.value)).toEqual(['a', 'b']);
    expect(converted.messages[2]!.toolCalls).toEqual([{ id: 't1', name: 'f', arguments: '{}' }]);
    expect(converted.messages[3]!.toolCallId).toBe('t1');
    expect(converted.toolChoice).toEqual({ mode: 'tool', toolName: 'f', disableParallel: false });
  });

  it.each([
    ['not JSON', '{"custom_id": ', 'invalid_json_line', ''],
    ['a GET', line({ custom_id: 'x', method: 'GET', url: '/v1/chat/completions', body: {} }), 'invalid_request', 'method'],
    ['another endpoint', line({ custom_id: 'x', method: 'POST', url: '/v1/embeddings', body: { model: 'm', input: 'x' } }), 'mismatched_endpoint', 'url'],
    ['no custom_id', line({ method: 'POST', url: '/v1/chat/completions', body: {} }), 'invalid_request', 'custom_id'],
    ['a stream', chat({ stream: true }), 'invalid_request', 'body.stream'],
    ['an image part', chat({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x' } }] }] }), 'invalid_request', 'body.messages.0.content'],
    ['an unknown field', chat({ logprobs: true }), 'invalid_request', 'body.logprobs'],
    ['model fallbacks', chat({ models: ['a', 'b'] }), 'invalid_request', 'body.models'],
    ['a temperature out of range', chat({ temperature: 9 }), 'invalid_request', 'body.temperature'],
  ])('refuses %s, naming it', (_name, text, code, param) => {
    const parsed = parseLine(text, '/v1/chat/completions');
    expect('code' in parsed && [parsed.code, parsed.param]).toEqual([code, param]);
  });

  it('embeddings lines take text input only', () => {
    expect('code' in parseLine(line({ custom_id: 'e', method: 'POST', url: '/v1/embeddings', body: { model: 'm', input: ['a', 'b'] } }), '/v1/embeddings')).toBe(false);
    const tokens = parseLine(line({ custom_id: 'e', method: 'POST', url: '/v1/embeddings', body: { model: 'm', input: [1, 2, 3] } }), '/v1/embeddings');
    expect('code' in tokens && tokens.param).toBe('body.input');
  });

  const responses = (body: Record<string, unknown>) => line({ custom_id: 'r', method: 'POST', url: '/v1/responses', body: { model: 'm', input: 'hi', ...body } });

  it('responses lines become the chat body they run as: instructions, items, function calls and outputs, formats', () => {
    const parsed = parseLine(responses({
      instructions: 'be brief',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'a' }] },
        { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{"x":1}' },
        { type: 'function_call', call_id: 'c2', name: 'g', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c1', output: 'one' },
        { type: 'function_call_output', call_id: 'c2', output: 'two' },
      ],
      tools: [{ type: 'function', name: 'f', parameters: { type: 'object' } }],
      tool_choice: { type: 'function', name: 'f' },
      text: { format: { type: 'json_schema', name: 'out', schema: { type: 'object' }, strict: true } },
      max_output_tokens: 30,
      reasoning: { effort: 'low' },
    }), '/v1/responses');
    if ('code' in parsed) throw new Error(parsed.message);
    expect(parsed.body).toMatchObject({
      model: 'm',
      max_completion_tokens: 30,
      reasoning_effort: 'low',
      tool_choice: { type: 'function', function: { name: 'f' } },
      response_format: { type: 'json_schema', json_schema: { name: 'out', schema: { type: 'object' }, strict: true } },
    });
    const converted = chatMessages(parsed.body as Parameters<typeof chatMessages>[0]);
    expect(converted.messages.map((message) => message.role)).toEqual(['system', 'user', 'assistant', 'tool', 'tool']);
    // Consecutive calls are one assistant turn.
    expect(converted.messages[2]!.toolCalls.map((call) => call.id)).toEqual(['c1', 'c2']);
    expect(converted.messages[4]).toMatchObject({ toolCallId: 'c2' });
  });

  it.each([
    ['store: true', responses({ store: true }), 'body.store'],
    ['previous_response_id', responses({ previous_response_id: 'resp_1' }), 'body.previous_response_id'],
    ['a built-in tool', responses({ tools: [{ type: 'web_search' }] }), 'body.tools.0.type'],
    ['an image item', responses({ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://x' }] }] }), 'body.input'],
    ['a stream', responses({ stream: true }), 'body.stream'],
  ])('refuses a responses line with %s, naming it', (_name, text, param) => {
    const parsed = parseLine(text, '/v1/responses');
    expect('code' in parsed && parsed.code).toBe('invalid_request');
    expect('code' in parsed && parsed.param.startsWith(param)).toBe(true);
  });

  it('moderations lines take a model and text input only', () => {
    const ok = parseLine(line({ custom_id: 'm', method: 'POST', url: '/v1/moderations', body: { model: 'mod', input: ['a', 'b'] } }), '/v1/moderations');
    expect('code' in ok).toBe(false);
    const noModel = parseLine(line({ custom_id: 'm', method: 'POST', url: '/v1/moderations', body: { input: 'a' } }), '/v1/moderations');
    expect('code' in noModel && noModel.param).toBe('body.model');
    const image = parseLine(line({ custom_id: 'm', method: 'POST', url: '/v1/moderations', body: { model: 'mod', input: [{ type: 'image_url', image_url: { url: 'https://x' } }] } }), '/v1/moderations');
    expect('code' in image && image.param).toBe('body.input');
  });
});

describe('batch prices and holds', () => {
  const model = {
    id: 'm', contextWindow: 1_000, maxOutputTokens: 200, supportedParameters: [], offers: [],
    pricing: { perInputToken: '0.000002', perOutputToken: '0.000004', perCachedInputToken: '0.000001' },
    batchPricing: { perInputToken: '0.000001', perOutputToken: '0.000002' },
  } as unknown as Model;

  it('batch prices replace the prices they name and keep the others', () => {
    expect(batchPrices(model)).toEqual({ perInputToken: '0.000001', perOutputToken: '0.000002', perCachedInputToken: '0.000001' });
    expect(batchPrices({ ...model, batchPricing: undefined } as Model)).toEqual(model.pricing);
  });

  it('a line holds its worst case at the batch prices, at least 0.05, with the prompt capped by the context window', () => {
    const small = parseLine(chat({ max_completion_tokens: 10 }), '/v1/chat/completions');
    if ('code' in small) throw new Error(small.message);
    expect(lineHold(model, small.body)).toBe(parseCredits('0.05'));
    const large = { ...model, pricing: { perInputToken: '0.002', perOutputToken: '0.004' }, batchPricing: { perInputToken: '0.001', perOutputToken: '0.002' } } as unknown as Model;
    const long = parseLine(chat({ messages: [{ role: 'user', content: 'x'.repeat(5_000) }] }), '/v1/chat/completions');
    if ('code' in long) throw new Error(long.message);
    // 1,000 prompt tokens (the window) × 0.001 + 200 output tokens (the model's cap) × 0.002.
    expect(lineHold(large, long.body)).toBe(parseCredits('1.4'));
    const free = { ...model, pricing: {}, batchPricing: undefined } as unknown as Model;
    expect(lineHold(free, small.body)).toBe(0n);
  });

  it("a message batch line holds its converted request's worst case: its max tokens, capped by the model", () => {
    const large = { ...model, pricing: { perInputToken: '0.002', perOutputToken: '0.004' }, batchPricing: { perInputToken: '0.001', perOutputToken: '0.002' } } as unknown as Model;
    const request = { messages: [{ role: 'user', content: [{ text: 'x'.repeat(100) }] }], maxOutputTokens: 50 };
    const bytes = Buffer.byteLength(JSON.stringify(request));
    expect(lineHold(large, { model: 'm', chat_request: request })).toBe(BigInt(bytes) * parseCredits('0.001') + 50n * parseCredits('0.002'));
    // No max tokens: the model's cap.
    const uncapped = { messages: request.messages };
    expect(lineHold(large, { model: 'm', chat_request: uncapped })).toBe(BigInt(Buffer.byteLength(JSON.stringify(uncapped))) * parseCredits('0.001') + 200n * parseCredits('0.002'));
  });

  it('each attempt of a line has its own request id, the first without a suffix', () => {
    expect([1, 2, 3].map((attempt) => attemptRequestId('batch_abc', 7, attempt))).toEqual(['batch_abc-7', 'batch_abc-7.2', 'batch_abc-7.3']);
  });
});
