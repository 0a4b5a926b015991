import type { Usage } from '@gateway/proto';
import { emptyUsage } from '../../usage/token-counter.js';
import type { GeminiUsage } from './gemini-api-types.js';

/**
 * Gemini usageMetadata in canonical terms. `promptTokenCount` is every prompt token, the cached ones
 * (`cachedContentTokenCount`) included, like canonical `inputTokens`; tool-use prompt tokens (Google's
 * own tools) are prompt too. `candidatesTokenCount` EXCLUDES the thinking tokens
 * (`thoughtsTokenCount`), while canonical `outputTokens` includes reasoning: the two are added here,
 * once, and the thinking part is reported as `reasoningTokens`. Gemini reports no cache writes (its
 * implicit cache is free to fill; explicit caches are created and billed outside generateContent).
 * Undefined when nothing countable came (the router counts tokens then).
 */
export function convertGeminiUsage(usage: GeminiUsage | null | undefined): Usage | undefined {
  if (!usage || (usage.promptTokenCount == null && usage.candidatesTokenCount == null && usage.thoughtsTokenCount == null)) return undefined;
  const thoughts = usage.thoughtsTokenCount ?? 0;
  return {
    ...emptyUsage(),
    inputTokens: (usage.promptTokenCount ?? 0) + (usage.toolUsePromptTokenCount ?? 0),
    cachedInputTokens: usage.cachedContentTokenCount ?? 0,
    outputTokens: (usage.candidatesTokenCount ?? 0) + thoughts,
    reasoningTokens: thoughts,
  };
}
