import { describe, expect, it } from 'vitest';
import { parseCredits } from '@gateway/platform';
import type { Model } from '@gateway/proto';
import { chatMessages, parseLine } from './batch-lines.js';
import { attemptRequestId, batchPrices, lineHold } from './batch-runner.js';

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

  it('each attempt of a line has its own request id, the first without a suffix', () => {
    expect([1, 2, 3].map((attempt) => attemptRequestId('batch_abc', 7, attempt))).toEqual(['batch_abc-7', 'batch_abc-7.2', 'batch_abc-7.3']);
  });
});
