import { describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import type { ChatStreamDelta, Usage } from '@gateway/proto';
import { answerContext, canonicalDelta, rawEvents, sdkEvents, sdkFinalResponse, testTags, testUsage, toolCallDelta } from '../../../test/responses-support.js';
import { parseResponsesRequest } from './responses-schema.js';
import { ResponsesStreamWriter } from './responses-stream-writer.js';

const START = { id: 'chatcmpl-x', modelId: 'acme/chat', created: 1n, providerId: 'provider-a', routingStrategy: 'balanced', droppedParams: [] };

/** A whole stream as the pipeline writes it: open, each delta, then end (or fail). */
function stream(deltas: ChatStreamDelta[], finish: { usage?: Usage; fail?: Parameters<ResponsesStreamWriter['fail']>[0] } = {}): string {
  const writer = new ResponsesStreamWriter(answerContext(), parseResponsesRequest({ model: 'chat', input: 'hi', tools: [{ type: 'function', name: 'weather', parameters: null, strict: null }] }));
  writer.start(START);
  let sse = writer.open();
  for (const delta of deltas) sse += writer.delta(delta);
  return sse + (finish.fail ? writer.fail(finish.fail, finish.usage) : writer.end(finish.usage));
}

describe('ResponsesStreamWriter', () => {
  it('streams a message: lifecycle, item, part, deltas, done events, completed with usage; sequence numbers count from 0', async () => {
    const sse = stream([canonicalDelta({ content: 'Hel' }), canonicalDelta({ content: 'lo.', finishReason: 'stop' })], { usage: testUsage(7, 2) });
    const events = rawEvents(sse);
    expect(events.map((event) => event.event)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    // Every event: its `event:` line names its data's type, and sequence numbers increase by one.
    events.forEach((event, index) => {
      expect(event.data.type).toBe(event.event);
      expect(event.data.sequence_number).toBe(index);
    });
    expect(events[4]!.data).toEqual({
      type: 'response.output_text.delta',
      sequence_number: 4,
      item_id: 'msg_0123456789abcdef0123456789abcdef_0',
      output_index: 0,
      content_index: 0,
      delta: 'Hel',
      logprobs: [],
    });
    expect(events[6]!.data).toMatchObject({ text: 'Hello.' });
    expect((events[0]!.data.response as { status: string; id: string }).status).toBe('in_progress');
    expect((events[0]!.data.response as { id: string }).id).toBe('resp_0123456789abcdef0123456789abcdef');

    // The SDK parses every event and assembles the same answer as the completed event says.
    expect((await sdkEvents(sse)).map((event) => event.type)).toEqual(events.map((event) => event.event));
    const final = await sdkFinalResponse(sse);
    expect(final.output_text).toBe('Hello.');
    expect(final.status).toBe('completed');
    expect(final.usage).toEqual({ input_tokens: 7, input_tokens_details: { cached_tokens: 0 }, output_tokens: 2, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 9 });
    expect(final.tools).toEqual([{ type: 'function', name: 'weather', description: null, parameters: null, strict: null }]);
  });

  it('reasoning, then text, then tool calls: each kind closes the item before it; arguments stream as they arrive', async () => {
    const sse = stream(
      [
        canonicalDelta({ reasoning: 'Weather ' }),
        canonicalDelta({ reasoning: 'needed.' }),
        canonicalDelta({ reasoningSignature: 'sig-A' }),
        canonicalDelta({ reasoningEncrypted: 'opaque-A' }),
        canonicalDelta({ content: 'Checking.' }),
        canonicalDelta({ toolCalls: [toolCallDelta(0, { id: 'call_1', name: 'weather', arguments: '{"ci' })] }),
        canonicalDelta({ toolCalls: [toolCallDelta(0, { arguments: 'ty":"Paris"}' })] }),
        canonicalDelta({ toolCalls: [toolCallDelta(1, { id: 'call_2', name: 'weather', arguments: '{}' })], finishReason: 'tool_calls' }),
      ],
      { usage: testUsage(30, 12, { reasoningTokens: 5 }) },
    );
    const events = rawEvents(sse);
    expect(events.map((event) => `${event.event}${event.data.output_index === undefined ? '' : `@${String(event.data.output_index)}`}`)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added@0',
      'response.reasoning_summary_part.added@0',
      'response.reasoning_summary_text.delta@0',
      'response.reasoning_summary_text.delta@0',
      'response.reasoning_summary_text.done@0',
      'response.reasoning_summary_part.done@0',
      'response.output_item.done@0',
      // The encrypted reasoning after a signed block is an item of its own, with no summary.
      'response.output_item.added@1',
      'response.output_item.done@1',
      'response.output_item.added@2',
      'response.content_part.added@2',
      'response.output_text.delta@2',
      'response.output_text.done@2',
      'response.content_part.done@2',
      'response.output_item.done@2',
      'response.output_item.added@3',
      'response.function_call_arguments.delta@3',
      'response.function_call_arguments.delta@3',
      'response.function_call_arguments.done@3',
      'response.output_item.done@3',
      'response.output_item.added@4',
      'response.function_call_arguments.delta@4',
      'response.function_call_arguments.done@4',
      'response.output_item.done@4',
      'response.completed',
    ]);
    events.forEach((event, index) => expect(event.data.sequence_number).toBe(index));
    expect(events[17]!.data.item).toEqual({
      id: 'fc_0123456789abcdef0123456789abcdef_3',
      type: 'function_call',
      status: 'in_progress',
      call_id: 'call_1',
      name: 'weather',
      arguments: '',
    });
    expect(events[20]!.data).toMatchObject({ name: 'weather', arguments: '{"city":"Paris"}', item_id: 'fc_0123456789abcdef0123456789abcdef_3' });

    const final = await sdkFinalResponse(sse);
    expect(final.output.map((item) => item.type)).toEqual(['reasoning', 'reasoning', 'message', 'function_call', 'function_call']);
    const [signed, opaque] = final.output as OpenAI.Responses.ResponseReasoningItem[];
    expect(signed!.summary).toEqual([{ type: 'summary_text', text: 'Weather needed.' }]);
    expect(testTags.untag(signed!.encrypted_content!)).toEqual({ providerId: 'provider-a', value: 's:sig-A' });
    expect(opaque!.summary).toEqual([]);
    expect(testTags.untag(opaque!.encrypted_content!)).toEqual({ providerId: 'provider-a', value: 'e:opaque-A' });
    expect(final.output_text).toBe('Checking.');
    expect((final.output[3] as OpenAI.Responses.ResponseFunctionToolCall).arguments).toBe('{"city":"Paris"}');
    expect(final.usage?.output_tokens_details.reasoning_tokens).toBe(5);
  });

  it('logprobs ride on the text deltas they score (a chunk of only logprobs waits for the next text); done and the final part carry them all', async () => {
    const logprobs = (tokens: string[]) => JSON.stringify({ content: tokens.map((token) => ({ token, logprob: -0.5, bytes: [...Buffer.from(token)], top_logprobs: [] })), refusal: null });
    const sse = stream([
      canonicalDelta({ content: 'Hel', logprobs: logprobs(['Hel']) }),
      canonicalDelta({ logprobs: logprobs(['lo']) }),
      canonicalDelta({ content: 'lo.' }),
      canonicalDelta({ content: '', finishReason: 'stop' }),
    ], { usage: testUsage(7, 2) });
    const events = rawEvents(sse);
    const deltas = events.filter((event) => event.event === 'response.output_text.delta').map((event) => event.data);
    expect(deltas.map((delta) => delta.logprobs)).toEqual([[{ token: 'Hel', logprob: -0.5, top_logprobs: [] }], [{ token: 'lo', logprob: -0.5, top_logprobs: [] }]]);
    const done = events.find((event) => event.event === 'response.output_text.done')!.data;
    expect((done.logprobs as { token: string }[]).map((entry) => entry.token)).toEqual(['Hel', 'lo']);
    const final = await sdkFinalResponse(sse);
    const part = (final.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText;
    expect(part.logprobs).toEqual([{ token: 'Hel', logprob: -0.5, bytes: [72, 101, 108], top_logprobs: [] }, { token: 'lo', logprob: -0.5, bytes: [108, 111], top_logprobs: [] }]);
    // None asked: the delta events carry an empty list, the part none.
    const plain = rawEvents(stream([canonicalDelta({ content: 'Hi', finishReason: 'stop' })]));
    expect(plain.find((event) => event.event === 'response.output_text.delta')!.data.logprobs).toEqual([]);
    expect(JSON.stringify(plain.at(-1)!.data)).not.toContain('"logprobs":[{');
  });

  it('a late delta of a call already closed still reaches the final response', async () => {
    const sse = stream([
      canonicalDelta({ toolCalls: [toolCallDelta(0, { id: 'a', name: 'f', arguments: '{"x":' })] }),
      canonicalDelta({ toolCalls: [toolCallDelta(1, { id: 'b', name: 'g', arguments: '{}' })] }),
      canonicalDelta({ toolCalls: [toolCallDelta(0, { arguments: '1}' })], finishReason: 'tool_calls' }),
    ]);
    const final = await sdkFinalResponse(sse);
    expect(final.output.map((item) => (item as OpenAI.Responses.ResponseFunctionToolCall).arguments)).toEqual(['{"x":1}', '{}']);
  });

  it('length ends as response.incomplete with its reason and the open item incomplete', async () => {
    const sse = stream([canonicalDelta({ content: 'Cut', finishReason: 'length' })], { usage: testUsage(3, 1) });
    const events = rawEvents(sse);
    expect(events.at(-1)!.event).toBe('response.incomplete');
    expect(events.at(-1)!.data.response).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, completed_at: null });
    expect(events.at(-2)!.data.item).toMatchObject({ type: 'message', status: 'incomplete' });
    const final = await sdkFinalResponse(sse);
    expect(final.status).toBe('incomplete');
    expect(final.output_text).toBe('Cut');
  });

  it('a failure after content ends with response.failed then error, and the SDK throws an APIError', async () => {
    const sse = stream([canonicalDelta({ content: 'Half an ans' })], {
      fail: { status: 503, type: 'service_unavailable', code: 'no_upstream', message: 'No upstream available.' },
      usage: testUsage(5, 3),
    });
    const events = rawEvents(sse);
    expect(events.map((event) => event.event).slice(-2)).toEqual(['response.failed', 'error']);
    expect(events.some((event) => event.event === 'response.completed' || event.event === 'response.output_item.done')).toBe(false);
    const failed = events.at(-2)!.data.response as Record<string, unknown>;
    expect(failed).toMatchObject({
      status: 'failed',
      error: { code: 'server_error', message: 'No upstream available.' },
      output: [{ type: 'message', status: 'incomplete', content: [{ type: 'output_text', text: 'Half an ans' }] }],
      usage: { input_tokens: 5, output_tokens: 3 },
    });
    expect(events.at(-1)!.data).toEqual({
      type: 'error',
      sequence_number: events.length - 1,
      code: 'no_upstream',
      message: 'No upstream available.',
      param: null,
      error: { type: 'service_unavailable', code: 'no_upstream', message: 'No upstream available.', param: null },
    });

    // Iterating create({stream: true}): the failed event arrives, then the SDK throws.
    const seen: string[] = [];
    const thrown = await (async () => {
      for await (const event of (await import('openai/core/streaming')).Stream.fromSSEResponse<{ type: string }>(
        new Response(sse, { headers: { 'content-type': 'text/event-stream' } }),
        new AbortController(),
      )) seen.push(event.type);
    })().then(() => undefined, (error: unknown) => error);
    expect(thrown).toBeInstanceOf(OpenAI.APIError);
    expect((thrown as InstanceType<typeof OpenAI.APIError>).message).toContain('No upstream available.');
    expect(seen.at(-1)).toBe('response.failed');
    // The stream helper (client.responses.stream) rejects too, with an APIError rather than a plain object.
    await expect(sdkFinalResponse(sse)).rejects.toBeInstanceOf(OpenAI.APIError);
  });

  it('maps a rate limit failure to the SDK code rate_limit_exceeded in response.failed', () => {
    const sse = stream([canonicalDelta({ content: 'x' })], { fail: { status: 429, type: 'rate_limit_exceeded', code: 'rate_limit_exceeded', message: 'slow down' } });
    expect(rawEvents(sse).at(-2)!.data.response).toMatchObject({ error: { code: 'rate_limit_exceeded' } });
  });

  it('a stream with no content at all still completes, with an empty output', async () => {
    const final = await sdkFinalResponse(stream([canonicalDelta({ finishReason: 'stop' })], { usage: testUsage(2, 0) }));
    expect(final).toMatchObject({ status: 'completed', output: [], output_text: '' });
  });

  it('every response a lifecycle event carries has each field the Open Responses schema requires: usage null while in progress, numbers not null', () => {
    const events = rawEvents(stream([canonicalDelta({ content: 'ok', finishReason: 'stop' })], { usage: testUsage(3, 1) }));
    const required = [
      'id', 'object', 'created_at', 'completed_at', 'status', 'incomplete_details', 'model', 'previous_response_id', 'instructions',
      'output', 'error', 'tools', 'tool_choice', 'truncation', 'parallel_tool_calls', 'text', 'top_p', 'presence_penalty',
      'frequency_penalty', 'top_logprobs', 'temperature', 'reasoning', 'usage', 'max_output_tokens', 'max_tool_calls', 'store',
      'background', 'service_tier', 'metadata', 'safety_identifier', 'prompt_cache_key',
    ];
    const lifecycle = events.filter((event) => ['response.created', 'response.in_progress', 'response.completed'].includes(event.event));
    expect(lifecycle).toHaveLength(3);
    for (const event of lifecycle) {
      const response = event.data.response as Record<string, unknown>;
      expect(required.filter((field) => !(field in response)), event.event).toEqual([]);
      expect(response).toMatchObject({ temperature: 1, top_p: 1, presence_penalty: 0, frequency_penalty: 0, top_logprobs: 0, service_tier: 'default' });
    }
    expect((lifecycle[0]!.data.response as { usage: unknown }).usage).toBeNull();
    expect((lifecycle[1]!.data.response as { usage: unknown }).usage).toBeNull();
    expect((lifecycle[2]!.data.response as { usage: { total_tokens: number } }).usage.total_tokens).toBe(4);
  });

  it('echoes the sampling and Codex fields the client sent', () => {
    const writer = new ResponsesStreamWriter(
      answerContext(),
      parseResponsesRequest({
        model: 'chat', input: 'hi', temperature: 0.2, top_p: 0.9, presence_penalty: 0.5, frequency_penalty: -1, top_logprobs: 2,
        max_tool_calls: 4, service_tier: 'flex', safety_identifier: 'u-1', prompt_cache_key: 'k-1',
      }),
    );
    writer.start(START);
    const created = rawEvents(writer.open())[0]!.data.response;
    expect(created).toMatchObject({
      temperature: 0.2, top_p: 0.9, presence_penalty: 0.5, frequency_penalty: -1, top_logprobs: 2, max_tool_calls: 4,
      service_tier: 'flex', safety_identifier: 'u-1', prompt_cache_key: 'k-1', usage: null,
    });
  });
});
