import { createHmac, randomBytes } from 'node:crypto';

/*
 * How the fake Anthropic provider (fake-anthropic-upstream.ts) checks a Messages request body the way
 * the API does where adapters typically go wrong, and signs the thinking it emits so it can refuse
 * thinking it did not sign.
 */

const ID_PATTERN = /^[a-zA-Z0-9_-]+$/;
const TOOL_NAME_PATTERN = /^[a-zA-Z0-9_-]{1,64}$/;

// Request fields of both API versions (2023-06-01 and 2026-10-21); anything else is refused, as the API does.
const REQUEST_FIELDS = new Set([
  'model', 'max_tokens', 'messages', 'system', 'tools', 'tool_choice', 'thinking', 'stop_sequences',
  'temperature', 'top_p', 'top_k', 'metadata', 'stream', 'service_tier', 'container', 'inference_geo',
  'output_config', 'cache_control', 'speed', 'diagnostics', 'user_profile_id', 'workspace_id',
  'context_management', 'mcp_servers',
]);
const TOOL_FIELDS = new Set([
  'type', 'name', 'description', 'input_schema', 'cache_control', 'strict', 'allowed_callers', 'defer_loading',
  'eager_input_streaming', 'input_examples',
]);
const BLOCK_FIELDS = new Map<string, Set<string>>([
  ['text', new Set(['type', 'text', 'cache_control', 'citations'])],
  ['image', new Set(['type', 'source', 'cache_control', 'transformations'])],
  ['document', new Set(['type', 'source', 'cache_control', 'citations', 'context', 'title'])],
  ['search_result', new Set(['type', 'source', 'title', 'content', 'cache_control', 'citations'])],
  ['tool_use', new Set(['type', 'id', 'name', 'input', 'cache_control', 'caller', 'toolset_name'])],
  ['tool_result', new Set(['type', 'tool_use_id', 'content', 'is_error', 'cache_control', 'toolset_name'])],
  ['thinking', new Set(['type', 'thinking', 'signature'])],
  ['redacted_thinking', new Set(['type', 'data'])],
]);
const USER_BLOCKS = new Set(['text', 'image', 'document', 'search_result', 'tool_result']);
const OUTPUT_CONFIG_FIELDS = new Set(['effort', 'format']);
const EFFORTS = new Set(['low', 'medium', 'high', 'xhigh', 'max']);
const ASSISTANT_BLOCKS = new Set(['text', 'tool_use', 'thinking', 'redacted_thinking']);
const TOOL_RESULT_CONTENT_BLOCKS = new Set(['text', 'image', 'document', 'search_result']);
const IMAGE_MEDIA_TYPES = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);

/** A request the API refuses with 400 invalid_request_error; the message names the offending path. */
export class InvalidRequest extends Error {}

function refuse(message: string): never {
  throw new InvalidRequest(message);
}

const isObject = (value: unknown): value is Record<string, any> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function refuseExtraFields(value: Record<string, unknown>, allowed: Set<string>, path: string) {
  for (const key of Object.keys(value)) {
    if (!allowed.has(key)) refuse(`${path ? `${path}.` : ''}${key}: Extra inputs are not permitted`);
  }
}

function checkText(block: Record<string, any>, path: string) {
  if (typeof block.text !== 'string') refuse(`${path}.text: Input should be a valid string`);
  if (block.text.trim() === '') refuse(`${path}: text content blocks must contain non-whitespace text`);
}

function checkSource(block: Record<string, any>, path: string) {
  const source = block.source;
  if (!isObject(source)) refuse(`${path}.source: Field required`);
  const kind = source.type;
  const fine =
    block.type === 'image'
      ? (kind === 'base64' && IMAGE_MEDIA_TYPES.has(source.media_type) && typeof source.data === 'string') ||
        (kind === 'url' && typeof source.url === 'string') ||
        (kind === 'file' && typeof source.file_id === 'string')
      : (kind === 'base64' && source.media_type === 'application/pdf' && typeof source.data === 'string') ||
        (kind === 'text' && source.media_type === 'text/plain' && typeof source.data === 'string') ||
        (kind === 'url' && typeof source.url === 'string') ||
        (kind === 'content' && (typeof source.content === 'string' || Array.isArray(source.content))) ||
        (kind === 'file' && typeof source.file_id === 'string');
  if (!fine) refuse(`${path}.source: invalid ${block.type} source ${JSON.stringify(kind)} (or its media_type / data)`);
}

