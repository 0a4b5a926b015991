import { describe, expect, it } from 'vitest';
import type { ChatRequest, Model } from '@gateway/proto';
import { dropUnsupportedParameters } from './drop-unsupported-parameters.js';

const model = { supportedParameters: ['temperature', 'max_tokens', 'tools'], extraParameters: ['seed'] } as unknown as Model;
const request: ChatRequest = {
  context: undefined, modelId: 'm', routingStrategy: '', endpoint: 'chat.completions', messages: [], stop: ['END'], includeUsage: false, timeoutMs: 0,
  tools: [{ name: 't', description: '', parameters: '{}' }], toolChoice: { mode: 'auto', toolName: '', disableParallel: false },
  temperature: 1, topP: 0.5, maxOutputTokens: 10, extraBody: '{"seed":1,"logit_bias":{}}',
};

describe('dropUnsupportedParameters', () => {
  it('drops what the model does not list, keeps the rest, and names what it dropped', () => {
    const { request: cleaned, dropped } = dropUnsupportedParameters(request, model);
    expect(dropped.sort()).toEqual(['logit_bias', 'stop', 'tool_choice', 'top_p']);
    expect(cleaned).toMatchObject({ temperature: 1, maxOutputTokens: 10, topP: undefined, stop: [], toolChoice: undefined, extraBody: '{"seed":1}' });
    expect(cleaned.tools).toHaveLength(1);
    expect(request.topP).toBe(0.5);
  });
});
