import type { Usage } from '@gateway/proto';
import { normalizeUsage } from '../../usage/normalize-usage.js';
import type { AnthropicUsage } from './anthropic-api-types.js';

/** A Claude model's counts, whichever API reports them (Anthropic's Messages, Bedrock's Converse). */
export interface ClaudeCounts {
  input: number | null | undefined;
  output: number | null | undefined;
  cacheRead: number | null | undefined;
  cacheWrite: number | null | undefined;
  /** The API's own total; Anthropic gives none. */
  total?: number | null | undefined;
}

/**
 * Usage counted as Claude counts it, normalized (usage/normalize-usage.ts). The input count EXCLUDES the
 * prompt tokens read from and written to the cache, so the three are added once there, and the two cache
 * parts reported beside it (never added again downstream). The output count INCLUDES the thinking tokens
 * (the billed count, also when the thinking shown is summarized) without saying how many: reasoning stays
 * 0. Undefined when the provider reported nothing countable (the router counts tokens then).
 */
export function claudeUsage(counts: ClaudeCounts): Usage | undefined {
  if (counts.input == null && counts.output == null) return undefined;
  return normalizeUsage({
    input: counts.input ?? 0,
    inputIncludesCache: false,
    cacheRead: counts.cacheRead ?? 0,
    cacheWrite: counts.cacheWrite ?? 0,
    output: counts.output ?? 0,
    reasoning: 0,
    outputIncludesReasoning: true,
    total: counts.total ?? 0,
  });
}

/** Anthropic usage (`input_tokens` without the cache parts, `output_tokens` with the thinking; no total), normalized. */
export function convertAnthropicUsage(usage: AnthropicUsage | null | undefined): Usage | undefined {
  if (!usage) return undefined;
  return claudeUsage({ input: usage.input_tokens, output: usage.output_tokens, cacheRead: usage.cache_read_input_tokens, cacheWrite: usage.cache_creation_input_tokens });
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