interface Turn {
  role: 'user' | 'assistant';
  /** Index of the turn's first message: consecutive messages of one role form one turn, as in the API. */
  firstIndex: number;
  blocks: { block: Record<string, any>; path: string }[];
}

/** Signs the thinking a fake instance emits (a per-instance key) and recognises it when it comes back. */
export interface ThinkingSigner {
  signThinking(thinking: string): string;
  redactedThinkingData(): string;
  isOwnRedactedData(data: string): boolean;
}

export function createThinkingSigner(): ThinkingSigner {
  const secret = randomBytes(32);

  const signThinking = (thinking: string) =>
    createHmac('sha256', secret).update('thinking\0').update(thinking).digest('base64');
  const macOfNonce = (nonce: Buffer) => createHmac('sha256', secret).update('redacted\0').update(nonce).digest();
  const redactedThinkingData = () => {
    const nonce = randomBytes(24);
    return Buffer.concat([nonce, macOfNonce(nonce)]).toString('base64');
  };
  const isOwnRedactedData = (data: string) => {
    const bytes = Buffer.from(data, 'base64');
    return bytes.length === 56 && macOfNonce(bytes.subarray(0, 24)).equals(bytes.subarray(24));
  };
  return { signThinking, redactedThinkingData, isOwnRedactedData };
}

/**
 * The body check: throws InvalidRequest naming the offending path, as the API's 400
 * invalid_request_error does. Thinking blocks must carry `signer`'s signatures.
 */
/** Breakpoints the API takes in one request (tools, system and message blocks together). */
const MAX_CACHE_BREAKPOINTS = 4;

function checkCacheMark(mark: unknown, path: string) {
  if (!isObject(mark) || mark.type !== 'ephemeral') refuse(`${path}.type: Input should be 'ephemeral'`);
  refuseExtraFields(mark, new Set(['type', 'ttl']), path);
  if (mark.ttl !== undefined && mark.ttl !== '5m' && mark.ttl !== '1h') refuse(`${path}.ttl: Input should be '5m' or '1h'`);
}

/** Every `cache_control` is `{type: 'ephemeral', ttl?: '5m' | '1h'}`, and at most four blocks carry one. */
function checkCacheControl(body: Record<string, any>) {
  if (body.cache_control !== undefined) checkCacheMark(body.cache_control, 'cache_control');
  let marks = 0;
  const visit = (block: unknown, path: string) => {
    if (!isObject(block)) return;
    if (block.cache_control !== undefined) {
      checkCacheMark(block.cache_control, `${path}.cache_control`);
      marks++;
    }
    if (Array.isArray(block.content)) block.content.forEach((inner: unknown, index: number) => visit(inner, `${path}.content.${index}`));
  };
  (Array.isArray(body.tools) ? body.tools : []).forEach((tool: unknown, index: number) => visit(tool, `tools.${index}`));
  (Array.isArray(body.system) ? body.system : []).forEach((block: unknown, index: number) => visit(block, `system.${index}`));
  (body.messages as unknown[]).forEach((message, index) => {
    const content = isObject(message) ? message.content : undefined;
    if (Array.isArray(content)) content.forEach((block: unknown, inner: number) => visit(block, `messages.${index}.content.${inner}`));
  });
  if (marks > MAX_CACHE_BREAKPOINTS) refuse(`A maximum of ${MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found ${marks}.`);
}

