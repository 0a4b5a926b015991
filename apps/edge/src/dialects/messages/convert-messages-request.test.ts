import { describe, expect, it } from 'vitest';
import type { ChatMessage, ContentPart } from '@gateway/proto';
import { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { catalogModel, tags } from '../../../test/messages-fixtures.js';
import { convertMessagesRequest } from './convert-messages-request.js';
import { parseCountTokensRequest, parseMessagesRequest } from './messages-schema.js';
import { refusalOf } from '../../../test/refusal.js';

const convert = (body: Record<string, unknown>, model = catalogModel()) =>
  convertMessagesRequest(parseMessagesRequest({ model: 'testco/m', max_tokens: 256, messages: [{ role: 'user', content: 'hi' }], ...body }), model, tags);

function refusal(body: Record<string, unknown>, model = catalogModel()) {
  return refusalOf(() => convert(body, model));
}

/** A message as role and its parts in a compact form, for readable expectations. */
function shape(message: ChatMessage) {
  return {
    role: message.role,
    parts: message.content.map((part: ContentPart) => {
      const value = part.part!;
      if (value.$case === 'text') return value.value;
      if (value.$case === 'image') return { image: value.value.url };
      if (value.$case === 'file') return { file: value.value.url || Buffer.from(value.value.data).toString('utf8'), mediaType: value.value.mediaType, name: value.value.filename, context: value.value.context };
      return value.$case;
    }),
  };
}

describe('conversation', () => {
  it('system (string or blocks) leads; a mid-conversation system turn stays where it stands', () => {
    const { request } = convert({
      system: [{ type: 'text', text: 'be brief', cache_control: { type: 'ephemeral', ttl: '1h' } }, { type: 'text', text: 'and kind' }],
      messages: [
        { role: 'user', content: 'one' },
        { role: 'assistant', content: 'two' },
        { role: 'system', content: [{ type: 'text', text: 'now answer in French' }] },
        { role: 'user', content: 'three' },
      ],
    });
    expect(request.messages.map(shape)).toEqual([
      { role: 'system', parts: ['be brief', 'and kind'] },
      { role: 'user', parts: ['one'] },
      { role: 'assistant', parts: ['two'] },
      { role: 'system', parts: ['now answer in French'] },
      { role: 'user', parts: ['three'] },
    ]);
    expect(request.messages[0]!.content[0]!.cacheControl).toEqual({ type: 'ephemeral', ttl: '1h' });
    expect(request.endpoint).toBe('messages');
    expect(convert({ system: 'plain' }).request.messages.map(shape)[0]).toEqual({ role: 'system', parts: ['plain'] });
  });

  it('a system turn carries text only', () => {
    expect(refusal({ messages: [{ role: 'system', content: [{ type: 'image', source: { type: 'url', url: 'https://x/a.png' } }] }, { role: 'user', content: 'q' }] })).toMatchObject({
      status: 400,
      param: 'body.messages.0.content.0.type',
    });
  });

  it('tool_use becomes assistant tool calls; tool_result blocks become tool messages before the rest of their turn', () => {
    const { request } = convert({
      messages: [
        { role: 'user', content: 'weather in Paris and Rome?' },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Checking.' },
            { type: 'tool_use', id: 'toolu_a', name: 'weather', input: { city: 'Paris' } },
            { type: 'tool_use', id: 'toolu_b', name: 'weather', input: { city: 'Rome', units: { temp: 'C' } } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_a', content: 'sunny' },
            { type: 'tool_result', tool_use_id: 'toolu_b', is_error: true, content: [{ type: 'text', text: 'timeout' }, { type: 'image', source: { type: 'url', url: 'https://x/radar.png' } }] },
            { type: 'text', text: 'Summarise.' },
          ],
        },
      ],
    });
    const [, assistant, first, second, rest] = request.messages;
    expect(assistant!.toolCalls).toEqual([
      { id: 'toolu_a', name: 'weather', arguments: '{"city":"Paris"}' },
      { id: 'toolu_b', name: 'weather', arguments: '{"city":"Rome","units":{"temp":"C"}}' },
    ]);
    expect([first, second].map((message) => ({ ...shape(message!), id: message!.toolCallId, isError: message!.isError }))).toEqual([
      { role: 'tool', parts: ['sunny'], id: 'toolu_a', isError: false },
      { role: 'tool', parts: ['timeout', { image: 'https://x/radar.png' }], id: 'toolu_b', isError: true },
    ]);
    expect(shape(rest!)).toEqual({ role: 'user', parts: ['Summarise.'] });
    expect(request.messages).toHaveLength(5);
  });

  it('a tool_result without an earlier tool_use, or a tool_use never answered, is 400 tool_output_unmatched', () => {
    expect(refusal({ messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_x', content: 'r' }] }] })).toMatchObject({
      status: 400,
      code: 'tool_output_unmatched',
      param: 'body.messages.0.content.0.tool_use_id',
    });
    expect(
      refusal({ messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_y', name: 'f', input: {} }] }, { role: 'user', content: 'next' }] }),
    ).toMatchObject({ code: 'tool_output_unmatched', param: 'body.messages.1.content.0.id' });
  });

  it('blocks in the wrong turn are refused by path', () => {
    expect(refusal({ messages: [{ role: 'user', content: [{ type: 'tool_use', id: 't', name: 'f', input: {} }] }] }).param).toBe('body.messages.0.content.0.type');
    expect(refusal({ messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: [{ type: 'image', source: { type: 'url', url: 'https://x' } }] }] }).param).toBe(
      'body.messages.1.content.0.type',
    );
  });
});

describe('reasoning provenance', () => {
  const replay = (assistantContent: unknown[]) =>
    convert({ messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: assistantContent }, { role: 'user', content: 'go on' }] }).request.messages[1]!;

  it('tagged thinking and redacted thinking go on with their issuer and the provider’s own value', () => {
    const assistant = replay([
      { type: 'thinking', thinking: 'let me think', signature: tags.tag('provider-a', 'sig-a') },
      { type: 'redacted_thinking', data: tags.tag('provider-b', 'opaque-b') },
      { type: 'text', text: 'answer' },
    ]);
    expect(assistant.reasoning).toEqual([
      { text: 'let me think', signature: 'sig-a', encryptedData: '', providerId: 'provider-a' },
      { text: '', signature: '', encryptedData: 'opaque-b', providerId: 'provider-b' },
    ]);
    expect(shape(assistant).parts).toEqual(['answer']);
  });

  it('untagged, edited or foreign-key reasoning is dropped whole, its text included', () => {
    const foreign = new ReasoningTags('some-other-gateway-key-000');
    const assistant = replay([
      { type: 'thinking', thinking: 'secret A', signature: 'raw-provider-signature' },
      { type: 'thinking', thinking: 'secret B', signature: '' },
      { type: 'thinking', thinking: 'secret C', signature: `${tags.tag('provider-a', 'sig')}x` },
      { type: 'thinking', thinking: 'secret D', signature: foreign.tag('provider-a', 'sig') },
      { type: 'redacted_thinking', data: 'raw-opaque' },
      { type: 'text', text: 'visible' },
    ]);
    expect(assistant.reasoning).toEqual([]);
    expect(JSON.stringify(assistant)).not.toMatch(/secret/);
  });
});

