import { anthropicBetas, unsentParameters } from '@gateway/platform';
import type { CacheControl, ChatMessage, ChatRequest, ContentPart, FilePart, ImagePart, ReasoningPart } from '@gateway/proto';
import { ProviderError } from '../provider-adapter.js';
import { AlternatingTurns } from '../anthropic/anthropic-turns.js';
import { ToolIdentifiers } from '../anthropic/anthropic-tool-identifiers.js';
import { hasText, isSystemRole, lastCacheMark, parseObjectSchema, textOf, toolInput } from '../anthropic/convert-to-anthropic-request.js';
import {
  DEFAULT_MAX_TOKENS,
  MIN_THINKING_BUDGET_TOKENS,
  systemNote,
  THINKING_BUDGET_BY_EFFORT,
} from '../anthropic/convert-to-anthropic-request.js';
import type {
  BedrockCachePoint,
  BedrockContentBlock,
  BedrockDocumentBlock,
  BedrockDocumentFormat,
  BedrockImageBlock,
  BedrockImageFormat,
  BedrockMessage,
  BedrockRequestBody,
  BedrockTextBlock,
  BedrockToolChoice,
  BedrockToolConfig,
  BedrockToolResultBlock,
  BedrockToolSpec,
} from './bedrock-api-types.js';

export interface BedrockConversionOptions {
  /** The model id, inference profile id or ARN (goes in the path, not the body). */
  upstreamModel: string;
  /** The adapter's provider: reasoning issued by any other provider never goes out (spec §1). */
  providerId: string;
  modelMaxOutputTokens?: number | undefined;
}

export interface BedrockConversion {
  body: BedrockRequestBody;
  /** Turns the tool ids and names of the answer back into the caller's. */
  tools: ToolIdentifiers;
  /**
   * The canonical parameters the request set that this body goes without (libs/platform PARAMETERS
   * names): what the wire has no field for, and what it takes only with certain values.
   */
  unsent: readonly string[];
}

/** Description of a tool Bedrock must be told about only because the history holds its blocks. */
export const HISTORY_TOOL_DESCRIPTION = 'A tool used earlier in this conversation; it is not offered now.';
/** The user turn put before a conversation that starts with the assistant (Converse wants a user turn first). */
export const LEADING_USER_TEXT = '(conversation start)';
/** Text of a tool result that came back empty (Converse requires content in a toolResult). */
export const EMPTY_TOOL_RESULT_TEXT = '(empty result)';
/** Claude's temperature range is 0..1 (OpenAI's 0..2): values above are sent as 1. */
const MAX_TEMPERATURE = 1;
const MIN_TOP_P_WITH_THINKING = 0.95;

/** Top-level Converse fields an operator may set through the model's extra_body; any other key goes to the model. */
const CONVERSE_FIELDS = new Set([
  'guardrailConfig',
  'performanceConfig',
  'requestMetadata',
  'promptVariables',
  'additionalModelResponseFieldPaths',
  'serviceTier',
]);

const IMAGE_FORMATS: Readonly<Record<string, BedrockImageFormat>> = {
  'image/png': 'png',
  'image/jpeg': 'jpeg',
  'image/jpg': 'jpeg',
  'image/gif': 'gif',
  'image/webp': 'webp',
};

const DOCUMENT_FORMATS: Readonly<Record<string, BedrockDocumentFormat>> = {
  'application/pdf': 'pdf',
  'text/csv': 'csv',
  'application/msword': 'doc',
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document': 'docx',
  'application/vnd.ms-excel': 'xls',
  'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet': 'xlsx',
  'text/html': 'html',
  'text/plain': 'txt',
  'text/markdown': 'md',
  'application/json': 'txt',
  'application/xml': 'txt',
};

function rejected(message: string): ProviderError {
  return new ProviderError('rejected', message, 400);
}

/** Claude's own request fields (thinking, top_k) go in additionalModelRequestFields only for Claude models. */
export function isClaudeModel(modelId: string): boolean {
  return /anthropic|claude/i.test(modelId);
}

