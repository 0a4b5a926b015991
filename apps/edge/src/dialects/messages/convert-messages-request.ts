import type { ChatMessage, ContentPart, Tool, ToolChoice } from '@gateway/proto';
import type { CatalogModel } from '../../catalog-cache.js';
import type { FilePathOf } from '../../canonical/file-parts.js';
import { decodedLength, decodeInline, inlineText, inlineTooLarge, MAX_INLINE_FILE_BYTES } from '../../canonical/inline-data.js';
import { effortForBudget, nearestReasoningEffort, requireModality, requireValidSchema } from '../../canonical/model-checks.js';
import { cacheControlOf, markLastBlock, optionalCacheControl } from '../../canonical/cache-control.js';
import { ParameterGate } from '../../canonical/parameters.js';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { newChatMessage, newChatRequest } from '../../canonical/request.js';
import { ToolPairing } from '../../canonical/tool-pairing.js';
import { requireFetchableUrl } from '../../canonical/urls.js';
import { echoed } from '../../echoed-value.js';
import { edgeErrors } from '../../errors.js';
import type { ConvertedRequest } from '../../inference/dialect.js';
import type {
  CacheControlInput,
  CountTokensRequest,
  DocumentBlockInput,
  ImageBlockInput,
  MessagesContentBlock,
  MessagesMessageInput,
  MessagesRequest,
  MessagesToolChoice,
  MessagesToolInput,
  TextBlockInput,
} from './messages-schema.js';

/** The endpoint the messages dialect names in its Router requests (and usage). */
export const MESSAGES_ENDPOINT = 'messages';

/** What the converter reads: a messages request, or a count_tokens one (the prompt without sampling fields). */
export type ConvertibleMessagesBody = CountTokensRequest &
  Partial<Pick<MessagesRequest, 'max_tokens' | 'temperature' | 'top_p' | 'top_k' | 'stop_sequences' | 'stream' | 'metadata' | 'routing'>>;

/** Canonical message index -> part index -> the client's path of a file block (errors while files are read). */
type FilePaths = Map<string, string>;

/**
 * Messages request -> canonical ChatRequest for one model (spec §4.10). `system` becomes the leading
 * system message and a mid-conversation `system` turn a system message where it stands; a user turn's
 * tool_result blocks become `tool` messages placed before the rest of that turn; thinking blocks come
 * back only with a valid issuer tag (anything else is foreign and dropped whole, spec §1). Parameters
 * the model lacks are dropped and reported in the dialect's spelling.
 */
export function convertMessagesRequest(body: ConvertibleMessagesBody, model: CatalogModel, tags: ReasoningTags): ConvertedRequest {
  // What goes on and what is dropped: canonical/parameters.ts, for every dialect.
  const gate = new ParameterGate(model, 'messages', body);

  const filePaths: FilePaths = new Map();
  const messages = convertConversation(body, model, tags, filePaths);
  if (body.cache_control) markLastBlock(messages, cacheControlOf(body.cache_control));
  const request = newChatRequest(model.id, MESSAGES_ENDPOINT, messages, true);

  // Tools are checked whether or not the model takes them: a server tool is a mistake either way.
  const tools = body.tools ? body.tools.map((tool, index) => convertTool(tool, `body.tools.${index}`)) : [];
  if (gate.forwards('tools')) request.tools = tools;
  if (gate.forwards('tool_choice') && body.tool_choice) {
    request.toolChoice = convertToolChoice(body.tool_choice);
    // Providers that only know `parallel_tool_calls` get the same request through it.
    if (request.toolChoice.disableParallel && gate.supports('parallel_tool_calls')) request.parallelToolCalls = false;
  }
  const format = body.output_config?.format;
  if (format) {
    requireValidSchema(format.schema, 'body.output_config.format.schema');
    if (gate.forwards('response_format')) {
      request.responseFormat = { type: 'json_schema', schemaName: '', schema: JSON.stringify(format.schema), strict: undefined };
    }
  }
  if (gate.forwards('reasoning_effort')) convertReasoningRequest(body, model, request);
  if (gate.forwards('max_output_tokens') && body.max_tokens != null) request.maxOutputTokens = Math.min(body.max_tokens, 0xffffffff);
  if (gate.forwards('temperature') && body.temperature != null) request.temperature = body.temperature;
  if (gate.forwards('top_p') && body.top_p != null) request.topP = body.top_p;
  if (gate.forwards('top_k') && body.top_k != null) request.topK = body.top_k;
  if (gate.forwards('stop') && body.stop_sequences) request.stop = body.stop_sequences;
  if (gate.forwards('user') && body.metadata?.user_id != null) request.user = body.metadata.user_id;
  const extraBody = gate.extraBody();
  if (extraBody !== undefined) request.extraBody = extraBody;

  const converted: ConvertedRequest = { request, stream: body.stream === true, droppedParams: gate.droppedParams(), spelling: gate, outputField: 'max_tokens' };
  if (filePaths.size > 0) converted.filePathOf = filePathOf(filePaths);
  return converted;
}