describe('images and documents', () => {
  const fileModel = catalogModel({ inputModalities: new Set(['text', 'image', 'file']) });

  it('images: base64 as a data: URL, url as is; a text-only model refuses them', () => {
    const { request } = convert({
      messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBO\nRw0K' } }, { type: 'image', source: { type: 'url', url: 'https://x/a.png' } }] }],
    });
    expect(shape(request.messages[0]!).parts).toEqual([{ image: 'data:image/png;base64,iVBORw0K' }, { image: 'https://x/a.png' }]);
    const textOnly = catalogModel({ inputModalities: new Set(['text']) });
    expect(refusal({ messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'image', source: { type: 'url', url: 'https://x/a.png' } }] }] }, textOnly)).toMatchObject({
      status: 400,
      code: 'unsupported_modality',
      param: 'body.messages.0.content.1',
    });
  });

  it('documents: PDF bytes, text as text/plain bytes, url left for the pipeline; title and context kept; file ids refused', () => {
    const converted = convert(
      {
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'read these' },
              { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: Buffer.from('%PDF-1.4 x').toString('base64') }, title: 'a.pdf', context: 'from finance' },
              { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'plain notes' }, title: 'notes.txt', cache_control: { type: 'ephemeral' } },
              { type: 'document', source: { type: 'url', url: 'https://files.example/report.pdf' } },
              { type: 'document', source: { type: 'content', content: [{ type: 'text', text: 'chunk one' }] }, title: 'Custom' },
            ],
          },
        ],
      },
      fileModel,
    );
    expect(shape(converted.request.messages[0]!).parts).toEqual([
      'read these',
      { file: '%PDF-1.4 x', mediaType: 'application/pdf', name: 'a.pdf', context: 'from finance' },
      { file: 'plain notes', mediaType: 'text/plain', name: 'notes.txt', context: '' },
      { file: 'https://files.example/report.pdf', mediaType: '', name: '', context: '' },
      'Custom',
      'chunk one',
    ]);
    expect(converted.request.messages[0]!.content[2]!.cacheControl).toEqual({ type: 'ephemeral', ttl: '' });
    // Errors while the pipeline reads files name the client's block, not the canonical position.
    expect(converted.filePathOf!(0, 3, 'url')).toBe('body.messages.0.content.3.source.url');
    expect(converted.filePathOf!(0, 1, 'file')).toBe('body.messages.0.content.1.source');
    expect(
      refusal({ messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'file', file_id: 'file_1' } }] }] }, fileModel),
    ).toMatchObject({ code: 'file_id_unsupported', param: 'body.messages.0.content.0.source.file_id' });
  });

  it('file paths follow a document inside a tool result past the system message and split turns', () => {
    const converted = convert({
      system: 'sys',
      messages: [
        { role: 'user', content: 'q' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'fetch', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'document', source: { type: 'url', url: 'https://x/r.pdf' } }] }, { type: 'text', text: 'then?' }] },
      ],
    });
    // Canonical: 0 system, 1 user, 2 assistant, 3 tool (the document), 4 user.
    expect(converted.request.messages[3]!.role).toBe('tool');
    expect(converted.filePathOf!(3, 0, 'url')).toBe('body.messages.2.content.0.content.0.source.url');
  });
});

