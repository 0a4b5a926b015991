import { describe, expect, it } from 'vitest';
import type { Model } from '@gateway/proto';
import { sameHiddenClass } from '@gateway/testing';
import type { CatalogModel } from '../../catalog-cache.js';
import { decodedLength } from '../../canonical/inline-data.js';
import { nearestReasoningEffort } from '../../canonical/model-checks.js';
import { routerRequest } from '../../canonical/request.js';
import { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { convertChatRequest } from './convert-chat-request.js';
import { parseChatCompletionRequest } from './chat-schema.js';
import { refusalOf } from '../../../test/refusal.js';

function catalogModel(overrides: Partial<CatalogModel> = {}): CatalogModel {
  return {
    model: { id: 'm', reasoningEfforts: [] } as unknown as Model,
    id: 'm',
    paid: true,
    endpoints: new Set(['chat.completions']),
    supportedParameters: new Set(['temperature', 'max_completion_tokens', 'tools', 'tool_choice']),
    inputModalities: new Set(['text']),
    extraParameters: new Set(['top_k_custom']),
    allowedTiers: null,
    availableTiers: ['free', 'tier-1', 'tier-2', 'tier-3', 'tier-4'],
    ...overrides,
  };
}

const tags = new ReasoningTags('chat-converter-test-key');

const convert = (body: Record<string, unknown>, model = catalogModel()) =>
  convertChatRequest(parseChatCompletionRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...body }), model, tags);

function refusal(body: Record<string, unknown>, model = catalogModel()) {
  return refusalOf(() => convert(body, model));
}

describe('convertChatRequest', () => {
  it('forwards supported parameters, drops the rest (logit_bias always), passes extra parameters', () => {
    const converted = convert({ temperature: 0.5, top_p: 0.3, max_tokens: 9, logit_bias: { '1': 2 }, seed: 4, top_k_custom: 7 });
    expect(converted.request.temperature).toBe(0.5);
    expect(converted.request.topP).toBeUndefined();
    expect(converted.request.maxOutputTokens).toBe(9);
    expect(converted.droppedParams).toEqual(['logit_bias', 'seed', 'top_p']);
    expect(JSON.parse(converted.request.extraBody ?? '{}')).toEqual({ top_k_custom: 7 });
  });

  it('converts content blocks and tool conversations', () => {
    const converted = convert(
      {
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'file', file: { filename: 'x.pdf', file_data: 'data:application/pdf;base64,QUJD' } }] },
          { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] },
          { role: 'tool', tool_call_id: 'c1', content: 'done' },
        ],
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
        tool_choice: 'required',
      },
      catalogModel(),
    );
    const [user, assistant, tool] = converted.request.messages;
    expect(user?.content[1]?.part).toMatchObject({ $case: 'file', value: { filename: 'x.pdf', mediaType: 'application/pdf' } });
    const file = user?.content[1]?.part;
    expect(file?.$case === 'file' && Buffer.from(file.value.data).toString()).toBe('ABC');
    expect(assistant?.toolCalls).toEqual([{ id: 'c1', name: 'f', arguments: '{"a":1}' }]);
    expect(tool?.toolCallId).toBe('c1');
    expect(converted.request.toolChoice).toEqual({ mode: 'required', toolName: '', disableParallel: false });
    expect(converted.request.tools[0]).toMatchObject({ name: 'f', parameters: '{"type":"object"}' });
  });

  it('refuses an image for a text-only model with unsupported_modality', () => {
    const apiError = refusal({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/y.png' } }] }] });
    expect(apiError).toMatchObject({ status: 400, code: 'unsupported_modality', param: 'body.messages.0.content.0' });
    expect(() => convert({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/u.png' } }] }] }, catalogModel({ inputModalities: new Set(['text', 'image']) }))).not.toThrow();
  });

  it('refuses audio to a model without audio input', () => {
    expect(refusal({ messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'QUJD', format: 'mp3' } }] }] }).code).toBe('unsupported_modality');
  });

  it('carries a file_id on as a file part to be read (canonical/file-parts.ts), whatever the model reads', () => {
    const converted = convert({ messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: 'file-1', filename: 'notes.txt' } }] }] });
    const part = converted.request.messages[0]!.content[0]!.part;
    expect(part).toEqual({ $case: 'file', value: { filename: 'notes.txt', data: Buffer.alloc(0), url: '', mediaType: '', context: '', fileId: 'file-1' } });
    // Inline data wins over an id sent beside it (as before: the id is only read when it is the file's sole source).
    const inline = convert({ messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: 'file-1', file_data: 'data:text/plain;base64,QUJD' } }] }] });
    expect(inline.request.messages[0]!.content[0]!.part).toMatchObject({ $case: 'file', value: { fileId: '', mediaType: 'text/plain' } });
  });

  it('refuses a tool call without its result and a result without its call', () => {
    expect(
      refusal({ messages: [{ role: 'user', content: 'x' }, { role: 'assistant', tool_calls: [{ id: 'c1', function: { name: 'f', arguments: '{}' } }] }] }),
    ).toMatchObject({ status: 400, code: 'tool_output_unmatched' });
    expect(refusal({ messages: [{ role: 'user', content: 'x' }, { role: 'tool', tool_call_id: 'c9', content: 'r' }] })).toMatchObject({
      status: 400,
      code: 'tool_output_unmatched',
      param: 'body.messages.1.tool_call_id',
    });
  });

  it('moves a reasoning effort the model lacks to the nearest it has', () => {
    expect(nearestReasoningEffort('minimal', ['low', 'high'])).toBe('low');
    expect(nearestReasoningEffort('medium', ['low', 'high'])).toBe('high');
    expect(nearestReasoningEffort('high', ['low', 'medium'])).toBe('medium');
    expect(nearestReasoningEffort('low', [])).toBe('low');
    // `none` stays `none` where the model lists it (or lists nothing): each provider kind says "no reasoning" its way.
    expect(nearestReasoningEffort('none', ['none', 'low', 'high'])).toBe('none');
    expect(nearestReasoningEffort('none', [])).toBe('none');
    expect(nearestReasoningEffort('none', ['low', 'high'])).toBe('low');
    expect(nearestReasoningEffort('xhigh', ['low', 'high'])).toBe('high');
  });
});

