import { describe, expect, it } from 'vitest';
import type OpenAI from 'openai';
import type { ChatResponse } from '@gateway/proto';
import { answerContext, testTags, testUsage } from '../../../test/responses-support.js';
import { convertResponsesRequest } from './convert-responses-request.js';
import { renderResponse } from './render-responses.js';
import { parseResponsesRequest } from './responses-schema.js';

const context = answerContext();

function answer(message: Partial<ChatResponse['choices'][number]['message'] & object>, finishReason = 'stop'): ChatResponse {
  return {
    id: 'chatcmpl-x',
    modelId: 'acme/chat',
    created: 1n,
    choices: [{ index: 0, message: { content: '', toolCalls: [], reasoning: [], images: [], ...message }, finishReason, stopSequence: '' }],
    usage: testUsage(20, 9, { cachedInputTokens: 4, reasoningTokens: 3 }),
    providerId: 'provider-a',
    routingStrategy: 'balanced',
    droppedParams: [],
  };
}

const body = (extra: Record<string, unknown> = {}) => parseResponsesRequest({ model: 'chat', input: 'hi', ...extra });

const chatLogprobs = (tokens: string[]) => JSON.stringify({
  content: tokens.map((token, index) => ({ token, logprob: -index - 0.5, bytes: [...Buffer.from(token)], top_logprobs: [{ token, logprob: -index - 0.5, bytes: [...Buffer.from(token)] }] })),
  refusal: null,
});

