import { createHmac, randomBytes } from 'node:crypto';

// Request checks of the fake Bedrock Converse API (fake-bedrock-upstream.ts); not part of the package's exports.
// Shapes checked against aws/aws-sdk-js-v3 clients/client-bedrock-runtime/src/models (models_0.ts:
// ConverseRequest, Message, ContentBlock, SystemContentBlock, ToolConfiguration, ToolSpecification,
// ToolChoice, ToolResultBlock, DocumentBlock, ImageBlock, CachePointBlock, ReasoningContentBlock,
// InferenceConfiguration; enums.ts: ImageFormat, DocumentFormat, CachePointType, ToolResultStatus,
// ConversationRole). The refusal messages follow the ones the service returns (ValidationException).

/** A request the API refuses: 400 ValidationException with this message. */
export class ValidationError extends Error {}

const fail = (message: string): never => {
  throw new ValidationError(message);
};

const REQUEST_FIELDS = new Set([
  'messages', 'system', 'inferenceConfig', 'toolConfig', 'guardrailConfig', 'additionalModelRequestFields',
  'promptVariables', 'additionalModelResponseFieldPaths', 'requestMetadata', 'performanceConfig', 'serviceTier',
]);
const INFERENCE_FIELDS = new Set(['maxTokens', 'temperature', 'topP', 'stopSequences']);
const BLOCK_MEMBERS = new Set([
  'text', 'image', 'document', 'video', 'toolUse', 'toolResult', 'guardContent', 'cachePoint', 'reasoningContent', 'citationsContent', 'searchResult',
]);
const SYSTEM_MEMBERS = new Set(['text', 'guardContent', 'cachePoint']);
const IMAGE_FORMATS = new Set(['png', 'jpeg', 'gif', 'webp']);
const DOCUMENT_FORMATS = new Set(['pdf', 'csv', 'doc', 'docx', 'xls', 'xlsx', 'html', 'txt', 'md']);
const CACHE_TTLS = new Set(['5m', '1h']);
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const TOOL_USE_ID = /^[a-zA-Z0-9_-]{1,64}$/;
/** DocumentBlock.name: letters, digits, single whitespace, hyphens, parentheses, square brackets. */
const DOCUMENT_NAME = /^(?:[A-Za-z0-9\-()[\]]|\s(?!\s))+$/;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

const isObject = (value: unknown): value is Record<string, any> => typeof value === 'object' && value !== null && !Array.isArray(value);

function onlyKeys(value: Record<string, unknown>, allowed: Set<string>, where: string) {
  for (const key of Object.keys(value)) if (!allowed.has(key)) fail(`Malformed input request: ${where}: extraneous key [${key}] is not permitted, please reformat your input and try again.`);
}

/** The one member a union value (ContentBlock, ToolChoice, ...) sets. */
function memberOf(value: unknown, allowed: Set<string>, where: string): [string, any] {
  if (!isObject(value)) return fail(`${where} must be an object`);
  const keys = Object.keys(value);
  if (keys.length !== 1) fail(`${where} must set exactly one member, found ${keys.length}`);
  const key = keys[0]!;
  if (!allowed.has(key)) fail(`Malformed input request: ${where}: extraneous key [${key}] is not permitted, please reformat your input and try again.`);
  return [key, value[key]];
}

function checkCachePoint(point: any, where: string) {
  if (!isObject(point)) fail(`${where}.cachePoint must be an object`);
  onlyKeys(point, new Set(['type', 'ttl']), `${where}.cachePoint`);
  if (point.type !== 'default') fail(`Value '${String(point.type)}' at '${where}.cachePoint.type' failed to satisfy constraint: Member must satisfy enum value set: [default]`);
  if (point.ttl !== undefined && !CACHE_TTLS.has(point.ttl)) {
    fail(`Value '${String(point.ttl)}' at '${where}.cachePoint.ttl' failed to satisfy constraint: Member must satisfy enum value set: [5m, 1h]`);
  }
}

function checkBytes(source: any, where: string) {
  if (!isObject(source)) return fail(`${where}.source is required`);
  const [kind, value] = memberOf(source, new Set(['bytes', 's3Location', 'text']), `${where}.source`);
  if (kind === 'bytes' && (typeof value !== 'string' || value.length === 0 || !BASE64.test(value))) fail(`${where}.source.bytes must be base64 data`);
}

export interface ReasoningSigner {
  sign(text: string): string;
  redacted(): string;
  acceptsRedacted(data: string): boolean;
}

/** Signs reasoning text with a key of this fake instance, and issues redacted content only it accepts back. */
export function createReasoningSigner(): ReasoningSigner {
  const key = randomBytes(32);
  const issued = new Set<string>();
  return {
    sign: (text) => createHmac('sha256', key).update(text).digest('base64'),
    redacted: () => {
      const data = randomBytes(48).toString('base64');
      issued.add(data);
      return data;
    },
    acceptsRedacted: (data) => issued.has(data),
  };
}