/** A cache breakpoint after the marked block; ttl only where Bedrock takes it (5m | 1h), else its default. */
export function cachePoint(mark: CacheControl): BedrockCachePoint {
  return mark.ttl === '5m' || mark.ttl === '1h' ? { cachePoint: { type: 'default', ttl: mark.ttl } } : { cachePoint: { type: 'default' } };
}

function imageBlock(image: ImagePart, where: string): BedrockImageBlock {
  const match = /^data:([^;,]+);base64,(.*)$/s.exec(image.url);
  if (!match) {
    throw rejected(`${where}: this provider (Amazon Bedrock) takes images as inline data only; send the image as a base64 data: URL instead of a link`);
  }
  const format = IMAGE_FORMATS[match[1]!.toLowerCase()];
  if (!format) throw rejected(`${where}: images of type ${match[1]} cannot be sent to this provider (png, jpeg, gif, webp)`);
  return { image: { format, source: { bytes: match[2]! } } };
}

/**
 * A document's name as Converse takes it: letters, digits, single spaces, hyphens, parentheses and
 * square brackets only (a '.' is refused, so `report.pdf` becomes `report-pdf`); unique within the
 * request (a repeated name gets a counter).
 */
export function documentName(filename: string, used: Map<string, number>): string {
  const cleaned = filename.replace(/[^A-Za-z0-9\s\-()[\]]/g, '-').replace(/\s+/g, ' ').trim().slice(0, 200) || 'document';
  const seen = used.get(cleaned) ?? 0;
  used.set(cleaned, seen + 1);
  return seen === 0 ? cleaned : `${cleaned} (${seen + 1})`;
}

function documentBlock(file: FilePart, where: string, names: Map<string, number>): BedrockDocumentBlock {
  if (file.data.length === 0) {
    throw rejected(`${where}: this provider (Amazon Bedrock) takes files as inline data only; send the file's content instead of a link`);
  }
  const mediaType = (file.mediaType || 'application/pdf').toLowerCase();
  const format = DOCUMENT_FORMATS[mediaType] ?? (mediaType.startsWith('text/') ? 'txt' : undefined);
  if (!format) throw rejected(`${where}: files of type ${mediaType} cannot be sent to this provider`);
  return { document: { format, name: documentName(file.filename || 'document', names), source: { bytes: Buffer.from(file.data).toString('base64') } } };
}

/** Request-wide state of the conversion. */
interface Context {
  tools: ToolIdentifiers;
  providerId: string;
  documentNames: Map<string, number>;
  /** Tool names the history uses (for toolConfig when the request offers none). */
  historyToolNames: Set<string>;
}

/** Text, image and document blocks of a user turn or a tool result, each cache mark a cachePoint after its block. */
function userBlocks(parts: readonly ContentPart[], where: string, context: Context): BedrockContentBlock[] {
  const blocks: BedrockContentBlock[] = [];
  parts.forEach((part, index) => {
    const value = part.part;
    const at = `${where}.content[${index}]`;
    const before = blocks.length;
    switch (value?.$case) {
      case 'text':
        if (hasText(value.value)) blocks.push({ text: value.value });
        break;
      case 'image':
        blocks.push(imageBlock(value.value, at));
        break;
      case 'file':
        blocks.push(documentBlock(value.value, at, context.documentNames));
        break;
      case 'audio':
        throw rejected(`${at}: this provider does not take audio input`);
      default:
        break;
    }
    if (part.cacheControl && blocks.length > before) blocks.push(cachePoint(part.cacheControl));
  });
  return blocks;
}

/** Only reasoning this provider issued goes back, and only what Bedrock can verify (signed or redacted). */
function reasoningBlock(part: ReasoningPart, providerId: string): BedrockContentBlock | undefined {
  if (part.providerId !== providerId) return undefined;
  if (part.encryptedData) return { reasoningContent: { redactedContent: part.encryptedData } };
  if (part.signature) return { reasoningContent: { reasoningText: { text: part.text, signature: part.signature } } };
  return undefined;
}

