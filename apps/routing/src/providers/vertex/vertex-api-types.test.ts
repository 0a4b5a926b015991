import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { vertexPredictResponseSchema } from './vertex-api-types.js';

const fixture = (name: string): unknown => JSON.parse(readFileSync(new URL(`./__fixtures__/${name}`, import.meta.url), 'utf8'));

describe('vertexPredictResponseSchema', () => {
  it('reads a recorded :predict answer (fixture): one prediction per input, values and token counts', () => {
    const parsed = vertexPredictResponseSchema.parse(fixture('predict.json'));
    expect(parsed.predictions.map((prediction) => prediction.embeddings.values.length)).toEqual([4, 4]);
    expect(parsed.predictions.map((prediction) => prediction.embeddings.statistics?.token_count)).toEqual([6, 4]);
  });

  it('refuses answers whose embeddings are not lists of numbers', () => {
    for (const answer of [{}, { predictions: [{}] }, { predictions: [{ embeddings: { values: ['0.1'] } }] }, { predictions: [{ embeddings: { values: [1], statistics: { token_count: 'x' } } }] }]) {
      expect(vertexPredictResponseSchema.safeParse(answer).success).toBe(false);
    }
  });
});
