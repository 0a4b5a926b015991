import type { ChatMessage, ContentPart, ReasoningPart, ToolChoice } from '@gateway/proto';
import type { CatalogModel } from '../../catalog-cache.js';
import type { FilePathOf } from '../../canonical/file-parts.js';
import { decodeInline } from '../../canonical/inline-data.js';
import { nearestReasoningEffort, requireModality, requireValidSchema } from '../../canonical/model-checks.js';
import { ParameterGate } from '../../canonical/parameters.js';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { cacheControlOf, markLastBlock, withPartCacheControl } from '../../canonical/cache-control.js';
import { newChatMessage, newChatRequest } from '../../canonical/request.js';
import { ToolPairing } from '../../canonical/tool-pairing.js';
import { requireFetchableUrl } from '../../canonical/urls.js';
import { edgeErrors } from '../../errors.js';
import type { ConvertedRequest } from '../../inference/dialect.js';
import { compactionText, openCompaction } from './compaction-item.js';
import { reasoningPartOf } from './responses-reasoning.js';
import type { ResponsesContentPart, ResponsesInputItem, ResponsesRequest } from './responses-schema.js';
import { conversationOf, isBackground, isExpanded } from './stored-marks.js';
import { customArguments, flatToolName, toolSetOf, type ResponsesToolSet } from './responses-tools.js';

/** The endpoint the responses dialect names in its Router requests (and usage). */
export const RESPONSES_ENDPOINT = 'responses';

/**
 * Request fields that need state the gateway does not keep (prompt templates, background
 * runs): refused rather than ignored, since ignoring them changes the answer.
 */
const STATEFUL_FIELDS: ReadonlyMap<string, string> = new Map([
  ['prompt', 'stored prompt templates are not supported: send the prompt in `instructions` and `input`.'],
]);

/**
 * Dialect -> canonical ChatRequest for one model: drops what the model does not support (spec §1),
 * refuses what it cannot read (unsupported_modality), unmatched tool calls and outputs
 * (tool_output_unmatched), file ids, item references and the stateful fields above.
 */
