import { describe, expect, it } from 'vitest';
import { geminiResponseSchema, parseGeminiResponse } from './gemini-api-types.js';

const answers: unknown[] = [
  { candidates: [{ content: { parts: [{ text: 'hi', thoughtSignature: 'c2ln' }], role: 'model' }, finishReason: 'STOP', index: 0 }], usageMetadata: { promptTokenCount: 3, candidatesTokenCount: 1, totalTokenCount: 4 }, modelVersion: 'm', responseId: 'r' },
  { candidates: [{ content: { parts: [{ functionCall: { name: 'f', args: { a: [1] } } }, { executableCode: { code: 'x' } }] } }] },
  { promptFeedback: { blockReason: 'SAFETY' }, usageMetadata: { promptTokenCount: 3 } },
  { candidates: [{ finishReason: 'MAX_TOKENS' }] },
  { candidates: [{ content: { parts: 'nope' } }] },
  { candidates: [{ content: { parts: [{ functionCall: { name: 'f', args: [1, 2] } }] } }] },
  { usageMetadata: { promptTokenCount: -1 } },
  { candidates: [{ index: 0.5 }] },
  { promptFeedback: { blockReason: 7 } },
  [],
  null,
];

describe('parseGeminiResponse', () => {
  it('accepts and refuses exactly what the zod schema does', () => {
    for (const answer of answers) {
      expect([answer, parseGeminiResponse(answer).success]).toEqual([answer, geminiResponseSchema.safeParse(answer).success]);
    }
    expect(answers.map((answer) => parseGeminiResponse(answer).success)).toEqual([true, true, true, true, false, false, false, false, false, false, false]);
  });
});