function convertMessages(messages: readonly ChatMessage[], context: Context) {
  const system: (BedrockTextBlock | BedrockCachePoint)[] = [];
  let index = 0;
  for (; index < messages.length && isSystemRole(messages[index]!.role); index++) {
    for (const part of messages[index]!.content) {
      if (part.part?.$case !== 'text' || !hasText(part.part.value)) continue;
      system.push({ text: part.part.value });
      if (part.cacheControl) system.push(cachePoint(part.cacheControl));
    }
  }
  const turns = new AlternatingTurns<BedrockContentBlock>();
  const { tools } = context;
  for (; index < messages.length; index++) {
    const message = messages[index]!;
    const where = `messages[${index}]`;
    if (isSystemRole(message.role)) {
      // Converse has one system prompt, before the conversation: a later instruction stays at its place.
      const text = textOf(message);
      if (!text) continue;
      const turn = turns.turnFor('user');
      turn.body.push({ text: systemNote(text) });
      const mark = lastCacheMark(message);
      if (mark) turn.body.push(cachePoint(mark));
    } else if (message.role === 'tool') {
      // A cachePoint cannot sit inside a toolResult: the result's mark goes after the result instead.
      const content = userBlocks(message.content, where, context).filter((block) => !('cachePoint' in block)) as BedrockToolResultBlock['toolResult']['content'];
      const result: BedrockToolResultBlock = {
        toolResult: { toolUseId: tools.upstreamId(message.toolCallId), content: content.length > 0 ? content : [{ text: EMPTY_TOOL_RESULT_TEXT }] },
      };
      if (message.isError) result.toolResult.status = 'error';
      turns.turnFor('user').leading.push(result);
      const mark = lastCacheMark(message);
      if (mark) turns.turnFor('user').leading.push(cachePoint(mark));
    } else if (message.role === 'assistant') {
      const reasoning = message.reasoning.map((part) => reasoningBlock(part, context.providerId)).filter((block) => block !== undefined);
      const said: BedrockContentBlock[] = [];
      for (const part of message.content) {
        if (part.part?.$case !== 'text' || !hasText(part.part.value)) continue;
        said.push({ text: part.part.value });
        if (part.cacheControl) said.push(cachePoint(part.cacheControl));
      }
      const calls = message.toolCalls.map((call): BedrockContentBlock => {
        const name = tools.upstreamName(call.name);
        context.historyToolNames.add(name);
        return { toolUse: { toolUseId: tools.upstreamId(call.id), name, input: toolInput(call.arguments) } };
      });
      turns.addAssistant(reasoning, said, calls);
    } else {
      const blocks = userBlocks(message.content, where, context);
      if (blocks.length > 0) turns.turnFor('user').body.push(...blocks);
    }
  }
  const converted: BedrockMessage[] = turns.messages();
  // A final assistant turn is a prefill: Claude refuses trailing whitespace at its end.
  const lastBlock = converted.at(-1)?.role === 'assistant' ? converted.at(-1)!.content.at(-1) : undefined;
  if (lastBlock && 'text' in lastBlock) lastBlock.text = lastBlock.text.trimEnd();
  // Only instructions and no conversation: Converse needs a user turn, so the instructions are it.
  if (converted.length === 0 && system.length > 0) return { system: [], messages: [{ role: 'user', content: system } as BedrockMessage] };
  // Converse refuses a conversation that opens with the assistant: a minimal user turn goes first.
  if (converted[0]?.role === 'assistant') converted.unshift({ role: 'user', content: [{ text: LEADING_USER_TEXT }] });
  return { system, messages: converted };
}

function toolChoice(request: ChatRequest, tools: ToolIdentifiers): BedrockToolChoice | undefined {
  switch (request.toolChoice?.mode) {
    case 'required':
      return { any: {} };
    case 'tool':
      return { tool: { name: tools.upstreamName(request.toolChoice.toolName) } };
    case 'auto':
      return { auto: {} };
    default:
      // none: Converse has no such choice (the tools are left out unless the history needs them).
      return undefined;
  }
}

