import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { openaiChatResponseSchema, parseOpenAIChatResponse } from './openai-api-types.js';

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
