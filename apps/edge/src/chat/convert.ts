import type { ChatMessage, ChatRequest, ContentPart, RequestContext, ToolChoice } from '@gateway/proto';
import { jsonSchemaProblem } from '@gateway/platform/json-schema';
import { echoed } from '../echoed-value.js';
import { edgeErrors } from '../errors.js';
import type { CatalogModel } from '../catalog-cache.js';
import type { ChatCompletionRequest, ContentBlock } from './schema.js';

/** Spec §8: a single inline file (or audio clip) may carry at most 20 MiB. */
export const MAX_INLINE_FILE_BYTES = 20 * 1024 * 1024;

/** Fields of the dialect that are the request itself, never "parameters" a model may lack. */
const STRUCTURAL_FIELDS = new Set(['model', 'messages', 'stream', 'stream_options', 'routing', 'user']);

/** Request fields forwarded to providers only when the model lists them in supported_parameters. */
const FORWARDABLE_PARAMETERS = new Set([
  'tools',
  'tool_choice',
  'response_format',
  'temperature',
  'top_p',
  'stop',
  'max_completion_tokens',
  'reasoning_effort',
  'presence_penalty',
  'frequency_penalty',
  'parallel_tool_calls',
  'prediction',
  'web_search_options',
  'image_config',
]);

const REASONING_LEVELS = ['minimal', 'low', 'medium', 'high'];

/** The endpoint the chat-completions dialect names in its Router requests (and usage). */
export const CHAT_ENDPOINT = 'chat.completions';

export interface ConvertedChat {
  /** The Router request; the route sets `context` and `routingStrategy` once admitted. */
  request: ChatRequest;
  stream: boolean;
  includeUsage: boolean;
  /** Request fields not forwarded to any provider (the model does not support them). */
  droppedParams: string[];
}

/**
 * The converted request made ready for the Router once admitted: filled in place. Not a spread copy
 * with these fields added: in V8 11 (Node 20) each field added to a spread copy made fresh hidden
 * classes per request, which kept request graphs alive through young-generation GCs (README "Performance").
 */
export function routerRequest(converted: ConvertedChat, context: RequestContext, routingStrategy: string): ChatRequest {
  const request = converted.request;
  request.context = context;
  request.routingStrategy = routingStrategy;
  return request;
}

/**
 * Dialect -> canonical ChatRequest for one model: drops what the model does not support (spec §1),
 * refuses what it cannot read (unsupported_modality), unmatched tool calls and file ids.
 */
