import { describe, expect, it } from 'vitest';
import { convertAnthropicUsage, latestAnthropicUsage } from './convert-anthropic-usage.js';
import { mapAnthropicFinishReason } from './map-anthropic-finish-reason.js';

describe('convertAnthropicUsage', () => {
  it('makes input every prompt token: uncached + cache reads + cache writes, each reported apart once', () => {
    const usage = convertAnthropicUsage({ input_tokens: 21, cache_read_input_tokens: 3400, cache_creation_input_tokens: 1200, output_tokens: 10 });
    expect(usage).toMatchObject({ inputTokens: 4621, cachedInputTokens: 3400, cacheWriteTokens: 1200, outputTokens: 10, reasoningTokens: 0, estimated: false });
    // Billing from these: uncached input is inputTokens - cachedInputTokens - cacheWriteTokens = Anthropic's input_tokens.
    expect(usage!.inputTokens - usage!.cachedInputTokens - usage!.cacheWriteTokens).toBe(21);
  });

  it('treats missing cache counts as zero and reports nothing when nothing was counted', () => {
    expect(convertAnthropicUsage({ input_tokens: 5, output_tokens: 2 })).toMatchObject({ inputTokens: 5, cachedInputTokens: 0, cacheWriteTokens: 0, outputTokens: 2 });
    expect(convertAnthropicUsage({ cache_read_input_tokens: 7 })).toBeUndefined();
    expect(convertAnthropicUsage(null)).toBeUndefined();
  });

  it('takes each stream count from the latest event that has it, never summing events', () => {
    const start = { input_tokens: 472, cache_read_input_tokens: 2048, cache_creation_input_tokens: 0, output_tokens: 4 };
    expect(latestAnthropicUsage(start, { output_tokens: 89 })).toEqual({ ...start, output_tokens: 89 });
    // Newer API versions repeat the input counts in message_delta (they may grow with server tools).
    expect(latestAnthropicUsage(start, { input_tokens: 500, cache_read_input_tokens: 2048, cache_creation_input_tokens: 0, output_tokens: 90 }))
      .toEqual({ input_tokens: 500, cache_read_input_tokens: 2048, cache_creation_input_tokens: 0, output_tokens: 90 });
    expect(convertAnthropicUsage(latestAnthropicUsage(start, { output_tokens: 89 }))).toMatchObject({ inputTokens: 2520, cachedInputTokens: 2048, outputTokens: 89 });
    expect(latestAnthropicUsage(undefined, { output_tokens: 3 })).toEqual({ output_tokens: 3 });
    expect(latestAnthropicUsage(start, null)).toEqual(start);
  });
});

describe('mapAnthropicFinishReason', () => {
  it('maps every stop reason onto the canonical four', () => {
    expect(['end_turn', 'stop_sequence', 'pause_turn', 'tool_use', 'max_tokens', 'model_context_window_exceeded', 'refusal', null, 'something_new']
      .map(mapAnthropicFinishReason))
      .toEqual(['stop', 'stop', 'stop', 'tool_calls', 'length', 'length', 'content_filter', 'stop', 'stop']);
  });
});
