import Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import type { ChatStreamDelta, ToolCallDelta, Usage } from '@gateway/proto';
import { answerContext, tags } from '../../../test/messages-fixtures.js';
import { MessagesStreamWriter } from './messages-stream-writer.js';

function delta(fields: Partial<ChatStreamDelta>): ChatStreamDelta {
  return { choiceIndex: 0, content: '', toolCalls: [], reasoning: '', reasoningSignature: '', finishReason: '', images: [], reasoningEncrypted: '', stopSequence: '', ...fields };
}

function toolDelta(index: number, fields: Partial<ToolCallDelta>): ToolCallDelta {
  return { index, id: '', name: '', arguments: '', ...fields };
}

function usage(fields: Partial<Usage>): Usage {
  return {
    inputTokens: 0, cachedInputTokens: 0, outputTokens: 0, reasoningTokens: 0, inputAudioTokens: 0, outputAudioTokens: 0, inputAudioMs: 0,
    outputAudioMs: 0, outputTextTokens: 0, inputTextCharacters: 0, outputTextCharacters: 0, outputImageTokens: 0, inputImageTokens: 0,
    inputTextTokens: 0, estimated: false, cacheWriteTokens: 0, ...fields,
  };
}

/** The SSE text as events; every event's `event:` line must name its data's type. */
function events(text: string): Array<{ event: string; data: any }> {
  expect(text.endsWith('\n\n')).toBe(true);
  return text
    .split('\n\n')
    .filter(Boolean)
    .map((frame) => {
      const match = /^event: (\S+)\ndata: (.*)$/s.exec(frame);
      expect(match, frame).not.toBeNull();
      const data = JSON.parse(match![2]!);
      expect(data.type).toBe(match![1]);
      return { event: match![1]!, data };
    });
}

/** What Anthropic's own SDK assembles from this SSE text (its `messages.stream()` helper over a canned response). */
async function sdkFinalMessage(text: string) {
  const client = new Anthropic({
    apiKey: 'unused',
    baseURL: 'http://gateway.invalid',
    maxRetries: 0,
    fetch: async () => new Response(text, { status: 200, headers: { 'content-type': 'text/event-stream' } }),
  });
  return client.messages.stream({ model: 'testco/m', max_tokens: 100, messages: [{ role: 'user', content: 'q' }] }).finalMessage();
}

function run(writer: MessagesStreamWriter, deltas: ChatStreamDelta[], finalUsage: Usage | undefined): string {
  writer.start({ id: 'chatcmpl-x', modelId: 'testco/m', created: 1n, providerId: 'provider-a', routingStrategy: 'balanced', droppedParams: [] });
  return writer.open() + deltas.map((one) => writer.delta(one)).join('') + writer.end(finalUsage);
}