describe('routerRequest', () => {
  it('fills the converted request in place, and requests of one shape share one hidden class', () => {
    const first = convert({ temperature: 0.5 });
    const second = convert({ temperature: 0.7 });
    const a = routerRequest(first.request, { requestId: 'r1', accountId: 'a', keyId: 'k', leaseId: 'l1' }, 'balanced');
    const b = routerRequest(second.request, { requestId: 'r2', accountId: 'a', keyId: 'k', leaseId: undefined }, 'latency');
    expect(a).toBe(first.request);
    expect(a).toMatchObject({ modelId: 'm', endpoint: 'chat.completions', routingStrategy: 'balanced', context: { requestId: 'r1', leaseId: 'l1' } });
    expect(b.routingStrategy).toBe('latency');
    // Requests of one shape share one hidden class (docs/performance.md "What brought the figures here": fresh ones per request were costly).
    expect(sameHiddenClass(a, b)).toBe(true);
    expect(sameHiddenClass(a.context!, b.context!)).toBe(true);
  });
});

describe('inline files: the 20 MiB bound is on decoded bytes (spec §8)', () => {
  const MIB_20 = 20 * 1024 * 1024;
  const fileModel = catalogModel({ inputModalities: new Set(['text', 'file']) });
  const withFile = (fileData: string) =>
    convert({ messages: [{ role: 'user', content: [{ type: 'file', file: { filename: 'f.bin', file_data: fileData } }] }] }, fileModel);
  const fileBytes = (converted: ReturnType<typeof convert>) => {
    const part = converted.request.messages[0]!.content[0]!.part;
    if (part?.$case !== 'file') throw new Error('expected a file part');
    return part.value.data.length;
  };

  it('decodedLength ignores padding', () => {
    for (const size of [0, 1, 2, 3, 4, 5, 100, 101, 102]) {
      const text = Buffer.alloc(size, 1).toString('base64');
      expect(decodedLength(text)).toBe(size);
      expect(decodedLength(text.replace(/=+$/, ''))).toBe(size);
    }
  });

  it('exactly 20 MiB passes, padded (20 MiB is not a multiple of 3) and as a data URL', () => {
    const base64 = Buffer.alloc(MIB_20, 7).toString('base64');
    expect(base64.endsWith('=')).toBe(true);
    expect(fileBytes(withFile(base64))).toBe(MIB_20);
    expect(fileBytes(withFile(`data:application/octet-stream;base64,${base64}`))).toBe(MIB_20);
  });

  it('exactly 20 MiB with MIME line breaks passes: whitespace is not data', () => {
    const wrapped = Buffer.alloc(MIB_20, 7).toString('base64').replace(/.{76}/g, '$&\r\n');
    expect(fileBytes(withFile(wrapped))).toBe(MIB_20);
  });

  it('20 MiB + 1 byte is 413 naming the field', () => {
    const error = refusal({ messages: [{ role: 'user', content: [{ type: 'file', file: { file_data: Buffer.alloc(MIB_20 + 1).toString('base64') } }] }] }, fileModel);
    expect(error.status).toBe(413);
    expect(error.code).toBe('payload_too_large');
    expect(error.param).toBe('body.messages.0.content.0.file.file_data');
  });
});

