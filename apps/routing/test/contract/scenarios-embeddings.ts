import { expect } from 'vitest';
import { live } from './contract-requests.js';
import type { ContractRig } from './contract-types.js';

/**
 * Embeddings, for the kinds that have them: one vector per input in input order, of the dimensions asked
 * (the setting reached the provider), and the inputs are what the provider received.
 */
export async function embeddings(rig: ContractRig) {
  expect(rig.adapter.embed, 'the adapter offers embeddings').toBeDefined();
  expect(rig.embeddingModel, 'the row names an embedding model').toBeDefined();
  const texts = ['The cat sat on the mat.', 'Stock prices rose sharply today.'];
  const result = await rig.adapter.embed!({ upstreamModel: rig.embeddingModel!, texts, tokenInputs: [], dimensions: 4 }, live());
  expect(result.embeddings).toHaveLength(2);
  for (const vector of result.embeddings) {
    expect(vector).toHaveLength(4);
    for (const value of vector) expect(Number.isFinite(value)).toBe(true);
  }
  expect(result.embeddings[0]).not.toEqual(result.embeddings[1]);
  if (!rig.scripted) return;
  // Some take one input per request (Vertex's gemini-embedding-001): every input reached the provider.
  const received = rig.received();
  expect(received.length).toBeGreaterThan(0);
  const bodies = received.map((request) => JSON.stringify(request.body)).join('\n');
  for (const text of texts) expect(bodies).toContain(text);
}
