import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { openaiChatResponseSchema, openaiChunkSchema, parseOpenAIChatResponse, parseOpenAIChunk } from './openai-api-types.js';

const fixture = (name: string) => JSON.parse(readFileSync(new URL(`./__fixtures__/${name}`, import.meta.url), 'utf8'));

const base = () => ({
  id: 'x', created: 1, model: 'm',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop', extra: 1 }],
  usage: { prompt_tokens: 3, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 1 } },
});

describe('parseOpenAIChatResponse', () => {
  const accepted: Array<[string, unknown]> = [
    ['the chat fixture', fixture('chat-completion.json')],
    ['the tool-call fixture', fixture('chat-completion-tool-calls.json')],
    ['a plain answer with unknown fields', base()],
    ['a choice without index (defaults to 0)', { ...base(), choices: [{ message: { content: null }, finish_reason: null }] }],
    ['nulls wherever nullish', { id: null, created: null, model: null, choices: [], usage: null }],
  ];
  it.each(accepted)('answers exactly what zod answers for %s', (_name, json) => {
    const expected = openaiChatResponseSchema.safeParse(json);
    expect(expected.success).toBe(true);
    expect(parseOpenAIChatResponse(json)).toEqual(expected);
  });

  const rejected: Array<[string, unknown]> = [
    ['not an object', []],
    ['choices missing', { id: 'x' }],
    ['a message that is not an object', { choices: [{ message: 'hi' }] }],
    ['content of the wrong type', { choices: [{ message: { content: 5 } }] }],
    ['a negative index', { choices: [{ index: -1, message: {} }] }],
    ['a tool call without a function name', { choices: [{ message: { tool_calls: [{ id: 'c', function: {} }] } }] }],
    ['fractional token counts', { choices: [], usage: { prompt_tokens: 1.5 } }],
    ['cached tokens of the wrong type', { choices: [], usage: { prompt_tokens_details: { cached_tokens: 'many' } } }],
  ];
  it.each(rejected)('rejects %s with zod\'s own error', (_name, json) => {
    const parsed = parseOpenAIChatResponse(json);
    expect(parsed.success).toBe(false);
    expect(parsed.error?.message).toBe(openaiChatResponseSchema.safeParse(json).error?.message);
  });
});

describe('parseOpenAIChunk', () => {
  const streamFixture = readFileSync(new URL('./__fixtures__/chat-completion-stream.sse.txt', import.meta.url), 'utf8')
    .split('\n')
    .filter((line) => line.startsWith('data: ') && line !== 'data: [DONE]')
    .map((line) => JSON.parse(line.slice(6)) as unknown);
  const chunk = (choice: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({ id: 'c', object: 'chat.completion.chunk', choices: [choice], ...extra });
  const accepted: Array<[string, unknown]> = [
    ...streamFixture.map((json, index): [string, unknown] => [`chunk ${index} of the stream fixture`, json]),
    ['a content delta with unknown fields', chunk({ index: 0, delta: { role: 'assistant', content: 'hi', extra: 1 }, finish_reason: null, logprobs: null })],
    ['reasoning in both spellings', chunk({ index: 1, delta: { reasoning_content: 'a', reasoning: 'b', refusal: null } })],
    ['tool call deltas', chunk({ index: 0, delta: { tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '' } }, { index: 1, function: null }] } })],
    ['a usage-only chunk', { id: 'c', choices: [], usage: { prompt_tokens: 9, completion_tokens: 7, total_tokens: 16, completion_tokens_details: { reasoning_tokens: 2 } } }],
    ['choices and delta null', { id: null, choices: null, usage: null, error: null }],
    ['a choice whose delta is null', chunk({ index: 0, delta: null, finish_reason: 'stop' })],
    ['logprobs of any shape', chunk({ index: 0, delta: { content: 'x' }, logprobs: { content: [{ token: 'x', logprob: -0.1 }] } })],
    ['a choice without index (zod defaults it to 0)', chunk({ delta: { content: 'x' } })],
    ['a tool call without index (zod defaults it to 0)', chunk({ index: 0, delta: { tool_calls: [{ id: 'call_1', function: { name: 'f' } }] } })],
    ['an error chunk', { error: { message: 'overloaded', type: 'server_error', code: 529 } }],
  ];
  it.each(accepted)('answers exactly what zod answers for %s', (_name, json) => {
    const expected = openaiChunkSchema.safeParse(json);
    expect(expected.success).toBe(true);
    expect(parseOpenAIChunk(json)).toEqual(expected);
  });

  it('answers the usual chunks as they came, without a copy', () => {
    expect(streamFixture.length).toBeGreaterThan(2);
    for (const json of streamFixture) expect(parseOpenAIChunk(json).data).toBe(json);
  });

  const rejected: Array<[string, unknown]> = [
    ['not an object', 'data'],
    ['choices not an array', { choices: {} }],
    ['content of the wrong type', chunk({ index: 0, delta: { content: 5 } })],
    ['a delta that is not an object', chunk({ index: 0, delta: 'x' })],
    ['a negative index', chunk({ index: -1, delta: {} })],
    ['a fractional index', chunk({ index: 0.5, delta: {} })],
    ['a finish reason of the wrong type', chunk({ index: 0, delta: {}, finish_reason: 1 })],
    ['tool calls not an array', chunk({ index: 0, delta: { tool_calls: {} } })],
    ['a tool call name of the wrong type', chunk({ index: 0, delta: { tool_calls: [{ index: 0, function: { name: 1 } }] } })],
    ['fractional token counts', { choices: [], usage: { prompt_tokens: 1.5 } }],
    ['an id of the wrong type', { id: 7, choices: [] }],
  ];
  it.each(rejected)('rejects %s with zod\'s own error', (_name, json) => {
    const parsed = parseOpenAIChunk(json);
    expect(parsed.success).toBe(false);
    expect(parsed.error?.message).toBe(openaiChunkSchema.safeParse(json).error?.message);
  });
});
