import type { ChatChoice, ReasoningPart, ToolCall } from '@gateway/proto';
import type {
  AnthropicMessageResponse,
  AnthropicRedactedThinkingContent,
  AnthropicTextContent,
  AnthropicThinkingContent,
  AnthropicToolUseContent,
} from './anthropic-api-types.js';
import type { ToolIdentifiers } from './anthropic-tool-identifiers.js';
import { mapAnthropicFinishReason } from './map-anthropic-finish-reason.js';

/**
 * A whole Messages answer as the canonical choice: text blocks joined, thinking and redacted thinking
 * as reasoning issued by `providerId` (so it only ever goes back to this provider), tool_use as tool
 * calls with the caller's own ids and names. Blocks of other types (server tools) are skipped.
 */
export function convertAnthropicAnswer(answer: AnthropicMessageResponse, providerId: string, tools: ToolIdentifiers): ChatChoice {
  let content = '';
  const reasoning: ReasoningPart[] = [];
  const toolCalls: ToolCall[] = [];
  for (const block of answer.content) {
    switch (block.type) {
      case 'text':
        content += (block as AnthropicTextContent).text;
        break;
      case 'thinking': {
        const thinking = block as AnthropicThinkingContent;
        reasoning.push({ text: thinking.thinking, signature: thinking.signature ?? '', encryptedData: '', providerId });
        break;
      }
      case 'redacted_thinking':
        reasoning.push({ text: '', signature: '', encryptedData: (block as AnthropicRedactedThinkingContent).data, providerId });
        break;
      case 'tool_use': {
        const call = block as AnthropicToolUseContent;
        toolCalls.push({ id: tools.callerId(call.id), name: tools.callerName(call.name), arguments: JSON.stringify(call.input ?? {}) });
        break;
      }
      default:
        break;
    }
  }
  return {
    index: 0,
    finishReason: mapAnthropicFinishReason(answer.stop_reason),
    stopSequence: answer.stop_sequence ?? '',
    message: { content, toolCalls, reasoning, images: [] },
  };
}