export function anthropicBodyValidator(signer: ThinkingSigner): (body: any) => void {
  const { signThinking, isOwnRedactedData } = signer;

  function validateBody(body: any) {
    if (!isObject(body)) refuse('body: Input should be a valid dictionary');
    refuseExtraFields(body, REQUEST_FIELDS, '');
    if (typeof body.model !== 'string' || body.model === '') refuse('model: Field required');
    if (body.max_tokens === undefined) refuse('max_tokens: Field required');
    if (!Number.isInteger(body.max_tokens) || body.max_tokens < 1) refuse('max_tokens: Input should be an integer >= 1');
    if (body.stream !== undefined && typeof body.stream !== 'boolean') refuse('stream: Input should be a valid boolean');
    checkSampling(body);
    if (body.metadata !== undefined) {
      if (!isObject(body.metadata)) refuse('metadata: Input should be a valid dictionary');
      refuseExtraFields(body.metadata, new Set(['user_id']), 'metadata');
    }
    if (body.stop_sequences !== undefined &&
        (!Array.isArray(body.stop_sequences) || body.stop_sequences.some((entry: unknown) => typeof entry !== 'string'))) {
      refuse('stop_sequences: Input should be a valid list of strings');
    }
    if (body.system !== undefined && typeof body.system !== 'string') {
      if (!Array.isArray(body.system)) refuse('system: Input should be a valid string or list of text blocks');
      body.system.forEach((block: unknown, index: number) => {
        const path = `system.${index}`;
        if (!isObject(block) || block.type !== 'text') refuse(`${path}.type: Input should be 'text'`);
        refuseExtraFields(block, BLOCK_FIELDS.get('text')!, path);
        checkText(block, path);
      });
    }
    checkOutputConfig(body.output_config);
    const toolNames = checkTools(body.tools);
    const thinkingOn = checkThinking(body);
    checkToolChoice(body.tool_choice, toolNames, thinkingOn);
    checkMessages(body.messages, thinkingOn);
    checkCacheControl(body);
  }

  function checkSampling(body: Record<string, any>) {
    const inRange = (value: unknown, low: number, high: number) => typeof value === 'number' && value >= low && value <= high;
    if (body.temperature !== undefined && !inRange(body.temperature, 0, 1)) refuse('temperature: Input should be between 0 and 1');
    if (body.top_p !== undefined && !inRange(body.top_p, 0, 1)) refuse('top_p: Input should be between 0 and 1');
    if (body.top_k !== undefined && !(Number.isInteger(body.top_k) && body.top_k >= 0)) refuse('top_k: Input should be an integer >= 0');
  }

  /** output_config: an effort level and/or a JSON-schema format, nothing else (as the API checks it). */
  function checkOutputConfig(config: unknown) {
    if (config === undefined) return;
    if (!isObject(config)) refuse('output_config: Input should be a valid dictionary');
    refuseExtraFields(config, OUTPUT_CONFIG_FIELDS, 'output_config');
    if (config.effort !== undefined && config.effort !== null && !EFFORTS.has(config.effort)) {
      refuse("output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'");
    }
  }

  function checkTools(tools: unknown): Set<string> {
    const names = new Set<string>();
    if (tools === undefined) return names;
    if (!Array.isArray(tools)) refuse('tools: Input should be a valid list');
    tools.forEach((tool: unknown, index: number) => {
      const path = `tools.${index}`;
      if (!isObject(tool)) refuse(`${path}: Input should be a valid dictionary`);
      if (typeof tool.name !== 'string' || !TOOL_NAME_PATTERN.test(tool.name)) {
        refuse(`${path}.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'`);
      }
      if (names.has(tool.name)) refuse('tools: Tool names must be unique.');
      names.add(tool.name);
      // Server tools (web search, bash, …) carry a versioned `type` and no schema; only custom tools are checked.
      if (tool.type !== undefined && tool.type !== null && tool.type !== 'custom') return;
      refuseExtraFields(tool, TOOL_FIELDS, path);
      if (!isObject(tool.input_schema)) refuse(`${path}.input_schema: Field required`);
      if (tool.input_schema.type !== 'object') refuse(`${path}.input_schema.type: Input should be 'object'`);
    });
    return names;
  }

  function checkThinking(body: Record<string, any>): boolean {
    const thinking = body.thinking;
    if (thinking === undefined) return false;
    if (!isObject(thinking) || !['enabled', 'disabled', 'adaptive'].includes(thinking.type)) {
      refuse("thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'");
    }
    if (thinking.type === 'disabled') return false;
    if (thinking.type === 'enabled') {
      if (!Number.isInteger(thinking.budget_tokens) || thinking.budget_tokens < 1024) {
        refuse('thinking.enabled.budget_tokens: Input should be greater than or equal to 1024');
      }
      if (thinking.budget_tokens >= body.max_tokens) refuse('`max_tokens` must be greater than `thinking.budget_tokens`');
    }
    if (body.temperature !== undefined && body.temperature !== 1) {
      refuse('`temperature` may only be set to 1 when thinking is enabled or in adaptive mode.');
    }
    if (body.top_k !== undefined) refuse('`top_k` must be unset when thinking is enabled or in adaptive mode.');
    if (body.top_p !== undefined && body.top_p < 0.95) {
      refuse('`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled or in adaptive mode.');
    }
    return true;
  }

  function checkToolChoice(choice: unknown, toolNames: Set<string>, thinkingOn: boolean) {
    if (choice === undefined) return;
    if (!isObject(choice) || !['auto', 'any', 'tool', 'none'].includes(choice.type)) {
      refuse("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'");
    }
    if (choice.type === 'tool' && typeof choice.name !== 'string') refuse('tool_choice.tool.name: Field required');
    if (choice.type === 'tool' && !toolNames.has(choice.name)) refuse(`tool_choice.tool.name: Tool '${choice.name}' not found in tools`);
    if (choice.type === 'any' && toolNames.size === 0) refuse('tool_choice: may only be specified while providing tools');
    if (thinkingOn && (choice.type === 'any' || choice.type === 'tool')) {
      refuse('Thinking may not be enabled when tool_choice forces tool use.');
    }
  }

  function checkMessages(messages: unknown, thinkingOn: boolean) {
    if (!Array.isArray(messages)) refuse('messages: Field required');
    if (messages.length === 0) refuse('messages: at least one message is required');
    const turns: Turn[] = [];
    messages.forEach((message: unknown, index: number) => {
      const path = `messages.${index}`;
      if (!isObject(message)) refuse(`${path}: Input should be a valid dictionary`);
      refuseExtraFields(message, new Set(['role', 'content']), path);
      if (message.role !== 'user' && message.role !== 'assistant') refuse(`${path}.role: Input should be 'user' or 'assistant'`);
      if (index === 0 && message.role !== 'user') refuse(`${path}.role: the first message must use the "user" role`);
      const isFinalAssistant = index === messages.length - 1 && message.role === 'assistant';
      const blocks = contentBlocks(message, path, isFinalAssistant);
      const previous = turns.at(-1);
      if (previous && previous.role === message.role) previous.blocks.push(...blocks);
      else turns.push({ role: message.role, firstIndex: index, blocks });
    });
    checkToolPairing(turns);
    if (thinkingOn) checkThinkingLeadsToolLoop(turns);
  }

  function contentBlocks(message: Record<string, any>, path: string, isFinalAssistant: boolean): Turn['blocks'] {
    const emptyContent = `${path}: all messages must have non-empty content except for the optional final assistant message`;
    if (typeof message.content === 'string') {
      if (message.content.trim() === '' && !(isFinalAssistant && message.content === '')) refuse(emptyContent);
      if (isFinalAssistant && /\s$/.test(message.content)) refuse('final assistant content cannot end with trailing whitespace');
      return [{ block: { type: 'text', text: message.content }, path: `${path}.content` }];
    }
    if (!Array.isArray(message.content)) refuse(`${path}.content: Input should be a valid string or list`);
    if (message.content.length === 0 && !isFinalAssistant) refuse(emptyContent);
    const allowed = message.role === 'user' ? USER_BLOCKS : ASSISTANT_BLOCKS;
    return message.content.map((block: unknown, index: number) => {
      const blockPath = `${path}.content.${index}`;
      if (!isObject(block) || !BLOCK_FIELDS.has(block.type)) {
        refuse(`${blockPath}.type: Input tag ${JSON.stringify(isObject(block) ? block.type : block)} does not match any of the expected tags`);
      }
      if (!allowed.has(block.type)) refuse(`${blockPath}: \`${block.type}\` blocks are not allowed in ${message.role} messages`);
      checkBlock(block, blockPath);
      if (isFinalAssistant && block.type === 'text' && index === message.content.length - 1 && /\s$/.test(block.text)) {
        refuse('final assistant content cannot end with trailing whitespace');
      }
      return { block, path: blockPath };
    });
  }

  function checkBlock(block: Record<string, any>, path: string) {
    refuseExtraFields(block, BLOCK_FIELDS.get(block.type)!, path);
    switch (block.type) {
      case 'text': return checkText(block, path);
      case 'image':
      case 'document': return checkSource(block, path);
      case 'search_result': return;
      case 'tool_use':
        if (typeof block.id !== 'string' || !ID_PATTERN.test(block.id)) refuse(`${path}.id: String should match pattern '^[a-zA-Z0-9_-]+$'`);
        if (typeof block.name !== 'string' || !TOOL_NAME_PATTERN.test(block.name)) {
          refuse(`${path}.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'`);
        }
        if (!isObject(block.input)) refuse(`${path}.input: Input should be a valid dictionary`);
        return;
      case 'tool_result':
        if (typeof block.tool_use_id !== 'string' || !ID_PATTERN.test(block.tool_use_id)) {
          refuse(`${path}.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'`);
        }
        if (block.is_error !== undefined && typeof block.is_error !== 'boolean') refuse(`${path}.is_error: Input should be a valid boolean`);
        if (block.content === undefined || typeof block.content === 'string') return;
        if (!Array.isArray(block.content)) refuse(`${path}.content: Input should be a valid string or list`);
        block.content.forEach((inner: unknown, index: number) => {
          const innerPath = `${path}.content.${index}`;
          if (!isObject(inner) || !TOOL_RESULT_CONTENT_BLOCKS.has(inner.type)) {
            refuse(`${innerPath}.type: Input tag ${JSON.stringify(isObject(inner) ? inner.type : inner)} does not match any of the expected tags`);
          }
          checkBlock(inner, innerPath);
        });
        return;
      case 'thinking':
        if (typeof block.thinking !== 'string') refuse(`${path}.thinking: Field required`);
        if (typeof block.signature !== 'string' || block.signature !== signThinking(block.thinking)) {
          refuse(`${path}: Invalid \`signature\` in \`thinking\` block`);
        }
        return;
      case 'redacted_thinking':
        if (typeof block.data !== 'string' || !isOwnRedactedData(block.data)) refuse(`${path}: Invalid \`data\` in \`redacted_thinking\` block`);
        return;
    }
  }

  function checkToolPairing(turns: Turn[]) {
    // Results first (the more specific complaint when both sides are wrong), then unanswered calls.
    turns.forEach((turn, position) => {
      if (turn.role !== 'user') return;
      const previous = turns[position - 1];
      const offered = new Set((previous?.blocks ?? []).filter(({ block }) => block.type === 'tool_use').map(({ block }) => block.id));
      let otherContentSeen = false;
      for (const { block, path } of turn.blocks) {
        if (block.type !== 'tool_result') { otherContentSeen = true; continue; }
        if (!offered.has(block.tool_use_id)) {
          refuse(`${path}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${block.tool_use_id}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`);
        }
        if (otherContentSeen) refuse(`${path}: \`tool_result\` blocks must come first in the user message, before any other content`);
      }
    });
    const seenToolUseIds = new Set<string>();
    turns.forEach((turn, position) => {
      if (turn.role !== 'assistant') return;
      const ids: string[] = [];
      for (const { block, path } of turn.blocks) {
        if (block.type !== 'tool_use') continue;
        if (seenToolUseIds.has(block.id)) refuse(`${path}: \`tool_use\` ids must be unique`);
        seenToolUseIds.add(block.id);
        ids.push(block.id);
      }
      const following = turns[position + 1];
      if (!following || ids.length === 0) return;
      const answered = new Set(following.blocks.filter(({ block }) => block.type === 'tool_result').map(({ block }) => block.tool_use_id));
      const missing = ids.filter((id) => !answered.has(id));
      if (missing.length > 0) {
        refuse(`messages.${following.firstIndex}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(', ')}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`);
      }
    });
  }

  // With thinking on, the assistant turn that opened the tool loop still being answered must start with the
  // (signed) thinking it was given, which is what adapters lose when they drop reasoning.
  function checkThinkingLeadsToolLoop(turns: Turn[]) {
    const last = turns.at(-1)!;
    if (last.role !== 'user' || !last.blocks.some(({ block }) => block.type === 'tool_result')) return;
    const assistant = turns.at(-2);
    const first = assistant?.blocks[0];
    if (!assistant || !first || first.block.type === 'thinking' || first.block.type === 'redacted_thinking') return;
    refuse(`${first.path}.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${first.block.type}\`. When \`thinking\` is enabled, a final \`assistant\` message must start with a thinking block (preceding the lastmost set of \`tool_use\` and \`tool_result\` blocks). To avoid this requirement, disable \`thinking\`.`);
  }

  return validateBody;
}
