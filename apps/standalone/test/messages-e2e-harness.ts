import Anthropic from '@anthropic-ai/sdk';
import { expect } from 'vitest';
import { startFakeAnthropicUpstream, startFakeUpstream, type FakeBehaviour, type FakeUpstream, type RecordedRequest } from '@gateway/testing';

/*
 * The messages dialect end to end: what each kind of fake upstream behind the gateway looks like to
 * the tests, so one test file runs against every upstream kind (apps/standalone/test/messages.e2e.test.ts).
 * UPSTREAM_KINDS: the OpenAI-compatible fake and the Anthropic-wire fake (routing's `kind: anthropic`).
 */

/** One message as an upstream received it, whatever its wire format. */
export interface ReceivedMessage {
  role: string;
  /** Every text the message carried, joined (file text included). */
  text: string;
  toolCallIds: string[];
  /** The calls an assistant message made, arguments as JSON text (Anthropic's `input` serialized). */
  toolCalls: { id: string; name: string; arguments: string }[];
  /** For a tool result: the call it answers. */
  toolResultFor: string;
  /** Reasoning the provider was handed back (thinking text, or the signature when there is no text). */
  reasoning: string[];
}

export interface UpstreamKind {
  readonly kind: 'openai' | 'anthropic';
  /** The fake signs its reasoning: the client gets a tagged signature, and replayed thinking goes back to it. */
  readonly signsReasoning: boolean;
  start(): Promise<FakeUpstream>;
  /** Its entry under `providers:`. */
  provider(id: string, upstream: FakeUpstream, apiKeyEnv: string): string;
  /** The conversation a recorded request carried, system messages included, in order. */
  conversation(request: RecordedRequest): ReceivedMessage[];
  /** The reasoning the request asked the provider for: a level, or a thinking budget. */
  reasoningAsked(request: RecordedRequest): { effort?: unknown; budget?: unknown };
  /** An answer of `text` after reasoning `thinking`. */
  withReasoning(thinking: string, text: string, stream: boolean): FakeBehaviour;
}

function openAIText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((part: any) => (part?.type === 'text' ? part.text : part?.type === 'image_url' ? `[image ${part.image_url?.url}]` : `[${part?.type}]`)).join('\n');
}

/** A recorded chat-completions answer with reasoning (the fake's own answers carry none). */
function openAIReasoningAnswer(thinking: string, text: string, stream: boolean): FakeBehaviour {
  const base = { id: 'chatcmpl-reasoning', created: 1_767_225_600, model: 'upstream-model' };
  const usage = { prompt_tokens: 20, completion_tokens: 12, total_tokens: 32 };
  if (!stream) {
    return {
      replay: {
        contentType: 'application/json',
        body: JSON.stringify({
          ...base,
          object: 'chat.completion',
          choices: [{ index: 0, message: { role: 'assistant', content: text, reasoning_content: thinking }, finish_reason: 'stop' }],
          usage,
        }),
      },
    };
  }
  const chunk = (delta: unknown, finish: string | null = null) => ({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] });
  const half = Math.ceil(thinking.length / 2);
  const frames = [
    chunk({ role: 'assistant', reasoning_content: thinking.slice(0, half) }),
    chunk({ reasoning_content: thinking.slice(half) }),
    chunk({ content: text }),
    chunk({}, 'stop'),
    { ...base, object: 'chat.completion.chunk', choices: [], usage },
  ];
  return { replay: { contentType: 'text/event-stream', body: `${frames.map((frame) => `data: ${JSON.stringify(frame)}\n\n`).join('')}data: [DONE]\n\n` } };
}

export const OPENAI_UPSTREAM: UpstreamKind = {
  kind: 'openai',
  // The chat-completions wire has no signatures: reasoning comes back as text only.
  signsReasoning: false,
  start: () => startFakeUpstream(),
  provider: (id, upstream, apiKeyEnv) => `  - { id: ${id}, kind: openai, base_url: ${upstream.url}, api_key_env: ${apiKeyEnv} }`,
  conversation: (request) =>
    (request.body?.messages ?? []).map((message: any) => ({
      role: message.role,
      text: openAIText(message.content),
      toolCallIds: (message.tool_calls ?? []).map((call: any) => call.id),
      toolCalls: (message.tool_calls ?? []).map((call: any) => ({ id: call.id, name: call.function?.name, arguments: call.function?.arguments })),
      toolResultFor: message.tool_call_id ?? '',
      reasoning: [message.reasoning_content, message.reasoning, ...(message.reasoning_details ?? []).map((detail: any) => detail.text ?? detail.data)].filter(Boolean),
    })),
  reasoningAsked: (request) => ({ effort: request.body?.reasoning_effort }),
  withReasoning: openAIReasoningAnswer,
};

function anthropicText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((block: any) => (block?.type === 'text' ? block.text : block?.type === 'image' ? `[image ${block.source?.url ?? block.source?.media_type}]` : `[${block?.type}]`))
    .join('\n');
}

