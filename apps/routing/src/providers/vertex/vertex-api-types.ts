import { z } from 'zod';

/*
 * Vertex's own wire format. Chat is Anthropic's Messages (Claude, anthropic-api-types.ts) or Gemini's
 * generateContent (Google models, gemini-api-types.ts); what is Vertex's own is embeddings: Google's
 * embedding models answer `:predict` on their publisher path, not the Gemini API's batchEmbedContents.
 * Request `{instances: [{content}], parameters: {outputDimensionality}}`, answer
 * `{predictions: [{embeddings: {values, statistics: {token_count, truncated}}}]}`.
 */

const predictionSchema = z.looseObject({
  embeddings: z.looseObject({
    values: z.array(z.number()),
    statistics: z.looseObject({ token_count: z.number().nullish(), truncated: z.boolean().nullish() }).nullish(),
  }),
});
export const vertexPredictResponseSchema = z.looseObject({ predictions: z.array(predictionSchema) });
export type VertexPredictResponse = z.infer<typeof vertexPredictResponseSchema>;
