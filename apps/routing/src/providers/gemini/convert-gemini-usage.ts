import type { Usage } from '@gateway/proto';
import { normalizeUsage } from '../../usage/normalize-usage.js';
import type { GeminiUsage } from './gemini-api-types.js';

/**
 * Gemini usageMetadata, normalized (usage/normalize-usage.ts). `promptTokenCount` is every prompt token,
 * the cached ones (`cachedContentTokenCount`) included; tool-use prompt tokens (Google's own tools) are
 * prompt too. `candidatesTokenCount` EXCLUDES the thinking tokens (`thoughtsTokenCount`), so the two are
 * added there, once, and the thinking part is reported as `reasoningTokens`. Gemini reports no cache
 * writes (its implicit cache is free to fill; explicit caches are created and billed outside
 * generateContent). `totalTokenCount` is kept. Undefined when nothing countable came (the router counts
 * tokens then).
 */
export function convertGeminiUsage(usage: GeminiUsage | null | undefined): Usage | undefined {
  if (!usage || (usage.promptTokenCount == null && usage.candidatesTokenCount == null && usage.thoughtsTokenCount == null)) return undefined;
  return normalizeUsage({
    input: (usage.promptTokenCount ?? 0) + (usage.toolUsePromptTokenCount ?? 0),
    inputIncludesCache: true,
    cacheRead: usage.cachedContentTokenCount ?? 0,
    cacheWrite: 0,
    output: usage.candidatesTokenCount ?? 0,
    reasoning: usage.thoughtsTokenCount ?? 0,
    outputIncludesReasoning: false,
    total: usage.totalTokenCount ?? 0,
  });
}
