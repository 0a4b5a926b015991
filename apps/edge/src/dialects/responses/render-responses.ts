import type { AssistantMessage, ChatResponse, Usage } from '@gateway/proto';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import type { AnswerContext } from '../../inference/dialect.js';
import { chatResponseCost, type AnswerCost } from '../../inference/answer-cost.js';
import { outputTextLogprobs } from './responses-logprobs.js';
import { encryptedContentOf } from './responses-reasoning.js';
import type { ResponsesRequest } from './responses-schema.js';
import { conversationOf, isStored } from './stored-marks.js';
import { customInputOf, dialectToolOf, echoedTools, toolSetOf, type ResponsesToolSet } from './responses-tools.js';

/*
 * The response object (wire-formats.md "OpenAI Responses"; the `openai` SDK's `Response` type), for a
 * whole answer and for the events of a stream (responses-stream-writer.ts), which carry it too.
 */

/** The hex of the gateway request id (`req_<hex>`): every id of one answer derives from it. */
export function idBase(requestId: string): string {
  return requestId.startsWith('req_') ? requestId.slice(4) : requestId;
}

/** `resp_…`: the same in the JSON answer and in every event of a stream; `x-gateway-request-id` is `req_` + the same hex. */
export function responseId(requestId: string): string {
  return `resp_${idBase(requestId)}`;
}

/** Output item ids: the kind's prefix, the request's hex, the item's output index. */
export function itemId(prefix: 'rs' | 'msg' | 'fc' | 'ctc', base: string, outputIndex: number): string {
  return `${prefix}_${base}_${outputIndex}`;
}

/** Responses usage; `cost` / `cost_details` (answer-cost.ts): the ledger's charge, when known. */
export function renderUsage(usage: Usage | undefined, cost?: AnswerCost) {
  const input = usage?.inputTokens ?? 0;
  const output = usage?.outputTokens ?? 0;
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: usage?.cachedInputTokens ?? 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: usage?.reasoningTokens ?? 0 },
    total_tokens: input + output,
    ...cost,
  };
}

/**
 * The request settings every response object repeats (the Open Responses schema requires each one),
 * echoed as the client sent them, with what the gateway did where that differs: `store` true only
 * when the response is stored (stored-response-steps.ts), `truncation: 'disabled'` (nothing is truncated). A number the client left out
 * is OpenAI's documented default: temperature 1, top_p 1, presence and frequency penalty 0,
 * top_logprobs 0; `service_tier` is 'default' (standard processing, what OpenAI reports when a project
 * configured nothing else). Hosted tools, dropped before any provider, are not among the `tools`.
 */
export function responseSettings(body: ResponsesRequest): Record<string, unknown> {
  const text: Record<string, unknown> = { format: body.text?.format ?? { type: 'text' } };
  if (body.text?.verbosity != null) text.verbosity = body.text.verbosity;
  const settings: Record<string, unknown> = {
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    metadata: body.metadata ?? {},
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    store: isStored(body),
    temperature: body.temperature ?? 1,
    text,
    tool_choice: body.tool_choice ?? 'auto',
    tools: echoedTools(body),
    top_p: body.top_p ?? 1,
    presence_penalty: body.presence_penalty ?? 0,
    frequency_penalty: body.frequency_penalty ?? 0,
    top_logprobs: body.top_logprobs ?? 0,
    max_tool_calls: body.max_tool_calls ?? null,
    service_tier: body.service_tier ?? 'default',
    safety_identifier: body.safety_identifier ?? null,
    prompt_cache_key: body.prompt_cache_key ?? null,
    truncation: 'disabled',
  };
  if (body.user != null) settings.user = body.user;
  // OpenAI's `conversation` of a response made in one (its input and output were added to it).
  const conversationId = conversationOf(body);
  if (conversationId !== undefined) settings.conversation = { id: conversationId };
  return settings;
}

export type ResponseStatus = 'completed' | 'incomplete' | 'failed' | 'in_progress';

/** A finish reason as the response's status and incomplete_details (length and content filter stop an answer short). */
export function statusOf(finishReason: string): { status: 'completed' | 'incomplete'; incompleteDetails: { reason: string } | null } {
  if (finishReason === 'length') return { status: 'incomplete', incompleteDetails: { reason: 'max_output_tokens' } };
  if (finishReason === 'content_filter') return { status: 'incomplete', incompleteDetails: { reason: 'content_filter' } };
  return { status: 'completed', incompleteDetails: null };
}

