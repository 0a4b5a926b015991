import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { canonicalNameOfWireField, learnedFieldsOf, parameterTableMarkdown, PARAMETERS, spellingsOf, CANONICAL_PARAMETERS } from './parameters.js';

const PROVIDERS_DOC = new URL('../../../docs/providers.md', import.meta.url);
const BEGIN = '<!-- parameter-table:begin (generated from libs/platform/src/parameters.ts: parameterTableMarkdown) -->';
const END = '<!-- parameter-table:end -->';

describe('the parameter vocabulary (libs/platform PARAMETERS)', () => {
  it("docs/providers.md's per-kind table is the one generated from the library table", () => {
    const doc = readFileSync(PROVIDERS_DOC, 'utf8');
    const start = doc.indexOf(BEGIN);
    const end = doc.indexOf(END);
    expect(start, 'the begin marker').toBeGreaterThan(0);
    expect(end, 'the end marker').toBeGreaterThan(start);
    expect(doc.slice(start + BEGIN.length, end).trim()).toBe(parameterTableMarkdown());
  });

  it('a provider refusal names a canonical parameter, the request itself (never dropped) or an extra_body key', () => {
    expect(canonicalNameOfWireField('topK')).toBe('top_k');
    expect(canonicalNameOfWireField('stop_sequences')).toBe('stop');
    expect(canonicalNameOfWireField('thinkingConfig')).toBe('reasoning_effort');
    expect(canonicalNameOfWireField('metadata.user_id')).toBe('user');
    for (const structural of ['tools', 'response_format', 'max_tokens', 'maxOutputTokens', 'messages', 'n', 'prompt_cache_key']) {
      expect(canonicalNameOfWireField(structural), structural).toBe('');
    }
    expect(canonicalNameOfWireField('logit_bias')).toBe('logit_bias');
  });

  it('learnable rows clear their fields; the rest are never learned', () => {
    expect(learnedFieldsOf('reasoning_effort')).toEqual(['reasoningEffort', 'reasoningSummary', 'thinkingBudgetTokens', 'thinkingMode', 'outputEffort']);
    expect(learnedFieldsOf('tools')).toBeUndefined();
    expect(learnedFieldsOf('max_output_tokens')).toBeUndefined();
    expect(learnedFieldsOf('prompt_cache_key')).toBeUndefined();
  });

  it('every row has a catalog name and the wire support of every kind', () => {
    for (const name of CANONICAL_PARAMETERS) {
      // A header (anthropic-beta) is no model's to lack: no catalog name.
      if (name !== 'anthropic-beta') expect(PARAMETERS[name].supportedNames.length, name).toBeGreaterThan(0);
      expect(Object.keys(PARAMETERS[name].wires).sort(), name).toEqual(['anthropic', 'bedrock', 'bedrock-claude', 'gemini', 'openai', 'simulated']);
    }
    expect(spellingsOf('messages', 'user')).toEqual(['metadata.user_id']);
  });
});