describe('parameters', () => {
  it('maps tools, tool_choice, sampling and stop sequences; max_tokens becomes max_output_tokens', () => {
    const { request, droppedParams } = convert({
      tools: [{ name: 'weather', description: 'Weather by city', input_schema: { type: 'object', properties: { city: { type: 'string' } } }, cache_control: { type: 'ephemeral' } }],
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
      temperature: 0.2,
      top_p: 0.8,
      top_k: 5,
      stop_sequences: ['END'],
      metadata: { user_id: 'user-7' },
    });
    expect(request.tools).toEqual([
      { name: 'weather', description: 'Weather by city', parameters: '{"type":"object","properties":{"city":{"type":"string"}}}', strict: undefined, cacheControl: { type: 'ephemeral', ttl: '' } },
    ]);
    expect(request.toolChoice).toEqual({ mode: 'required', toolName: '', disableParallel: true });
    expect(request.parallelToolCalls).toBe(false);
    expect([request.temperature, request.topP, request.topK, request.stop, request.maxOutputTokens, request.user]).toEqual([0.2, 0.8, 5, ['END'], 256, 'user-7']);
    expect(droppedParams).toEqual([]);
    expect(convert({ tool_choice: { type: 'tool', name: 'weather' } }).request.toolChoice).toEqual({ mode: 'tool', toolName: 'weather', disableParallel: false });
    expect(convert({ tool_choice: { type: 'none' } }).request.toolChoice).toEqual({ mode: 'none', toolName: '', disableParallel: false });
  });

  it('drops what the model lacks and reports it in this dialect’s spelling; extra parameters pass; gateway-irrelevant fields are dropped', () => {
    const bare = catalogModel({ supportedParameters: new Set(['max_tokens']) });
    const { request, droppedParams } = convert(
      { max_tokens: 2048, temperature: 0.2, top_k: 3, stop_sequences: ['x'], metadata: { user_id: 'u' }, thinking: { type: 'enabled', budget_tokens: 1024 }, custom_knob: 9, service_tier: 'auto', unheard_of: 1 },
      bare,
    );
    expect(droppedParams).toEqual(['metadata.user_id', 'service_tier', 'stop_sequences', 'temperature', 'thinking', 'top_k', 'unheard_of']);
    expect([request.temperature, request.topK, request.stop, request.user, request.thinkingBudgetTokens, request.reasoningEffort]).toEqual([
      undefined, undefined, [], undefined, undefined, undefined,
    ]);
    expect(JSON.parse(request.extraBody!)).toEqual({ custom_knob: 9 });
    expect(request.maxOutputTokens).toBe(2048);
  });

  it('server tools are refused by name', () => {
    expect(refusal({ tools: [{ type: 'web_search_20250305', name: 'web_search' }] })).toMatchObject({ status: 400, param: 'body.tools.0.type' });
    expect(refusal({ tools: [{ name: 'f' }] })).toMatchObject({ status: 400, param: 'body.tools.0.input_schema' });
  });

  it('thinking: a budget and the nearest reasoning level the model has; disabled asks for neither; an explicit effort wins', () => {
    const model = catalogModel({ reasoningEfforts: ['low', 'high'] });
    const enabled = convert({ max_tokens: 20_000, thinking: { type: 'enabled', budget_tokens: 10_000 } }, model).request;
    expect([enabled.thinkingBudgetTokens, enabled.reasoningEffort]).toEqual([10_000, 'high']); // medium -> nearest, ties go up
    const small = convert({ max_tokens: 4_000, thinking: { type: 'enabled', budget_tokens: 1_024 } }, model).request;
    expect(small.reasoningEffort).toBe('low'); // minimal -> low
    const disabled = convert({ thinking: { type: 'disabled' } }, model).request;
    expect([disabled.thinkingBudgetTokens, disabled.reasoningEffort]).toEqual([undefined, undefined]);
    const explicit = convert({ max_tokens: 4_000, thinking: { type: 'enabled', budget_tokens: 1_024 }, output_config: { effort: 'high' } }, model).request;
    expect(explicit.reasoningEffort).toBe('high');
    expect(convert({ output_config: { effort: 'low' } }, model).request.reasoningEffort).toBe('low');
  });

  it('adaptive thinking and output_config.effort also go on as written, for the Anthropic kinds (issue 37 item 6)', () => {
    const model = catalogModel({ reasoningEfforts: ['low', 'high'] });
    const adaptive = convert({ thinking: { type: 'adaptive' }, output_config: { effort: 'xhigh' } }, model).request;
    expect([adaptive.thinkingMode, adaptive.outputEffort, adaptive.reasoningEffort, adaptive.thinkingBudgetTokens]).toEqual(['adaptive', 'xhigh', 'high', undefined]);
    const alone = convert({ thinking: { type: 'adaptive' } }, model).request;
    expect([alone.thinkingMode, alone.outputEffort, alone.reasoningEffort]).toEqual(['adaptive', undefined, undefined]);
    const enabled = convert({ max_tokens: 4_000, thinking: { type: 'enabled', budget_tokens: 1_024 }, output_config: { effort: 'max' } }, model).request;
    expect([enabled.thinkingMode, enabled.outputEffort, enabled.thinkingBudgetTokens]).toEqual([undefined, 'max', 1_024]);
    // A model without reasoning gets none of them (the parameter table drops `thinking` and `output_config.effort`).
    const none = convert({ thinking: { type: 'adaptive' }, output_config: { effort: 'low' } }, catalogModel({ supportedParameters: new Set(['max_tokens']) })).request;
    expect([none.thinkingMode, none.outputEffort, none.reasoningEffort]).toEqual([undefined, undefined, undefined]);
  });

  it('output_config.format becomes a json_schema response format, checked against its meta-schema', () => {
    const { request } = convert({ output_config: { format: { type: 'json_schema', schema: { type: 'object', properties: { a: { type: 'number' } } } } } });
    expect(request.responseFormat).toEqual({ type: 'json_schema', schemaName: '', schema: '{"type":"object","properties":{"a":{"type":"number"}}}', strict: undefined });
    expect(refusal({ output_config: { format: { type: 'json_schema', schema: { type: 12 } } } })).toMatchObject({
      code: 'invalid_json_schema',
      param: 'body.output_config.format.schema',
    });
  });

  it('top-level cache_control marks the last block of the conversation', () => {
    const { request } = convert({ cache_control: { type: 'ephemeral', ttl: '5m' }, messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }] });
    expect(request.messages[0]!.content.map((part) => part.cacheControl)).toEqual([undefined, { type: 'ephemeral', ttl: '5m' }]);
  });

  it('count_tokens bodies convert without sampling fields', () => {
    const body = parseCountTokensRequest({ model: 'testco/m', system: 's', messages: [{ role: 'user', content: 'count me' }] });
    const { request, stream } = convertMessagesRequest(body, catalogModel(), tags);
    expect(request.messages.map(shape)).toEqual([{ role: 'system', parts: ['s'] }, { role: 'user', parts: ['count me'] }]);
    expect([request.maxOutputTokens, stream]).toEqual([undefined, false]);
  });
});
