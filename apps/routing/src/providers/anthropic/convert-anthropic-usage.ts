import type { Usage } from '@gateway/proto';
import { emptyUsage } from '../../usage/token-counter.js';
import type { AnthropicUsage } from './anthropic-api-types.js';

/**
 * Anthropic usage in canonical terms. Anthropic's `input_tokens` EXCLUDES the prompt tokens read from
 * and written to its cache; canonical `inputTokens` is every prompt token, so the three are added once
 * here, and the two cache parts are reported beside it (never added again downstream). Anthropic does
 * not say how many output tokens were thinking: reasoning stays 0 (they are in `output_tokens`).
 * Undefined when the provider reported nothing countable (the router counts tokens then).
 */
export function convertAnthropicUsage(usage: AnthropicUsage | null | undefined): Usage | undefined {
  if (!usage || (usage.input_tokens == null && usage.output_tokens == null)) return undefined;
  const cacheRead = usage.cache_read_input_tokens ?? 0;
  const cacheWrite = usage.cache_creation_input_tokens ?? 0;
  return {
    ...emptyUsage(),
    inputTokens: (usage.input_tokens ?? 0) + cacheRead + cacheWrite,
    cachedInputTokens: cacheRead,
    cacheWriteTokens: cacheWrite,
    outputTokens: usage.output_tokens ?? 0,
  };
}

/**
 * A stream's usage: `message_start` carries the input counts, `message_delta` the cumulative output
 * (and, in newer API versions, the input counts again). Each count is taken from the latest event that
 * has it, never summed across events.
 */
export function latestAnthropicUsage(start: AnthropicUsage | null | undefined, end: AnthropicUsage | null | undefined): AnthropicUsage | undefined {
  if (!start) return end ?? undefined;
  if (!end) return start;
  return {
    input_tokens: end.input_tokens ?? start.input_tokens,
    output_tokens: end.output_tokens ?? start.output_tokens,
    cache_creation_input_tokens: end.cache_creation_input_tokens ?? start.cache_creation_input_tokens,
    cache_read_input_tokens: end.cache_read_input_tokens ?? start.cache_read_input_tokens,
  };
}
