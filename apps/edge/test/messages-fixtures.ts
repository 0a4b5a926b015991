import type { Model } from '@gateway/proto';
import { testLogger } from '@gateway/testing';
import type { CatalogModel } from '../src/catalog-cache.js';
import { ReasoningTags } from '../src/canonical/reasoning-tags.js';
import type { AnswerContext } from '../src/inference/dialect.js';

/** Test fixtures of the messages dialect's unit tests (apps/edge/src/dialects/messages/*.test.ts). */

export function catalogModel(overrides: Partial<CatalogModel> & { reasoningEfforts?: string[] } = {}): CatalogModel {
  const { reasoningEfforts = [], ...rest } = overrides;
  return {
    model: { id: 'testco/m', reasoningEfforts } as unknown as Model,
    id: 'testco/m',
    paid: true,
    endpoints: new Set(['messages']),
    supportedParameters: new Set(['tools', 'tool_choice', 'temperature', 'top_p', 'top_k', 'stop', 'max_tokens', 'reasoning', 'response_format', 'user', 'parallel_tool_calls']),
    inputModalities: new Set(['text', 'image']),
    extraParameters: new Set(['custom_knob']),
    allowedTiers: null,
    availableTiers: ['free', 'tier-1'],
    ...rest,
  };
}

export const tags = new ReasoningTags('messages-dialect-test-key-0123');

export function answerContext(overrides: Partial<AnswerContext> = {}): AnswerContext {
  return { requestId: 'req_0123abcd', model: catalogModel(), tags, created: 1_767_225_600, logger: testLogger('messages-test'), ...overrides };
}
