import type { ChatChoice } from '@gateway/proto';
import type { OpenAIChatResponse } from './openai-api-types.js';
import { mapOpenAIFinishReason } from './map-openai-finish-reason.js';

/**
 * The choices of a whole chat-completions answer as canonical choices: content, tool calls, refusal, and
 * `reasoning_content` / `reasoning` as reasoning issued by `providerId` (plain text, unsigned).
 */
export function convertOpenAIAnswer(answer: OpenAIChatResponse, providerId: string): ChatChoice[] {
  return answer.choices.map((choice) => ({
    index: choice.index,
    // No finish reason stays none (zero-completion insurance tells an unfinished answer by it), as on the stream path.
    finishReason: choice.finish_reason ? mapOpenAIFinishReason(choice.finish_reason) : '',
    stopSequence: '',
    message: {
      content: choice.message.content ?? '',
      toolCalls: (choice.message.tool_calls ?? []).map((call) => ({
        id: call.id,
        name: call.function.name,
        arguments: call.function.arguments ?? '',
      })),
      reasoning:
        choice.message.reasoning_content || choice.message.reasoning
          ? [{ text: choice.message.reasoning_content ?? choice.message.reasoning ?? '', signature: '', encryptedData: '', providerId }]
          : [],
      images: [],
      ...(choice.message.refusal ? { refusal: choice.message.refusal } : {}),
    },
    // The upstream's logprobs, relayed as they came (the chat dialect renders them; only asked-for ones come).
    ...(choice.logprobs != null ? { logprobs: JSON.stringify(choice.logprobs) } : {}),
  }));
}
