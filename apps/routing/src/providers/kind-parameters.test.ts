import { describe, expect, it } from 'vitest';
import type { ChatRequest } from '@gateway/proto';
import { inexpressibleParameters } from './kind-parameters.js';

const base: ChatRequest = {
  context: undefined, modelId: 'm', routingStrategy: '', endpoint: 'chat.completions', messages: [], tools: [], stop: [],
  includeUsage: false, timeoutMs: 0,
};

const everything: ChatRequest = {
  ...base, seed: 5n, presencePenalty: 0.5, frequencyPenalty: -0.5, imageAspectRatio: '16:9', parallelToolCalls: false, user: 'u-1', verbosity: 'low',
  temperature: 0.3, topP: 0.7, topK: 5, stop: ['END'],
};

describe('inexpressibleParameters', () => {
  it('names, per kind, what its wire has no field for (Vertex by upstream model); openai, azure-openai and simulated send everything', () => {
    expect(inexpressibleParameters('anthropic', 'claude-x', everything)).toEqual(['seed', 'presence_penalty', 'frequency_penalty', 'image_config', 'verbosity']);
    expect(inexpressibleParameters('vertex', 'claude-sonnet-4-5@20250929', everything)).toEqual(['seed', 'presence_penalty', 'frequency_penalty', 'image_config', 'verbosity']);
    expect(inexpressibleParameters('gemini', 'gemini-2.5-flash', everything)).toEqual(['parallel_tool_calls', 'user', 'verbosity']);
    expect(inexpressibleParameters('vertex', 'gemini-2.5-flash', everything)).toEqual(['parallel_tool_calls', 'user', 'verbosity']);
    expect(inexpressibleParameters('bedrock', 'anthropic.claude-x', everything)).toEqual(['seed', 'presence_penalty', 'frequency_penalty', 'image_config', 'parallel_tool_calls', 'user', 'verbosity']);
    // top_k goes to Claude only (additionalModelRequestFields); Nova and the rest have none.
    expect(inexpressibleParameters('bedrock', 'amazon.nova-pro-v1:0', everything)).toEqual(['seed', 'presence_penalty', 'frequency_penalty', 'image_config', 'parallel_tool_calls', 'user', 'verbosity', 'top_k']);
    for (const kind of ['openai', 'azure-openai', 'simulated']) expect(inexpressibleParameters(kind, 'm', everything), kind).toEqual([]);
  });

  it('names only what the request sets; nothing (one shared empty list) for a request that sets none of them', () => {
    expect(inexpressibleParameters('anthropic', 'claude-x', { ...base, seed: 0n })).toEqual(['seed']);
    expect(inexpressibleParameters('gemini', 'g', { ...base, parallelToolCalls: true })).toEqual(['parallel_tool_calls']);
    expect(inexpressibleParameters('anthropic', 'claude-x', base)).toEqual([]);
    expect(inexpressibleParameters('anthropic', 'claude-x', base)).toBe(inexpressibleParameters('bedrock', 'b', base));
  });
});