interface Checked {
  /** Tool names toolConfig declares. */
  toolNames: Set<string>;
  thinkingBudget: number | undefined;
}

function checkBlock(block: unknown, where: string, role: string, signer: ReasoningSigner): [string, any] {
  const [kind, value] = memberOf(block, BLOCK_MEMBERS, where);
  switch (kind) {
    case 'text':
      if (typeof value !== 'string') fail(`${where}.text must be a string`);
      if (value.trim() === '') fail(`The text field in the ContentBlock object at ${where} is blank. Add text to the text field, and try again.`);
      break;
    case 'image':
      if (!isObject(value)) fail(`${where}.image must be an object`);
      onlyKeys(value, new Set(['format', 'source']), `${where}.image`);
      if (!IMAGE_FORMATS.has(value.format)) fail(`Value '${String(value.format)}' at '${where}.image.format' failed to satisfy constraint: Member must satisfy enum value set: [png, jpeg, gif, webp]`);
      checkBytes(value.source, `${where}.image`);
      break;
    case 'document':
      if (!isObject(value)) fail(`${where}.document must be an object`);
      onlyKeys(value, new Set(['format', 'name', 'source', 'context', 'citations']), `${where}.document`);
      if (value.format !== undefined && !DOCUMENT_FORMATS.has(value.format)) fail(`Value '${String(value.format)}' at '${where}.document.format' failed to satisfy constraint`);
      if (typeof value.name !== 'string' || !DOCUMENT_NAME.test(value.name)) {
        fail(`The format of the value at ${where}.document.name is invalid. Provide a name that contains only alphanumeric characters, whitespace characters (no more than one in a row), hyphens, parentheses, and square brackets.`);
      }
      checkBytes(value.source, `${where}.document`);
      break;
    case 'toolUse':
      if (role !== 'assistant') fail(`${where}: toolUse blocks are only allowed in assistant messages`);
      if (!isObject(value)) fail(`${where}.toolUse must be an object`);
      onlyKeys(value, new Set(['toolUseId', 'name', 'input', 'type']), `${where}.toolUse`);
      if (typeof value.toolUseId !== 'string' || !TOOL_USE_ID.test(value.toolUseId)) fail(`Value at '${where}.toolUse.toolUseId' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+`);
      if (typeof value.name !== 'string' || !TOOL_NAME.test(value.name)) fail(`Value at '${where}.toolUse.name' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+`);
      if (!isObject(value.input)) fail(`${where}.toolUse.input must be a JSON object`);
      break;
    case 'toolResult': {
      if (role !== 'user') fail(`${where}: toolResult blocks are only allowed in user messages`);
      if (!isObject(value)) fail(`${where}.toolResult must be an object`);
      onlyKeys(value, new Set(['toolUseId', 'content', 'status', 'type']), `${where}.toolResult`);
      if (typeof value.toolUseId !== 'string' || !TOOL_USE_ID.test(value.toolUseId)) fail(`Value at '${where}.toolResult.toolUseId' failed to satisfy constraint`);
      if (!Array.isArray(value.content)) fail(`${where}.toolResult.content is required`);
      value.content.forEach((part: unknown, index: number) => {
        const [member, inner] = memberOf(part, new Set(['json', 'text', 'image', 'document', 'video', 'searchResult']), `${where}.toolResult.content.${index}`);
        if (member === 'text' && typeof inner !== 'string') fail(`${where}.toolResult.content.${index}.text must be a string`);
        if (member === 'image' || member === 'document') checkBlock({ [member]: inner }, `${where}.toolResult.content.${index}`, role, signer);
      });
      if (value.status !== undefined && value.status !== 'success' && value.status !== 'error') fail(`Value at '${where}.toolResult.status' failed to satisfy constraint: Member must satisfy enum value set: [success, error]`);
      break;
    }
    case 'cachePoint':
      checkCachePoint(value, where);
      break;
    case 'reasoningContent': {
      if (role !== 'assistant') fail(`${where}: reasoningContent blocks are only allowed in assistant messages`);
      const [member, inner] = memberOf(value, new Set(['reasoningText', 'redactedContent']), `${where}.reasoningContent`);
      if (member === 'reasoningText') {
        if (!isObject(inner)) return fail(`${where}.reasoningContent.reasoningText must be an object`);
        onlyKeys(inner, new Set(['text', 'signature']), `${where}.reasoningContent.reasoningText`);
        if (typeof inner.text !== 'string') fail(`${where}.reasoningContent.reasoningText.text is required`);
        if (inner.signature !== signer.sign(inner.text)) fail(`${where}.reasoningContent.reasoningText: Invalid signature in thinking block`);
      } else if (typeof inner !== 'string' || !signer.acceptsRedacted(inner)) {
        fail(`${where}.reasoningContent.redactedContent: Invalid redacted thinking data`);
      }
      break;
    }
    default:
      break;
  }
  return [kind, value];
}