describe('response_format json_schema: checked against its meta-schema', () => {
  const jsonModel = catalogModel({ supportedParameters: new Set(['response_format']) });
  const withSchema = (schema: unknown) => ({ response_format: { type: 'json_schema', json_schema: { name: 's', schema } } });

  it('an invalid schema is 400 invalid_json_schema naming the field', () => {
    for (const schema of [{ type: 12 }, { type: 'object', properties: 5 }, { type: 'object', required: 'a' }]) {
      const error = refusal(withSchema(schema), jsonModel);
      expect(error.status).toBe(400);
      expect(error.code).toBe('invalid_json_schema');
      expect(error.param).toBe('body.response_format.json_schema.schema');
      expect(error.message).toMatch(/^body\.response_format\.json_schema\.schema: not a valid JSON Schema: schema\//);
    }
  });

  it('a valid schema goes on as JSON text; a model without response_format drops it, but a bad schema is a 400 whatever the model', () => {
    const schema = { type: 'object', properties: { a: { type: 'string' } } };
    expect(convert(withSchema(schema), jsonModel).request.responseFormat?.schema).toBe(JSON.stringify(schema));
    expect(convert(withSchema(schema)).droppedParams).toContain('response_format');
    expect(refusal(withSchema({ type: 12 })).code).toBe('invalid_json_schema');
  });

  it('a long complaint is cut like any echoed value', () => {
    const error = refusal(withSchema({ type: 'object', properties: { ['k'.repeat(5_000)]: { type: 12 } } }), jsonModel);
    expect(error.message.length).toBeLessThan(600);
  });
});

describe('reasoning_details on replayed assistant turns', () => {
  const turn = (details: unknown[]) =>
    convert({
      messages: [
        { role: 'user', content: 'q' },
        { role: 'assistant', content: 'a', reasoning_details: details },
        { role: 'user', content: 'next' },
      ],
    }).request.messages[1]!.reasoning;

  it('keeps tagged signatures and data with their issuer, untagged', () => {
    const reasoning = turn([
      { type: 'reasoning.text', text: 'thought', signature: tags.tag('provider-a', 'sig-a') },
      { type: 'reasoning.encrypted', data: tags.tag('provider-b', 'opaque') },
    ]);
    expect(reasoning).toEqual([
      { text: 'thought', signature: 'sig-a', encryptedData: '', providerId: 'provider-a' },
      { text: '', signature: '', encryptedData: 'opaque', providerId: 'provider-b' },
    ]);
  });

  it('drops entries whose tag is missing, edited or from another key, text included', () => {
    const other = new ReasoningTags('another-gateway-key-0000');
    const reasoning = turn([
      { type: 'reasoning.text', text: 'secret thought', signature: 'raw-provider-signature' },
      { type: 'reasoning.text', text: 'other', signature: other.tag('provider-a', 'sig') },
      { type: 'reasoning.encrypted', data: `${tags.tag('provider-a', 'opaque')}x` },
      { type: 'reasoning.text', text: 'plain unsigned text' },
    ]);
    expect(reasoning).toEqual([{ text: 'plain unsigned text', signature: '', encryptedData: '', providerId: '' }]);
  });

  it('cache_control on text, image, file and audio parts becomes the canonical breakpoint (OpenRouter convention)', () => {
    const model = catalogModel({ inputModalities: new Set(['text', 'image', 'file', 'audio']) });
    const { request, droppedParams } = convert(
      {
        messages: [
          { role: 'system', content: [{ type: 'text', text: 'long system prompt', cache_control: { type: 'ephemeral', ttl: '1h' } }] },
          {
            role: 'user',
            content: [
              { type: 'image_url', image_url: { url: 'https://example.com/a.png' }, cache_control: { type: 'ephemeral' } },
              { type: 'file', file: { file_url: 'https://example.com/a.pdf' }, cache_control: { type: 'ephemeral', ttl: '5m' } },
              { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' }, cache_control: { type: 'ephemeral' } },
              { type: 'text', text: 'question' },
            ],
          },
        ],
      },
      model,
    );
    expect(request.messages[0]!.content[0]!.cacheControl).toEqual({ type: 'ephemeral', ttl: '1h' });
    expect(request.messages[1]!.content.map((part) => part.cacheControl)).toEqual([
      { type: 'ephemeral', ttl: '' },
      { type: 'ephemeral', ttl: '5m' },
      { type: 'ephemeral', ttl: '' },
      undefined,
    ]);
    // A breakpoint is not a parameter a model may lack: nothing is dropped or refused for it.
    expect(droppedParams).toEqual([]);
  });

  it('top-level cache_control marks the conversation\'s last block; prompt_cache_key is carried, neither is reported dropped', () => {
    const { request, droppedParams } = convert({
      cache_control: { type: 'ephemeral' },
      prompt_cache_key: 'session-7',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }, { role: 'assistant', content: '' }],
    });
    // The assistant turn's empty text is the last block: the mark lands on it (the last block with content).
    expect(request.messages.at(-1)!.content.at(-1)!.cacheControl).toEqual({ type: 'ephemeral', ttl: '' });
    expect(request.messages[0]!.content.map((part) => part.cacheControl)).toEqual([undefined, undefined]);
    expect(request.promptCacheKey).toBe('session-7');
    expect(droppedParams).toEqual([]);
    expect(convert({}).request.promptCacheKey).toBeUndefined();
  });

  it('cache_control on a tool definition (OpenRouter tool caching) marks the canonical tool', () => {
    const { request } = convert({
      tools: [
        { type: 'function', function: { name: 'a', parameters: { type: 'object' } } },
        { type: 'function', function: { name: 'b', parameters: { type: 'object' } }, cache_control: { type: 'ephemeral', ttl: '1h' } },
      ],
    });
    expect(request.tools.map((tool) => tool.cacheControl)).toEqual([undefined, { type: 'ephemeral', ttl: '1h' }]);
    expect(refusal({ tools: [{ type: 'function', function: { name: 'a' }, cache_control: { type: 'auto' } }] })).toMatchObject({ param: 'body.tools.0.cache_control.type' });
  });

  it('refuses a cache_control of another type or ttl, naming the field', () => {
    expect(refusal({ messages: [{ role: 'user', content: [{ type: 'text', text: 'a', cache_control: { type: 'ephemeral', ttl: '2h' } }] }] })).toMatchObject({
      param: 'body.messages.0.content.0.cache_control.ttl',
      message: "body.messages.0.content.0.cache_control.ttl: cache_control.ttl must be '5m' or '1h'",
    });
    expect(refusal({ messages: [{ role: 'user', content: [{ type: 'text', text: 'a', cache_control: {} }] }] })).toMatchObject({
      param: 'body.messages.0.content.0.cache_control.type',
    });
    expect(refusal({ cache_control: 'ephemeral' })).toMatchObject({ param: 'body.cache_control' });
  });
});
