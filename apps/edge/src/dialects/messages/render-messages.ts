import type { ChatResponse, ReasoningPart, Usage } from '@gateway/proto';
import type { Logger } from '@gateway/platform';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import type { AnswerContext } from '../../inference/dialect.js';
import { chatResponseCost, type AnswerCost } from '../../inference/answer-cost.js';
import { messagesStopReason } from './messages-stop-reason.js';

/** The answer's `msg_` id, derived from the gateway's request id: the same in a JSON answer and a stream. */
export function messageId(requestId: string): string {
  return `msg_${requestId.startsWith('req_') ? requestId.slice(4) : requestId}`;
}

/**
 * Messages usage: `input_tokens` EXCLUDES the prompt tokens read from and written to the provider's
 * cache, which are reported apart (the canonical `input_tokens` counts all of them, common.proto).
 * A client adding the three gets the whole prompt, as with Anthropic's own API. `cost` / `cost_details`
 * (answer-cost.ts): the ledger's charge, when known.
 */
export function renderMessagesUsage(usage: Usage | undefined, cost?: AnswerCost) {
  const cached = usage?.cachedInputTokens ?? 0;
  const written = usage?.cacheWriteTokens ?? 0;
  return {
    input_tokens: Math.max(0, (usage?.inputTokens ?? 0) - cached - written),
    output_tokens: usage?.outputTokens ?? 0,
    cache_creation_input_tokens: written,
    cache_read_input_tokens: cached,
    ...cost,
  };
}

/**
 * A tool call's arguments as the `input` object of a tool_use block. A provider that produced arguments
 * that are not a JSON object gets `{}` (a client cannot run the call either way) and a warning.
 */
export function toolInput(call: { id: string; name: string; arguments: string }, logger: Logger, requestId: string): Record<string, unknown> {
  if (call.arguments.trim() === '') return {};
  try {
    const parsed: unknown = JSON.parse(call.arguments);
    if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed as Record<string, unknown>;
  } catch {
    // Reported below.
  }
  logger.warn({ request_id: requestId, tool_call_id: call.id, tool: call.name }, 'provider tool arguments are not a JSON object; sent as {}');
  return {};
}

/** Reasoning as messages blocks, every signature and datum tagged with the provider that issued it. */
export function reasoningBlocks(part: ReasoningPart, providerId: string, tags: ReasoningTags): Record<string, unknown>[] {
  const issuer = part.providerId || providerId;
  const blocks: Record<string, unknown>[] = [];
  if (part.text || part.signature) blocks.push({ type: 'thinking', thinking: part.text, signature: tags.tag(issuer, part.signature) });
  if (part.encryptedData) blocks.push({ type: 'redacted_thinking', data: tags.tag(issuer, part.encryptedData) });
  return blocks;
}

/** A whole answer as a messages `message`: thinking blocks first, then the text, then the tool calls. */
export function renderMessage(answer: ChatResponse, answerContext: AnswerContext) {
  const choice = answer.choices[0];
  const source = choice?.message;
  const content: Record<string, unknown>[] = [];
  for (const part of source?.reasoning ?? []) content.push(...reasoningBlocks(part, answer.providerId, answerContext.tags));
  const text = source?.content || source?.refusal || '';
  if (text) content.push({ type: 'text', text });
  const toolCalls = source?.toolCalls ?? [];
  for (const call of toolCalls) {
    content.push({ type: 'tool_use', id: call.id, name: call.name, input: toolInput(call, answerContext.logger, answerContext.requestId) });
  }
  return {
    id: messageId(answerContext.requestId),
    type: 'message',
    role: 'assistant',
    model: answerContext.model.id,
    content,
    stop_reason: messagesStopReason(choice?.finishReason ?? '', choice?.stopSequence ?? '', toolCalls.length > 0),
    stop_sequence: choice?.stopSequence || null,
    usage: renderMessagesUsage(answer.usage, chatResponseCost(answer, answerContext.model.model.pricing)),
  };
}
