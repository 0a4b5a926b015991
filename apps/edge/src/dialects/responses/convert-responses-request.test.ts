import { describe, expect, it } from 'vitest';
import type { Model } from '@gateway/proto';
import { sameHiddenClass } from '@gateway/testing';
import type { CatalogModel } from '../../catalog-cache.js';
import { routerRequest } from '../../canonical/request.js';
import { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { convertResponsesRequest } from './convert-responses-request.js';
import { encryptedContentOf } from './responses-reasoning.js';
import { parseResponsesRequest } from './responses-schema.js';
import { refusalOf } from '../../../test/refusal.js';

function catalogModel(overrides: Partial<CatalogModel> & { reasoningEfforts?: string[] } = {}): CatalogModel {
  const { reasoningEfforts = [], ...rest } = overrides;
  return {
    model: { id: 'm', reasoningEfforts } as unknown as Model,
    id: 'm',
    paid: true,
    endpoints: new Set(['responses']),
    supportedParameters: new Set(['temperature', 'max_completion_tokens', 'tools', 'tool_choice', 'response_format', 'reasoning']),
    inputModalities: new Set(['text']),
    extraParameters: new Set(['top_k_custom']),
    allowedTiers: null,
    availableTiers: ['free', 'tier-1'],
    ...rest,
  };
}

const tags = new ReasoningTags('responses-converter-test-key');

const convert = (body: Record<string, unknown>, model = catalogModel()) =>
  convertResponsesRequest(parseResponsesRequest({ model: 'm', input: 'hi', ...body }), model, tags);

function refusal(body: Record<string, unknown>, model = catalogModel()) {
  return refusalOf(() => convert(body, model));
}

/** The canonical messages in a compact form to compare against. */
const shape = (converted: ReturnType<typeof convert>) =>
  converted.request.messages.map((message) => ({
    role: message.role,
    text: message.content.map((part) => (part.part?.$case === 'text' ? part.part.value : `<${part.part?.$case}>`)).join('|'),
    ...(message.toolCalls.length > 0 ? { calls: message.toolCalls.map((call) => `${call.id}:${call.name}(${call.arguments})`) } : {}),
    ...(message.toolCallId ? { answers: message.toolCallId } : {}),
    ...(message.reasoning.length > 0 ? { reasoning: message.reasoning } : {}),
  }));

describe('convertResponsesRequest: input', () => {
  it('a string input is one user message; instructions lead as the system message', () => {
    expect(shape(convert({ input: 'Hello', instructions: 'Be brief.' }))).toEqual([
      { role: 'system', text: 'Be brief.' },
      { role: 'user', text: 'Hello' },
    ]);
  });

  it('instructions alone are the conversation (no input)', () => {
    const converted = convertResponsesRequest(parseResponsesRequest({ model: 'm', instructions: 'Say hi.' }), catalogModel(), tags);
    expect(shape(converted)).toEqual([{ role: 'system', text: 'Say hi.' }]);
    const empty = convertResponsesRequest(parseResponsesRequest({ model: 'm', instructions: 'Say hi.', input: '' }), catalogModel(), tags);
    expect(shape(empty)).toEqual([{ role: 'system', text: 'Say hi.' }]);
  });

  it('messages keep their roles and parts, typed or not; replayed assistant text becomes text', () => {
    const converted = convert({
      input: [
        { role: 'developer', content: 'Rules.' },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'a' }, { type: 'input_text', text: 'b' }] },
        { role: 'assistant', content: [{ type: 'output_text', text: 'c', annotations: [] }, { type: 'refusal', refusal: 'no' }] },
        { role: 'system', content: 'Mid-conversation system text.' },
      ],
    });
    expect(shape(converted)).toEqual([
      { role: 'developer', text: 'Rules.' },
      { role: 'user', text: 'a|b' },
      { role: 'assistant', text: 'c|no' },
      { role: 'system', text: 'Mid-conversation system text.' },
    ]);
  });

  it('function calls join the assistant turn before them; outputs become tool messages', () => {
    const converted = convert({
      input: [
        { role: 'user', content: 'Weather in Paris and Rome?' },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Checking.' }] },
        { type: 'function_call', call_id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call', call_id: 'call_2', name: 'weather', arguments: '{"city":"Rome"}' },
        { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
        { type: 'function_call_output', call_id: 'call_2', output: [{ type: 'input_text', text: 'rain' }] },
        { type: 'function_call', call_id: 'call_3', name: 'weather', arguments: '{}' },
        { type: 'function_call_output', call_id: 'call_3', output: 'fog' },
      ],
    });
    expect(shape(converted)).toEqual([
      { role: 'user', text: 'Weather in Paris and Rome?' },
      { role: 'assistant', text: 'Checking.', calls: ['call_1:weather({"city":"Paris"})', 'call_2:weather({"city":"Rome"})'] },
      { role: 'tool', text: 'sunny', answers: 'call_1' },
      { role: 'tool', text: 'rain', answers: 'call_2' },
      // After a tool output, a call is a new assistant turn.
      { role: 'assistant', text: '', calls: ['call_3:weather({})'] },
      { role: 'tool', text: 'fog', answers: 'call_3' },
    ]);
  });

  it('refuses an output without its call (tool_output_unmatched) and a call without its output', () => {
    expect(refusal({ input: [{ role: 'user', content: 'x' }, { type: 'function_call_output', call_id: 'call_9', output: 'r' }] })).toMatchObject({
      status: 400,
      code: 'tool_output_unmatched',
      param: 'body.input.1.call_id',
    });
    // An output before its call is just as unmatched.
    expect(
      refusal({
        input: [
          { type: 'function_call_output', call_id: 'c', output: 'r' },
          { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' },
        ],
      }),
    ).toMatchObject({ code: 'tool_output_unmatched', param: 'body.input.0.call_id' });
    expect(refusal({ input: [{ role: 'user', content: 'x' }, { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' }] })).toMatchObject({
      status: 400,
      code: 'tool_output_unmatched',
      param: 'body.input.1.call_id',
    });
  });

  it('refuses item references, naming the item', () => {
    for (const item of [{ type: 'item_reference', id: 'msg_1' }, { id: 'msg_1' }]) {
      const error = refusal({ input: [{ role: 'user', content: 'x' }, item] });
      expect(error).toMatchObject({ status: 400, param: 'body.input.1', code: 'item_reference_unsupported' });
      expect(error.message).toMatch(/^body\.input\.1: item_reference is not supported/);
    }
  });

  it('refuses previous_response_id, conversation, prompt templates and background runs with a clear 400', () => {
    const previous = refusal({ previous_response_id: 'resp_123' });
    expect(previous).toMatchObject({ status: 400, param: 'body.previous_response_id', code: 'unsupported_parameter' });
    expect(previous.message).toMatch(/stores no responses/);
    expect(refusal({ conversation: 'conv_1' })).toMatchObject({ param: 'body.conversation' });
    expect(refusal({ prompt: { id: 'pmpt_1' } })).toMatchObject({ param: 'body.prompt' });
    expect(refusal({ background: true })).toMatchObject({ param: 'body.background' });
    // Accepted as harmless: store (nothing is stored), background false, truncation, include.
    expect(() => convert({ store: true, background: false, truncation: 'auto', include: ['reasoning.encrypted_content'] })).not.toThrow();
  });
});

describe('convertResponsesRequest: images and files', () => {
  const visionModel = catalogModel({ inputModalities: new Set(['text', 'image']) });

  it('images need an image-reading model; an image by file id is refused, a file by file id goes on to be read', () => {
    const image = { role: 'user', content: [{ type: 'input_image', image_url: 'https://example.com/a.png', detail: 'original' }] };
    expect(refusal({ input: [image] })).toMatchObject({ code: 'unsupported_modality', param: 'body.input.0.content.0' });
    const part = convert({ input: [image] }, visionModel).request.messages[0]!.content[0]!.part;
    expect(part).toEqual({ $case: 'image', value: { url: 'https://example.com/a.png', detail: 'high' } });
    expect(refusal({ input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file_1', detail: 'auto' }] }] }, visionModel)).toMatchObject({
      code: 'file_id_unsupported',
      param: 'body.input.0.content.0.file_id',
    });
    const byId = convert({ input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'file-1' }] }] });
    expect(byId.request.messages[0]!.content[0]!.part).toEqual({ $case: 'file', value: { filename: '', data: Buffer.alloc(0), url: '', mediaType: '', context: '', fileId: 'file-1' } });
    // Errors while the file is read name the client's field.
    expect(byId.filePathOf?.(0, 0, 'id')).toBe('body.input.0.content.0.file_id');
  });

  it('files become file parts, and their errors name the client path', () => {
    const converted = convert({
      instructions: 'Read it.',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'see' }, { type: 'input_file', filename: 'a.pdf', file_data: 'data:application/pdf;base64,QUJD' }] },
        { type: 'function_call', call_id: 'c', name: 'fetch', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c', output: [{ type: 'input_file', file_url: 'https://example.com/b.pdf' }] },
      ],
    });
    const file = converted.request.messages[1]!.content[1]!.part;
    expect(file?.$case === 'file' && file.value).toMatchObject({ filename: 'a.pdf', mediaType: 'application/pdf' });
    expect(file?.$case === 'file' && Buffer.from(file.value.data).toString()).toBe('ABC');
    // Canonical message 1 (after the instructions) part 1 is body.input.0.content.1; message 3 part 0 is the tool output's.
    expect(converted.filePathOf?.(1, 1, 'block')).toBe('body.input.0.content.1');
    expect(converted.filePathOf?.(3, 0, 'url')).toBe('body.input.2.output.0.file_url');
    expect(convert({}).filePathOf).toBeUndefined();
  });
});