/** Anthropic's shape read like chat's: `system` first, each tool_result block a `tool` message before the rest of its turn. */
function anthropicConversation(request: RecordedRequest): ReceivedMessage[] {
  const body = request.body ?? {};
  const received: ReceivedMessage[] = [];
  const system = anthropicText(body.system);
  if (system) received.push({ role: 'system', text: system, toolCallIds: [], toolCalls: [], toolResultFor: '', reasoning: [] });
  for (const message of body.messages ?? []) {
    const blocks: any[] = typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : (message.content ?? []);
    for (const result of blocks.filter((block) => block.type === 'tool_result')) {
      received.push({ role: 'tool', text: anthropicText(result.content), toolCallIds: [], toolCalls: [], toolResultFor: result.tool_use_id, reasoning: [] });
    }
    const rest = blocks.filter((block) => block.type !== 'tool_result');
    if (rest.length === 0) continue;
    received.push({
      role: message.role,
      text: anthropicText(rest.filter((block) => block.type === 'text' || block.type === 'image')),
      toolCallIds: rest.filter((block) => block.type === 'tool_use').map((block) => block.id),
      toolCalls: rest.filter((block) => block.type === 'tool_use').map((block) => ({ id: block.id, name: block.name, arguments: JSON.stringify(block.input) })),
      toolResultFor: '',
      reasoning: rest.filter((block) => block.type === 'thinking' || block.type === 'redacted_thinking').map((block) => block.thinking ?? block.data),
    });
  }
  return received;
}

export const ANTHROPIC_UPSTREAM: UpstreamKind = {
  kind: 'anthropic',
  signsReasoning: true,
  start: () => startFakeAnthropicUpstream(),
  provider: (id, upstream, apiKeyEnv) => `  - { id: ${id}, kind: anthropic, base_url: ${upstream.url}, api_key_env: ${apiKeyEnv} }`,
  conversation: anthropicConversation,
  reasoningAsked: (request) => ({ budget: request.body?.thinking?.budget_tokens }),
  withReasoning: (thinking, text) => ({ thinking, text }) as FakeBehaviour,
};

/** The upstream kinds every messages e2e test runs against. */
export const UPSTREAM_KINDS: readonly UpstreamKind[] = [OPENAI_UPSTREAM, ANTHROPIC_UPSTREAM];

/** The conversation a provider received, as role and text of each message. */
export const textTurns = (kind: UpstreamKind, request: RecordedRequest) =>
  kind.conversation(request).map((message) => ({ role: message.role, text: message.text }));

/** The reasoning a request handed back to the provider, message by message in order. */
export const reasoningSent = (kind: UpstreamKind, request: RecordedRequest) => kind.conversation(request).flatMap((message) => message.reasoning);

export function anthropicClient(baseURL: string, apiKey: string): Anthropic {
  return new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 30_000 });
}

export interface SseEvent {
  event: string;
  data: any;
}

/** A raw POST to the gateway: status, headers, and the body as SSE events (streams) or JSON. */
export async function rawPost(url: string, headers: Record<string, string>, body: unknown): Promise<{ status: number; headers: Headers; events: SseEvent[]; json: any }> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await response.text();
  if (!(response.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    return { status: response.status, headers: response.headers, events: [], json: text ? JSON.parse(text) : undefined };
  }
  return { status: response.status, headers: response.headers, events: parseSse(text), json: undefined };
}

/** Every frame must have an `event:` line naming its data's type (the SDK routes by it). */
export function parseSse(text: string): SseEvent[] {
  return text
    .split('\n\n')
    .filter((frame) => frame.trim() !== '')
    .map((frame) => {
      const match = /^event: (\S+)\ndata: (.*)$/s.exec(frame);
      expect(match, `SSE frame without an event line: ${frame}`).not.toBeNull();
      const data = JSON.parse(match![2]!);
      expect(data.type, frame).toBe(match![1]);
      return { event: match![1]!, data };
    });
}

/**
 * The event order of a complete messages stream: message_start, then per block start / deltas / stop
 * with indices 0, 1, 2, … in order, then message_delta and message_stop. Pings may come anywhere after
 * message_start. Returns each block's type, in order.
 */
export function expectWellFormedStream(events: readonly SseEvent[]): string[] {
  const names = events.map((one) => one.event).filter((name) => name !== 'ping');
  expect(names[0]).toBe('message_start');
  expect(names.slice(-2)).toEqual(['message_delta', 'message_stop']);
  const blocks: string[] = [];
  let open = -1;
  for (const { event, data } of events.slice(1, -2)) {
    if (event === 'ping') continue;
    if (event === 'content_block_start') {
      expect(open, 'a block started before the previous one stopped').toBe(-1);
      expect(data.index).toBe(blocks.length);
      blocks.push(data.content_block.type);
      open = data.index;
    } else if (event === 'content_block_delta') {
      expect(data.index).toBe(open);
    } else if (event === 'content_block_stop') {
      expect(data.index).toBe(open);
      open = -1;
    } else {
      throw new Error(`unexpected event ${event} inside the stream`);
    }
  }
  expect(open).toBe(-1);
  return blocks;
}
