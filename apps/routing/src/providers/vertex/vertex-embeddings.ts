import type { Pool } from 'undici';
import { emptyUsage } from '../../usage/token-counter.js';
import { geminiHttpError } from '../gemini/gemini-error.js';
import { bufferedRequest, MAX_RESPONSE_BYTES } from '../http/buffered-request.js';
import { parseJsonAnswer } from '../http/json-answer.js';
import { createProviderPool } from '../http/provider-pool.js';
import {
  ProviderError,
  toProviderError,
  type AdapterEmbedRequest,
  type AdapterEmbedResult,
  type AttemptSignal,
} from '../provider-adapter.js';
import { vertexPredictResponseSchema } from './vertex-api-types.js';

/*
 * Embeddings on Vertex AI: Google's embedding models answer `:predict` on their publisher path, not the
 * Gemini API's batchEmbedContents. Request `{instances: [{content}], parameters: {outputDimensionality}}`,
 * answer `{predictions: [{embeddings: {values, statistics: {token_count, truncated}}}]}`.
 */

/** Instances per `:predict` call: the text-embedding models take up to 250, gemini-embedding models one. */
const MAX_INSTANCES = 250;
/** `:predict` calls of one request in flight at once (a gemini-embedding batch is one call per input). */
const PARALLEL_CALLS = 8;

/** gemini-embedding models take one input per request on Vertex. */
function instancesPerCall(model: string): number {
  return model.startsWith('gemini-embedding') ? 1 : MAX_INSTANCES;
}

export interface VertexEmbedderOptions {
  origin: string;
  /** `.../publishers/google/models/{model}:predict`. */
  predictPath: (model: string) => string;
  authHeaders: (signal: AttemptSignal) => Promise<Record<string, string>> | Record<string, string>;
  headers?: Record<string, string> | undefined;
}

/** Text embeddings of a Vertex provider's Google models. */
export class VertexEmbedder {
  private readonly pool: Pool;
  private readonly predictPath: VertexEmbedderOptions['predictPath'];
  private readonly authHeaders: VertexEmbedderOptions['authHeaders'];
  private readonly headers: Record<string, string>;
  private lastAuth: Record<string, string> | undefined = undefined;
  private merged: Record<string, string> = {};

  constructor(options: VertexEmbedderOptions) {
    this.pool = createProviderPool(options.origin);
    this.predictPath = options.predictPath;
    this.authHeaders = options.authHeaders;
    this.headers = { ...options.headers, 'content-type': 'application/json', accept: 'application/json' };
  }

  async embed(request: AdapterEmbedRequest, signal: AttemptSignal): Promise<AdapterEmbedResult> {
    if (request.texts.length === 0) throw new ProviderError('rejected', 'this provider embeds text only, not token ids', 400);
    const path = this.predictPath(request.upstreamModel);
    const size = instancesPerCall(request.upstreamModel);
    const batches: string[][] = [];
    for (let start = 0; start < request.texts.length; start += size) batches.push(request.texts.slice(start, start + size));
    const parameters = request.dimensions !== undefined ? { outputDimensionality: request.dimensions } : undefined;

    const embeddings: number[][] = new Array<number[]>(request.texts.length);
    let tokens = 0;
    let counted = true;
    let next = 0;
    let failed = false;
    const worker = async () => {
      while (next < batches.length && !failed) {
        const index = next++;
        const batch = batches[index]!;
        const predictions = await this.predict(path, batch, parameters, signal).catch((error: unknown) => {
          failed = true;
          throw error;
        });
        predictions.forEach((prediction, offset) => {
          embeddings[index * size + offset] = prediction.embeddings.values;
          const count = prediction.embeddings.statistics?.token_count;
          if (typeof count === 'number') tokens += count;
          else counted = false;
        });
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARALLEL_CALLS, batches.length) }, worker));
    return { embeddings, usage: counted && tokens > 0 ? { ...emptyUsage(), inputTokens: tokens } : undefined };
  }

  private async predict(path: string, texts: string[], parameters: object | undefined, signal: AttemptSignal) {
    const body = JSON.stringify({ instances: texts.map((content) => ({ content })), ...(parameters ? { parameters } : {}) });
    let answer: { statusCode: number; text: string };
    try {
      const auth = await this.authHeaders(signal);
      if (auth !== this.lastAuth) {
        this.merged = { ...this.headers, ...auth };
        this.lastAuth = auth;
      }
      answer = await bufferedRequest(this.pool, { method: 'POST', path, headers: this.merged, body }, signal, MAX_RESPONSE_BYTES);
    } catch (error) {
      throw toProviderError(error, signal);
    }
    if (answer.statusCode >= 300) throw geminiHttpError(answer.statusCode, answer.text);
    const predicted = parseJsonAnswer(answer.text, (json) => vertexPredictResponseSchema.safeParse(json), 'embeddings answer');
    if (predicted.predictions.length !== texts.length) {
      throw new ProviderError('connection', `expected ${texts.length} embeddings, got ${predicted.predictions.length}`);
    }
    return predicted.predictions;
  }

  async close(): Promise<void> {
    await this.pool.close().catch(() => undefined);
  }
}