export interface ReasoningItem {
  id: string;
  type: 'reasoning';
  summary: { type: 'summary_text'; text: string }[];
  encrypted_content?: string;
}

/** A reasoning item: its text as one summary part, its signature or encrypted data tagged with the issuer. */
export function reasoningItem(id: string, text: string, signature: string, encryptedData: string, providerId: string, tags: ReasoningTags): ReasoningItem {
  const item: ReasoningItem = { id, type: 'reasoning', summary: text ? [{ type: 'summary_text', text }] : [] };
  const encrypted = encryptedContentOf(signature, encryptedData, providerId, tags);
  if (encrypted !== undefined) item.encrypted_content = encrypted;
  return item;
}

/**
 * A tool call as the output item OpenAI returns for the tool the client offered: `function_call` (with
 * `namespace` for a namespace member) or `custom_tool_call` with the raw `input`.
 */
export function toolCallItem(id: string, status: string, callId: string, flatName: string, argumentsJson: string, toolSet: ResponsesToolSet): Record<string, unknown> {
  const tool = dialectToolOf(toolSet, flatName);
  if (tool.kind === 'custom') {
    const item: Record<string, unknown> = { id, type: 'custom_tool_call', status, call_id: callId, name: tool.name, input: customInputOf(argumentsJson) };
    if (tool.namespace !== '') item.namespace = tool.namespace;
    return item;
  }
  if (tool.namespace !== '') return { id, type: 'function_call', status, call_id: callId, name: tool.name, namespace: tool.namespace, arguments: argumentsJson };
  return { id, type: 'function_call', status, call_id: callId, name: tool.name, arguments: argumentsJson };
}

/** The item id prefix of a tool call: `ctc` for a custom tool's, `fc` for a function's. */
export function toolCallPrefix(toolSet: ResponsesToolSet, flatName: string): 'fc' | 'ctc' {
  return dialectToolOf(toolSet, flatName).kind === 'custom' ? 'ctc' : 'fc';
}

/** Output items in the answer's order: reasoning first (spec §4.9), then the message, then tool calls. */
function outputItems(
  message: AssistantMessage | undefined, base: string, providerId: string, tags: ReasoningTags, itemStatus: string, toolSet: ResponsesToolSet, logprobs: string | undefined,
): unknown[] {
  const output: unknown[] = [];
  for (const part of message?.reasoning ?? []) {
    output.push(reasoningItem(itemId('rs', base, output.length), part.text, part.signature, part.encryptedData, part.providerId || providerId, tags));
  }
  const content = message?.content ?? '';
  const toolCalls = message?.toolCalls ?? [];
  const refusal = message?.refusal;
  // An answer of only tool calls has no message; an empty answer still has one (output_text is then '').
  if (content !== '' || refusal || toolCalls.length === 0) {
    const parts: unknown[] = [];
    if (content !== '' || !refusal) {
      // The choice's logprobs, only where the request asked for them (`include: ["message.output_text.logprobs"]`).
      parts.push(logprobs ? { type: 'output_text', text: content, annotations: [], logprobs: outputTextLogprobs(logprobs) } : { type: 'output_text', text: content, annotations: [] });
    }
    if (refusal) parts.push({ type: 'refusal', refusal });
    output.push({ id: itemId('msg', base, output.length), type: 'message', status: itemStatus, role: 'assistant', content: parts });
  }
  for (const call of toolCalls) {
    output.push(toolCallItem(itemId(toolCallPrefix(toolSet, call.name), base, output.length), itemStatus, call.id, call.name, call.arguments, toolSet));
  }
  return output;
}

/** A whole answer as the dialect's response object. `model` is the catalog id the edge resolved. */
export function renderResponse(answer: ChatResponse, answerContext: AnswerContext, body: ResponsesRequest) {
  const choice = answer.choices[0];
  const { status, incompleteDetails } = statusOf(choice?.finishReason ?? '');
  const base = idBase(answerContext.requestId);
  return {
    id: responseId(answerContext.requestId),
    object: 'response',
    created_at: answerContext.created,
    status,
    background: false,
    completed_at: status === 'completed' ? Math.floor(Date.now() / 1000) : null,
    error: null,
    incomplete_details: incompleteDetails,
    model: answerContext.model.id,
    output: outputItems(choice?.message, base, answer.providerId, answerContext.tags, status, toolSetOf(body), choice?.logprobs),
    ...responseSettings(body),
    usage: renderUsage(answer.usage, chatResponseCost(answer, answerContext.model.model.pricing)),
  };
}
