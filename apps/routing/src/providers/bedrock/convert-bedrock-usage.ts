import type { Usage } from '@gateway/proto';
import { emptyUsage } from '../../usage/token-counter.js';
import type { BedrockUsage } from './bedrock-api-types.js';

/**
 * Bedrock TokenUsage in canonical terms. Bedrock's `inputTokens` EXCLUDES the prompt tokens read from
 * (`cacheReadInputTokens`) and written to (`cacheWriteInputTokens`) the prompt cache; canonical
 * `inputTokens` is every prompt token (common.proto Usage), so the three are added once here and the two
 * cache parts reported beside it. Bedrock does not say how many output tokens were reasoning: 0.
 * Undefined when the answer carried nothing countable (the router counts tokens then).
 */
export function convertBedrockUsage(usage: BedrockUsage | null | undefined): Usage | undefined {
  if (!usage || (usage.inputTokens == null && usage.outputTokens == null)) return undefined;
  const cacheRead = usage.cacheReadInputTokens ?? 0;
  const cacheWrite = usage.cacheWriteInputTokens ?? 0;
  return {
    ...emptyUsage(),
    inputTokens: (usage.inputTokens ?? 0) + cacheRead + cacheWrite,
    cachedInputTokens: cacheRead,
    cacheWriteTokens: cacheWrite,
    outputTokens: usage.outputTokens ?? 0,
  };
}