/**
 * `thinking` and `output_config.effort`. A budget goes on as `thinking_budget_tokens` and, for providers
 * that take a level instead, as the nearest reasoning effort the model has; an explicit effort wins
 * over the one a budget implies. `disabled` asks for neither. `adaptive` and the effort also go on as
 * written (thinking_mode, output_effort), for the Anthropic kinds, which take them as such.
 */
function convertReasoningRequest(body: ConvertibleMessagesBody, model: CatalogModel, request: ConvertedRequest['request']): void {
  const thinking = body.thinking;
  const effort = body.output_config?.effort ?? undefined;
  const levels = model.model.reasoningEfforts;
  if (effort !== undefined) request.outputEffort = effort;
  if (thinking?.type === 'adaptive') request.thinkingMode = 'adaptive';
  if (thinking && thinking.type !== 'disabled') {
    if (thinking.type === 'enabled') {
      request.thinkingBudgetTokens = thinking.budget_tokens;
      request.reasoningEffort = nearestReasoningEffort(effort ?? effortForBudget(thinking.budget_tokens), levels);
    } else if (effort !== undefined) {
      request.reasoningEffort = nearestReasoningEffort(effort, levels);
    }
    return;
  }
  if (effort !== undefined) request.reasoningEffort = nearestReasoningEffort(effort, levels);
}

function convertTool(tool: MessagesToolInput, path: string): Tool {
  if (tool.type != null && tool.type !== 'custom') {
    throw edgeErrors.invalidRequest(
      `${path}.type: server tool \`${echoed(tool.type)}\` is not supported; only client tools (name, input_schema) are.`,
      `${path}.type`,
    );
  }
  if (!tool.input_schema) throw edgeErrors.invalidRequest(`${path}.input_schema: required for a client tool.`, `${path}.input_schema`);
  return {
    name: tool.name,
    description: tool.description ?? '',
    parameters: JSON.stringify(tool.input_schema),
    strict: tool.strict ?? undefined,
    cacheControl: tool.cache_control ? cacheControlOf(tool.cache_control) : undefined,
  };
}

function convertToolChoice(choice: MessagesToolChoice): ToolChoice {
  const disableParallel = choice.type !== 'none' && choice.disable_parallel_tool_use === true;
  switch (choice.type) {
    case 'auto':
      return { mode: 'auto', toolName: '', disableParallel };
    case 'any':
      return { mode: 'required', toolName: '', disableParallel };
    case 'tool':
      return { mode: 'tool', toolName: choice.name, disableParallel };
    case 'none':
      return { mode: 'none', toolName: '', disableParallel: false };
  }
}

function textPart(text: string, cacheControl: CacheControlInput | null | undefined): ContentPart {
  return { part: { $case: 'text', value: text }, cacheControl: optionalCacheControl(cacheControl) };
}

/** Builds the canonical conversation, noting where each file block came from. */
class ConversationBuilder {
  readonly messages: ChatMessage[] = [];
  readonly pairing = new ToolPairing();

  constructor(
    private readonly model: CatalogModel,
    private readonly tags: ReasoningTags,
    private readonly filePaths: FilePaths,
  ) {}

  /** Adds a message; `files` are its file parts' indices with the client's path of each. */
  push(message: ChatMessage, files: Array<[number, string]> | undefined): void {
    if (files) for (const [part, path] of files) this.filePaths.set(`${this.messages.length}:${part}`, path);
    this.messages.push(message);
  }

  system(input: MessagesMessageInput, path: string): void {
    const message = newChatMessage('system');
    if (typeof input.content === 'string') {
      message.content.push(textPart(input.content, undefined));
    } else {
      input.content.forEach((block, index) => {
        if (block.type !== 'text') {
          throw edgeErrors.invalidRequest(`${path}.content.${index}: a system message carries text blocks only, not ${block.type}.`, `${path}.content.${index}.type`);
        }
        message.content.push(textPart(block.text, block.cache_control));
      });
    }
    this.push(message, undefined);
  }

