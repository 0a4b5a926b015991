import { describe, expect, it } from 'vitest';
import type { OtelAttributes } from '@gateway/platform';
import type { ChatRequest } from '@gateway/proto';
import { answerChoices, captureMessageContentFromEnv, inputContentAttributes, MAX_CONTENT_ATTRIBUTE_LENGTH, outputMessagesAttribute } from './gen-ai-content.js';

const text = (value: string) => ({ part: { $case: 'text' as const, value } });

describe('GenAI message content (the opt-in attributes)', () => {
  it('is on only when OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is true', () => {
    expect(captureMessageContentFromEnv({})).toBe(false);
    expect(captureMessageContentFromEnv({ OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'false' })).toBe(false);
    expect(captureMessageContentFromEnv({ OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: '1' })).toBe(false);
    expect(captureMessageContentFromEnv({ OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true' })).toBe(true);
    expect(captureMessageContentFromEnv({ OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'TRUE' })).toBe(true);
  });

  it('names media by type only, keeps non-JSON tool arguments as sent, and maps tool_calls to tool_call', () => {
    const request = {
      messages: [
        { role: 'developer', content: [text('Be brief.')], toolCalls: [], toolCallId: '', reasoning: [], isError: false },
        { role: 'user', content: [text('Look:'), { part: { $case: 'image' as const, value: { url: 'data:image/png;base64,AAAA', detail: '' } } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false },
        { role: 'assistant', content: [], toolCalls: [{ id: 'c1', name: 'f', arguments: 'not json' }], toolCallId: '', reasoning: [{ text: 'hmm', signature: '', encryptedData: '', providerId: '' }], isError: false },
      ],
      tools: [],
    } as unknown as ChatRequest;
    const attributes: OtelAttributes = {};
    inputContentAttributes(request, attributes);
    expect(JSON.parse(attributes['gen_ai.system_instructions'] as string)).toEqual([{ type: 'text', content: 'Be brief.' }]);
    const input = attributes['gen_ai.input.messages'] as string;
    expect(input).not.toContain('AAAA');
    expect(JSON.parse(input)).toEqual([
      { role: 'user', parts: [{ type: 'text', content: 'Look:' }, { type: 'image' }] },
      { role: 'assistant', parts: [{ type: 'reasoning', content: 'hmm' }, { type: 'tool_call', id: 'c1', name: 'f', arguments: 'not json' }] },
    ]);
    expect(attributes['gen_ai.tool.definitions']).toBeUndefined();
    const output = outputMessagesAttribute(answerChoices([
      { index: 0, message: { content: '', toolCalls: [{ id: 'c2', name: 'g', arguments: '{"a":1}' }], reasoning: [], images: [] }, finishReason: 'tool_calls', stopSequence: '' },
    ]));
    expect(JSON.parse(output)).toEqual([{ role: 'assistant', parts: [{ type: 'tool_call', id: 'c2', name: 'g', arguments: { a: 1 } }], finish_reason: 'tool_call' }]);
  });

  it('cuts each attribute to its bound', () => {
    const long = 'x'.repeat(MAX_CONTENT_ATTRIBUTE_LENGTH * 2);
    const output = outputMessagesAttribute([{ content: long, reasoning: '', toolCalls: [], finishReason: 'length' }]);
    expect(output).toHaveLength(MAX_CONTENT_ATTRIBUTE_LENGTH);
    expect(output.startsWith('[{"role":"assistant","parts":[{"type":"text","content":"xxx')).toBe(true);
  });
});
