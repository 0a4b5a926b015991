import type { ChatStreamDelta, ToolCallDelta } from '@gateway/proto';
import { mapOpenAIFinishReason } from './map-openai-finish-reason.js';

/**
 * One choice of a chat-completions stream chunk as a canonical delta; undefined for role-only and empty
 * keep-alive chunks, which carry nothing a caller can see. The adapter reads the chunks (SSE, `[DONE]`,
 * errors, usage) and hands each choice here.
 */
export function convertOpenAIStreamChoice(choice: {
  index: number;
  delta?: { content?: string | null; reasoning_content?: string | null; reasoning?: string | null; tool_calls?: { index: number; id?: string | null; function?: { name?: string | null; arguments?: string | null } | null }[] | null } | null;
  finish_reason?: string | null;
  logprobs?: unknown;
}): ChatStreamDelta | undefined {
  const content = choice.delta?.content ?? '';
  const reasoning = choice.delta?.reasoning_content ?? choice.delta?.reasoning ?? '';
  const toolCalls: ToolCallDelta[] = (choice.delta?.tool_calls ?? []).map((call) => ({
    index: call.index,
    id: call.id ?? '',
    name: call.function?.name ?? '',
    arguments: call.function?.arguments ?? '',
  }));
  const finishReason = choice.finish_reason ? mapOpenAIFinishReason(choice.finish_reason) : '';
  // Role-only and empty keep-alive chunks carry nothing a caller can see.
  if (!content && !reasoning && toolCalls.length === 0 && !finishReason && choice.logprobs == null) return undefined;
  const delta: ChatStreamDelta = { choiceIndex: choice.index, content, toolCalls, reasoning, reasoningSignature: '', finishReason, images: [], reasoningEncrypted: '', stopSequence: '' };
  // The upstream chunk's logprobs, relayed as they came (only a request that asked for them gets any).
  if (choice.logprobs != null) delta.logprobs = JSON.stringify(choice.logprobs);
  return delta;
}
