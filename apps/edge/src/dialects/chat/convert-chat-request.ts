import type { ChatMessage, ContentPart, ReasoningPart, ToolCall, ToolChoice } from '@gateway/proto';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { decodeInline } from '../../canonical/inline-data.js';
import { nearestReasoningEffort, requireModality, requireValidSchema } from '../../canonical/model-checks.js';
import { cacheControlOf, markLastBlock, withPartCacheControl } from '../../canonical/cache-control.js';
import { ParameterGate } from '../../canonical/parameters.js';
import { newChatMessage, newChatRequest } from '../../canonical/request.js';
import { ToolPairing } from '../../canonical/tool-pairing.js';
import { requireFetchableUrl } from '../../canonical/urls.js';
import type { ConvertedRequest } from '../../inference/dialect.js';
import { edgeErrors } from '../../errors.js';
import type { CatalogModel } from '../../catalog-cache.js';
import type { ChatCompletionRequest, ChatToolCallInput, ContentBlock } from './chat-schema.js';

/** The endpoint the chat-completions dialect names in its Router requests (and usage). */
export const CHAT_ENDPOINT = 'chat.completions';

/**
 * Dialect -> canonical ChatRequest for one model: drops what the model does not support (spec §1),
 * refuses what it cannot read (unsupported_modality), unmatched tool calls and file ids.
 */
export function convertChatRequest(body: ChatCompletionRequest, model: CatalogModel, tags: ReasoningTags): ConvertedRequest {
  // What goes on and what is dropped: canonical/parameters.ts, for every dialect.
  const gate = new ParameterGate(model, 'chat', body);

  const messages = convertMessages(body, model, tags);
  if (body.cache_control) markLastBlock(messages, cacheControlOf(body.cache_control));
  const request = newChatRequest(model.id, CHAT_ENDPOINT, messages, body.stream_options?.include_usage === true);
  if (body.prompt_cache_key) request.promptCacheKey = body.prompt_cache_key;

  if (gate.forwards('tools') && body.tools) {
    request.tools = body.tools.map((tool) => ({
      name: tool.function.name,
      description: tool.function.description ?? '',
      parameters: JSON.stringify(tool.function.parameters ?? { type: 'object', properties: {} }),
      ...(tool.function.strict != null ? { strict: tool.function.strict } : {}),
      ...(tool.cache_control ? { cacheControl: cacheControlOf(tool.cache_control) } : {}),
    }));
  }
  if (gate.forwards('tool_choice') && body.tool_choice) request.toolChoice = convertToolChoice(body.tool_choice);
  const format = body.response_format;
  // A schema is checked whatever the model: a bad one is a bad request, not a dropped parameter.
  if (format?.type === 'json_schema' && format.json_schema.schema) {
    requireValidSchema(format.json_schema.schema, 'body.response_format.json_schema.schema');
  }
  if (gate.forwards('response_format') && format) {
    request.responseFormat =
      format.type === 'json_schema'
        ? {
            type: 'json_schema',
            schemaName: format.json_schema.name,
            schema: JSON.stringify(format.json_schema.schema ?? {}),
            ...(format.json_schema.strict != null ? { strict: format.json_schema.strict } : {}),
          }
        : { type: format.type, schemaName: '', schema: '' };
  }
  if (gate.forwards('temperature') && body.temperature != null) request.temperature = body.temperature;
  if (gate.forwards('top_p') && body.top_p != null) request.topP = body.top_p;
  if (gate.forwards('stop') && body.stop != null) request.stop = typeof body.stop === 'string' ? [body.stop] : body.stop;
  const maxTokens = body.max_completion_tokens ?? body.max_tokens;
  if (gate.forwards('max_output_tokens') && maxTokens != null) request.maxOutputTokens = Math.min(maxTokens, 0xffffffff);
  if (gate.forwards('reasoning_effort') && body.reasoning_effort != null) {
    request.reasoningEffort = nearestReasoningEffort(body.reasoning_effort, model.model.reasoningEfforts);
  }
  if (gate.forwards('presence_penalty') && body.presence_penalty != null) request.presencePenalty = body.presence_penalty;
  if (gate.forwards('frequency_penalty') && body.frequency_penalty != null) request.frequencyPenalty = body.frequency_penalty;
  if (gate.forwards('parallel_tool_calls') && body.parallel_tool_calls != null) request.parallelToolCalls = body.parallel_tool_calls;
  if (gate.forwards('image_config') && body.image_config?.aspect_ratio != null) request.imageAspectRatio = body.image_config.aspect_ratio;
  if (gate.forwards('user') && body.user != null) request.user = body.user;
  if (gate.forwards('seed') && body.seed != null) request.seed = BigInt(body.seed);
  if (gate.forwards('verbosity') && body.verbosity != null) request.verbosity = body.verbosity;
  if (gate.forwards('logprobs') && body.logprobs != null) request.logprobs = body.logprobs;
  if (gate.forwards('top_logprobs') && body.top_logprobs != null) request.topLogprobs = body.top_logprobs;
  if (body.n != null && body.n > 1) {
    // Several choices are never answered with one: a model that does not list `n` refuses them.
    if (!gate.forwards('n')) throw edgeErrors.invalidRequest(`body.n: ${model.id} answers one choice per request: n must be 1`, 'body.n');
    request.n = body.n;
  }
  const extraBody = gate.extraBody();
  if (extraBody !== undefined) request.extraBody = extraBody;

  return { request, stream: body.stream === true, droppedParams: gate.droppedParams(), spelling: gate };
}

function convertToolChoice(choice: NonNullable<ChatCompletionRequest['tool_choice']>): ToolChoice {
  if (typeof choice === 'string') return { mode: choice, toolName: '', disableParallel: false };
  return { mode: 'tool', toolName: choice.function.name, disableParallel: false };
}

