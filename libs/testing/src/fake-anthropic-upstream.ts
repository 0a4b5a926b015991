import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { anthropicBodyValidator, createThinkingSigner, InvalidRequest } from './fake-anthropic-validation.js';
import { approximateTokens, listenOnLoopback, receiveScripted, ScriptedBehaviours, sleep, splitText } from './fake-upstream-support.js';
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
  /**
   * Streams: a slow first token. The events before the first content delta (`message_start` with the
   * prompt's usage, `content_block_start`, `ping`) go out at once; the first delta this long after them.
   */
  firstChunkDelayMs?: number;
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

/**
 * An Anthropic Messages API provider on a real loopback HTTP server (POST /v1/messages, JSON and SSE),
 * scriptable per request like `startFakeUpstream` (same behaviour fields, same queue/fallback), which
 * validates requests the way the API does where adapters typically go wrong (required headers and
 * fields, unknown fields, roles, tool_use/tool_result pairing, tool ids and names, thinking signatures)
 * and answers those with 400 before any scripted behaviour but latency, stall and reset. It signs the
 * thinking it emits with a per-instance key and refuses thinking it did not sign.
 */
export async function startFakeAnthropicUpstream(options: FakeAnthropicUpstreamOptions = {}): Promise<FakeAnthropicUpstream> {
  const scripted = new ScriptedBehaviours<FakeAnthropicBehaviour>();
  let answered = 0;
  const signer = createThinkingSigner();
  const { signThinking, redactedThinkingData } = signer;
  const validateBody = anthropicBodyValidator(signer);

  async function handle(request: IncomingMessage, response: ServerResponse) {
    const { behaviour, raw, body } = await receiveScripted(request, scripted);
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
    const betas = headers['anthropic-beta'];
    if (betas !== undefined) {
      // Anthropic refuses a beta it does not know, naming it (its words).
      const unknown = String(betas).split(',').map((beta) => beta.trim()).filter((beta) => beta !== '' && !KNOWN_BETAS.has(beta));
      if (unknown.length > 0) {
        return {
          status: 400,
          message: `Unexpected value(s) \`${unknown.join('`, `')}\` for the \`anthropic-beta\` header. Please consult our documentation at docs.anthropic.com or try again without the header.`,
        };
      }
    }
    if (body === undefined) return { status: 400, message: raw ? 'There was an error parsing the body: invalid JSON' : 'body: Field required' };
    try {
      validateBody(body);
      return undefined;
    } catch (error) {
      if (error instanceof InvalidRequest) return { status: 400, message: error.message };
      throw error;
    }
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
      const isDelta = event.name === 'content_block_delta';
      if (isDelta && sent === 0 && behaviour.firstChunkDelayMs) {
        await write(pending);
        pending = '';
        await sleep(behaviour.firstChunkDelayMs);
        if (response.destroyed) return;
      }
      pending += `event: ${event.name}\ndata: ${JSON.stringify(event.data)}\n\n`;
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
    ...scripted.controls(),
    close: () => server.close(),
    signThinking,
    redactedThinkingData,
  };
}

/** The `anthropic-beta` values Anthropic's API knows (its documented betas); any other is a 400. */
const KNOWN_BETAS = new Set([
  'message-batches-2024-09-24', 'prompt-caching-2024-07-31', 'computer-use-2024-10-22', 'computer-use-2025-01-24', 'pdfs-2024-09-25',
  'token-counting-2024-11-01', 'token-efficient-tools-2025-02-19', 'output-128k-2025-02-19', 'files-api-2025-04-14', 'mcp-client-2025-04-04',
  'dev-full-thinking-2025-05-14', 'interleaved-thinking-2025-05-14', 'code-execution-2025-05-22', 'extended-cache-ttl-2025-04-11',
  'context-1m-2025-08-07', 'context-management-2025-06-27', 'model-context-window-exceeded-2025-08-26', 'skills-2025-10-02',
  'fine-grained-tool-streaming-2025-05-14', 'effort-2025-11-24', 'claude-code-20250219', 'oauth-2025-04-20',
]);