export function convertChatRequest(body: ChatCompletionRequest, model: CatalogModel): ConvertedChat {
  const supported = model.supportedParameters;
  const present = new Set<string>();
  for (const [name, value] of Object.entries(body)) if (value !== undefined && value !== null) present.add(name);
  // `max_tokens` is the old name of max_completion_tokens.
  if (present.has('max_tokens')) {
    present.delete('max_tokens');
    present.add('max_completion_tokens');
  }
  const dropped: string[] = [];
  const extraBody: Record<string, unknown> = {};
  const forward = new Set<string>();
  for (const name of present) {
    if (STRUCTURAL_FIELDS.has(name)) continue;
    if (FORWARDABLE_PARAMETERS.has(name)) {
      const isSupported = supported.has(name) || (name === 'max_completion_tokens' && supported.has('max_tokens'));
      if (isSupported) forward.add(name);
      else dropped.push(name);
    } else if (model.extraParameters.has(name)) {
      extraBody[name] = (body as Record<string, unknown>)[name];
    } else {
      // logit_bias lands here too: accepted in the shape, never passed to providers (spec §4.8).
      dropped.push(name);
    }
  }

  const messages = convertMessages(body, model);
  // Every field the route fills in later is in this literal, so filling it changes no hidden class.
  const request: ChatRequest = {
    context: undefined,
    modelId: model.id,
    routingStrategy: '',
    endpoint: CHAT_ENDPOINT,
    messages,
    tools: [],
    stop: [],
    includeUsage: body.stream_options?.include_usage === true,
    timeoutMs: 0,
  };
  if (forward.has('tools') && body.tools) {
    request.tools = body.tools.map((tool) => ({
      name: tool.function.name,
      description: tool.function.description ?? '',
      parameters: JSON.stringify(tool.function.parameters ?? { type: 'object', properties: {} }),
      ...(tool.function.strict != null ? { strict: tool.function.strict } : {}),
    }));
  }
  if (forward.has('tool_choice') && body.tool_choice) request.toolChoice = convertToolChoice(body.tool_choice);
  if (forward.has('response_format') && body.response_format) {
    const format = body.response_format;
    if (format.type === 'json_schema' && format.json_schema.schema) requireValidSchema(format.json_schema.schema);
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
  if (forward.has('temperature') && body.temperature != null) request.temperature = body.temperature;
  if (forward.has('top_p') && body.top_p != null) request.topP = body.top_p;
  if (forward.has('stop') && body.stop != null) request.stop = typeof body.stop === 'string' ? [body.stop] : body.stop;
  const maxTokens = body.max_completion_tokens ?? body.max_tokens;
  if (forward.has('max_completion_tokens') && maxTokens != null) request.maxOutputTokens = Math.min(maxTokens, 0xffffffff);
  if (forward.has('reasoning_effort') && body.reasoning_effort != null) {
    request.reasoningEffort = nearestReasoningEffort(body.reasoning_effort, model.model.reasoningEfforts);
  }
  if (forward.has('presence_penalty') && body.presence_penalty != null) request.presencePenalty = body.presence_penalty;
  if (forward.has('frequency_penalty') && body.frequency_penalty != null) request.frequencyPenalty = body.frequency_penalty;
  if (forward.has('parallel_tool_calls') && body.parallel_tool_calls != null) request.parallelToolCalls = body.parallel_tool_calls;
  if (forward.has('prediction') && body.prediction != null) request.prediction = JSON.stringify(body.prediction);
  if (forward.has('web_search_options') && body.web_search_options != null) {
    request.webSearchOptions = JSON.stringify(body.web_search_options);
  }
  if (forward.has('image_config') && body.image_config?.aspect_ratio != null) request.imageAspectRatio = body.image_config.aspect_ratio;
  if (body.user != null) request.user = body.user;
  if (Object.keys(extraBody).length > 0) request.extraBody = JSON.stringify(extraBody);

  return { request, stream: body.stream === true, includeUsage: request.includeUsage, droppedParams: dropped.sort() };
}

function convertToolChoice(choice: NonNullable<ChatCompletionRequest['tool_choice']>): ToolChoice {
  if (typeof choice === 'string') return { mode: choice, toolName: '' };
  return { mode: 'tool', toolName: choice.function.name };
}

/** Spec §4.8: a level the model lacks moves to the nearest one it has (ties go up). */
export function nearestReasoningEffort(requested: string, available: readonly string[]): string {
  if (available.length === 0 || available.includes(requested)) return requested;
  const target = REASONING_LEVELS.indexOf(requested);
  let best = available[0] as string;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const level of available) {
    const index = REASONING_LEVELS.indexOf(level);
    if (index < 0) continue;
    const distance = Math.abs(index - target);
    if (distance < bestDistance || (distance === bestDistance && index > target)) {
      best = level;
      bestDistance = distance;
    }
  }
  return best;
}

function convertMessages(body: ChatCompletionRequest, model: CatalogModel): ChatMessage[] {
  const issuedCalls = new Map<string, number>();
  const answeredCalls = new Set<string>();
  const messages: ChatMessage[] = [];
  body.messages.forEach((input, index) => {
    const path = `body.messages.${index}`;
    const content: ContentPart[] = [];
    if (typeof input.content === 'string') {
      content.push({ part: { $case: 'text', value: input.content } });
    } else if (input.content) {
      input.content.forEach((block, blockIndex) => content.push(convertBlock(block, `${path}.content.${blockIndex}`, model)));
    }
    const message: ChatMessage = { role: input.role, content, toolCalls: [], toolCallId: '', reasoning: [] };
    if (input.name != null) message.name = input.name;
    if (input.tool_calls && input.tool_calls.length > 0) {
      if (input.role !== 'assistant') throw edgeErrors.invalidRequest(`${path}.tool_calls: only assistant messages carry tool calls.`, `${path}.tool_calls`);
      for (const call of input.tool_calls) {
        issuedCalls.set(call.id, index);
        message.toolCalls.push({ id: call.id, name: call.function.name, arguments: call.function.arguments });
      }
    }
    if (input.role === 'tool') {
      if (!input.tool_call_id) {
        throw edgeErrors.invalidRequest(`${path}.tool_call_id: required for role tool.`, `${path}.tool_call_id`);
      }
      if (!issuedCalls.has(input.tool_call_id)) {
        throw edgeErrors.invalidRequest(
          `${path}.tool_call_id: no earlier assistant tool call has id \`${echoed(input.tool_call_id)}\`.`,
          `${path}.tool_call_id`,
          'tool_output_unmatched',
        );
      }
      answeredCalls.add(input.tool_call_id);
      message.toolCallId = input.tool_call_id;
    }
    messages.push(message);
  });
  for (const [id, index] of issuedCalls) {
    if (!answeredCalls.has(id)) {
      throw edgeErrors.invalidRequest(
        `body.messages.${index}.tool_calls: tool call \`${echoed(id)}\` has no tool message with its result.`,
        `body.messages.${index}.tool_calls`,
        'tool_output_unmatched',
      );
    }
  }
  return messages;
}