/**
 * toolConfig: the request's tools (each cache mark a cachePoint after its tool) and tool choice. Converse
 * refuses a history with toolUse / toolResult blocks unless toolConfig is present; when the request
 * offers no tools then (a client that dropped them, tool_choice none), each tool the history used is
 * declared with an open object schema, as LiteLLM and other gateways do, so the conversation stays valid.
 */
function toolConfig(request: ChatRequest, context: Context, historyHasToolBlocks: boolean): BedrockToolConfig | undefined {
  const offered = request.tools.length > 0 && request.toolChoice?.mode !== 'none';
  if (offered) {
    const tools: BedrockToolConfig['tools'] = [];
    request.tools.forEach((tool, index) => {
      const spec: BedrockToolSpec = {
        toolSpec: { name: context.tools.upstreamName(tool.name), inputSchema: { json: parseObjectSchema(tool.parameters, `tools[${index}].parameters`) } },
      };
      if (tool.description) spec.toolSpec.description = tool.description;
      tools.push(spec);
      if (tool.cacheControl) tools.push(cachePoint(tool.cacheControl));
    });
    const declared = new Set(tools.flatMap((tool) => ('toolSpec' in tool ? [tool.toolSpec.name] : [])));
    for (const name of context.historyToolNames) if (!declared.has(name)) tools.push(historyTool(name));
    const choice = toolChoice(request, context.tools);
    return choice ? { tools, toolChoice: choice } : { tools };
  }
  if (!historyHasToolBlocks) return undefined;
  const names = context.historyToolNames.size > 0 ? [...context.historyToolNames] : ['history_tool'];
  return { tools: names.map(historyTool) };
}

function historyTool(name: string): BedrockToolSpec {
  return { toolSpec: { name, description: HISTORY_TOOL_DESCRIPTION, inputSchema: { json: { type: 'object', properties: {} } } } };
}

function thinkingBudget(request: ChatRequest, maxTokens: number | undefined): number | undefined {
  if (request.thinkingBudgetTokens !== undefined) return request.thinkingBudgetTokens > 0 ? request.thinkingBudgetTokens : undefined;
  const byEffort = request.reasoningEffort !== undefined ? THINKING_BUDGET_BY_EFFORT[request.reasoningEffort] : undefined;
  if (byEffort === undefined) return undefined;
  const budget = maxTokens === undefined ? byEffort : Math.min(byEffort, Math.floor(maxTokens / 2));
  return budget >= MIN_THINKING_BUDGET_TOKENS ? budget : undefined;
}

/** With thinking on, Claude refuses a tool loop whose last assistant turn does not open with its reasoning. */
function toolLoopLacksReasoning(messages: readonly BedrockMessage[]): boolean {
  const last = messages.at(-1);
  if (!last || last.role !== 'user' || !last.content.some((block) => 'toolResult' in block)) return false;
  const assistant = messages.at(-2);
  const first = assistant?.role === 'assistant' ? assistant.content[0] : undefined;
  return first !== undefined && !('reasoningContent' in first);
}

function extraFields(request: ChatRequest): Record<string, unknown> | undefined {
  if (request.extraBody === undefined) return undefined;
  let extra: unknown;
  try {
    extra = JSON.parse(request.extraBody);
  } catch {
    throw rejected('extra_body is not JSON');
  }
  return extra && typeof extra === 'object' && !Array.isArray(extra) ? (extra as Record<string, unknown>) : undefined;
}

/**
 * Canonical request -> Converse body. Leading system and developer messages become `system`; later ones
 * a wrapped note in the user turn at their place; tool results become toolResult blocks first in one user
 * turn; consecutive messages of one role merge (Converse requires alternation); cache marks become
 * cachePoint blocks after the marked block (system, messages, tools). Claude models get thinking and
 * top_k in additionalModelRequestFields, and the matched stop sequence is asked back. response_format is
 * not sent: the adapter is wrapped in InstructedStructuredOutput (create-bedrock-adapter.ts).
 */
