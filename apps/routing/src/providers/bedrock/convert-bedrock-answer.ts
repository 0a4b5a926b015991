import type { ChatChoice, ReasoningPart, ToolCall } from '@gateway/proto';
import { ProviderError } from '../provider-adapter.js';
import type { ToolIdentifiers } from '../anthropic/anthropic-tool-identifiers.js';
import { reportedStopSequence, type BedrockConverseResponse } from './bedrock-api-types.js';
import { isBedrockSafetyStop, mapBedrockFinishReason } from './map-bedrock-finish-reason.js';

/** What the caller is told when a guardrail or the model's own filter blocked the answer. */
export function safetyStopError(reason: string): ProviderError {
  return new ProviderError('content_filter', reason === 'guardrail_intervened' ? 'A Bedrock guardrail intervened.' : 'The model filtered the content.');
}

/**
 * A whole Converse answer as the canonical choice: text blocks joined, reasoningContent as reasoning
 * issued by `providerId` (signed text or redacted bytes, so it only ever goes back to this provider),
 * toolUse as tool calls with the caller's own ids and names. Other blocks are skipped. A safety stop
 * (guardrail_intervened, content_filtered) is a content_filter error: the answer holds only the
 * guardrail's canned text.
 */
export function convertBedrockAnswer(answer: BedrockConverseResponse, providerId: string, tools: ToolIdentifiers): ChatChoice {
  if (isBedrockSafetyStop(answer.stopReason)) throw safetyStopError(answer.stopReason!);
  let content = '';
  const reasoning: ReasoningPart[] = [];
  const toolCalls: ToolCall[] = [];
  for (const block of answer.output.message?.content ?? []) {
    if (typeof block.text === 'string') {
      content += block.text;
    } else if (block.toolUse) {
      const call = block.toolUse;
      toolCalls.push({ id: tools.callerId(call.toolUseId), name: tools.callerName(call.name), arguments: JSON.stringify(call.input ?? {}) });
    } else if (block.reasoningContent) {
      const { reasoningText, redactedContent } = block.reasoningContent;
      if (reasoningText) reasoning.push({ text: reasoningText.text ?? '', signature: reasoningText.signature ?? '', encryptedData: '', providerId });
      else if (redactedContent) reasoning.push({ text: '', signature: '', encryptedData: redactedContent, providerId });
    }
  }
  const finishReason = mapBedrockFinishReason(answer.stopReason);
  return {
    index: 0,
    finishReason,
    stopSequence: finishReason === 'stop' ? reportedStopSequence(answer.additionalModelResponseFields) : '',
    message: { content, toolCalls, reasoning, images: [] },
  };
}