export function convertResponsesRequest(body: ResponsesRequest, model: CatalogModel, tags: ReasoningTags): ConvertedRequest {
  const loose = body as Record<string, unknown>;
  // Expanded into `input` by the storing route (stored-response-steps.ts); any other path stores nothing to continue.
  if (body.previous_response_id != null && !isExpanded(body)) {
    throw edgeErrors.invalidRequest(
      'body.previous_response_id: this path stores no responses, so it cannot continue one: send the whole conversation in `input`.',
      'body.previous_response_id',
      'unsupported_parameter',
    );
  }
  // Expanded into `input` by the storing route, as previous_response_id; any other path keeps no conversations.
  if (loose.conversation != null && conversationOf(body) === undefined) {
    throw edgeErrors.invalidRequest('body.conversation: this path keeps no conversations: send the whole conversation in `input` (conversations are kept over HTTP POST /v1/responses with a store).', 'body.conversation', 'unsupported_parameter');
  }
  for (const [field, reason] of STATEFUL_FIELDS) {
    if (loose[field] != null) throw edgeErrors.invalidRequest(`body.${field}: ${reason}`, `body.${field}`, 'unsupported_parameter');
  }
  if (body.background === true && !isBackground(body)) {
    throw edgeErrors.invalidRequest('body.background: background responses are run only over HTTP POST /v1/responses with a store (a gateway with a jobs service).', 'body.background', 'unsupported_parameter');
  }

  const toolSet = toolSetOf(body);
  // What goes on and what is dropped: canonical/parameters.ts, for every dialect. `store`, `include`
  // and `truncation` are request fields there: storing is the route's (stored-response-steps.ts),
  // encrypted reasoning comes whenever a provider issued some, and nothing is truncated (a
  // conversation over the context window is a 400). A tool list of hosted tools only asks for no
  // tools (they are reported as dropped tools), so its absence is not a dropped parameter.
  const gate = new ParameterGate(model, 'responses', body, { tools: toolSet.tools.length > 0 });

  const input = convertInput(body, model, tags);
  // Usage always comes back in the answer (and in response.completed): the dialect has no opt-out.
  if (body.cache_control) markLastBlock(input.messages, cacheControlOf(body.cache_control));
  const request = newChatRequest(model.id, RESPONSES_ENDPOINT, input.messages, true);
  if (body.prompt_cache_key) request.promptCacheKey = body.prompt_cache_key;

  if (gate.forwards('tools')) request.tools = toolSet.tools;
  // Without tools, a tool choice or parallel-calls flag means nothing, and OpenAI-compatible providers
  // refuse them ("only allowed when tools are specified"): they go only with the tools they govern.
  const withTools = request.tools.length > 0;
  // A choice forcing a hosted tool cannot be honoured by any provider: refused, whatever the model.
  if (body.tool_choice != null && typeof body.tool_choice === 'object' && body.tool_choice.type !== 'function' && body.tool_choice.type !== 'custom') {
    throw edgeErrors.invalidRequest(
      `body.tool_choice: it forces the hosted tool '${body.tool_choice.type}', which no provider behind this gateway runs (hosted tools are dropped; see x-gateway-dropped-tools).`,
      'body.tool_choice',
      'unsupported_tool_choice',
    );
  }
  if (withTools && gate.forwards('tool_choice') && body.tool_choice) request.toolChoice = convertToolChoice(body.tool_choice, toolSet);
  const format = body.text?.format;
  // A schema is checked whatever the model: a bad one is a bad request, not a dropped parameter.
  if (format?.type === 'json_schema') requireValidSchema(format.schema, 'body.text.format.schema');
  if (gate.forwards('response_format') && format) {
    request.responseFormat =
      format.type === 'json_schema'
        ? { type: 'json_schema', schemaName: format.name, schema: JSON.stringify(format.schema), ...(format.strict != null ? { strict: format.strict } : {}) }
        : { type: format.type, schemaName: '', schema: '' };
  }
  if (gate.forwards('temperature') && body.temperature != null) request.temperature = body.temperature;
  if (gate.forwards('top_p') && body.top_p != null) request.topP = body.top_p;
  if (gate.forwards('presence_penalty') && body.presence_penalty != null) request.presencePenalty = body.presence_penalty;
  if (gate.forwards('frequency_penalty') && body.frequency_penalty != null) request.frequencyPenalty = body.frequency_penalty;
  if (gate.forwards('max_output_tokens') && body.max_output_tokens != null) request.maxOutputTokens = Math.min(body.max_output_tokens, 0xffffffff);
  if (withTools && gate.forwards('parallel_tool_calls') && body.parallel_tool_calls != null) request.parallelToolCalls = body.parallel_tool_calls;
  if (gate.forwards('reasoning_effort') && body.reasoning?.effort != null) {
    request.reasoningEffort = nearestReasoningEffort(body.reasoning.effort, model.model.reasoningEfforts);
  }
  if (gate.forwards('reasoning_effort') && body.reasoning?.summary != null) request.reasoningSummary = body.reasoning.summary;
  if (gate.forwards('user') && body.user != null) request.user = body.user;
  if (gate.forwards('verbosity') && body.text?.verbosity != null) request.verbosity = body.text.verbosity;
  // Logprobs: asked for by `include: ["message.output_text.logprobs"]`; top_logprobs (above 0) goes along
  // with them, and without them asks for nothing a provider could answer (named).
  if (gate.forwards('logprobs')) request.logprobs = true;
  if (gate.forwards('top_logprobs') && body.top_logprobs != null) {
    if (request.logprobs === true) request.topLogprobs = body.top_logprobs;
    else gate.drop('top_logprobs');
  }
  const extraBody = gate.extraBody();
  if (extraBody !== undefined) request.extraBody = extraBody;

  return {
    request,
    stream: body.stream === true,
    droppedParams: gate.droppedParams(),
    spelling: gate,
    droppedTools: toolSet.dropped,
    outputField: 'max_output_tokens',
    ...(input.filePaths ? { filePathOf: filePathOf(input.filePaths) } : {}),
  };
}

