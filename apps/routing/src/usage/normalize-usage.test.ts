import { describe, expect, it } from 'vitest';
import { computeCostPicoParsed, chatInsurance, insuranceHonoured, parsePricing } from '@gateway/platform';
import { convertAnthropicUsage } from '../providers/anthropic/convert-anthropic-usage.js';
import { convertBedrockUsage } from '../providers/bedrock/convert-bedrock-usage.js';
import { convertGeminiUsage } from '../providers/gemini/convert-gemini-usage.js';
import { convertOpenAIUsage } from '../providers/openai/convert-openai-usage.js';
import { normalizeUsage } from './normalize-usage.js';

// Issue 35 item 6: one normalization for every provider kind (azure-openai uses the OpenAI converter,
// vertex the Anthropic and Gemini ones). input = uncached + cache read + cache write; output includes
// reasoning (output ≥ reasoning); the provider's total kept beside, never priced.

const counts = (usage: ReturnType<typeof normalizeUsage> | undefined) => usage && {
  input: usage.inputTokens,
  cacheRead: usage.cachedInputTokens,
  cacheWrite: usage.cacheWriteTokens,
  output: usage.outputTokens,
  reasoning: usage.reasoningTokens,
  total: usage.providerTotalTokens ?? 0,
};

describe('normalized usage, per provider kind', () => {
  it('openai / azure-openai: reasoning beside completion_tokens 0 is output (the reported case)', () => {
    expect(counts(convertOpenAIUsage({ prompt_tokens: 900, completion_tokens: 0, total_tokens: 900, completion_tokens_details: { reasoning_tokens: 40 } })))
      .toEqual({ input: 900, cacheRead: 0, cacheWrite: 0, output: 40, reasoning: 40, total: 900 });
  });

  it('openai: completion_tokens includes reasoning_tokens (kept as it is); cache parts are inside prompt_tokens', () => {
    expect(counts(convertOpenAIUsage({
      prompt_tokens: 1_200, completion_tokens: 90, total_tokens: 1_290,
      prompt_tokens_details: { cached_tokens: 800, cache_write_tokens: 300 }, completion_tokens_details: { reasoning_tokens: 40 },
    }))).toEqual({ input: 1_200, cacheRead: 800, cacheWrite: 300, output: 90, reasoning: 40, total: 1_290 });
    // A prompt count below its own cache parts is raised to them (never a negative uncached part).
    expect(convertOpenAIUsage({ prompt_tokens: 10, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 64 } })?.inputTokens).toBe(64);
  });

  it('anthropic: input_tokens excludes cache reads and writes; output_tokens includes thinking (no count apart)', () => {
    expect(counts(convertAnthropicUsage({ input_tokens: 100, cache_read_input_tokens: 800, cache_creation_input_tokens: 300, output_tokens: 90 })))
      .toEqual({ input: 1_200, cacheRead: 800, cacheWrite: 300, output: 90, reasoning: 0, total: 0 });
  });

  it('gemini: candidatesTokenCount excludes thoughtsTokenCount (added); cached content is inside promptTokenCount; total kept', () => {
    expect(counts(convertGeminiUsage({ promptTokenCount: 900, cachedContentTokenCount: 500, candidatesTokenCount: 0, thoughtsTokenCount: 40, totalTokenCount: 940 })))
      .toEqual({ input: 900, cacheRead: 500, cacheWrite: 0, output: 40, reasoning: 40, total: 940 });
    expect(convertGeminiUsage({ promptTokenCount: 10, toolUsePromptTokenCount: 5, candidatesTokenCount: 7, thoughtsTokenCount: 3 })).toMatchObject({ inputTokens: 15, outputTokens: 10 });
  });

  it('bedrock: inputTokens excludes cache reads and writes; outputTokens includes Claude thinking; totalTokens kept', () => {
    expect(counts(convertBedrockUsage({ inputTokens: 100, cacheReadInputTokens: 800, cacheWriteInputTokens: 300, outputTokens: 90, totalTokens: 1_290 })))
      .toEqual({ input: 1_200, cacheRead: 800, cacheWrite: 300, output: 90, reasoning: 0, total: 1_290 });
  });

  it('the contract itself: output ≥ reasoning whichever way a kind counts; nonsense counts are 0; sums saturate', () => {
    const base = { input: 0, inputIncludesCache: true, cacheRead: 0, cacheWrite: 0, output: 0, reasoning: 0, outputIncludesReasoning: true, total: 0 };
    expect(normalizeUsage({ ...base, output: 10, reasoning: 40 }).outputTokens).toBe(40);
    expect(normalizeUsage({ ...base, output: 50, reasoning: 40 }).outputTokens).toBe(50);
    expect(normalizeUsage({ ...base, output: 10, reasoning: 40, outputIncludesReasoning: false }).outputTokens).toBe(50);
    expect(normalizeUsage({ ...base, output: -5, reasoning: 1.5, input: Number.NaN })).toMatchObject({ outputTokens: 0, reasoningTokens: 0, inputTokens: 0 });
    expect(normalizeUsage({ ...base, output: 0xffff_ffff, reasoning: 9, outputIncludesReasoning: false }).outputTokens).toBe(0xffff_ffff);
  });

  it('prices the reported case at 900 prompt + 40 output, and an answer that is only reasoning is no zero completion', () => {
    const usage = convertOpenAIUsage({ prompt_tokens: 900, completion_tokens: 0, completion_tokens_details: { reasoning_tokens: 40 } })!;
    const pricing = parsePricing({ perInputToken: '0.000001', perOutputToken: '0.000002' });
    // 900 × 1,000,000 + 40 × 2,000,000 pico-credits.
    expect(computeCostPicoParsed(usage, pricing)).toBe(900_000_000n + 80_000_000n);
    expect(chatInsurance(usage, '')).toBe('');
    expect(insuranceHonoured('no_output_no_finish_reason', usage)).toBe(false);
  });
});
