import { unsentParameters } from '@gateway/platform';
import type { CacheControl, ChatMessage, ChatRequest, ContentPart, FilePart, ImagePart, ReasoningPart } from '@gateway/proto';
import { ProviderError } from '../provider-adapter.js';
import type {
  AnthropicAssistantBlock,
  AnthropicCacheControl,
  AnthropicDocumentBlock,
  AnthropicImageBlock,
  AnthropicMessage,
  AnthropicRequestBody,
  AnthropicTextBlock,
  AnthropicTool,
  AnthropicToolChoice,
  AnthropicToolResultBlock,
  AnthropicUserBlock,
} from './anthropic-api-types.js';
import { AlternatingTurns } from './anthropic-turns.js';
import { ToolIdentifiers } from './anthropic-tool-identifiers.js';

/**
 * `max_tokens` when neither the request nor the catalog model gives one (Anthropic requires it). The
 * catalog's max_output_tokens comes first: admission already reserved for that many.
 */
export const DEFAULT_MAX_TOKENS = 4_096;
/** Anthropic's smallest thinking budget. */
export const MIN_THINKING_BUDGET_TOKENS = 1_024;
/**
 * Thinking budget for a `reasoning_effort` (chat and responses callers), at most half of max_tokens so
 * the answer keeps room; below Anthropic's minimum no thinking is asked for.
 */
export const THINKING_BUDGET_BY_EFFORT: Readonly<Record<string, number>> = {
  minimal: 1_024,
  low: 2_048,
  medium: 8_192,
  high: 16_384,
  xhigh: 32_768,
};
/** Anthropic's temperature range is 0..1 (OpenAI's 0..2): values above are sent as 1, not refused. */
const MAX_TEMPERATURE = 1;
/** With thinking on, Anthropic refuses top_p below this. */
const MIN_TOP_P_WITH_THINKING = 0.95;

export interface AnthropicConversionOptions {
  upstreamModel: string;
  stream: boolean;
  /** The adapter's provider: reasoning issued by any other provider never goes out (spec §1). */
  providerId: string;
  modelMaxOutputTokens?: number | undefined;
}

export interface AnthropicConversion {
  body: AnthropicRequestBody;
  /** Turns the tool ids and names of the answer back into the caller's. */
  tools: ToolIdentifiers;
  /**
   * The canonical parameters the request set that this body goes without (libs/platform PARAMETERS
   * names): what the wire has no field for, and what Anthropic takes only with certain values (below).
   */
  unsent: readonly string[];
}

function rejected(message: string): ProviderError {
  return new ProviderError('rejected', message, 400);
}

function cacheControl(mark: CacheControl | undefined): AnthropicCacheControl | undefined {
  if (!mark) return undefined;
  return mark.ttl ? { type: 'ephemeral', ttl: mark.ttl } : { type: 'ephemeral' };
}

function withCacheControl<Block extends object>(block: Block, mark: CacheControl | undefined): Block & { cache_control?: AnthropicCacheControl } {
  const converted = cacheControl(mark);
  return converted ? { ...block, cache_control: converted } : block;
}

/** Anthropic refuses text blocks without non-whitespace text. */
/** Text with something besides white space (Anthropic and Converse refuse blank text blocks). */
export const hasText = (text: string) => text.trim().length > 0;

function textBlock(text: string, mark: CacheControl | undefined): AnthropicTextBlock {
  return withCacheControl({ type: 'text' as const, text }, mark);
}

function imageBlock(image: ImagePart, mark: CacheControl | undefined, where: string): AnthropicImageBlock {
  const url = image.url;
  if (url.startsWith('data:')) {
    const match = /^data:([^;,]+);base64,(.*)$/s.exec(url);
    if (!match) throw rejected(`${where}: only base64 data: URLs can be sent as images to this provider`);
    return withCacheControl({ type: 'image' as const, source: { type: 'base64' as const, media_type: match[1]!, data: match[2]! } }, mark);
  }
  return withCacheControl({ type: 'image' as const, source: { type: 'url' as const, url } }, mark);
}

/** Media types sent as a plain-text document (Anthropic's text source is text/plain only). */
function isTextMediaType(mediaType: string): boolean {
  return mediaType.startsWith('text/') || mediaType === 'application/json' || mediaType === 'application/xml';
}