function convertToolChoice(choice: NonNullable<ResponsesRequest['tool_choice']>, toolSet: ResponsesToolSet): ToolChoice {
  if (typeof choice === 'string') return { mode: choice, toolName: '', disableParallel: false };
  // Hosted choices were refused above. A function or custom choice names a tool; one naming a namespace
  // member (no top-level tool of that name, one member of it) forces that member's flat name.
  const name = 'name' in choice && typeof choice.name === 'string' ? choice.name : '';
  return { mode: 'tool', toolName: toolSet.byFlatName.has(name) ? name : (memberFlatName(toolSet, name) ?? name), disableParallel: false };
}

function memberFlatName(toolSet: ResponsesToolSet, name: string): string | undefined {
  let found: string | undefined;
  for (const [flat, tool] of toolSet.byFlatName) {
    if (tool.name !== name) continue;
    if (found !== undefined) return undefined;
    found = flat;
  }
  return found;
}

/** Client paths of the file parts, by `<canonical message index>:<part index>`. */
type FilePaths = Map<string, string>;

function filePathOf(paths: FilePaths): FilePathOf {
  return (messageIndex, partIndex, what) => {
    const path = paths.get(`${messageIndex}:${partIndex}`) ?? 'body.input';
    return what === 'url' ? `${path}.file_url` : what === 'id' ? `${path}.file_id` : path;
  };
}

/**
 * The input items as canonical messages, in order. Items that are one assistant turn in the dialect
 * become one assistant message: function calls join the assistant message (or calls) right before
 * them, and reasoning items join the next assistant message or call. Reasoning that no assistant
 * output follows explains nothing the conversation keeps, and is dropped.
 */
class InputConversion {
  readonly messages: ChatMessage[] = [];
  filePaths: FilePaths | undefined;
  private readonly pairing = new ToolPairing();
  private pendingReasoning: ReasoningPart[] = [];
  /** The assistant message function calls may still join. */
  private openAssistant: ChatMessage | undefined;

  constructor(
    private readonly model: CatalogModel,
    private readonly tags: ReasoningTags,
  ) {}

  text(role: string, text: string): void {
    this.closeTurn();
    const message = this.push(newChatMessage(role));
    message.content.push({ part: { $case: 'text', value: text } });
  }

  item(item: ResponsesInputItem, path: string): void {
    switch (item.type) {
      case 'message': {
        const message = item.role === 'assistant' ? this.assistant() : this.other(item.role);
        if (typeof item.content === 'string') {
          message.content.push({ part: { $case: 'text', value: item.content } });
        } else {
          item.content.forEach((part, index) => this.part(message, part, `${path}.content.${index}`));
        }
        return;
      }
      case 'function_call':
      case 'custom_tool_call': {
        const message = this.openAssistant && this.pendingReasoning.length === 0 ? this.openAssistant : this.assistant();
        this.pairing.call(item.call_id, `${path}.call_id`);
        // The name the provider saw when it made the call (responses-tools.ts), so a replay matches the tools offered.
        const name = flatToolName(item.namespace ?? '', item.name);
        const args = item.type === 'function_call' ? item.arguments : customArguments(item.input);
        message.toolCalls.push({ id: item.call_id, name, arguments: args });
        return;
      }
      case 'function_call_output':
      case 'custom_tool_call_output': {
        const message = this.other('tool');
        this.pairing.result(item.call_id, `${path}.call_id`);
        message.toolCallId = item.call_id;
        if (typeof item.output === 'string') {
          message.content.push({ part: { $case: 'text', value: item.output } });
        } else {
          item.output.forEach((part, index) => this.part(message, part, `${path}.output.${index}`));
        }
        return;
      }
      case 'reasoning': {
        // A reasoning item opens the next assistant turn: calls after it do not join the turn before it.
        this.openAssistant = undefined;
        const summary = (item.summary ?? []).map((part) => part.text).join('');
        const part = reasoningPartOf(summary, item.encrypted_content, this.tags);
        if (part) this.pendingReasoning.push(part);
        return;
      }
      case 'compaction':
        // The summary of the turns it replaced, as a user message every provider reads (a forged one is a 400).
        this.text('user', compactionText(openCompaction(item.encrypted_content, this.tags, `${path}.encrypted_content`)));
        return;
      case 'compaction_trigger':
        // Last in the input, it makes the request a compaction (compaction.ts) and is taken off before this.
        throw edgeErrors.invalidRequest(
          `${path}: a compaction_trigger item is the last input item (it asks for the conversation before it to be compacted).`,
          path,
          'invalid_compaction_trigger',
        );
      case 'item_reference':
        throw edgeErrors.invalidRequest(
          `${path}: item_reference is not supported: the gateway stores no items to refer to; send the item itself.`,
          path,
          'item_reference_unsupported',
        );
    }
  }