function requireModality(model: CatalogModel, modality: string, path: string): void {
  if (!model.inputModalities.has(modality)) {
    throw edgeErrors.invalidRequest(
      `${path}: the model \`${model.id}\` does not accept ${modality} input.`,
      path,
      'unsupported_modality',
    );
  }
}

function convertBlock(block: ContentBlock, path: string, model: CatalogModel): ContentPart {
  switch (block.type) {
    case 'text':
      return { part: { $case: 'text', value: block.text } };
    case 'refusal':
      return { part: { $case: 'text', value: block.refusal } };
    case 'image_url':
      requireModality(model, 'image', path);
      return { part: { $case: 'image', value: { url: block.image_url.url, detail: block.image_url.detail ?? 'auto' } } };
    case 'input_audio':
      requireModality(model, 'audio', path);
      return { part: { $case: 'audio', value: { data: decodeInline(block.input_audio.data, `${path}.input_audio.data`).bytes, format: block.input_audio.format } } };
    case 'file': {
      // Files reach every model: those without native file input receive the file's text (spec §4.8).
      if (block.file.file_id != null && block.file.file_data == null && block.file.file_url == null) {
        throw edgeErrors.invalidRequest(`${path}.file.file_id: file ids are not supported; send file_data or file_url.`, `${path}.file.file_id`, 'file_id_unsupported');
      }
      if (block.file.file_data != null) {
        const inline = decodeInline(block.file.file_data, `${path}.file.file_data`);
        return {
          part: {
            $case: 'file',
            value: { filename: block.file.filename ?? '', data: inline.bytes, url: '', mediaType: inline.mediaType || 'application/pdf' },
          },
        };
      }
      return { part: { $case: 'file', value: { filename: block.file.filename ?? '', data: Buffer.alloc(0), url: block.file.file_url ?? '', mediaType: '' } } };
    }
  }
}

const DATA_URL = /^data:([^;,]*)(;[^,]*)?,/;

const BASE64 = /^[A-Za-z0-9+/_-]*={0,2}$/;

/**
 * Base64 or a base64 data: URL, bounded by its DECODED size (spec §8: a file of exactly 20 MiB passes):
 * padding and line breaks (MIME base64) carry no bytes, so they are not counted.
 */
function decodeInline(text: string, path: string): { bytes: Buffer; mediaType: string } {
  let mediaType = '';
  let payload = text;
  const match = DATA_URL.exec(text);
  if (match) {
    mediaType = match[1] ?? '';
    payload = text.slice(match[0].length);
  }
  const compact = /\s/.test(payload) ? payload.replace(/\s+/g, '') : payload;
  if (decodedLength(compact) > MAX_INLINE_FILE_BYTES) throw inlineTooLarge(path);
  if (!BASE64.test(compact)) throw edgeErrors.invalidRequest(`${path}: not valid base64.`, path);
  return { bytes: Buffer.from(compact, 'base64'), mediaType };
}

/** Bytes that base64 text without whitespace decodes to (padded or not). */
export function decodedLength(base64: string): number {
  let characters = base64.length;
  if (base64.charCodeAt(characters - 1) === 0x3d) characters--;
  if (base64.charCodeAt(characters - 1) === 0x3d) characters--;
  return Math.floor((characters * 3) / 4);
}

/**
 * A client's json_schema that fails its draft's meta-schema (`{"type": 12}`) is the client's 400 here,
 * before admission, whatever provider would have served it: an OpenAI-compatible provider would refuse
 * it (or worse, accept it), and a provider without native JSON modes cannot check answers against it.
 * Only requests that carry a json_schema pay (tens of µs; nothing compiled, nothing cached).
 */
function requireValidSchema(schema: Record<string, unknown>): void {
  const problem = jsonSchemaProblem(schema);
  if (problem === undefined) return;
  const param = 'body.response_format.json_schema.schema';
  throw edgeErrors.invalidRequest(`${param}: not a valid JSON Schema: ${echoed(problem)}.`, param, 'invalid_json_schema');
}

function inlineTooLarge(path: string) {
  const error = edgeErrors.payloadTooLarge(MAX_INLINE_FILE_BYTES);
  error.apiError.message = `${path}: inline file is larger than ${MAX_INLINE_FILE_BYTES} bytes.`;
  error.apiError.param = path;
  return error;
}