describe('convertResponsesRequest: reasoning provenance (spec §1)', () => {
  const signed = (provider: string, signature: string) => encryptedContentOf(signature, '', provider, tags)!;
  const encrypted = (provider: string, data: string) => encryptedContentOf('', data, provider, tags)!;
  const conversation = (reasoningItems: Record<string, unknown>[]) => ({
    input: [
      { role: 'user', content: 'Weather?' },
      ...reasoningItems,
      { type: 'function_call', call_id: 'c1', name: 'weather', arguments: '{}' },
      { type: 'function_call_output', call_id: 'c1', output: 'sunny' },
    ],
  });

  it('tagged reasoning reaches the canonical request with its issuer and the provider value, on the next assistant turn', () => {
    const converted = convert(
      conversation([
        { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'I should call ' }, { type: 'summary_text', text: 'the tool.' }], encrypted_content: signed('anthropic-a', 'sig-A') },
        { type: 'reasoning', id: 'rs_2', summary: [], encrypted_content: encrypted('anthropic-a', 'opaque-A') },
      ]),
    );
    expect(converted.request.messages[1]).toMatchObject({
      role: 'assistant',
      toolCalls: [{ id: 'c1' }],
      reasoning: [
        { text: 'I should call the tool.', signature: 'sig-A', encryptedData: '', providerId: 'anthropic-a' },
        { text: '', signature: '', encryptedData: 'opaque-A', providerId: 'anthropic-a' },
      ],
    });
  });

  it('drops foreign, edited, untagged and differently-encoded reasoning whole, summary text included', () => {
    const tagged = signed('anthropic-a', 'sig-A');
    const items = [
      { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'untagged' }], encrypted_content: 'sig-from-somewhere' },
      { type: 'reasoning', id: 'rs_2', summary: [{ type: 'summary_text', text: 'edited' }], encrypted_content: `${tagged}x` },
      { type: 'reasoning', id: 'rs_3', summary: [{ type: 'summary_text', text: 'other key' }], encrypted_content: encryptedContentOf('sig', '', 'anthropic-a', new ReasoningTags('another-gateway-key-000')) },
      // Tagged by this gateway, but not in this dialect's encoding (e.g. a chat reasoning_details signature).
      { type: 'reasoning', id: 'rs_4', summary: [{ type: 'summary_text', text: 'chat tag' }], encrypted_content: tags.tag('anthropic-a', 'sig-A') },
    ];
    const converted = convert(conversation(items));
    expect(converted.request.messages[1]!.reasoning).toEqual([]);
    expect(JSON.stringify(converted.request)).not.toMatch(/untagged|edited|other key|chat tag|sig-from-somewhere/);
  });

  it('drops reasoning without encrypted content (no issuer to vouch for) and reasoning no assistant output follows', () => {
    const converted = convert({
      input: [
        { role: 'user', content: 'a' },
        { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'plain thought' }] },
        { role: 'assistant', content: 'b' },
        { type: 'reasoning', id: 'rs_2', summary: [{ type: 'summary_text', text: 'orphan' }], encrypted_content: signed('p', 's') },
        { role: 'user', content: 'c' },
      ],
    });
    expect(shape(converted)).toEqual([
      { role: 'user', text: 'a' },
      { role: 'assistant', text: 'b' },
      { role: 'user', text: 'c' },
    ]);
  });

  it('a reasoning item opens a new assistant turn: calls after it do not join the message before it', () => {
    const converted = convert({
      input: [
        { role: 'user', content: 'a' },
        { role: 'assistant', content: 'Let me look.' },
        { type: 'reasoning', id: 'rs_1', summary: [], encrypted_content: signed('p', 's') },
        { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c1', output: 'r' },
      ],
    });
    expect(shape(converted).map((message) => [message.role, message.calls?.length ?? 0, (message.reasoning ?? []).length])).toEqual([
      ['user', 0, 0],
      ['assistant', 0, 0],
      ['assistant', 1, 1],
      ['tool', 0, 0],
    ]);
  });
});