describe('messages stream writer', () => {
  it('writes blocks in order with sequential indices, tool input as it arrives, a tagged signature, cumulative usage', async () => {
    const writer = new MessagesStreamWriter(answerContext());
    const text = run(
      writer,
      [
        delta({ reasoning: 'Think' }),
        delta({ reasoning: 'ing.' }),
        delta({ reasoningSignature: 'sig-' }),
        delta({ reasoningSignature: 'part2' }),
        delta({ content: 'Let me ' }),
        delta({ content: 'check.' }),
        delta({ toolCalls: [toolDelta(0, { id: 'call_1', name: 'weather', arguments: '{"ci' })] }),
        delta({ toolCalls: [toolDelta(0, { arguments: 'ty":"Paris"}' })] }),
        delta({ toolCalls: [toolDelta(1, { id: 'call_2', name: 'weather', arguments: '' })] }),
        delta({ toolCalls: [toolDelta(1, { arguments: '{"city":"Rome"}' })] }),
        delta({ finishReason: 'tool_calls' }),
      ],
      usage({ inputTokens: 100, cachedInputTokens: 30, cacheWriteTokens: 20, outputTokens: 12 }),
    );
    const sequence = events(text);
    expect(sequence.map(({ event, data }) => (data.index !== undefined ? `${event}#${data.index}${data.delta ? `:${data.delta.type}` : ''}` : event))).toEqual([
      'message_start',
      'content_block_start#0',
      'content_block_delta#0:thinking_delta',
      'content_block_delta#0:thinking_delta',
      'content_block_delta#0:signature_delta',
      'content_block_stop#0',
      'content_block_start#1',
      'content_block_delta#1:text_delta',
      'content_block_delta#1:text_delta',
      'content_block_stop#1',
      'content_block_start#2',
      'content_block_delta#2:input_json_delta',
      'content_block_delta#2:input_json_delta',
      'content_block_stop#2',
      'content_block_start#3',
      'content_block_delta#3:input_json_delta',
      'content_block_stop#3',
      'message_delta',
      'message_stop',
    ]);
    expect(sequence[0]!.data.message).toMatchObject({ id: 'msg_0123abcd', type: 'message', role: 'assistant', model: 'testco/m', content: [] });
    expect(sequence[10]!.data.content_block).toEqual({ type: 'tool_use', id: 'call_1', name: 'weather', input: {} });
    // Each arguments piece is its own event, as it came (never buffered to the end).
    expect([sequence[11]!.data.delta.partial_json, sequence[12]!.data.delta.partial_json]).toEqual(['{"ci', 'ty":"Paris"}']);
    expect(tags.untag(sequence[4]!.data.delta.signature)).toEqual({ providerId: 'provider-a', value: 'sig-part2' });
    expect(sequence[17]!.data).toEqual({
      type: 'message_delta',
      delta: { stop_reason: 'tool_use', stop_sequence: null },
      usage: { input_tokens: 50, output_tokens: 12, cache_creation_input_tokens: 20, cache_read_input_tokens: 30 },
    });

    const message = await sdkFinalMessage(text);
    expect(message.content.map((block) => block.type)).toEqual(['thinking', 'text', 'tool_use', 'tool_use']);
    expect(message.content[2]).toMatchObject({ type: 'tool_use', id: 'call_1', input: { city: 'Paris' } });
    expect(message.content[3]).toMatchObject({ type: 'tool_use', id: 'call_2', input: { city: 'Rome' } });
    expect(message).toMatchObject({ stop_reason: 'tool_use', usage: { input_tokens: 50, output_tokens: 12, cache_read_input_tokens: 30 } });
  });

  it('redacted thinking is a whole block; reasoning after a signature opens a new thinking block; a matched stop sequence is reported', () => {
    const writer = new MessagesStreamWriter(answerContext());
    const sequence = events(
      run(
        writer,
        [
          delta({ reasoning: 'a', reasoningSignature: 's1' }),
          delta({ reasoning: 'b' }),
          delta({ reasoningEncrypted: 'opaque' }),
          delta({ content: 'done', finishReason: 'stop', stopSequence: 'END' }),
        ],
        undefined,
      ),
    );
    const starts = sequence.filter(({ event }) => event === 'content_block_start').map(({ data }) => [data.index, data.content_block.type]);
    expect(starts).toEqual([[0, 'thinking'], [1, 'thinking'], [2, 'redacted_thinking'], [3, 'text']]);
    const redacted = sequence.find(({ data }) => data.content_block?.type === 'redacted_thinking')!.data.content_block;
    expect(tags.untag(redacted.data)).toEqual({ providerId: 'provider-a', value: 'opaque' });
    expect(sequence.at(-2)!.data.delta).toEqual({ stop_reason: 'stop_sequence', stop_sequence: 'END' });
  });

  it('a failure after the commit point ends with an error event, never message_stop, and the SDK throws', async () => {
    const writer = new MessagesStreamWriter(answerContext());
    writer.start({ id: 'x', modelId: 'testco/m', created: 1n, providerId: 'provider-a', routingStrategy: '', droppedParams: [] });
    const text = writer.open() + writer.delta(delta({ content: 'partial' })) + writer.fail({ status: 503, type: 'service_unavailable', message: 'No upstream available.' });
    const sequence = events(text);
    expect(sequence.at(-1)).toEqual({ event: 'error', data: { type: 'error', error: { type: 'overloaded_error', message: 'No upstream available.' } } });
    expect(sequence.map(({ event }) => event)).not.toContain('message_stop');
    const failure = await sdkFinalMessage(text).then(() => undefined, (error: unknown) => error);
    expect(failure).toBeInstanceOf(Anthropic.APIError);
    expect((failure as InstanceType<typeof Anthropic.APIError>).type).toBe('overloaded_error');
  });

  it('a stream committed by pings before the router started still opens a whole message', () => {
    const writer = new MessagesStreamWriter(answerContext({ requestId: 'req_ping' }));
    const text = writer.open() + writer.ping() + writer.ping();
    expect(events(text).map(({ event }) => event)).toEqual(['message_start', 'ping', 'ping']);
    expect(events(text)[0]!.data.message.id).toBe('msg_ping');
  });
});
