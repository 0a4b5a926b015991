import { describe, expect, it } from 'vitest';
import { convertOpenAIUsage } from './convert-openai-usage.js';

describe('convertOpenAIUsage', () => {
  it('keeps cache reads and writes as parts of the prompt tokens', () => {
    expect(convertOpenAIUsage({ prompt_tokens: 2_060, completion_tokens: 7, prompt_tokens_details: { cached_tokens: 10, cache_write_tokens: 2_048 } })).toMatchObject({
      inputTokens: 2_060,
      cachedInputTokens: 10,
      cacheWriteTokens: 2_048,
      outputTokens: 7,
    });
  });

  it('reports no cache writes when the provider says none or something that is not a count', () => {
    expect(convertOpenAIUsage({ prompt_tokens: 5, completion_tokens: 1 })).toMatchObject({ cachedInputTokens: 0, cacheWriteTokens: 0 });
    expect(convertOpenAIUsage({ prompt_tokens: 5, completion_tokens: 1, prompt_tokens_details: { cache_write_tokens: -3 } })?.cacheWriteTokens).toBe(0);
    expect(convertOpenAIUsage({ prompt_tokens: 5, completion_tokens: 1, prompt_tokens_details: { cache_write_tokens: '7' } })?.cacheWriteTokens).toBe(0);
    expect(convertOpenAIUsage({})).toBeUndefined();
  });
});