  finish(): void {
    this.pairing.requireAllAnswered();
    this.pendingReasoning = [];
  }

  private push(message: ChatMessage): ChatMessage {
    this.messages.push(message);
    return message;
  }

  /** A new assistant message carrying the reasoning items that came before it. */
  private assistant(): ChatMessage {
    const message = this.push(newChatMessage('assistant'));
    message.reasoning = this.pendingReasoning;
    this.pendingReasoning = [];
    this.openAssistant = message;
    return message;
  }

  private other(role: string): ChatMessage {
    this.closeTurn();
    return this.push(newChatMessage(role));
  }

  private closeTurn(): void {
    this.openAssistant = undefined;
    this.pendingReasoning = [];
  }

  private part(message: ChatMessage, part: ResponsesContentPart, path: string): void {
    const converted = withPartCacheControl(convertPart(part, path, this.model), part);
    if (converted.part?.$case === 'file') {
      this.filePaths ??= new Map();
      this.filePaths.set(`${this.messages.length - 1}:${message.content.length}`, path);
    }
    message.content.push(converted);
  }
}

function convertInput(body: ResponsesRequest, model: CatalogModel, tags: ReasoningTags): InputConversion {
  const conversion = new InputConversion(model, tags);
  // Instructions lead the conversation as its system message (OpenAI: they apply to this response only).
  if (body.instructions) conversion.text('system', body.instructions);
  if (typeof body.input === 'string') {
    // An empty string is no input (the instructions alone are the request): no empty user turn, which
    // Anthropic-kind providers refuse.
    if (body.input !== '') conversion.text('user', body.input);
  } else {
    body.input.forEach((item, index) => conversion.item(item, `body.input.${index}`));
  }
  conversion.finish();
  return conversion;
}

function convertPart(part: ResponsesContentPart, path: string, model: CatalogModel): ContentPart {
  switch (part.type) {
    case 'input_text':
    case 'output_text':
      return { part: { $case: 'text', value: part.text } };
    case 'refusal':
      return { part: { $case: 'text', value: part.refusal } };
    case 'input_image': {
      if (part.image_url == null) throw fileIdUnsupported(`${path}.file_id`);
      requireModality(model, 'image', path);
      // `original` (full resolution) is the responses dialect's own level; providers know it as `high`.
      const detail = part.detail == null ? 'auto' : part.detail === 'original' ? 'high' : part.detail;
      return { part: { $case: 'image', value: { url: requireFetchableUrl(part.image_url, `${path}.image_url`), detail } } };
    }
    case 'input_file': {
      // Files reach every model: those without native file input receive the file's text (spec §4.8).
      // A file id is read (the caller's own file, through the jobs service) where URLs are fetched: canonical/file-parts.ts.
      if (part.file_data == null && part.file_url == null) {
        return { part: { $case: 'file', value: { filename: part.filename ?? '', data: Buffer.alloc(0), url: '', mediaType: '', context: '', fileId: part.file_id ?? '' } } };
      }
      if (part.file_data != null) {
        const inline = decodeInline(part.file_data, `${path}.file_data`);
        return {
          part: {
            $case: 'file',
            value: { filename: part.filename ?? '', data: inline.bytes, url: '', mediaType: inline.mediaType || 'application/pdf', context: '', fileId: '' },
          },
        };
      }
      return { part: { $case: 'file', value: { filename: part.filename ?? '', data: Buffer.alloc(0), url: part.file_url ? requireFetchableUrl(part.file_url, `${path}.file_url`) : '', mediaType: '', context: '', fileId: '' } } };
    }
  }
}

/** Images by file id are not read (input_file's file id is); the image is sent by URL or data URL. */
function fileIdUnsupported(param: string) {
  return edgeErrors.invalidRequest(`${param}: images by file id are not supported; send image_url (a URL or a data: URL).`, param, 'file_id_unsupported');
}
