import { describe, expect, it } from 'vitest';
import type { ChatResponse, Usage } from '@gateway/proto';
import type { Logger } from '@gateway/platform';
import { answerContext, tags } from '../../../test/messages-fixtures.js';
import { messagesStopReason } from './messages-stop-reason.js';
import { renderMessage, renderMessagesUsage } from './render-messages.js';

function answer(message: Partial<NonNullable<ChatResponse['choices'][number]['message']>>, finishReason: string, stopSequence = '', usage?: Partial<Usage>): ChatResponse {
  return {
    id: 'chatcmpl-1',
    modelId: 'testco/m',
    created: 1n,
    providerId: 'provider-a',
    routingStrategy: 'balanced',
    droppedParams: [],
    choices: [{ index: 0, finishReason, stopSequence, message: { content: '', toolCalls: [], reasoning: [], images: [], ...message } }],
    usage: usage as Usage | undefined,
  };
}

describe('renderMessage', () => {
  it('thinking first (signature tagged), then text, then tool_use with parsed input; msg_ id from the request id; catalog model id', () => {
    const rendered = renderMessage(
      answer(
        {
          content: 'Checking the weather.',
          reasoning: [
            { text: 'User wants weather.', signature: 'sig-1', encryptedData: '', providerId: '' },
            { text: '', signature: '', encryptedData: 'opaque', providerId: '' },
          ],
          toolCalls: [{ id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}' }],
        },
        'tool_calls',
        '',
        { inputTokens: 120, cachedInputTokens: 100, cacheWriteTokens: 0, outputTokens: 9 },
      ),
      answerContext(),
    );
    expect(rendered).toMatchObject({
      id: 'msg_0123abcd',
      type: 'message',
      role: 'assistant',
      model: 'testco/m',
      stop_reason: 'tool_use',
      stop_sequence: null,
      usage: { input_tokens: 20, output_tokens: 9, cache_read_input_tokens: 100, cache_creation_input_tokens: 0 },
    });
    expect(rendered.content.map((block) => block.type)).toEqual(['thinking', 'redacted_thinking', 'text', 'tool_use']);
    expect(tags.untag(rendered.content[0]!.signature as string)).toEqual({ providerId: 'provider-a', value: 'sig-1' });
    expect(tags.untag(rendered.content[1]!.data as string)).toEqual({ providerId: 'provider-a', value: 'opaque' });
    expect(rendered.content[3]).toEqual({ type: 'tool_use', id: 'call_1', name: 'weather', input: { city: 'Paris' } });
  });

  it('a provider’s unparsable tool arguments become {} and a warning', () => {
    const warnings: unknown[] = [];
    const logger = { warn: (fields: unknown) => warnings.push(fields) } as unknown as Logger;
    const rendered = renderMessage(answer({ toolCalls: [{ id: 'call_9', name: 'f', arguments: '{"broken' }] }, 'tool_calls'), answerContext({ logger }));
    expect(rendered.content).toEqual([{ type: 'tool_use', id: 'call_9', name: 'f', input: {} }]);
    expect(warnings).toEqual([expect.objectContaining({ tool_call_id: 'call_9', request_id: 'req_0123abcd' })]);
  });

  it('stop reasons map exactly', () => {
    expect(messagesStopReason('stop', '', false)).toBe('end_turn');
    expect(messagesStopReason('stop', 'END', false)).toBe('stop_sequence');
    expect(messagesStopReason('length', '', false)).toBe('max_tokens');
    expect(messagesStopReason('tool_calls', '', true)).toBe('tool_use');
    expect(messagesStopReason('content_filter', '', false)).toBe('refusal');
    // A provider that says `stop` with tool calls still asks the client to run them.
    expect(messagesStopReason('stop', '', true)).toBe('tool_use');
    expect(renderMessage(answer({ content: 'x' }, 'stop', 'END'), answerContext())).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: 'END' });
  });

  it('usage: input_tokens excludes cache reads and writes, which are reported apart', () => {
    expect(renderMessagesUsage({ inputTokens: 1000, cachedInputTokens: 600, cacheWriteTokens: 300, outputTokens: 5 } as Usage)).toEqual({
      input_tokens: 100,
      output_tokens: 5,
      cache_read_input_tokens: 600,
      cache_creation_input_tokens: 300,
    });
    expect(renderMessagesUsage(undefined)).toEqual({ input_tokens: 0, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 });
  });
});
