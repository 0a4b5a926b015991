import { describe, expect, it } from 'vitest';
import type { ChatRequest, Model } from '@gateway/proto';
import { dropUnsupportedParameters } from './drop-unsupported-parameters.js';

const model = { supportedParameters: ['temperature'], extraParameters: [] } as unknown as Model;
const request: ChatRequest = {
  context: undefined, modelId: 'm', routingStrategy: '', endpoint: 'chat.completions', messages: [], stop: ['END'], includeUsage: false, timeoutMs: 0,
  tools: [], temperature: 1, topP: 0.5, user: 'u-1', extraBody: '{"seed":1}',
};

describe('dropUnsupportedParameters', () => {
  it('leaves dropping to the edge: the request goes on as the edge made it, nothing reported', () => {
    const { request: forwarded, dropped } = dropUnsupportedParameters(request, model);
    expect(forwarded).toBe(request);
    expect(forwarded).toMatchObject({ topP: 0.5, stop: ['END'], user: 'u-1', extraBody: '{"seed":1}' });
    expect(dropped).toEqual([]);
  });
});