function documentBlock(file: FilePart, mark: CacheControl | undefined, where: string): AnthropicDocumentBlock {
  let source: AnthropicDocumentBlock['source'];
  if (file.data.length > 0) {
    const mediaType = file.mediaType || 'application/pdf';
    if (mediaType === 'application/pdf') source = { type: 'base64', media_type: 'application/pdf', data: Buffer.from(file.data).toString('base64') };
    else if (isTextMediaType(mediaType)) source = { type: 'text', media_type: 'text/plain', data: Buffer.from(file.data).toString('utf8') };
    else throw rejected(`${where}: files of type ${mediaType} cannot be sent to this provider (PDF and plain text only)`);
  } else if (file.url) {
    source = { type: 'url', url: file.url };
  } else {
    throw rejected(`${where}: a file needs data or a url`);
  }
  const block: AnthropicDocumentBlock = { type: 'document', source };
  if (file.filename) block.title = file.filename;
  if (file.context) block.context = file.context;
  return withCacheControl(block, mark);
}

/** Text, image and document blocks of a user turn (or a tool result) in the client's order. */
function userBlocks(parts: readonly ContentPart[], where: string): (AnthropicTextBlock | AnthropicImageBlock | AnthropicDocumentBlock)[] {
  const blocks: (AnthropicTextBlock | AnthropicImageBlock | AnthropicDocumentBlock)[] = [];
  parts.forEach((part, index) => {
    const value = part.part;
    const at = `${where}.content[${index}]`;
    switch (value?.$case) {
      case 'text':
        if (hasText(value.value)) blocks.push(textBlock(value.value, part.cacheControl));
        break;
      case 'image':
        blocks.push(imageBlock(value.value, part.cacheControl, at));
        break;
      case 'file':
        blocks.push(documentBlock(value.value, part.cacheControl, at));
        break;
      case 'audio':
        throw rejected(`${at}: this provider does not take audio input`);
      default:
        break;
    }
  });
  return blocks;
}

/** A message's text parts, blank ones left out, joined by newlines. */
export function textOf(message: ChatMessage): string {
  return message.content.map((part) => (part.part?.$case === 'text' ? part.part.value : '')).filter(hasText).join('\n');
}

/** The cache mark of a message's last marked part. */
export function lastCacheMark(message: ChatMessage): CacheControl | undefined {
  for (let index = message.content.length - 1; index >= 0; index--) {
    const mark = message.content[index]!.cacheControl;
    if (mark) return mark;
  }
  return undefined;
}

/**
 * A system or developer message in the middle of a conversation (spec §4.10). Anthropic has one
 * system prompt, before the conversation; moving a later instruction there would change what the
 * model saw when. It goes into the user turn at its place instead, wrapped so the model reads it as
 * an instruction rather than something the user said.
 */
export function systemNote(text: string): string {
  return `<system>\n${text}\n</system>`;
}

export function isSystemRole(role: string): boolean {
  return role === 'system' || role === 'developer';
}

/**
 * Tool arguments as Anthropic's `input` object (and Bedrock Converse's `input` document, the same shape).
 * Not a JSON object (a cut-off answer of another model): `{}`.
 */