  /** A user turn: its tool results first (one `tool` message each), then the rest of the turn. */
  user(input: MessagesMessageInput, path: string): void {
    if (typeof input.content === 'string') return this.pushText('user', input.content);
    const rest = newChatMessage('user');
    let restFiles: Array<[number, string]> | undefined;
    input.content.forEach((block, index) => {
      const blockPath = `${path}.content.${index}`;
      if (block.type === 'tool_result') {
        this.toolResult(block, blockPath);
        return;
      }
      if (block.type === 'tool_use' || block.type === 'thinking' || block.type === 'redacted_thinking') {
        throw edgeErrors.invalidRequest(`${blockPath}: a user turn cannot carry ${block.type} blocks (they are the assistant's).`, `${blockPath}.type`);
      }
      restFiles = this.appendBlock(rest, block, blockPath, restFiles);
    });
    if (rest.content.length > 0) this.push(rest, restFiles);
  }

  /** A user or assistant turn given as a string: one text part. */
  private pushText(role: 'user' | 'assistant', text: string): void {
    const message = newChatMessage(role);
    message.content.push(textPart(text, undefined));
    this.push(message, undefined);
  }

  private toolResult(block: Extract<MessagesContentBlock, { type: 'tool_result' }>, path: string): void {
    this.pairing.result(block.tool_use_id, `${path}.tool_use_id`);
    const message = newChatMessage('tool');
    message.toolCallId = block.tool_use_id;
    message.isError = block.is_error === true;
    let files: Array<[number, string]> | undefined;
    if (typeof block.content === 'string') {
      message.content.push(textPart(block.content, undefined));
    } else if (block.content) {
      block.content.forEach((inner, index) => {
        files = this.appendBlock(message, inner, `${path}.content.${index}`, files);
      });
    }
    if (block.cache_control && message.content.length > 0) message.content[message.content.length - 1]!.cacheControl = cacheControlOf(block.cache_control);
    this.push(message, files);
  }

  assistant(input: MessagesMessageInput, path: string): void {
    if (typeof input.content === 'string') return this.pushText('assistant', input.content);
    const message = newChatMessage('assistant');
    input.content.forEach((block, index) => {
      const blockPath = `${path}.content.${index}`;
      switch (block.type) {
        case 'text':
          message.content.push(textPart(block.text, block.cache_control));
          break;
        case 'thinking': {
          // Only reasoning the gateway tagged goes on, with its issuer; anything else is foreign: dropped, text included.
          const issued = this.tags.untag(block.signature);
          if (issued.providerId !== '') message.reasoning.push({ text: block.thinking, signature: issued.value, encryptedData: '', providerId: issued.providerId });
          break;
        }
        case 'redacted_thinking': {
          const issued = this.tags.untag(block.data);
          if (issued.providerId !== '') message.reasoning.push({ text: '', signature: '', encryptedData: issued.value, providerId: issued.providerId });
          break;
        }
        case 'tool_use':
          this.pairing.call(block.id, `${blockPath}.id`);
          message.toolCalls.push({ id: block.id, name: block.name, arguments: JSON.stringify(block.input) });
          break;
        default:
          throw edgeErrors.invalidRequest(
            `${blockPath}: an assistant turn carries text, thinking, redacted_thinking and tool_use blocks, not ${block.type}.`,
            `${blockPath}.type`,
          );
      }
    });
    this.push(message, undefined);
  }

  /** Text, image or document blocks of a user turn or a tool result; returns the file parts noted so far. */
  private appendBlock(
    target: ChatMessage,
    block: TextBlockInput | ImageBlockInput | DocumentBlockInput,
    path: string,
    files: Array<[number, string]> | undefined,
  ): Array<[number, string]> | undefined {
    switch (block.type) {
      case 'text':
        target.content.push(textPart(block.text, block.cache_control));
        return files;
      case 'image':
        target.content.push(imagePart(block, path, this.model));
        return files;
      case 'document':
        return this.appendDocument(target, block, path, files);
    }
  }