export function convertToBedrockRequest(request: ChatRequest, options: BedrockConversionOptions): BedrockConversion {
  const context: Context = { tools: new ToolIdentifiers(), providerId: options.providerId, documentNames: new Map(), historyToolNames: new Set() };
  const { system, messages } = convertMessages(request.messages, context);
  const body: BedrockRequestBody = { messages };
  if (system.length > 0) body.system = system;

  const historyHasToolBlocks = messages.some((message) => message.content.some((block) => 'toolUse' in block || 'toolResult' in block));
  const tools = toolConfig(request, context, historyHasToolBlocks);
  if (tools) body.toolConfig = tools;

  const claude = isClaudeModel(options.upstreamModel);
  const unsent: string[] = [...unsentParameters(claude ? 'bedrock-claude' : 'bedrock', request)];
  const inference: BedrockRequestBody['inferenceConfig'] = {};
  let maxTokens = request.maxOutputTokens ?? options.modelMaxOutputTokens;
  const model: Record<string, unknown> = {};
  let budget = claude ? thinkingBudget(request, maxTokens) : undefined;
  const forced = tools?.toolChoice !== undefined && !('auto' in tools.toolChoice);
  // Claude refuses thinking with a forced tool choice, and a tool loop whose last turn lacks its reasoning.
  if (budget !== undefined && (forced || toolLoopLacksReasoning(messages))) {
    budget = undefined;
    unsent.push('reasoning_effort');
  }
  if (budget !== undefined) {
    if (maxTokens === undefined || (budget >= maxTokens && request.maxOutputTokens === undefined && options.modelMaxOutputTokens === undefined)) {
      maxTokens = budget + DEFAULT_MAX_TOKENS;
    }
    model.thinking = { type: 'enabled', budget_tokens: budget };
  }
  if (maxTokens !== undefined) inference.maxTokens = maxTokens;
  const thinking = budget !== undefined;
  // With thinking on Claude takes only temperature 1, no top_k and top_p >= 0.95: others are left out, and named.
  if (request.temperature !== undefined) {
    if (!thinking || request.temperature === 1) inference.temperature = claude ? Math.min(Math.max(request.temperature, 0), MAX_TEMPERATURE) : request.temperature;
    else unsent.push('temperature');
  }
  if (request.topP !== undefined) {
    if (!thinking || request.topP >= MIN_TOP_P_WITH_THINKING) inference.topP = request.topP;
    else unsent.push('top_p');
  }
  if (request.topK !== undefined && claude) {
    if (!thinking) model.top_k = request.topK;
    else unsent.push('top_k');
  }
  const stops = request.stop.filter(hasText);
  if (stops.length < request.stop.length) unsent.push('stop');
  if (stops.length > 0) {
    inference.stopSequences = stops;
    if (claude) body.additionalModelResponseFieldPaths = ['/stop_sequence'];
  }
  if (Object.keys(inference).length > 0) body.inferenceConfig = inference;
  // Anthropic betas (the allowlisted `anthropic-beta` values the edge kept): Claude's request body takes
  // them as `anthropic_beta`, which Converse passes on from additionalModelRequestFields. Other models
  // have no such field (anthropic-beta is named: unsentParameters).
  if (claude && request.anthropicBeta) {
    // The edge kept only allowlisted values; anything else here is still never sent, and named.
    const { betas, droppedSome } = anthropicBetas(request.anthropicBeta);
    if (betas.length > 0) model.anthropic_beta = betas;
    if (droppedSome) unsent.push('anthropic-beta');
  }

  const extra = extraFields(request);
  if (extra) {
    for (const [field, value] of Object.entries(extra)) {
      if (field === 'additionalModelRequestFields' && value && typeof value === 'object') Object.assign(model, value);
      else if (CONVERSE_FIELDS.has(field)) body[field] = value;
      else if (!(field in model)) model[field] = value;
    }
  }
  if (Object.keys(model).length > 0) body.additionalModelRequestFields = model;
  return { body, tools: context.tools, unsent };
}
