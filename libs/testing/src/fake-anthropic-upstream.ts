import { createHmac, randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { approximateTokens, listenOnLoopback, receiveScripted, sleep, splitText } from './fake-upstream-support.js';
import type { FakeBehaviour, FakeUpstream, RecordedRequest } from './fake-upstream.js';

/**
 * Usage of one scripted answer: Anthropic's own counters, or the OpenAI-compatible fake's shape (so one
 * script drives both fakes), where `prompt_tokens` includes `cached_tokens` and becomes
 * `input_tokens = prompt_tokens - cached_tokens`, `cache_read_input_tokens = cached_tokens`.
 * `absent` leaves usage out of the JSON answer and of `message_start` / `message_delta` (the SDK's own
 * stream assembly cannot digest that; it is for testing a gateway's handling of a provider that omits it).
 */
export type FakeAnthropicUsage =
  | 'absent'
  | { input_tokens: number; output_tokens: number; cache_creation_input_tokens?: number; cache_read_input_tokens?: number }
  | { prompt_tokens: number; completion_tokens: number; cached_tokens?: number };

export interface FakeAnthropicToolCall {
  /** Default: `toolu_fake<request>_<index>`. */
  id?: string;
  name: string;
  /** The tool input as JSON text (what the OpenAI fake takes); streamed verbatim in pieces. Must parse
   *  for a non-streamed answer (else the connection is dropped). */
  arguments?: string;
  /** The tool input as a value; used when `arguments` is absent. */
  input?: unknown;
}

/**
 * One scripted answer of the fake Anthropic provider: every field of the OpenAI-compatible fake's
 * `FakeBehaviour` means the same here (a `FakeBehaviour` is a valid value), plus Anthropic's own.
 * A stream "chunk" is one `content_block_delta` event: `cutAfterChunks: N` delivers exactly N deltas
 * (with the `message_start` / `content_block_start` / `ping` events that precede them) and then destroys
 * the socket; N = the number of deltas cuts before the last `content_block_stop` and `message_delta` (no
 * final usage); 0 sends headers only. Requests the fake refuses (400/401/404) still use up a queued script.
 */
export interface FakeAnthropicBehaviour extends Omit<FakeBehaviour, 'usage' | 'toolCalls' | 'errorBody'> {
  /** Error body for `status` (default: Anthropic's `{type:"error", error:{type, message}, request_id}`). */
  errorBody?: unknown;
  /** `error.type` of the default error body (default: the API's type for the status). */
  errorType?: string;
  /** `retry-after` header (seconds) on a scripted 429 or 529 (default: 1 on 429, none on 529). */
  retryAfterSeconds?: number;
  toolCalls?: FakeAnthropicToolCall[];
  /** Anthropic `stop_reason`; OpenAI names are mapped (stop → end_turn, length → max_tokens,
   *  tool_calls → tool_use, content_filter → refusal). Default: tool_use with tool calls, else end_turn
   *  (stop_sequence when `stopSequence` is set). */
  finishReason?: string;
  /** Reports this stop sequence (`stop_reason: stop_sequence`). */
  stopSequence?: string;
  usage?: FakeAnthropicUsage;
  /** A signed thinking block first: its text, `true` for a default text, `false` for none even when the
   *  request enables thinking. Default: present when the request's `thinking.type` is enabled/adaptive. */
  thinking?: string | boolean;
  /** A `redacted_thinking` block (opaque data this instance can verify) before the text. */
  redactedThinking?: boolean;
  /** `error.type` of the in-stream error event of `streamErrorAfterChunks` (default: overloaded_error). */
  streamErrorType?: string;
}

export type FakeAnthropicScript = FakeAnthropicBehaviour | ((request: RecordedRequest) => FakeAnthropicBehaviour);

export interface FakeAnthropicUpstreamOptions {
  /** The only key accepted (`x-api-key`, or `authorization: Bearer`); default: any non-empty key. */
  apiKey?: string;
}

export interface FakeAnthropicUpstream extends FakeUpstream {
  /** The host root, as Anthropic's base URL: clients (and the SDK) append `/v1/messages`. */
  url: string;
  script(...behaviours: FakeAnthropicScript[]): void;
  setFallback(behaviour: FakeAnthropicScript): void;
  /** The signature this instance gives (and accepts for) a thinking block with this text. */
  signThinking(thinking: string): string;
  /** Fresh `redacted_thinking` data this instance accepts back. */
  redactedThinkingData(): string;
}

const DEFAULT_TEXT = 'Hello from the fake upstream.';
const DEFAULT_THINKING = 'The user greets me; a short friendly answer fits.';
const API_VERSIONS = new Set(['2023-06-01', '2026-10-21']);
const ID_PATTERN = /^[a-zA-Z0-9_-]+$/;
const TOOL_NAME_PATTERN = /^[a-zA-Z0-9_-]{1,64}$/;

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};

