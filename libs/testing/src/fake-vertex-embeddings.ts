import type { ServerResponse } from 'node:http';
import { approximateTokens } from './fake-upstream-support.js';

/** Vector length when the request sets no outputDimensionality (small: tests compare whole vectors). */
const DEFAULT_DIMENSIONS = 8;
const INSTANCE_FIELDS = new Set(['content', 'task_type', 'title']);
const PARAMETER_FIELDS = new Set(['outputDimensionality', 'autoTruncate']);

function invalid(response: ServerResponse, message: string) {
  response.writeHead(400, { 'content-type': 'application/json; charset=UTF-8' });
  response.end(JSON.stringify({ error: { code: 400, message, status: 'INVALID_ARGUMENT' } }));
}

/** A deterministic unit-free vector of a text: equal texts get equal vectors. */
export function fakeVertexEmbedding(text: string, dimensions: number): number[] {
  let seed = 0;
  for (let index = 0; index < text.length; index++) seed = (seed * 31 + text.charCodeAt(index)) >>> 0;
  return Array.from({ length: dimensions }, (_, index) => (((seed >>> (index % 24)) + index * 7) % 1000) / 1000);
}

/**
 * `publishers/google/models/{model}:predict` for Google's embedding models, as Vertex answers it:
 * `{instances: [{content, task_type?, title?}], parameters?: {outputDimensionality?, autoTruncate?}}` →
 * `{predictions: [{embeddings: {values, statistics: {token_count, truncated}}}]}`. gemini-embedding
 * models take one instance per request, the text-embedding models up to 250.
 */
export function answerVertexPredict(response: ServerResponse, body: any, model: string) {
  if (!body || typeof body !== 'object' || !Array.isArray(body.instances) || body.instances.length === 0) {
    return invalid(response, 'instances: at least one instance is required.');
  }
  const limit = model.startsWith('gemini-embedding') ? 1 : 250;
  if (body.instances.length > limit) return invalid(response, `Unable to submit request because the model supports up to ${limit} instances per request, but ${body.instances.length} were given.`);
  for (const instance of body.instances) {
    if (!instance || typeof instance.content !== 'string') return invalid(response, 'instances[].content: a string is required.');
    const unknown = Object.keys(instance).find((field) => !INSTANCE_FIELDS.has(field));
    if (unknown) return invalid(response, `Invalid JSON payload received. Unknown name "${unknown}" at 'instances[0]': Cannot find field.`);
  }
  const parameters = body.parameters ?? {};
  const unknownParameter = Object.keys(parameters).find((field) => !PARAMETER_FIELDS.has(field));
  if (unknownParameter) return invalid(response, `Invalid JSON payload received. Unknown name "${unknownParameter}" at 'parameters': Cannot find field.`);
  const dimensions = parameters.outputDimensionality ?? DEFAULT_DIMENSIONS;
  if (!Number.isInteger(dimensions) || dimensions < 1) return invalid(response, 'parameters.outputDimensionality must be a positive integer.');
  response.writeHead(200, { 'content-type': 'application/json; charset=UTF-8' });
  response.end(JSON.stringify({
    predictions: body.instances.map((instance: { content: string }) => ({
      embeddings: { values: fakeVertexEmbedding(instance.content, dimensions), statistics: { token_count: approximateTokens(instance.content), truncated: false } },
    })),
    metadata: { billableCharacterCount: body.instances.reduce((sum: number, instance: { content: string }) => sum + instance.content.length, 0) },
  }));
}