function checkToolConfig(config: unknown): Set<string> {
  if (!isObject(config)) return fail('toolConfig must be an object');
  onlyKeys(config, new Set(['tools', 'toolChoice']), 'toolConfig');
  if (!Array.isArray(config.tools) || config.tools.length === 0) fail('toolConfig.tools must hold at least one tool');
  const names = new Set<string>();
  config.tools.forEach((tool: unknown, index: number) => {
    const where = `toolConfig.tools.${index}`;
    const [kind, value] = memberOf(tool, new Set(['toolSpec', 'cachePoint', 'systemTool']), where);
    if (kind === 'cachePoint') return checkCachePoint(value, where);
    if (kind !== 'toolSpec') return;
    if (!isObject(value)) fail(`${where}.toolSpec must be an object`);
    onlyKeys(value, new Set(['name', 'description', 'inputSchema', 'strict']), `${where}.toolSpec`);
    if (typeof value.name !== 'string' || !TOOL_NAME.test(value.name)) fail(`Value at '${where}.toolSpec.name' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+`);
    if (names.has(value.name)) fail(`The toolConfig field has duplicate tool names: ${value.name}`);
    names.add(value.name);
    if (value.description !== undefined && (typeof value.description !== 'string' || value.description === '')) fail(`${where}.toolSpec.description must be a non-empty string`);
    const [schemaKind, schema] = memberOf(value.inputSchema, new Set(['json']), `${where}.toolSpec.inputSchema`);
    if (schemaKind === 'json' && (!isObject(schema) || schema.type !== 'object')) fail(`${where}.toolSpec.inputSchema.json must be a JSON schema of type object`);
  });
  if (config.toolChoice !== undefined) {
    const [kind, value] = memberOf(config.toolChoice, new Set(['auto', 'any', 'tool']), 'toolConfig.toolChoice');
    if (kind === 'tool' && (!isObject(value) || !names.has(value.name))) fail(`toolConfig.toolChoice.tool.name must name a tool of toolConfig.tools`);
    if (kind !== 'tool' && (!isObject(value) || Object.keys(value).length > 0)) fail(`toolConfig.toolChoice.${kind} must be an empty object`);
  }
  return names;
}

function checkInference(config: unknown): number | undefined {
  if (!isObject(config)) return fail('inferenceConfig must be an object');
  onlyKeys(config, INFERENCE_FIELDS, 'inferenceConfig');
  if (config.maxTokens !== undefined && (!Number.isInteger(config.maxTokens) || config.maxTokens < 1)) fail(`Value at 'inferenceConfig.maxTokens' failed to satisfy constraint: Member must have value greater than or equal to 1`);
  for (const field of ['temperature', 'topP']) {
    const value = config[field];
    if (value !== undefined && (typeof value !== 'number' || value < 0 || value > 1)) fail(`Value at 'inferenceConfig.${field}' failed to satisfy constraint: Member must have value less than or equal to 1`);
  }
  if (config.stopSequences !== undefined && (!Array.isArray(config.stopSequences) || config.stopSequences.some((stop: unknown) => typeof stop !== 'string' || stop === ''))) {
    fail('inferenceConfig.stopSequences must be non-empty strings');
  }
  return config.maxTokens;
}

/**
 * Beta flags the fake's Claude models know (Bedrock documents `anthropic_beta` as a list of Anthropic
 * beta names in the Claude request body; Converse passes additionalModelRequestFields into that body).
 * Bedrock answers another flag with `invalid beta flag`.
 */
const KNOWN_BETAS = new Set([
  'computer-use-2024-10-22', 'computer-use-2025-01-24', 'token-efficient-tools-2025-02-19', 'interleaved-thinking-2025-05-14',
  'output-128k-2025-02-19', 'dev-full-thinking-2025-05-14', 'context-1m-2025-08-07', 'context-management-2025-06-27',
  'effort-2025-11-24', 'tool-search-tool-2025-10-19', 'tool-examples-2025-10-29', 'fine-grained-tool-streaming-2025-05-14',
]);

/** `anthropic_beta`: Claude models only, a list of known flag strings. */
function checkAnthropicBeta(value: unknown, modelId: string): void {
  // Other models' request bodies have no such key (Nova: `extraneous key [anthropic_beta] is not permitted`).
  if (modelId !== '' && !/anthropic\.claude/.test(modelId)) fail('Malformed input request: extraneous key [anthropic_beta] is not permitted, please reformat your input and try again.');
  if (!Array.isArray(value) || value.some((flag) => typeof flag !== 'string')) fail('Malformed input request: anthropic_beta must be an array of strings');
  if ((value as string[]).some((flag) => !KNOWN_BETAS.has(flag))) fail('invalid beta flag');
}

