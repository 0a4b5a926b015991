import type { Usage } from '@gateway/proto';
import { emptyUsage } from '../../usage/token-counter.js';
import type { OpenAIUsage } from './openai-api-types.js';

/** Undefined when the provider reported nothing countable (the router counts tokens then). */
export function convertOpenAIUsage(usage: OpenAIUsage | null | undefined): Usage | undefined {
  if (!usage || (usage.prompt_tokens == null && usage.completion_tokens == null)) return undefined;
  return {
    ...emptyUsage(),
    inputTokens: usage.prompt_tokens ?? 0,
    cachedInputTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
    outputTokens: usage.completion_tokens ?? 0,
    reasoningTokens: usage.completion_tokens_details?.reasoning_tokens ?? 0,
  };
}