describe('convertResponsesRequest: parameters', () => {
  it('forwards what the model supports and reports the rest in the dialect spelling', () => {
    const converted = convert({
      temperature: 0.4,
      top_p: 0.9,
      max_output_tokens: 100,
      parallel_tool_calls: false,
      metadata: { team: 'a' },
      text: { verbosity: 'low' },
      service_tier: 'flex',
      top_k_custom: 3,
      user: 'u-1',
    });
    expect(converted.request).toMatchObject({ temperature: 0.4, maxOutputTokens: 100 });
    expect(converted.request.topP).toBeUndefined();
    expect(converted.request.parallelToolCalls).toBeUndefined();
    // `user` is a parameter like the others: this model does not list it.
    expect(converted.request.user).toBeUndefined();
    expect(converted.droppedParams).toEqual(['metadata', 'parallel_tool_calls', 'service_tier', 'text.verbosity', 'top_p', 'user']);
    expect(JSON.parse(converted.request.extraBody ?? '{}')).toEqual({ top_k_custom: 3 });
    expect(converted.request).toMatchObject({ endpoint: 'responses', includeUsage: true });
    // Context-window and credit refusals name this dialect's output bound.
    expect(converted.outputField).toBe('max_output_tokens');
    expect(converted.stream).toBe(false);
    expect(convert({ stream: true }).stream).toBe(true);
  });

  it('flat function tools and tool_choice; an empty tool list is no drop', () => {
    const converted = convert({
      tools: [{ type: 'function', name: 'weather', description: 'Weather by city', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: true }],
      tool_choice: { type: 'function', name: 'weather' },
    });
    expect(converted.request.tools).toEqual([
      { name: 'weather', description: 'Weather by city', parameters: '{"type":"object","properties":{"city":{"type":"string"}}}', strict: true },
    ]);
    expect(converted.request.toolChoice).toEqual({ mode: 'tool', toolName: 'weather', disableParallel: false });
    const withTool = { tools: [{ type: 'function', name: 'f', parameters: null, strict: null }] };
    const parallel = catalogModel({ supportedParameters: new Set(['tools', 'tool_choice', 'parallel_tool_calls']) });
    expect(convert({ ...withTool, tool_choice: 'required', parallel_tool_calls: false }, parallel).request).toMatchObject({
      toolChoice: { mode: 'required', toolName: '', disableParallel: false },
      parallelToolCalls: false,
    });
    // Without tools they govern nothing, and OpenAI-compatible providers refuse them.
    const bare = convert({ tool_choice: 'none', parallel_tool_calls: true }, parallel).request;
    expect(bare.toolChoice).toBeUndefined();
    expect(bare.parallelToolCalls).toBeUndefined();
    const noTools = catalogModel({ supportedParameters: new Set(['temperature']) });
    expect(convert({ tools: [] }, noTools).droppedParams).toEqual([]);
    expect(convert({ tools: [{ type: 'function', name: 'f', parameters: null, strict: null }] }, noTools).droppedParams).toEqual(['tools']);
  });

  it('text.format: json_object and json_schema (validated) become the response format', () => {
    expect(convert({ text: { format: { type: 'json_object' } } }).request.responseFormat).toEqual({ type: 'json_object', schemaName: '', schema: '' });
    const schema = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'], additionalProperties: false };
    expect(convert({ text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } } }).request.responseFormat).toEqual({
      type: 'json_schema',
      schemaName: 'answer',
      schema: JSON.stringify(schema),
      strict: true,
    });
    expect(refusal({ text: { format: { type: 'json_schema', name: 'bad', schema: { type: 12 } } } })).toMatchObject({
      code: 'invalid_json_schema',
      param: 'body.text.format.schema',
    });
    const plain = catalogModel({ supportedParameters: new Set(['temperature']) });
    expect(convert({ text: { format: { type: 'json_object' } } }, plain).droppedParams).toEqual(['text.format']);
  });

  it('reasoning.effort moves to the nearest level the model has; summary is forwarded; both gated by reasoning', () => {
    const reasoner = catalogModel({ reasoningEfforts: ['low', 'high'] });
    const converted = convert({ reasoning: { effort: 'medium', summary: 'detailed' } }, reasoner);
    expect(converted.request.reasoningEffort).toBe('high');
    expect(converted.request.reasoningSummary).toBe('detailed');
    expect(convert({ reasoning: { effort: 'minimal' } }, reasoner).request.reasoningEffort).toBe('low');
    const plain = catalogModel({ supportedParameters: new Set(['temperature']) });
    const dropped = convert({ reasoning: { effort: 'high', summary: 'auto' } }, plain);
    expect(dropped.request.reasoningEffort).toBeUndefined();
    expect(dropped.request.reasoningSummary).toBeUndefined();
    expect(dropped.droppedParams).toEqual(['reasoning.effort', 'reasoning.summary']);
  });

  it('requests of one shape share one hidden class once made ready for the router', () => {
    const a = routerRequest(convert({}).request, { requestId: 'r1', accountId: 'a', keyId: 'k', leaseId: 'l' }, 'balanced');
    const b = routerRequest(convert({ input: 'other' }).request, { requestId: 'r2', accountId: 'a', keyId: 'k', leaseId: 'l' }, 'latency');
    expect(sameHiddenClass(a, b)).toBe(true);
  });

  it('logprobs: the include entry asks for them, top_logprobs ranks them; top_logprobs alone is named; out of range is 400', () => {
    const model = catalogModel({ supportedParameters: new Set(['top_logprobs']) });
    const asked = convert({ include: ['reasoning.encrypted_content', 'message.output_text.logprobs'], top_logprobs: 5 }, model);
    expect(asked.request).toMatchObject({ logprobs: true, topLogprobs: 5 });
    expect(asked.droppedParams).toEqual([]);
    const alone = convert({ top_logprobs: 5 }, model);
    expect([alone.request.logprobs, alone.request.topLogprobs, alone.droppedParams]).toEqual([undefined, undefined, ['top_logprobs']]);
    // The echoed default asks for nothing.
    expect(convert({ top_logprobs: 0 }, model).droppedParams).toEqual([]);
    // Other include entries ask for no logprobs.
    expect(convert({ include: ['reasoning.encrypted_content'] }, model).request.logprobs).toBeUndefined();
    expect(() => parseResponsesRequest({ model: 'm', input: 'hi', top_logprobs: 21 })).toThrow(/top_logprobs/);
  });

  it('forwards presence and frequency penalties; Codex fields no provider takes are accepted and reported as dropped', () => {
    const model = catalogModel({ supportedParameters: new Set(['presence_penalty', 'frequency_penalty']) });
    const converted = convert(
      {
        presence_penalty: 0.5, frequency_penalty: -0.5, top_logprobs: 2, service_tier: 'priority', prompt_cache_key: 'k', safety_identifier: 'u',
        client_metadata: { a: 'b' }, max_tool_calls: 3, store: false, include: ['reasoning.encrypted_content'], parallel_tool_calls: true,
      },
      model,
    );
    // prompt_cache_key is the gateway's own (cache affinity): carried, never reported as dropped.
    expect(converted.request).toMatchObject({ presencePenalty: 0.5, frequencyPenalty: -0.5, promptCacheKey: 'k' });
    expect(converted.droppedParams).toEqual(['client_metadata', 'max_tool_calls', 'parallel_tool_calls', 'safety_identifier', 'service_tier', 'top_logprobs']);
  });

  it('cache_control on input_text, input_image, input_file and output_text parts becomes the canonical breakpoint', () => {
    const model = catalogModel({ inputModalities: new Set(['text', 'image', 'file']) });
    const { request, droppedParams } = convert(
      {
        instructions: 'be brief',
        input: [
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'long document', cache_control: { type: 'ephemeral', ttl: '1h' } },
              { type: 'input_image', image_url: 'https://example.com/a.png', cache_control: { type: 'ephemeral' } },
              { type: 'input_file', file_url: 'https://example.com/a.pdf', cache_control: { type: 'ephemeral', ttl: '5m' } },
              { type: 'input_text', text: 'question' },
            ],
          },
          { role: 'assistant', content: [{ type: 'output_text', text: 'answer', cache_control: { type: 'ephemeral' } }] },
        ],
      },
      model,
    );
    expect(request.messages[1]!.content.map((part) => part.cacheControl)).toEqual([
      { type: 'ephemeral', ttl: '1h' },
      { type: 'ephemeral', ttl: '' },
      { type: 'ephemeral', ttl: '5m' },
      undefined,
    ]);
    expect(request.messages[2]!.content[0]!.cacheControl).toEqual({ type: 'ephemeral', ttl: '' });
    expect(request.messages[0]!.content[0]!.cacheControl).toBeUndefined();
    expect(droppedParams).toEqual([]);
  });

  it('top-level cache_control marks the last block; a part the client marked keeps its own mark', () => {
    const marked = convert({ cache_control: { type: 'ephemeral', ttl: '1h' }, input: [{ role: 'user', content: [{ type: 'input_text', text: 'a' }, { type: 'input_text', text: 'b' }] }] });
    expect(marked.request.messages[0]!.content.map((part) => part.cacheControl)).toEqual([undefined, { type: 'ephemeral', ttl: '1h' }]);
    expect(marked.droppedParams).toEqual([]);
    const own = convert({ cache_control: { type: 'ephemeral', ttl: '1h' }, input: [{ role: 'user', content: [{ type: 'input_text', text: 'a', cache_control: { type: 'ephemeral' } }] }] });
    expect(own.request.messages[0]!.content[0]!.cacheControl).toEqual({ type: 'ephemeral', ttl: '' });
  });

  it('cache_control on a function or custom tool marks the canonical tool', () => {
    const { request } = convert({
      tools: [
        { type: 'function', name: 'a', parameters: { type: 'object' } },
        { type: 'custom', name: 'b', cache_control: { type: 'ephemeral' } },
        { type: 'function', name: 'c', parameters: { type: 'object' }, cache_control: { type: 'ephemeral', ttl: '5m' } },
      ],
    });
    expect(request.tools.map((tool) => tool.cacheControl)).toEqual([undefined, { type: 'ephemeral', ttl: '' }, { type: 'ephemeral', ttl: '5m' }]);
  });

  it('refuses a cache_control of another type or ttl, naming the field', () => {
    expect(refusal({ input: [{ role: 'user', content: [{ type: 'input_text', text: 'a', cache_control: { type: 'persistent' } }] }] })).toMatchObject({
      param: 'body.input.0.content.0.cache_control.type',
      message: "body.input.0.content.0.cache_control.type: cache_control.type must be 'ephemeral'",
    });
    expect(refusal({ cache_control: { type: 'ephemeral', ttl: '10m' } })).toMatchObject({
      param: 'body.cache_control.ttl',
      message: "body.cache_control.ttl: cache_control.ttl must be '5m' or '1h'",
    });
  });

  it('a request without prompt_cache_key carries none', () => {
    expect(convert({}).request.promptCacheKey).toBeUndefined();
  });
});