/**
 * Checks a Converse body the way the service does where adapters typically go wrong, and throws a
 * ValidationError for what it refuses: unknown fields, roles and alternation, blank text, content block
 * unions, document names with '.', image / document formats, cachePoint type and ttl, tool names and ids,
 * toolUse / toolResult pairing, `toolConfig` missing while the history holds tool blocks, tool choice
 * naming an undeclared tool, reasoning it did not sign, Claude's thinking budget rules.
 */
export function checkConverseBody(body: unknown, signer: ReasoningSigner, modelId = ''): Checked {
  if (!isObject(body)) return fail('Malformed input request: the body must be a JSON object');
  onlyKeys(body, REQUEST_FIELDS, 'body');
  const toolNames = body.toolConfig !== undefined ? checkToolConfig(body.toolConfig) : new Set<string>();
  const maxTokens = body.inferenceConfig !== undefined ? checkInference(body.inferenceConfig) : undefined;
  if (body.system !== undefined) {
    if (!Array.isArray(body.system)) fail('system must be a list');
    body.system.forEach((block: unknown, index: number) => {
      const [kind, value] = memberOf(block, SYSTEM_MEMBERS, `system.${index}`);
      if (kind === 'text' && (typeof value !== 'string' || value.trim() === '')) fail(`The text field in the SystemContentBlock object at system.${index} is blank.`);
      if (kind === 'cachePoint') checkCachePoint(value, `system.${index}`);
    });
  }
  if (!Array.isArray(body.messages) || body.messages.length === 0) fail('messages: A conversation must start with a user message. Try again with a conversation that starts with a user message.');
  let hasToolBlocks = false;
  let pendingToolUses: Set<string> | undefined;
  body.messages.forEach((message: unknown, index: number) => {
    const where = `messages.${index}`;
    if (!isObject(message)) return fail(`${where} must be an object`);
    onlyKeys(message, new Set(['role', 'content']), where);
    if (message.role !== 'user' && message.role !== 'assistant') fail(`Value '${String(message.role)}' at '${where}.role' failed to satisfy constraint: Member must satisfy enum value set: [user, assistant]`);
    if (index === 0 && message.role !== 'user') fail('A conversation must start with a user message. Try again with a conversation that starts with a user message.');
    if (index > 0 && body.messages[index - 1].role === message.role) {
      fail('A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.');
    }
    if (!Array.isArray(message.content) || message.content.length === 0) fail(`The content field in the Message object at ${where} is empty. Add a ContentBlock object to the content field and try again.`);
    const toolUses = new Set<string>();
    const answered = new Set<string>();
    message.content.forEach((block: unknown, blockIndex: number) => {
      const [kind, value] = checkBlock(block, `${where}.content.${blockIndex}`, message.role, signer);
      if (kind === 'toolUse') { hasToolBlocks = true; toolUses.add(value.toolUseId); }
      if (kind === 'toolResult') {
        hasToolBlocks = true;
        if (!pendingToolUses?.has(value.toolUseId)) {
          fail(`${where}.content.${blockIndex}: The toolResult blocks at ${where}.content don't match the toolUse blocks of the previous turn (unknown toolUseId ${value.toolUseId}).`);
        }
        answered.add(value.toolUseId);
      }
    });
    if (message.role === 'user' && pendingToolUses && pendingToolUses.size > 0) {
      for (const id of pendingToolUses) {
        if (!answered.has(id)) fail(`Expected toolResult blocks at ${where}.content for the following Ids: ${id}`);
      }
    }
    pendingToolUses = message.role === 'assistant' ? toolUses : undefined;
  });
  if (hasToolBlocks && body.toolConfig === undefined) {
    fail('The toolConfig field must be defined when using toolUse and toolResult content blocks.');
  }
  let thinkingBudget: number | undefined;
  const extra = body.additionalModelRequestFields;
  if (extra !== undefined && !isObject(extra)) fail('additionalModelRequestFields must be a JSON object');
  if (isObject(extra) && extra.anthropic_beta !== undefined) checkAnthropicBeta(extra.anthropic_beta, modelId);
  if (isObject(extra) && isObject(extra.thinking) && extra.thinking.type === 'enabled') {
    const budget = extra.thinking.budget_tokens;
    if (!Number.isInteger(budget) || budget < 1024) fail('thinking.budget_tokens: Input should be greater than or equal to 1024');
    if (maxTokens !== undefined && budget >= maxTokens) fail('`max_tokens` must be greater than `thinking.budget_tokens`');
    const choice = body.toolConfig?.toolChoice;
    if (choice && !('auto' in choice)) fail('Thinking may not be enabled when tool_choice forces tool use.');
    thinkingBudget = budget;
  }
  return { toolNames, thinkingBudget };
}