export function toolInput(argumentsText: string): Record<string, unknown> {
  if (argumentsText.trim() === '') return {};
  try {
    const value: unknown = JSON.parse(argumentsText);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

function reasoningBlock(part: ReasoningPart, providerId: string): AnthropicAssistantBlock | undefined {
  // Only what this provider issued goes back (the router strips the rest already; this is the last line).
  // Unsigned thinking text (another provider's plain reasoning) has nothing Anthropic could verify.
  if (part.providerId !== providerId) return undefined;
  if (part.encryptedData) return { type: 'redacted_thinking', data: part.encryptedData };
  if (part.signature) return { type: 'thinking', thinking: part.text, signature: part.signature };
  return undefined;
}

/**
 * A tool's JSON Schema text as the object schema Anthropic (and Bedrock's Converse, which takes the same
 * shape) require at the top; unparsable or non-object text is the caller's error.
 */
export function parseObjectSchema(text: string, where: string): Record<string, unknown> {
  if (text.trim() === '') return { type: 'object', properties: {} };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw rejected(`${where} is not JSON`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw rejected(`${where} is not a JSON object`);
  const schema = value as Record<string, unknown>;
  // Anthropic requires an object schema at the top; a schema that leaves `type` out means one.
  return schema.type === undefined ? { type: 'object', ...schema } : schema;
}

function toolChoice(request: ChatRequest, tools: ToolIdentifiers): AnthropicToolChoice | undefined {
  const choice = request.toolChoice;
  const single = choice?.disableParallel === true || request.parallelToolCalls === false;
  const parallel = single ? { disable_parallel_tool_use: true } : {};
  switch (choice?.mode) {
    case 'none':
      return { type: 'none' };
    case 'required':
      return { type: 'any', ...parallel };
    case 'tool':
      return { type: 'tool', name: tools.upstreamName(choice.toolName), ...parallel };
    case 'auto':
      return { type: 'auto', ...parallel };
    default:
      return single ? { type: 'auto', ...parallel } : undefined;
  }
}

/** The thinking budget the request asks for, or undefined for none. */
function thinkingBudget(request: ChatRequest, maxTokens: number): number | undefined {
  if (request.thinkingBudgetTokens !== undefined) return request.thinkingBudgetTokens > 0 ? request.thinkingBudgetTokens : undefined;
  const byEffort = request.reasoningEffort !== undefined ? THINKING_BUDGET_BY_EFFORT[request.reasoningEffort] : undefined;
  if (byEffort === undefined) return undefined;
  const budget = Math.min(byEffort, Math.floor(maxTokens / 2));
  return budget >= MIN_THINKING_BUDGET_TOKENS ? budget : undefined;
}

/**
 * With thinking on, Anthropic refuses a tool loop whose last assistant turn does not start with its
 * thinking block, which is the case when that turn came from another provider (its reasoning was
 * stripped) or from a request without thinking. That one request then goes without thinking.
 */
function toolLoopLacksThinking(messages: readonly AnthropicMessage[]): boolean {
  const last = messages.at(-1);
  if (!last || last.role !== 'user' || !last.content.some((block) => block.type === 'tool_result')) return false;
  const assistant = messages.at(-2);
  if (!assistant || assistant.role !== 'assistant') return false;
  const first = assistant.content[0];
  return first !== undefined && first.type !== 'thinking' && first.type !== 'redacted_thinking';
}

/** The user turn put before a conversation that starts with the assistant (Anthropic wants a user turn first). */
export const LEADING_USER_TEXT = '(conversation start)';

/** The conversation as alternating Anthropic turns, plus the leading system text. */
function convertMessages(messages: readonly ChatMessage[], tools: ToolIdentifiers, providerId: string) {
  const system: AnthropicTextBlock[] = [];
  let index = 0;
  // Leading system / developer messages are the system prompt, cache marks kept.
  for (; index < messages.length && isSystemRole(messages[index]!.role); index++) {
    for (const part of messages[index]!.content) {
      if (part.part?.$case === 'text' && hasText(part.part.value)) system.push(textBlock(part.part.value, part.cacheControl));
    }
  }
  const turns = new AlternatingTurns<AnthropicToolResultBlock | AnthropicUserBlock | AnthropicAssistantBlock>();
  for (; index < messages.length; index++) {
    const message = messages[index]!;
    const where = `messages[${index}]`;
    if (isSystemRole(message.role)) {
      const text = textOf(message);
      if (text) turns.turnFor('user').body.push(textBlock(systemNote(text), lastCacheMark(message)));
    } else if (message.role === 'tool') {
      const content = userBlocks(message.content, where);
      const result: AnthropicToolResultBlock = { type: 'tool_result', tool_use_id: tools.upstreamId(message.toolCallId) };
      if (content.length > 0) result.content = content;
      if (message.isError) result.is_error = true;
      // Every result of the turn goes before its other content, in the order the results came.
      turns.turnFor('user').leading.push(result);
    } else if (message.role === 'assistant') {
      const thinking = message.reasoning.map((part) => reasoningBlock(part, providerId)).filter((block) => block !== undefined);
      const said = message.content.flatMap((part) =>
        part.part?.$case === 'text' && hasText(part.part.value) ? [textBlock(part.part.value, part.cacheControl)] : []);
      const calls = message.toolCalls.map((call): AnthropicAssistantBlock => ({
        type: 'tool_use', id: tools.upstreamId(call.id), name: tools.upstreamName(call.name), input: toolInput(call.arguments),
      }));
      turns.addAssistant(thinking, said, calls);
    } else {
      const blocks = userBlocks(message.content, where);
      if (blocks.length > 0) turns.turnFor('user').body.push(...blocks);
    }
  }
  const converted = turns.messages() as AnthropicMessage[];
  // A final assistant turn is a prefill: Anthropic refuses trailing whitespace at its end.
  const final = converted.at(-1);
  if (final?.role === 'assistant') {
    const lastBlock = final.content.at(-1);
    if (lastBlock?.type === 'text') lastBlock.text = lastBlock.text.trimEnd();
  }
  // Only instructions and no conversation (OpenAI answers those): Anthropic needs a user turn, so the
  // instructions are it.
  if (converted.length === 0 && system.length > 0) return { system: [], messages: [{ role: 'user', content: system } as AnthropicMessage] };
  // A conversation that opens with the assistant (a greeting, a trimmed history; OpenAI takes it) is refused
  // with 400 "messages: first message must use the user role" (Bedrock does; Anthropic's own API did through
  // 2024, and the fake does): a minimal user turn goes first, the assistant's words kept as they were.
  if (converted[0]?.role === 'assistant') converted.unshift({ role: 'user', content: [{ type: 'text', text: LEADING_USER_TEXT }] } as AnthropicMessage);
  return { system, messages: converted };
}

/**
 * Canonical request -> Anthropic Messages body (anthropic-version 2023-06-01). Leading system and
 * developer messages become `system`; later ones a wrapped note in the user turn at their place (see
 * systemNote); tool results become tool_result blocks first in one user turn; consecutive messages of
 * one role merge into one turn (Anthropic requires alternation). response_format is not sent: the
 * adapter is wrapped in InstructedStructuredOutput (create-adapter.ts), whose instruction arrives here
 * as a leading system message and whose check runs on the answer.
 */
export function convertToAnthropicRequest(request: ChatRequest, options: AnthropicConversionOptions): AnthropicConversion {
  const tools = new ToolIdentifiers();
  const unsent: string[] = [...unsentParameters('anthropic', request)];
  const { system, messages } = convertMessages(request.messages, tools, options.providerId);
  let maxTokens = request.maxOutputTokens ?? options.modelMaxOutputTokens ?? DEFAULT_MAX_TOKENS;
  const body: AnthropicRequestBody = { model: options.upstreamModel, max_tokens: maxTokens, messages };
  if (system.length > 0) body.system = system;

  if (request.tools.length > 0) {
    body.tools = request.tools.map((tool, index): AnthropicTool => {
      const converted: AnthropicTool = { name: tools.upstreamName(tool.name), input_schema: parseObjectSchema(tool.parameters, `tools[${index}].parameters`) };
      if (tool.description) converted.description = tool.description;
      // `strict` is not sent: models without structured outputs refuse it, and the gateway checks nothing on it.
      return withCacheControl(converted, tool.cacheControl);
    });
    const choice = toolChoice(request, tools);
    if (choice) body.tool_choice = choice;
  }

  // Adaptive thinking (the client's own `thinking: {type: "adaptive"}`) is Claude's to size: no budget.
  const adaptiveAsked = request.thinkingMode === 'adaptive';
  // An effort the client wrote as output_config.effort goes on as such; without thinking it asks for
  // none (the edge's reasoning_effort for it is for the kinds that take only a level).
  const effortOnly = request.outputEffort !== undefined && request.thinkingBudgetTokens === undefined;
  let budget = adaptiveAsked || effortOnly ? undefined : thinkingBudget(request, maxTokens);
  let adaptive = adaptiveAsked;
  const forcedTool = body.tool_choice?.type === 'any' || body.tool_choice?.type === 'tool';
  // Anthropic refuses thinking with a forced tool choice; the caller's tool choice is the harder constraint.
  if ((budget !== undefined || adaptive) && (forcedTool || toolLoopLacksThinking(messages))) {
    budget = undefined;
    adaptive = false;
    unsent.push('reasoning_effort');
  }
  if (budget !== undefined) {
    // A budget without any output bound from the caller or the catalog: room for the budget and an answer.
    if (budget >= maxTokens && request.maxOutputTokens === undefined && options.modelMaxOutputTokens === undefined) {
      maxTokens = budget + DEFAULT_MAX_TOKENS;
      body.max_tokens = maxTokens;
    }
    body.thinking = { type: 'enabled', budget_tokens: budget };
  }
  if (adaptive) body.thinking = { type: 'adaptive' };
  if (request.outputEffort !== undefined) body.output_config = { effort: request.outputEffort };

  const thinking = budget !== undefined || adaptive;
  // With thinking on Anthropic accepts only temperature 1, no top_k and top_p >= 0.95: others are left out.
  // Each left out is named (unsent).
  if (request.temperature !== undefined) {
    if (!thinking || request.temperature === 1) body.temperature = Math.min(Math.max(request.temperature, 0), MAX_TEMPERATURE);
    else unsent.push('temperature');
  }
  if (request.topP !== undefined) {
    if (!thinking || request.topP >= MIN_TOP_P_WITH_THINKING) body.top_p = request.topP;
    else unsent.push('top_p');
  }
  if (request.topK !== undefined) {
    if (!thinking) body.top_k = request.topK;
    else unsent.push('top_k');
  }
  // Anthropic refuses whitespace-only stop sequences (OpenAI callers send "\n"): those are left out, and named.
  const stops = request.stop.filter(hasText);
  if (stops.length > 0) body.stop_sequences = stops;
  if (stops.length < request.stop.length) unsent.push('stop');
  if (request.user !== undefined && request.user !== '') body.metadata = { user_id: request.user };

  if (request.extraBody !== undefined) {
    let extra: unknown;
    try {
      extra = JSON.parse(request.extraBody);
    } catch {
      throw rejected('extra_body is not JSON');
    }
    if (extra && typeof extra === 'object' && !Array.isArray(extra)) {
      for (const [field, value] of Object.entries(extra)) if (!(field in body)) body[field] = value;
    }
  }
  if (options.stream) body.stream = true;
  return { body, tools, unsent };
}
