import type { Usage } from '@gateway/proto';
import { normalizeUsage } from '../../usage/normalize-usage.js';
import type { OpenAIUsage } from './openai-api-types.js';

const isCount = (value: unknown): value is number => typeof value === 'number' && Number.isInteger(value) && value >= 0;

/**
 * OpenAI (and Azure OpenAI, and compatibles) usage, normalized (usage/normalize-usage.ts). Cache reads
 * (`cached_tokens`) and, where an OpenAI-compatible provider reports them, cache writes
 * (`cache_write_tokens`, OpenRouter's name) are parts of `prompt_tokens`; `completion_tokens` includes
 * `reasoning_tokens` (OpenAI's documented meaning), so it is kept, and raised to the reasoning count when a
 * server reports less (`completion_tokens: 0` beside `reasoning_tokens: 40`). `total_tokens` is kept.
 * Undefined when the provider reported nothing countable (the router counts tokens then).
 */
export function convertOpenAIUsage(usage: OpenAIUsage | null | undefined): Usage | undefined {
  if (!usage || (usage.prompt_tokens == null && usage.completion_tokens == null)) return undefined;
  const written = usage.prompt_tokens_details?.cache_write_tokens;
  return normalizeUsage({
    input: usage.prompt_tokens ?? 0,
    inputIncludesCache: true,
    cacheRead: usage.prompt_tokens_details?.cached_tokens ?? 0,
    cacheWrite: isCount(written) ? written : 0,
    output: usage.completion_tokens ?? 0,
    reasoning: usage.completion_tokens_details?.reasoning_tokens ?? 0,
    outputIncludesReasoning: true,
    total: usage.total_tokens ?? 0,
  });
}