function errorTypeFor(status: number): string {
  return ERROR_TYPES[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
}

const STOP_REASONS = new Map([
  ['stop', 'end_turn'],
  ['length', 'max_tokens'],
  ['tool_calls', 'tool_use'],
  ['content_filter', 'refusal'],
]);

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
const ASSISTANT_BLOCKS = new Set(['text', 'tool_use', 'thinking', 'redacted_thinking']);
const TOOL_RESULT_CONTENT_BLOCKS = new Set(['text', 'image', 'document', 'search_result']);
const IMAGE_MEDIA_TYPES = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);

/** A request the API refuses with 400 invalid_request_error; the message names the offending path. */
class InvalidRequest extends Error {}

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

/**
 * An Anthropic Messages API provider on a real loopback HTTP server (POST /v1/messages, JSON and SSE),
 * scriptable per request like `startFakeUpstream` (same behaviour fields, same queue/fallback), which
 * validates requests the way the API does where adapters typically go wrong (required headers and
 * fields, unknown fields, roles, tool_use/tool_result pairing, tool ids and names, thinking signatures)
 * and answers those with 400 before any scripted behaviour but latency, stall and reset. It signs the
 * thinking it emits with a per-instance key and refuses thinking it did not sign.
 */
export async function startFakeAnthropicUpstream(options: FakeAnthropicUpstreamOptions = {}): Promise<FakeAnthropicUpstream> {
  const requests: RecordedRequest[] = [];
  const queue: FakeAnthropicScript[] = [];
  let fallback: FakeAnthropicScript = {};
  let answered = 0;
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

  async function handle(request: IncomingMessage, response: ServerResponse) {
    const { behaviour, raw, body } = await receiveScripted(request, requests, queue, fallback);
    const number = ++answered;
    const requestId = `req_fake${number}`;

    if (behaviour.latencyMs) await sleep(behaviour.latencyMs);
    if (behaviour.stall) return; // never answers; close() destroys the socket
    if (behaviour.reset) { request.socket.destroy(); return; }

    const path = (request.url ?? '').split('?')[0];
    if (request.method !== 'POST' || path !== '/v1/messages') {
      return sendError(response, requestId, 404, 'not_found_error', `Not found: ${request.method} ${path}`);
    }
    const refusal = refusalOf(request.headers, raw, body);
    if (refusal) return sendError(response, requestId, refusal.status, errorTypeFor(refusal.status), refusal.message);

    if (behaviour.status && behaviour.status >= 400) {
      const type = behaviour.errorType ?? errorTypeFor(behaviour.status);
      const retryAfter = behaviour.retryAfterSeconds ?? (behaviour.status === 429 ? 1 : undefined);
      return sendError(response, requestId, behaviour.status, type, `fake upstream error ${behaviour.status}`, behaviour.errorBody, retryAfter);
    }
    if (behaviour.replay) {
      response.writeHead(200, { 'content-type': behaviour.replay.contentType, 'request-id': requestId });
      response.end(behaviour.replay.body);
      return;
    }
    return answer(body, behaviour, number, requestId, response, request.socket);
  }

  function sendError(
    response: ServerResponse, requestId: string, status: number, type: string, message: string,
    body?: unknown, retryAfterSeconds?: number,
  ) {
    response.writeHead(status, {
      'content-type': 'application/json',
      'request-id': requestId,
      ...(retryAfterSeconds !== undefined ? { 'retry-after': String(retryAfterSeconds) } : {}),
    });
    response.end(JSON.stringify(body ?? { type: 'error', error: { type, message }, request_id: requestId }));
  }

  function refusalOf(headers: IncomingHttpHeaders, raw: string, body: any): { status: number; message: string } | undefined {
    const version = headers['anthropic-version'];
    if (!version) return { status: 400, message: 'anthropic-version: header is required' };
    if (!API_VERSIONS.has(String(version))) return { status: 400, message: `anthropic-version: invalid version ${String(version)}` };
    const bearer = /^Bearer (.+)$/.exec(headers.authorization ?? '')?.[1];
    const key = (headers['x-api-key'] as string | undefined) || bearer;
    if (!key) return { status: 401, message: 'x-api-key header is required' };
    if (options.apiKey !== undefined && key !== options.apiKey) return { status: 401, message: 'invalid x-api-key' };
    if (body === undefined) return { status: 400, message: raw ? 'There was an error parsing the body: invalid JSON' : 'body: Field required' };
    try {
      validateBody(body);
      return undefined;
    } catch (error) {
      if (error instanceof InvalidRequest) return { status: 400, message: error.message };
      throw error;
    }
  }

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
    const toolNames = checkTools(body.tools);
    const thinkingOn = checkThinking(body);
    checkToolChoice(body.tool_choice, toolNames, thinkingOn);
    checkMessages(body.messages, thinkingOn);
  }

  function checkSampling(body: Record<string, any>) {
    const inRange = (value: unknown, low: number, high: number) => typeof value === 'number' && value >= low && value <= high;
    if (body.temperature !== undefined && !inRange(body.temperature, 0, 1)) refuse('temperature: Input should be between 0 and 1');
    if (body.top_p !== undefined && !inRange(body.top_p, 0, 1)) refuse('top_p: Input should be between 0 and 1');
    if (body.top_k !== undefined && !(Number.isInteger(body.top_k) && body.top_k >= 0)) refuse('top_k: Input should be an integer >= 0');
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

  function promptText(body: any): string {
    const parts: string[] = [];
    const collect = (content: unknown) => {
      if (typeof content === 'string') { parts.push(content); return; }
      if (!Array.isArray(content)) return;
      for (const block of content) {
        if (typeof block?.text === 'string') parts.push(block.text);
        else if (block?.type === 'tool_use') parts.push(JSON.stringify(block.input));
        else if (block?.type === 'tool_result') collect(block.content);
      }
    };
    collect(body.system);
    for (const message of body.messages) collect(message.content);
    return parts.join('\n');
  }

  function usageFor(body: any, behaviour: FakeAnthropicBehaviour, outputText: string) {
    const scripted = behaviour.usage;
    if (scripted === 'absent') return undefined;
    let input: number, output: number, cacheCreation = 0, cacheRead = 0;
    if (scripted && 'input_tokens' in scripted) {
      input = scripted.input_tokens;
      output = scripted.output_tokens;
      cacheCreation = scripted.cache_creation_input_tokens ?? 0;
      cacheRead = scripted.cache_read_input_tokens ?? 0;
    } else if (scripted) {
      cacheRead = scripted.cached_tokens ?? 0;
      input = scripted.prompt_tokens - cacheRead;
      output = scripted.completion_tokens;
    } else {
      input = approximateTokens(promptText(body));
      output = approximateTokens(outputText);
    }
    return {
      input_tokens: input,
      cache_creation_input_tokens: cacheCreation,
      cache_read_input_tokens: cacheRead,
      cache_creation: { ephemeral_5m_input_tokens: cacheCreation, ephemeral_1h_input_tokens: 0 },
      output_tokens: output,
      service_tier: 'standard',
    };
  }

  async function answer(
    body: any, behaviour: FakeAnthropicBehaviour, number: number, requestId: string, response: ServerResponse, socket: Socket,
  ) {
    const id = `msg_fake${number}`;
    const model = body.model;
    const pieces = behaviour.chunkCount ?? 3;
    const toolCalls = behaviour.toolCalls ?? [];
    const text = behaviour.text ?? DEFAULT_TEXT;
    const thinkingRequested = body.thinking?.type === 'enabled' || body.thinking?.type === 'adaptive';
    const thinking =
      typeof behaviour.thinking === 'string' ? behaviour.thinking
      : behaviour.thinking === true || (behaviour.thinking === undefined && thinkingRequested) ? DEFAULT_THINKING
      : undefined;

    // Each block: its final form (JSON answer), its empty form (content_block_start) and its deltas.
    const blocks: { final: Record<string, unknown>; start: Record<string, unknown>; deltas: Record<string, unknown>[] }[] = [];
    if (thinking !== undefined) {
      const signature = signThinking(thinking);
      blocks.push({
        final: { type: 'thinking', thinking, signature },
        start: { type: 'thinking', thinking: '', signature: '' },
        deltas: [
          ...splitText(thinking, pieces).map((piece) => ({ type: 'thinking_delta', thinking: piece })),
          { type: 'signature_delta', signature },
        ],
      });
    }
    if (behaviour.redactedThinking) {
      const redacted = { type: 'redacted_thinking', data: redactedThinkingData() };
      blocks.push({ final: redacted, start: redacted, deltas: [] });
    }
    if (toolCalls.length === 0 || behaviour.text) {
      blocks.push({
        final: { type: 'text', text },
        start: { type: 'text', text: '' },
        deltas: splitText(text, pieces).map((piece) => ({ type: 'text_delta', text: piece })),
      });
    }
    let outputText = (thinking ?? '') + (blocks.some((block) => block.final.type === 'text') ? text : '');
    toolCalls.forEach((call, index) => {
      const toolId = call.id ?? `toolu_fake${number}_${index}`;
      const inputJson = call.arguments ?? JSON.stringify(call.input ?? {});
      outputText += inputJson;
      blocks.push({
        final: { type: 'tool_use', id: toolId, name: call.name, input: call.input ?? JSON.parse(inputJson) },
        start: { type: 'tool_use', id: toolId, name: call.name, input: {} },
        deltas: splitText(inputJson, pieces).map((piece) => ({ type: 'input_json_delta', partial_json: piece })),
      });
    });
    const stopReason = behaviour.finishReason !== undefined
      ? (STOP_REASONS.get(behaviour.finishReason) ?? behaviour.finishReason)
      : behaviour.stopSequence !== undefined ? 'stop_sequence'
      : toolCalls.length > 0 ? 'tool_use' : 'end_turn';
    const stopSequence = behaviour.stopSequence ?? null;
    const usage = usageFor(body, behaviour, outputText);

    if (!body.stream) {
      response.writeHead(200, { 'content-type': 'application/json', 'request-id': requestId });
      response.end(JSON.stringify({
        id, type: 'message', role: 'assistant', model,
        content: blocks.map((block) => block.final),
        stop_reason: stopReason, stop_sequence: stopSequence,
        ...(usage ? { usage } : {}),
      }));
      return;
    }

    const events: { name: string; data: unknown }[] = [];
    events.push({
      name: 'message_start',
      data: {
        type: 'message_start',
        message: {
          id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null,
          // The API reports a first output count here and the cumulative one in message_delta.
          ...(usage ? { usage: { ...usage, output_tokens: Math.min(1, usage.output_tokens) } } : {}),
        },
      },
    });
    if (blocks.length === 0) events.push({ name: 'ping', data: { type: 'ping' } });
    blocks.forEach((block, index) => {
      events.push({ name: 'content_block_start', data: { type: 'content_block_start', index, content_block: block.start } });
      if (index === 0) events.push({ name: 'ping', data: { type: 'ping' } });
      for (const delta of block.deltas) events.push({ name: 'content_block_delta', data: { type: 'content_block_delta', index, delta } });
      events.push({ name: 'content_block_stop', data: { type: 'content_block_stop', index } });
    });
    events.push({
      name: 'message_delta',
      data: {
        type: 'message_delta',
        delta: { stop_reason: stopReason, stop_sequence: stopSequence },
        ...(usage ? {
          usage: {
            input_tokens: usage.input_tokens,
            cache_creation_input_tokens: usage.cache_creation_input_tokens,
            cache_read_input_tokens: usage.cache_read_input_tokens,
            output_tokens: usage.output_tokens,
          },
        } : {}),
      },
    });
    events.push({ name: 'message_stop', data: { type: 'message_stop' } });

    response.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'request-id': requestId,
    });
    response.flushHeaders();
    // Written (and flushed) a group at a time: the events up to and including one delta, so a cut after
    // N chunks really delivers N deltas and nothing after them.
    const write = (text: string) => new Promise<void>((resolve) => { response.write(text, () => resolve()); });
    let pending = '';
    let sent = 0;
    for (const event of events) {
      pending += `event: ${event.name}\ndata: ${JSON.stringify(event.data)}\n\n`;
      const isDelta = event.name === 'content_block_delta';
      if (!isDelta && event.name !== 'message_delta') continue;
      // The decision point lies before the group, so its events go out only when the delta does.
      const group = pending;
      pending = '';
      if (behaviour.cutAfterChunks === sent) { socket.destroy(); return; }
      if (behaviour.stallAfterChunks === sent) return;
      if (behaviour.streamErrorAfterChunks === sent) {
        const error = { type: 'error', error: { type: behaviour.streamErrorType ?? 'overloaded_error', message: 'Overloaded' } };
        await write(`event: error\ndata: ${JSON.stringify(error)}\n\n`);
        response.end();
        return;
      }
      if (isDelta && behaviour.chunkDelayMs && sent > 0) await sleep(behaviour.chunkDelayMs);
      await write(group);
      if (isDelta) sent++;
    }
    response.end(pending);
  }

  const server = await listenOnLoopback(handle);

  return {
    url: `http://127.0.0.1:${server.port}`,
    requests,
    script: (...behaviours) => { queue.push(...behaviours); },
    setFallback: (behaviour) => { fallback = behaviour; },
    reset: () => { queue.length = 0; requests.length = 0; fallback = {}; },
    close: () => server.close(),
    signThinking,
    redactedThinkingData,
  };
}
