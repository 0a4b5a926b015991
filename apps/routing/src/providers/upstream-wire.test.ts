import { describe, expect, it } from 'vitest';
import { answersChoices, MAX_GEMINI_CANDIDATES, wireOf } from './upstream-wire.js';

describe('which upstreams answer several choices (PARAMETERS.n)', () => {
  it('OpenAI-wire kinds always; Gemini-wire ones up to 8 candidates and never in a stream; the others never', () => {
    for (const kind of ['openai', 'azure-openai']) {
      expect(answersChoices(kind, 'm', 128, true)).toBe(true);
      expect(answersChoices(kind, 'm', 2, false)).toBe(true);
    }
    for (const [kind, model] of [['gemini', 'gemini-2.5-flash'], ['vertex', 'gemini-3-pro-preview']] as const) {
      expect(wireOf(kind, model)).toBe('gemini');
      expect(answersChoices(kind, model, 2, false)).toBe(true);
      expect(answersChoices(kind, model, MAX_GEMINI_CANDIDATES, false)).toBe(true);
      expect(answersChoices(kind, model, MAX_GEMINI_CANDIDATES + 1, false)).toBe(false);
      expect(answersChoices(kind, model, 2, true)).toBe(false);
    }
    for (const [kind, model] of [['anthropic', 'claude-x'], ['vertex', 'claude-sonnet-4-5@20250929'], ['bedrock', 'anthropic.claude-x'], ['bedrock', 'amazon.nova-pro-v1:0'], ['simulated', 's']] as const) {
      expect(answersChoices(kind, model, 2, false), `${kind} ${model}`).toBe(false);
    }
  });
});
