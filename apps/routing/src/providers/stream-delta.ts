import type { ChatStreamDelta, ToolCallDelta } from '@gateway/proto';

/**
 * A canonical stream delta of the first choice (the block-based wire formats answer one choice). Every
 * field at once, in the order the other adapters build them: one hidden class for all deltas.
 */
export function streamDelta(
  content: string,
  reasoning: string,
  reasoningSignature: string,
  reasoningEncrypted: string,
  toolCalls: ToolCallDelta[],
  finishReason: string,
  stopSequence: string,
): ChatStreamDelta {
  return { choiceIndex: 0, content, toolCalls, reasoning, reasoningSignature, finishReason, images: [], reasoningEncrypted, stopSequence };
}
