import type { Usage } from '@gateway/proto';
import { normalizeUsage } from '../../usage/normalize-usage.js';
import type { AnthropicUsage } from './anthropic-api-types.js';

/**
 * Anthropic usage, normalized (usage/normalize-usage.ts). Anthropic's `input_tokens` EXCLUDES the prompt
 * tokens read from and written to its cache, so the three are added once there, and the two cache parts
 * reported beside it (never added again downstream). `output_tokens` INCLUDES the thinking tokens (the
 * billed count, also when the thinking shown is summarized) without saying how many: reasoning stays 0.
 * Anthropic gives no total. Undefined when the provider reported nothing countable (the router counts
 * tokens then).
 */
export function convertAnthropicUsage(usage: AnthropicUsage | null | undefined): Usage | undefined {
  if (!usage || (usage.input_tokens == null && usage.output_tokens == null)) return undefined;
  return normalizeUsage({
    input: usage.input_tokens ?? 0,
    inputIncludesCache: false,
    cacheRead: usage.cache_read_input_tokens ?? 0,
    cacheWrite: usage.cache_creation_input_tokens ?? 0,
    output: usage.output_tokens ?? 0,
    reasoning: 0,
    outputIncludesReasoning: true,
    total: 0,
  });
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
