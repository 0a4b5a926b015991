import { modelTakesEndpointParameter } from '@gateway/platform';
import { z } from 'zod';
import type { EmbedResponse, Pricing } from '@gateway/proto';
import { answerCost } from '../../inference/answer-cost.js';
import { edgeErrors } from '../../errors.js';
import { sendJson } from '../../http.js';
import { gatewayHeaders } from '../../inference/gateway-headers.js';
import { countTokens, ENDPOINT_DEADLINE_MS, pricePico, jsonBody, type EndpointFamily } from '../shared.js';

/** OpenAI's own bound on inputs per request. */
export const MAX_EMBEDDING_INPUTS = 2_048;

export const embeddingsSchema = z.looseObject({
  model: z.string().min(1),
  // Shape checked by embeddingInputs: a union's error would not say which bound was passed.
  input: z.union([z.string(), z.array(z.unknown())], 'must be a string, an array of strings, an array of token ids or an array of token-id arrays'),
  encoding_format: z.enum(['float', 'base64']).nullish(),
  // A uint32 in the Router call: larger values were a 500 serializing it (issue 29).
  dimensions: z.number().int().min(1).max(4_294_967_295, 'must be at most 4294967295').nullish(),
  user: z.string().nullish(),
});

const isTokenId = (value: unknown): value is number => Number.isInteger(value) && (value as number) >= 0 && (value as number) <= 4_294_967_295;

/** The inputs as texts or as token-id lists, with a 400 naming the field and the bound that was passed. */
export function embeddingInputs(input: string | unknown[]): { texts: string[]; tokenInputs: number[][] } {
  if (typeof input === 'string') {
    if (input === '') throw edgeErrors.invalidRequest('body.input: must not be empty.', 'body.input');
    return { texts: [input], tokenInputs: [] };
  }
  if (input.length === 0) throw edgeErrors.invalidRequest('body.input: must hold at least one input.', 'body.input');
  if (input.length > MAX_EMBEDDING_INPUTS) {
    throw edgeErrors.invalidRequest(`body.input: ${input.length} inputs; at most ${MAX_EMBEDDING_INPUTS} per request.`, 'body.input');
  }
  if (input.every((item) => typeof item === 'string')) {
    const empty = input.findIndex((item) => item === '');
    if (empty >= 0) throw edgeErrors.invalidRequest(`body.input.${empty}: must not be empty.`, `body.input.${empty}`);
    return { texts: input as string[], tokenInputs: [] };
  }
  if (input.every(isTokenId)) return { texts: [], tokenInputs: [input as number[]] };
  if (input.every((item) => Array.isArray(item))) {
    (input as unknown[][]).forEach((ids, index) => {
      if (ids.length === 0 || !ids.every(isTokenId)) {
        throw edgeErrors.invalidRequest(`body.input.${index}: a token-id input must be a non-empty array of non-negative integers.`, `body.input.${index}`);
      }
    });
    return { texts: [], tokenInputs: input as number[][] };
  }
  throw edgeErrors.invalidRequest('body.input: must be a string, an array of strings, an array of token ids or an array of token-id arrays.', 'body.input');
}

type EmbeddingsBody = z.infer<typeof embeddingsSchema>;

interface PreparedEmbeddings {
  body: EmbeddingsBody;
  texts: string[];
  tokenInputs: number[][];
  modelId: string;
}

/** A vector as the OpenAI SDK decodes `base64`: little-endian float32 bytes (spec §2.4: precision is lost). */
export function encodeBase64Vector(values: readonly number[]): string {
  const bytes = Buffer.allocUnsafe(values.length * 4);
  values.forEach((value, index) => bytes.writeFloatLE(value, index * 4));
  return bytes.toString('base64');
}

/** `pricing`: the catalog's prices of the model, for a Router that sends none with the answer (usage.cost). */
export function renderEmbeddings(answer: EmbedResponse, base64: boolean, pricing?: Pricing) {
  const promptTokens = answer.usage?.inputTokens ?? 0;
  return {
    object: 'list',
    data: answer.embeddings.map((embedding, index) => ({
      object: 'embedding',
      index,
      embedding: base64 ? encodeBase64Vector(embedding.values) : embedding.values,
    })),
    model: answer.modelId,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, ...answerCost(answer.usage, answer.prices, pricing) },
  };
}

/** POST /v1/embeddings (spec §2.4, §4.7). */
export const embeddingsFamily: EndpointFamily<EmbeddingsBody, PreparedEmbeddings> = {
  endpoint: 'embeddings',
  parse: jsonBody(embeddingsSchema),
  modelName: (body) => body.model,
  async prepare(body, model) {
    const { texts, tokenInputs } = embeddingInputs(body.input);
    const counts = texts.length > 0 ? await countTokens(texts) : tokenInputs.map((ids) => ids.length);
    const window = model.model.contextWindow;
    counts.forEach((count, index) => {
      if (window > 0 && count > window) {
        throw edgeErrors.invalidRequest(
          `body.input.${index}: ${count} tokens; ${model.id} embeds at most ${window} tokens per input.`, `body.input.${index}`, 'context_length_exceeded',
        );
      }
    });
    const total = counts.reduce((sum, count) => sum + count, 0);
    return { prepared: { body, texts, tokenInputs, modelId: model.id }, holdPico: pricePico(model, 'perInputToken', total) + pricePico(model, 'perToken', total) };
  },
  async exchange({ prepared }, job, http, context) {
    const { body } = prepared;
    // `dimensions` reaches only a model that lists it (spec 4.7), decided here once; otherwise named.
    const dimensions = body.dimensions != null && modelTakesEndpointParameter(job.model.supportedParameters, 'dimensions') ? body.dimensions : undefined;
    const answer = await context.router.embed(
      {
        context: job.routerContext,
        modelId: prepared.modelId,
        routingStrategy: job.strategy,
        texts: prepared.texts,
        tokenInputs: prepared.tokenInputs.map((ids) => ({ ids })),
        ...(dimensions !== undefined ? { dimensions } : {}),
      },
      { requestId: job.requestId, deadlineMs: ENDPOINT_DEADLINE_MS, signal: job.signal },
    );
    job.commit(answer.usage);
    const dropped = body.dimensions != null && dimensions === undefined ? ['dimensions'] : [];
    sendJson(http.response, 200, renderEmbeddings(answer, body.encoding_format === 'base64', job.model.model.pricing), gatewayHeaders(answer.routingStrategy || job.strategy, dropped));
  },
};
