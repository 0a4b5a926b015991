import { describe, expect, it } from 'vitest';
import type { ChatRequest } from '@gateway/proto';
import { convertToOpenAIRequest } from './convert-to-openai-request.js';
import { mapOpenAIFinishReason } from './map-openai-finish-reason.js';
import { JSON_OBJECT_INSTRUCTION } from '../structured-output.js';

const base: ChatRequest = {
  context: undefined, modelId: 'm', routingStrategy: '', endpoint: 'chat.completions', messages: [], tools: [], stop: [],
  includeUsage: false, timeoutMs: 0,
};

describe('convertToOpenAIRequest', () => {
  it('never sends a cache_control breakpoint (the OpenAI wire has none; OpenAI caches prefixes by itself)', () => {
    const mark = { type: 'ephemeral', ttl: '1h' };
    const body = convertToOpenAIRequest({
      ...base,
      messages: [
        { role: 'system', content: [{ part: { $case: 'text', value: 'Long prompt.' }, cacheControl: mark }], toolCalls: [], toolCallId: '', reasoning: [], isError: false },
        {
          role: 'user', toolCalls: [], toolCallId: '', reasoning: [], isError: false,
          content: [{ part: { $case: 'text', value: 'Look:' } }, { part: { $case: 'image', value: { url: 'https://x/y.png', detail: 'low' } }, cacheControl: mark }],
        },
      ],
      tools: [{ name: 'lookup', description: 'Looks up', parameters: '{"type":"object"}', cacheControl: mark }],
    }, { upstreamModel: 'upstream-name', stream: false }).body;
    const text = JSON.stringify(body);
    expect(text).not.toContain('cache_control');
    expect(text).not.toContain('cacheControl');
    expect(body.messages).toHaveLength(2);
  });

  it('converts messages, parts, tools, tool choice and response format', () => {
    const body = convertToOpenAIRequest({
      ...base,
      messages: [
        { role: 'system', content: [{ part: { $case: 'text', value: 'Be brief.' } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false },
        {
          role: 'user', toolCalls: [], toolCallId: '', reasoning: [], isError: false,
          content: [{ part: { $case: 'text', value: 'What is this?' } }, { part: { $case: 'image', value: { url: 'https://x/y.png', detail: 'low' } } }],
        },
        { role: 'assistant', content: [], toolCalls: [{ id: 'call_1', name: 'lookup', arguments: '{"q":1}' }], toolCallId: '', reasoning: [], isError: false },
        { role: 'tool', content: [{ part: { $case: 'text', value: 'result' } }], toolCalls: [], toolCallId: 'call_1', reasoning: [], isError: false },
      ],
      tools: [{ name: 'lookup', description: 'Looks up', parameters: '{"type":"object","properties":{"q":{"type":"number"}}}' }],
      toolChoice: { mode: 'tool', toolName: 'lookup', disableParallel: false },
      responseFormat: { type: 'json_schema', schemaName: 'answer', schema: '{"type":"object"}', strict: true },
      extraBody: '{"seed":3}',
    }, { upstreamModel: 'upstream-name', stream: false }).body;
    expect(body).toEqual({
      model: 'upstream-name',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url: 'https://x/y.png', detail: 'low' } }] },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{"q":1}' } }] },
        { role: 'tool', content: 'result', tool_call_id: 'call_1' },
      ],
      tools: [{ type: 'function', function: { name: 'lookup', description: 'Looks up', parameters: { type: 'object', properties: { q: { type: 'number' } } } } }],
      tool_choice: { type: 'function', function: { name: 'lookup' } },
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: { type: 'object' }, strict: true } },
      seed: 3,
    });
  });

  it('sends the seed as the number the client sent, and the verbosity (issue 37 item 6); nothing when there is none', () => {
    expect(convertToOpenAIRequest({ ...base, seed: 9_007_199_254_740_991n }, { upstreamModel: 'u', stream: false }).body.seed).toBe(9_007_199_254_740_991);
    expect(convertToOpenAIRequest({ ...base, seed: -3n }, { upstreamModel: 'u', stream: true }).body.seed).toBe(-3);
    expect(convertToOpenAIRequest(base, { upstreamModel: 'u', stream: false }).body).not.toHaveProperty('seed');
    expect(convertToOpenAIRequest({ ...base, verbosity: 'low' }, { upstreamModel: 'u', stream: false }).body.verbosity).toBe('low');
    expect(convertToOpenAIRequest(base, { upstreamModel: 'u', stream: false }).body).not.toHaveProperty('verbosity');
  });

  it('maps finish reasons onto the canonical set', () => {
    expect(['stop', 'length', 'tool_calls', 'function_call', 'content_filter', 'eos', null].map(mapOpenAIFinishReason))
      .toEqual(['stop', 'length', 'tool_calls', 'tool_calls', 'content_filter', 'stop', 'stop']);
  });

  it('json_object without the word json in the messages gets a system instruction; with it, nothing is added', () => {
    const user = (text: string) => ({ role: 'user', content: [{ part: { $case: 'text' as const, value: text } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false });
    const bare = convertToOpenAIRequest({ ...base, messages: [user('List three colours.')], responseFormat: { type: 'json_object', schemaName: '', schema: '' } }, { upstreamModel: 'u', stream: false }).body;
    expect(bare.messages).toEqual([{ role: 'system', content: JSON_OBJECT_INSTRUCTION }, { role: 'user', content: 'List three colours.' }]);
    expect(bare.response_format).toEqual({ type: 'json_object' });
    const mentioned = convertToOpenAIRequest({ ...base, messages: [user('Answer in JSON please.')], responseFormat: { type: 'json_object', schemaName: '', schema: '' } }, { upstreamModel: 'u', stream: false }).body;
    expect(mentioned.messages).toEqual([{ role: 'user', content: 'Answer in JSON please.' }]);
    // json_schema is native on OpenAI-compatible servers: passed through, no instruction.
    const schema = convertToOpenAIRequest({ ...base, messages: [user('Colours.')], responseFormat: { type: 'json_schema', schemaName: 'c', schema: '{"type":"object"}' } }, { upstreamModel: 'u', stream: false }).body;
    expect(schema.messages).toHaveLength(1);
    expect(schema.response_format).toEqual({ type: 'json_schema', json_schema: { name: 'c', schema: { type: 'object' } } });
  });
});