describe('renderResponse', () => {
  it('carries the relayed logprobs as the output_text part\'s logprobs (only where the answer has some)', () => {
    const asked = answer({ content: 'Hé lo' });
    asked.choices[0]!.logprobs = chatLogprobs(['Hé ', 'lo']);
    const rendered = renderResponse(asked, context, body({ include: ['message.output_text.logprobs'] }));
    const part = (rendered.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText;
    expect(part.logprobs).toEqual([
      { token: 'Hé ', bytes: [72, 195, 169, 32], logprob: -0.5, top_logprobs: [{ token: 'Hé ', bytes: [72, 195, 169, 32], logprob: -0.5 }] },
      { token: 'lo', bytes: [108, 111], logprob: -1.5, top_logprobs: [{ token: 'lo', bytes: [108, 111], logprob: -1.5 }] },
    ]);
    const plain = renderResponse(answer({ content: 'Hé lo' }), context, body());
    expect((plain.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0]).not.toHaveProperty('logprobs');
  });

  it('renders a completed answer in the SDK Response shape, ids derived from the request id', () => {
    const rendered = renderResponse(answer({ content: 'Hello.' }), context, body({ metadata: { team: 'a' }, temperature: 0.3, store: true }));
    // The SDK's own type: every required field present with its declared type.
    const typed: Omit<OpenAI.Responses.Response, 'output_text'> = rendered as unknown as Omit<OpenAI.Responses.Response, 'output_text'>;
    expect(typed).toMatchObject({
      id: 'resp_0123456789abcdef0123456789abcdef',
      object: 'response',
      created_at: 1_767_225_600,
      status: 'completed',
      error: null,
      incomplete_details: null,
      model: 'acme/chat',
      output: [
        {
          id: 'msg_0123456789abcdef0123456789abcdef_0',
          type: 'message',
          status: 'completed',
          role: 'assistant',
          content: [{ type: 'output_text', text: 'Hello.', annotations: [] }],
        },
      ],
      instructions: null,
      metadata: { team: 'a' },
      parallel_tool_calls: true,
      temperature: 0.3,
      // Numbers the client left out are OpenAI's documented defaults (the Open Responses schema wants numbers).
      top_p: 1,
      presence_penalty: 0,
      frequency_penalty: 0,
      top_logprobs: 0,
      service_tier: 'default',
      max_tool_calls: null,
      safety_identifier: null,
      prompt_cache_key: null,
      tool_choice: 'auto',
      tools: [],
      text: { format: { type: 'text' } },
      // Nothing is stored, whatever the request said.
      store: false,
      truncation: 'disabled',
      usage: { input_tokens: 20, input_tokens_details: { cached_tokens: 4 }, output_tokens: 9, output_tokens_details: { reasoning_tokens: 3 }, total_tokens: 29 },
    });
    expect(typed.completed_at).toBeGreaterThanOrEqual(1_767_225_600);
  });

  it('lists reasoning before the message and function calls after it, each with its own id', () => {
    const rendered = renderResponse(
      answer({
        content: 'Let me check.',
        reasoning: [{ text: 'The user wants weather.', signature: 'sig-A', encryptedData: '', providerId: '' }],
        toolCalls: [
          { id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}' },
          { id: 'call_2', name: 'weather', arguments: '{"city":"Rome"}' },
        ],
      }, 'tool_calls'),
      context,
      body(),
    );
    expect(rendered.output.map((item) => (item as { type: string }).type)).toEqual(['reasoning', 'message', 'function_call', 'function_call']);
    expect(rendered.output.map((item) => (item as { id: string }).id)).toEqual([
      'rs_0123456789abcdef0123456789abcdef_0',
      'msg_0123456789abcdef0123456789abcdef_1',
      'fc_0123456789abcdef0123456789abcdef_2',
      'fc_0123456789abcdef0123456789abcdef_3',
    ]);
    expect(rendered.output[2]).toEqual({
      id: 'fc_0123456789abcdef0123456789abcdef_2',
      type: 'function_call',
      status: 'completed',
      call_id: 'call_1',
      name: 'weather',
      arguments: '{"city":"Paris"}',
    });
    expect(rendered.status).toBe('completed');
  });

  it('tags signed and encrypted reasoning with its issuer, and the converter reads it back symmetrically', () => {
    const rendered = renderResponse(
      answer({
        content: 'Done.',
        reasoning: [
          { text: 'Thinking.', signature: 'sig-A', encryptedData: '', providerId: '' },
          { text: '', signature: '', encryptedData: 'opaque-B', providerId: 'provider-b' },
          { text: 'Plain.', signature: '', encryptedData: '', providerId: '' },
        ],
      }),
      context,
      body(),
    );
    const [signed, opaque, plain] = rendered.output as { encrypted_content?: string; summary: unknown[] }[];
    expect(signed!.summary).toEqual([{ type: 'summary_text', text: 'Thinking.' }]);
    expect(signed!.encrypted_content).toMatch(/^gw1\./);
    expect(testTags.untag(signed!.encrypted_content!)).toEqual({ providerId: 'provider-a', value: 's:sig-A' });
    expect(opaque!.summary).toEqual([]);
    expect(testTags.untag(opaque!.encrypted_content!)).toEqual({ providerId: 'provider-b', value: 'e:opaque-B' });
    // No provider value, nothing to carry.
    expect(plain).not.toHaveProperty('encrypted_content');

    // Replayed as input, the same items come back as the provider's own values with their issuers.
    const replay = parseResponsesRequest({
      model: 'chat',
      input: [{ role: 'user', content: 'hi' }, ...rendered.output, { role: 'user', content: 'more' }],
    });
    const model = { ...context.model, supportedParameters: new Set<string>() };
    const converted = convertResponsesRequest(replay, model, testTags);
    // Plain reasoning (no provider value) is shown, never replayed.
    expect(converted.request.messages[1]!.reasoning).toEqual([
      { text: 'Thinking.', signature: 'sig-A', encryptedData: '', providerId: 'provider-a' },
      { text: '', signature: '', encryptedData: 'opaque-B', providerId: 'provider-b' },
    ]);
  });

  it('length and content filter are incomplete with their reason; only tool calls means no message item', () => {
    const long = renderResponse(answer({ content: 'Cut sh' }, 'length'), context, body({ max_output_tokens: 5 }));
    expect(long).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, completed_at: null, max_output_tokens: 5 });
    expect((long.output[0] as { status: string }).status).toBe('incomplete');
    const filtered = renderResponse(answer({ content: '' }, 'content_filter'), context, body());
    expect(filtered).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'content_filter' } });
    const calls = renderResponse(answer({ toolCalls: [{ id: 'c', name: 'f', arguments: '{}' }] }, 'tool_calls'), context, body());
    expect(calls.output.map((item) => (item as { type: string }).type)).toEqual(['function_call']);
  });

  it('a refusal is a refusal part of the message', () => {
    const rendered = renderResponse(answer({ content: '', refusal: 'I cannot help with that.' }), context, body());
    expect((rendered.output[0] as { content: unknown[] }).content).toEqual([{ type: 'refusal', refusal: 'I cannot help with that.' }]);
  });

  it('echoes the request settings: tools, tool choice, text format, reasoning, user', () => {
    const rendered = renderResponse(
      answer({ content: '{}' }),
      context,
      body({
        instructions: 'Be brief.',
        tools: [{ type: 'function', name: 'f', parameters: { type: 'object' }, strict: true }],
        tool_choice: { type: 'function', name: 'f' },
        text: { format: { type: 'json_object' }, verbosity: 'low' },
        reasoning: { effort: 'low', summary: 'auto' },
        parallel_tool_calls: false,
        user: 'u-1',
      }),
    );
    expect(rendered).toMatchObject({
      instructions: 'Be brief.',
      tools: [{ type: 'function', name: 'f', description: null, parameters: { type: 'object' }, strict: true }],
      tool_choice: { type: 'function', name: 'f' },
      text: { format: { type: 'json_object' }, verbosity: 'low' },
      reasoning: { effort: 'low', summary: 'auto' },
      parallel_tool_calls: false,
      user: 'u-1',
    });
  });
});