  /**
   * A document reaches every model (spec §4.10): base64 PDF and plain text as inline bytes, a URL as a
   * file part the pipeline fetches through the media service; models without file input get the text.
   */
  private appendDocument(
    target: ChatMessage,
    block: DocumentBlockInput,
    path: string,
    files: Array<[number, string]> | undefined,
  ): Array<[number, string]> | undefined {
    const source = block.source;
    const cacheControl = block.cache_control ? cacheControlOf(block.cache_control) : undefined;
    const filename = block.title ?? '';
    const context = block.context ?? '';
    switch (source.type) {
      case 'file':
        throw edgeErrors.invalidRequest(`${path}.source.file_id: file ids are not supported; send the document as base64, text or url.`, `${path}.source.file_id`, 'file_id_unsupported');
      case 'content': {
        // A document given as content blocks is those blocks (its title and context, when any, in front).
        if (filename || context) target.content.push(textPart([filename, context].filter(Boolean).join('\n'), undefined));
        if (typeof source.content === 'string') target.content.push(textPart(source.content, undefined));
        else source.content.forEach((inner, index) => this.appendBlock(target, inner, `${path}.source.content.${index}`, undefined));
        if (cacheControl && target.content.length > 0) target.content[target.content.length - 1]!.cacheControl = cacheControl;
        return files;
      }
      case 'base64': {
        const data = decodeInline(source.data, `${path}.source.data`).bytes;
        target.content.push({ part: { $case: 'file', value: { filename, data, url: '', mediaType: 'application/pdf', context, fileId: '' } }, cacheControl });
        break;
      }
      case 'text': {
        const data = inlineText(source.data, `${path}.source.data`);
        target.content.push({ part: { $case: 'file', value: { filename, data, url: '', mediaType: 'text/plain', context, fileId: '' } }, cacheControl });
        break;
      }
      case 'url':
        target.content.push({ part: { $case: 'file', value: { filename, data: Buffer.alloc(0), url: requireFetchableUrl(source.url, `${path}.source.url`), mediaType: '', context, fileId: '' } }, cacheControl });
        break;
    }
    const noted = files ?? [];
    noted.push([target.content.length - 1, path]);
    return noted;
  }
}

function imagePart(block: ImageBlockInput, path: string, model: CatalogModel): ContentPart {
  requireModality(model, 'image', path);
  const source = block.source;
  const cacheControl = block.cache_control ? cacheControlOf(block.cache_control) : undefined;
  if (source.type === 'file') {
    throw edgeErrors.invalidRequest(`${path}.source.file_id: file ids are not supported; send the image as base64 or url.`, `${path}.source.file_id`, 'file_id_unsupported');
  }
  if (source.type === 'url') return { part: { $case: 'image', value: { url: requireFetchableUrl(source.url, `${path}.source.url`), detail: 'auto' } }, cacheControl };
  // Bounded by its decoded size (spec §8) without decoding it: the provider reads the data: URL.
  const data = /\s/.test(source.data) ? source.data.replace(/\s+/g, '') : source.data;
  if (decodedLength(data) > MAX_INLINE_FILE_BYTES) throw inlineTooLarge(`${path}.source.data`);
  return { part: { $case: 'image', value: { url: `data:${source.media_type};base64,${data}`, detail: 'auto' } }, cacheControl };
}

function convertConversation(body: ConvertibleMessagesBody, model: CatalogModel, tags: ReasoningTags, filePaths: FilePaths): ChatMessage[] {
  const builder = new ConversationBuilder(model, tags, filePaths);
  if (body.system != null) {
    const system = newChatMessage('system');
    if (typeof body.system === 'string') {
      if (body.system !== '') system.content.push(textPart(body.system, undefined));
    } else {
      for (const block of body.system) system.content.push(textPart(block.text, block.cache_control));
    }
    if (system.content.length > 0) builder.push(system, undefined);
  }
  body.messages.forEach((input, index) => {
    const path = `body.messages.${index}`;
    if (input.role === 'system') builder.system(input, path);
    else if (input.role === 'user') builder.user(input, path);
    else builder.assistant(input, path);
  });
  builder.pairing.requireAllAnswered();
  return builder.messages;
}

/** Errors while files are read name the client's document block. */
function filePathOf(filePaths: FilePaths): FilePathOf {
  return (messageIndex, partIndex, what) => {
    const path = filePaths.get(`${messageIndex}:${partIndex}`) ?? 'body.messages';
    return what === 'url' ? `${path}.source.url` : what === 'id' ? `${path}.source.file_id` : what === 'file' ? `${path}.source` : path;
  };
}
