import type { Usage } from '@gateway/proto';
import { normalizeUsage } from '../../usage/normalize-usage.js';
import type { BedrockUsage } from './bedrock-api-types.js';

/**
 * Bedrock TokenUsage, normalized (usage/normalize-usage.ts). Bedrock's `inputTokens` EXCLUDES the prompt
 * tokens read from (`cacheReadInputTokens`) and written to (`cacheWriteInputTokens`) the prompt cache, so
 * the three are added once there and the two cache parts reported beside it. `outputTokens` INCLUDES a
 * Claude model's thinking tokens, without saying how many: reasoning 0. `totalTokens` is kept.
 * Undefined when the answer carried nothing countable (the router counts tokens then).
 */
export function convertBedrockUsage(usage: BedrockUsage | null | undefined): Usage | undefined {
  if (!usage || (usage.inputTokens == null && usage.outputTokens == null)) return undefined;
  return normalizeUsage({
    input: usage.inputTokens ?? 0,
    inputIncludesCache: false,
    cacheRead: usage.cacheReadInputTokens ?? 0,
    cacheWrite: usage.cacheWriteInputTokens ?? 0,
    output: usage.outputTokens ?? 0,
    reasoning: 0,
    outputIncludesReasoning: true,
    total: usage.totalTokens ?? 0,
  });
}
