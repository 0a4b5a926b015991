import type { Usage } from '@gateway/proto';
import { emptyUsage } from '../../usage/token-counter.js';
import type { OpenAIUsage } from './openai-api-types.js';

const isCount = (value: unknown): value is number => typeof value === 'number' && Number.isInteger(value) && value >= 0;

/**
 * Undefined when the provider reported nothing countable (the router counts tokens then). Cache reads
 * (`cached_tokens`) and, where an OpenAI-compatible provider reports them, cache writes
 * (`cache_write_tokens`, OpenRouter's name) are parts of `prompt_tokens`, as in the canonical Usage.
 */
export function convertOpenAIUsage(usage: OpenAIUsage | null | undefined): Usage | undefined {
  if (!usage || (usage.prompt_tokens == null && usage.completion_tokens == null)) return undefined;
  const written = usage.prompt_tokens_details?.cache_write_tokens;
  return {
    ...emptyUsage(),
    inputTokens: usage.prompt_tokens ?? 0,
    cachedInputTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
    cacheWriteTokens: isCount(written) ? written : 0,
    outputTokens: usage.completion_tokens ?? 0,
    reasoningTokens: usage.completion_tokens_details?.reasoning_tokens ?? 0,
  };
}
