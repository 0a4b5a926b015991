import type { Usage } from '@gateway/proto';
import { claudeUsage } from '../anthropic/convert-anthropic-usage.js';
import type { BedrockUsage } from './bedrock-api-types.js';

/**
 * Bedrock TokenUsage, normalized. Converse counts as Claude does (every model it serves): `inputTokens`
 * EXCLUDES the prompt tokens read from (`cacheReadInputTokens`) and written to (`cacheWriteInputTokens`)
 * the prompt cache, `outputTokens` INCLUDES a Claude model's thinking tokens without saying how many;
 * `totalTokens` is kept. Undefined when the answer carried nothing countable (the router counts tokens then).
 */
export function convertBedrockUsage(usage: BedrockUsage | null | undefined): Usage | undefined {
  if (!usage) return undefined;
  return claudeUsage({ input: usage.inputTokens, output: usage.outputTokens, cacheRead: usage.cacheReadInputTokens, cacheWrite: usage.cacheWriteInputTokens, total: usage.totalTokens });
}
