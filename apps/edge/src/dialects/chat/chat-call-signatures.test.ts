import { describe, expect, it } from 'vitest';
import type { ChatResponse, ChatStreamDelta, Model } from '@gateway/proto';
import type { CatalogModel } from '../../catalog-cache.js';
import { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { parseChatCompletionRequest } from './chat-schema.js';
import { ChatChunkWriter } from './chat-stream-writer.js';
import { convertChatRequest } from './convert-chat-request.js';
import { renderChatCompletion } from './render-chat.js';

/*
 * A tool call's own signature (Gemini's thoughtSignature on a functionCall part) in chat completions:
 * rendered issuer-tagged at `tool_calls[].extra_content.google.thought_signature` (Google's OpenAI
 * compatibility), whole and streamed, and taken back from a replayed assistant message's tool_calls.
 */

const tags = new ReasoningTags('chat-call-signature-test-key');

const model = {
  model: { id: 'm', reasoningEfforts: [] } as unknown as Model,
  id: 'm',
  paid: true,
  endpoints: new Set(['chat.completions']),
  supportedParameters: new Set(['tools']),
  inputModalities: new Set(['text']),
  extraParameters: new Set<string>(),
  allowedTiers: null,
  availableTiers: ['tier-1'],
} as CatalogModel;

function answer(): ChatResponse {
  return {
    id: 'req_1', created: 1n, modelId: 'm', providerId: 'gem',
    choices: [{
      index: 0, finishReason: 'tool_calls', stopSequence: '',
      message: {
        content: '', reasoning: [], images: [],
        toolCalls: [
          { id: 'call_a', name: 'get_weather', arguments: '{"city":"Paris"}', signature: 'CiQBsig+A=', signatureProviderId: 'gem' },
          { id: 'call_b', name: 'get_weather', arguments: '{"city":"Rome"}' },
        ],
      },
    }],
  } as unknown as ChatResponse;
}

/** The replayed turn: the assistant message as rendered, and both results. */
function replay(toolCalls: unknown[]) {
  return convertChatRequest(parseChatCompletionRequest({
    model: 'm',
    messages: [
      { role: 'user', content: 'Weather?' },
      { role: 'assistant', content: null, tool_calls: toolCalls },
      { role: 'tool', tool_call_id: 'call_a', content: '21' },
      { role: 'tool', tool_call_id: 'call_b', content: '19' },
    ],
  }), model, tags).request.messages[1]!.toolCalls;
}

describe('tool call signatures in chat completions', () => {
  it('a whole answer puts the tagged signature on its call; sent back as received, it returns untagged with its issuer', () => {
    const rendered = renderChatCompletion(answer(), 'm', tags);
    const calls = (rendered.choices[0]!.message as any).tool_calls;
    const tagged = calls[0].extra_content.google.thought_signature;
    expect(tags.untagCall(tagged)).toEqual({ providerId: 'gem', value: 'CiQBsig+A=' });
    expect(calls[1].extra_content).toBeUndefined();
    const back = replay(JSON.parse(JSON.stringify(calls)));
    expect(back[0]).toMatchObject({ id: 'call_a', signature: 'CiQBsig+A=', signatureProviderId: 'gem' });
    expect(back[1]!.signature).toBeUndefined();
  });

  it('the issuer is the answer provider when the call names none', () => {
    const response = answer();
    response.choices[0]!.message!.toolCalls[0]!.signatureProviderId = '';
    const rendered = renderChatCompletion(response, 'm', tags);
    expect(tags.untagCall((rendered.choices[0]!.message as any).tool_calls[0].extra_content.google.thought_signature).providerId).toBe('gem');
  });

  it("a stream puts it on the call's first chunk, tagged with the stream's provider", () => {
    const writer = new ChatChunkWriter('m', false, tags);
    writer.start({ id: 'req_2', created: 1n, modelId: 'm', providerId: 'gem' } as any);
    const delta = (toolCalls: ChatStreamDelta['toolCalls']): ChatStreamDelta => ({
      choiceIndex: 0, content: '', toolCalls, reasoning: '', reasoningSignature: '', finishReason: '', images: [], reasoningEncrypted: '', stopSequence: '',
    });
    const frame = (text: string) => JSON.parse(text.slice('data: '.length)).choices[0].delta;
    const first = frame(writer.delta(delta([{ index: 0, id: 'call_a', name: 'get_weather', arguments: '{}', signature: 'CiQBsig+A=' }])));
    expect(tags.untagCall(first.tool_calls[0].extra_content.google.thought_signature)).toEqual({ providerId: 'gem', value: 'CiQBsig+A=' });
    const plain = frame(writer.delta(delta([{ index: 1, id: 'call_b', name: 'get_weather', arguments: '{}' }])));
    expect(plain.tool_calls[0].extra_content).toBeUndefined();
  });

  it('a signature without a valid tag (raw, edited, a reasoning tag) is foreign: the call stays, its signature goes nowhere', () => {
    const call = (signature: string) => ({ id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{}' }, extra_content: { google: { thought_signature: signature } } });
    const other = { id: 'call_b', type: 'function', function: { name: 'get_weather', arguments: '{}' } };
    const tagged = tags.tagCall('gem', 'CiQBsig+A=');
    for (const signature of ['CiQBsig+A=', `${tagged}x`, tags.tag('gem', 'CiQBsig+A='), new ReasoningTags('another-key-of-enough-length').tagCall('gem', 'CiQBsig+A=')]) {
      const [back] = replay([call(signature), other]);
      expect(back, signature).toEqual({ id: 'call_a', name: 'get_weather', arguments: '{}' });
      expect(back!.signature).toBeUndefined();
    }
    // Another vendor's extras are accepted and ignored.
    expect(replay([{ ...other, id: 'call_a', extra_content: { acme: { x: 1 } } }, other])[0]!.signature).toBeUndefined();
  });
});
