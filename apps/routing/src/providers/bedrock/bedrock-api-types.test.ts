import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ToolIdentifiers } from '../anthropic/anthropic-tool-identifiers.js';
import { convertBedrockAnswer } from './convert-bedrock-answer.js';
import { convertBedrockUsage } from './convert-bedrock-usage.js';
import {
  bedrockConverseResponseSchema,
  bedrockStreamEventSchemas,
  parseBedrockAnswer,
  parseBedrockStreamEvent,
  type BedrockStreamEventType,
} from './bedrock-api-types.js';

const fixture = (name: string): unknown => JSON.parse(readFileSync(new URL(`./__fixtures__/${name}`, import.meta.url), 'utf8'));

const answers: unknown[] = [
  { output: { message: { role: 'assistant', content: [{ text: 'hi' }] } }, stopReason: 'end_turn', usage: { inputTokens: 3, outputTokens: 1, totalTokens: 4 }, metrics: { latencyMs: 5 } },
  { output: { message: { content: [{ toolUse: { toolUseId: 't', name: 'f', input: { a: [1] } } }, { reasoningContent: { reasoningText: { text: 'x', signature: 's' } } }, { reasoningContent: { redactedContent: 'cmVk' } }, { citationsContent: {} }] } } },
  { output: {}, stopReason: null, usage: null },
  { output: { message: null } },
  { output: { message: { content: 'nope' } } },
  { output: { message: { content: [{ text: 5 }] } } },
  { output: { message: { content: [{ toolUse: { name: 'f' } }] } } },
  { output: { message: { content: [{ reasoningContent: { reasoningText: 'x' } }] } } },
  { output: [] },
  { stopReason: 'end_turn' },
  { output: {}, usage: { inputTokens: -1 } },
  { output: {}, usage: { outputTokens: 1.5 } },
  { output: {}, stopReason: 3 },
  [],
  null,
];

const events: [BedrockStreamEventType, unknown][] = [
  ['messageStart', { role: 'assistant', p: 'abc' }],
  ['messageStart', { role: 1 }],
  ['contentBlockStart', { contentBlockIndex: 1, start: { toolUse: { toolUseId: 't', name: 'f' } } }],
  ['contentBlockStart', { contentBlockIndex: 1, start: {} }],
  ['contentBlockStart', { contentBlockIndex: 1, start: { toolUse: { toolUseId: 't' } } }],
  ['contentBlockStart', { contentBlockIndex: -1 }],
  ['contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'Hello' }, p: 'xyz' }],
  ['contentBlockDelta', { contentBlockIndex: 0, delta: { toolUse: { input: '{"a"' } } }],
  ['contentBlockDelta', { contentBlockIndex: 0, delta: { reasoningContent: { text: 'r', signature: 's' } } }],
  ['contentBlockDelta', { contentBlockIndex: 0, delta: { citation: { title: 'x' } } }],
  ['contentBlockDelta', { contentBlockIndex: 0, delta: { text: 1 } }],
  ['contentBlockDelta', { contentBlockIndex: 0, delta: { toolUse: { input: {} } } }],
  ['contentBlockDelta', { contentBlockIndex: 0, delta: { reasoningContent: { redactedContent: 2 } } }],
  ['contentBlockDelta', { contentBlockIndex: 0 }],
  ['contentBlockDelta', { contentBlockIndex: '0', delta: {} }],
  ['contentBlockStop', { contentBlockIndex: 0 }],
  ['contentBlockStop', { contentBlockIndex: 0.5 }],
  ['messageStop', { stopReason: 'end_turn', additionalModelResponseFields: { stop_sequence: 'END' } }],
  ['messageStop', { stopReason: ['end_turn'] }],
  ['metadata', { usage: { inputTokens: 9, outputTokens: 7, totalTokens: 16, cacheReadInputTokens: 0 }, metrics: { latencyMs: 1 } }],
  ['metadata', {}],
  ['metadata', { usage: { inputTokens: '9' } }],
  ['metadata', []],
  ['messageStop', null],
];

describe('parseBedrockAnswer and parseBedrockStreamEvent', () => {
  it('accept and refuse exactly what the zod schemas do, with the same data', () => {
    for (const answer of answers) {
      const zod = bedrockConverseResponseSchema.safeParse(answer);
      const hand = parseBedrockAnswer(answer);
      expect([answer, hand.success]).toEqual([answer, zod.success]);
      if (hand.success && zod.success) expect(hand.data).toEqual(zod.data);
    }
    expect(answers.map((answer) => parseBedrockAnswer(answer).success)).toEqual([true, true, true, true, false, false, false, false, false, false, false, false, false, false, false]);
    for (const [type, payload] of events) {
      const zod = bedrockStreamEventSchemas[type].safeParse(payload);
      const hand = parseBedrockStreamEvent(type, payload);
      expect([type, payload, hand.success]).toEqual([type, payload, zod.success]);
      if (hand.success && zod.success) expect(hand.data).toEqual(zod.data);
    }
    // The usual shapes are the parsed JSON itself (checked by hand, not copied by zod).
    expect(parseBedrockAnswer(answers[0])).toEqual({ success: true, data: answers[0] });
    expect((parseBedrockAnswer(answers[0]) as { data: unknown }).data).toBe(answers[0]);
    expect((parseBedrockStreamEvent('contentBlockDelta', events[6]![1]) as { data: unknown }).data).toBe(events[6]![1]);
    expect(events.filter(([type, payload]) => parseBedrockStreamEvent(type, payload).success)).toHaveLength(11);
  });
});

describe('a recorded Converse answer (fixture)', () => {
  it('parses, and converts to signed reasoning for this provider, text, the tool call, tool_calls and usage with the cache read', () => {
    const parsed = parseBedrockAnswer(fixture('converse.json'));
    expect(parsed.success).toBe(true);
    if (!parsed.success) return;
    expect(convertBedrockAnswer(parsed.data, 'bdr', new ToolIdentifiers())).toEqual({
      index: 0, finishReason: 'tool_calls', stopSequence: '',
      message: {
        content: "I'll check the weather in Paris.",
        toolCalls: [{ id: 'tooluse_kZJMlvQmRJ6eAyJE5GIl7Q', name: 'get_weather', arguments: '{"city":"Paris"}' }],
        reasoning: [{ text: 'The user asks for the weather in Paris. I will call get_weather.', signature: 'EqoBCkgIBhABGAIiQL2tZ3JlYXRzaWduYXR1cmU=', encryptedData: '', providerId: 'bdr' }],
        images: [],
      },
    });
    expect(convertBedrockUsage(parsed.data.usage)).toMatchObject({ inputTokens: 2060, cachedInputTokens: 2048, cacheWriteTokens: 0, outputTokens: 96, providerTotalTokens: 2156 });
  });
});
