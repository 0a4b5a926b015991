import { describe, expect, it } from 'vitest';
import type { ChatRequest } from '@gateway/proto';
import { convertToAnthropicRequest } from './anthropic/convert-to-anthropic-request.js';
import { convertToBedrockRequest } from './bedrock/convert-to-bedrock-request.js';
import { convertToGeminiRequest } from './gemini/convert-to-gemini-request.js';
import { convertToOpenAIRequest } from './openai/convert-to-openai-request.js';

// Each converter returns what it could not send (issue 38 item 3, as vercel/ai's converters return
// warnings): the wire's missing fields from the one table (libs/platform PARAMETERS), and what the wire
// takes only with certain values. The answer names them in dropped_params: nothing is left out silently.

const user = { role: 'user', content: [{ part: { $case: 'text' as const, value: 'q' } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false };
const base: ChatRequest = {
  context: undefined, modelId: 'm', routingStrategy: '', endpoint: 'chat.completions', messages: [user], tools: [], stop: [],
  includeUsage: false, timeoutMs: 0,
};

const everything: ChatRequest = {
  ...base, seed: 5n, presencePenalty: 0.5, frequencyPenalty: -0.5, imageAspectRatio: '16:9', parallelToolCalls: false, user: 'u-1', verbosity: 'low',
  temperature: 0.3, topP: 0.7, topK: 5, stop: ['END'],
};

const anthropic = (request: ChatRequest) => convertToAnthropicRequest(request, { upstreamModel: 'claude-x', stream: false, providerId: 'p' }).unsent;
const gemini = (request: ChatRequest) => convertToGeminiRequest(request, { providerId: 'p', upstreamModel: 'gemini-2.5-flash' }).unsent;
const bedrock = (request: ChatRequest, upstreamModel: string) => convertToBedrockRequest(request, { upstreamModel, providerId: 'p' }).unsent;
const openai = (request: ChatRequest) => convertToOpenAIRequest(request, { upstreamModel: 'm', stream: false }).unsent;

describe('what each converter could not send', () => {
  it('names, per wire, what it has no field for; the OpenAI wire sends everything', () => {
    expect(anthropic(everything)).toEqual(['presence_penalty', 'frequency_penalty', 'image_config', 'seed', 'verbosity']);
    expect(gemini(everything)).toEqual(['parallel_tool_calls', 'verbosity', 'user']);
    expect(bedrock(everything, 'anthropic.claude-x')).toEqual(['presence_penalty', 'frequency_penalty', 'parallel_tool_calls', 'image_config', 'seed', 'verbosity', 'user']);
    // top_k and reasoning go to Claude only (additionalModelRequestFields); Nova and the rest have none.
    expect(bedrock({ ...everything, reasoningEffort: 'high' }, 'amazon.nova-pro-v1:0')).toEqual(
      ['top_k', 'reasoning_effort', 'presence_penalty', 'frequency_penalty', 'parallel_tool_calls', 'image_config', 'seed', 'verbosity', 'user']);
    expect(openai(everything)).toEqual([]);
  });

  it('names only what the request sets; nothing (one shared empty list) for a request that sets none of them', () => {
    expect(anthropic({ ...base, seed: 0n })).toEqual(['seed']);
    expect(gemini({ ...base, parallelToolCalls: true })).toEqual(['parallel_tool_calls']);
    expect(anthropic(base)).toEqual([]);
    expect(gemini(base)).toBe(openai(base));
  });

  it('names what a wire takes only with certain values: sampling with thinking on, whitespace stops, a sixth stop for Gemini', () => {
    const thinking: ChatRequest = { ...base, thinkingBudgetTokens: 2_000, maxOutputTokens: 8_000, temperature: 0.3, topP: 0.5, topK: 5 };
    expect(anthropic(thinking)).toEqual(['temperature', 'top_p', 'top_k']);
    expect(bedrock(thinking, 'anthropic.claude-x')).toEqual(['temperature', 'top_p', 'top_k']);
    // Thinking takes temperature 1 and top_p ≥ 0.95: nothing to name.
    expect(anthropic({ ...thinking, temperature: 1, topP: 0.95, topK: undefined })).toEqual([]);
    expect(anthropic({ ...base, stop: ['\n', 'END'] })).toEqual(['stop']);
    expect(bedrock({ ...base, stop: [' '] }, 'anthropic.claude-x')).toEqual(['stop']);
    expect(gemini({ ...base, stop: ['a', 'b', 'c', 'd', 'e', 'f'] })).toEqual(['stop']);
    expect(gemini({ ...base, stop: ['a', 'b', 'c', 'd', 'e'] })).toEqual([]);
  });

  it('logprobs and candidates reach Gemini (generationConfig); Claude on Bedrock takes the betas, other Bedrock models name them', () => {
    const asked: ChatRequest = { ...base, logprobs: true, topLogprobs: 3, n: 2, anthropicBeta: 'interleaved-thinking-2025-05-14' };
    const sent = convertToGeminiRequest(asked, { providerId: 'p', upstreamModel: 'gemini-2.5-flash' });
    expect(sent.body.generationConfig).toEqual({ candidateCount: 2, responseLogprobs: true, logprobs: 3 });
    expect(sent.unsent).toEqual(['anthropic-beta']);
    // top_logprobs without logprobs: Gemini refuses `logprobs` without responseLogprobs, so it is named.
    const alone = convertToGeminiRequest({ ...base, topLogprobs: 2 }, { providerId: 'p', upstreamModel: 'gemini-2.5-flash' });
    expect([alone.body.generationConfig, alone.unsent]).toEqual([undefined, ['top_logprobs']]);
    const claude = convertToBedrockRequest(asked, { upstreamModel: 'anthropic.claude-x', providerId: 'p' });
    expect(claude.body.additionalModelRequestFields).toEqual({ anthropic_beta: ['interleaved-thinking-2025-05-14'] });
    expect(claude.unsent).toEqual(['logprobs', 'top_logprobs']);
    const nova = convertToBedrockRequest(asked, { upstreamModel: 'amazon.nova-pro-v1:0', providerId: 'p' });
    expect(nova.body.additionalModelRequestFields).toBeUndefined();
    expect(nova.unsent).toEqual(['logprobs', 'top_logprobs', 'anthropic-beta']);
    // A value outside the allowlist (the edge keeps none, routing checks again) never reaches Bedrock.
    const foreign = convertToBedrockRequest({ ...base, anthropicBeta: 'files-api-2025-04-14' }, { upstreamModel: 'anthropic.claude-x', providerId: 'p' });
    expect([foreign.body.additionalModelRequestFields, foreign.unsent]).toEqual([undefined, ['anthropic-beta']]);
  });

  it('names a thinking request a forced tool choice overrides (Anthropic and Bedrock Claude refuse the two together)', () => {
    const forced: ChatRequest = {
      ...base, thinkingBudgetTokens: 2_000, maxOutputTokens: 8_000,
      tools: [{ name: 'f', description: '', parameters: '{"type":"object"}' }], toolChoice: { mode: 'required', toolName: '', disableParallel: false },
    };
    expect(anthropic(forced)).toEqual(['reasoning_effort']);
    expect(bedrock(forced, 'anthropic.claude-x')).toEqual(['reasoning_effort']);
  });
});