function convertMessages(body: ChatCompletionRequest, model: CatalogModel, tags: ReasoningTags): ChatMessage[] {
  const pairing = new ToolPairing();
  const messages: ChatMessage[] = [];
  body.messages.forEach((input, index) => {
    const path = `body.messages.${index}`;
    const message = newChatMessage(input.role);
    if (typeof input.content === 'string') {
      message.content.push({ part: { $case: 'text', value: input.content } });
    } else if (input.content) {
      input.content.forEach((block, blockIndex) => message.content.push(withPartCacheControl(convertBlock(block, `${path}.content.${blockIndex}`, model), block)));
    }
    if (input.name != null) message.name = input.name;
    if (input.role === 'assistant') message.reasoning = convertReasoning(input, tags);
    if (input.tool_calls && input.tool_calls.length > 0) {
      if (input.role !== 'assistant') throw edgeErrors.invalidRequest(`${path}.tool_calls: only assistant messages carry tool calls.`, `${path}.tool_calls`);
      for (const call of input.tool_calls) {
        pairing.call(call.id, `${path}.tool_calls`);
        message.toolCalls.push(convertToolCall(call, tags));
      }
    }
    if (input.role === 'tool') {
      if (!input.tool_call_id) {
        throw edgeErrors.invalidRequest(`${path}.tool_call_id: required for role tool.`, `${path}.tool_call_id`);
      }
      pairing.result(input.tool_call_id, `${path}.tool_call_id`);
      message.toolCallId = input.tool_call_id;
    }
    messages.push(message);
  });
  pairing.requireAllAnswered();
  return messages;
}

/**
 * A replayed tool call. Its `extra_content.google.thought_signature` is the call's signature as the
 * gateway returned it: with a valid issuer tag it goes on for that provider only; without one it is
 * foreign to every provider and dropped (the call itself stays).
 */
function convertToolCall(call: ChatToolCallInput, tags: ReasoningTags): ToolCall {
  const tagged = call.extra_content?.google?.thought_signature;
  const issued = tagged ? tags.untagCall(tagged) : undefined;
  const signed = issued !== undefined && issued.providerId !== '';
  return {
    id: call.id,
    name: call.function.name,
    arguments: call.function.arguments,
    signature: signed ? issued.value : undefined,
    signatureProviderId: signed ? issued.providerId : undefined,
  };
}

/**
 * A replayed assistant turn's reasoning: `reasoning_details` entries, or else the plain `reasoning`
 * text. A signature or encrypted datum must carry a valid issuer tag; one that does not is foreign
 * and the entry is dropped whole (spec §1: it goes to no provider).
 */
function convertReasoning(input: ChatCompletionRequest['messages'][number], tags: ReasoningTags): ReasoningPart[] {
  const parts: ReasoningPart[] = [];
  for (const detail of input.reasoning_details ?? []) {
    if (detail.type === 'reasoning.encrypted') {
      if (!detail.data) continue;
      const issued = tags.untag(detail.data);
      if (issued.providerId !== '') parts.push({ text: '', signature: '', encryptedData: issued.value, providerId: issued.providerId });
    } else if (detail.type === 'reasoning.text') {
      if (detail.signature) {
        const issued = tags.untag(detail.signature);
        if (issued.providerId !== '') parts.push({ text: detail.text ?? '', signature: issued.value, encryptedData: '', providerId: issued.providerId });
      } else if (detail.text) {
        parts.push({ text: detail.text, signature: '', encryptedData: '', providerId: '' });
      }
    }
  }
  if (parts.length === 0 && input.reasoning && !input.reasoning_details) {
    parts.push({ text: input.reasoning, signature: '', encryptedData: '', providerId: '' });
  }
  return parts;
}

function convertBlock(block: ContentBlock, path: string, model: CatalogModel): ContentPart {
  switch (block.type) {
    case 'text':
      return { part: { $case: 'text', value: block.text } };
    case 'refusal':
      return { part: { $case: 'text', value: block.refusal } };
    case 'image_url':
      requireModality(model, 'image', path);
      return { part: { $case: 'image', value: { url: requireFetchableUrl(block.image_url.url, `${path}.image_url.url`), detail: block.image_url.detail ?? 'auto' } } };
    case 'input_audio':
      requireModality(model, 'audio', path);
      return { part: { $case: 'audio', value: { data: decodeInline(block.input_audio.data, `${path}.input_audio.data`).bytes, format: block.input_audio.format } } };
    case 'file': {
      // Files reach every model: those without native file input receive the file's text (spec §4.8).
      // A file id is read (the caller's own file, through the jobs service) where URLs are fetched: canonical/file-parts.ts.
      if (block.file.file_id != null && block.file.file_data == null && block.file.file_url == null) {
        return { part: { $case: 'file', value: { filename: block.file.filename ?? '', data: Buffer.alloc(0), url: '', mediaType: '', context: '', fileId: block.file.file_id } } };
      }
      if (block.file.file_data != null) {
        const inline = decodeInline(block.file.file_data, `${path}.file.file_data`);
        return {
          part: {
            $case: 'file',
            value: { filename: block.file.filename ?? '', data: inline.bytes, url: '', mediaType: inline.mediaType || 'application/pdf', context: '', fileId: '' },
          },
        };
      }
      return { part: { $case: 'file', value: { filename: block.file.filename ?? '', data: Buffer.alloc(0), url: block.file.file_url ? requireFetchableUrl(block.file.file_url, `${path}.file.file_url`) : '', mediaType: '', context: '', fileId: '' } } };
    }
  }
}

