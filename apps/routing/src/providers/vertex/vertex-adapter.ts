import {
  ProviderError,
  type AdapterChatRequest,
  type AdapterEmbedRequest,
  type AdapterEmbedResult,
  type AdapterChatResult,
  type AdapterStreamPart,
  type AttemptSignal,
  type ProviderAdapterV1,
} from '../provider-adapter.js';
import type { VertexEmbedder } from './vertex-embeddings.js';
import { isClaudeModel } from './vertex-paths.js';

export interface VertexAdapterOptions {
  providerId: string;
  /** Claude models (`publishers/anthropic`, rawPredict / streamRawPredict). */
  claude: ProviderAdapterV1;
  /** Every other model (`publishers/google`, Gemini's generateContent). */
  gemini: ProviderAdapterV1;
  /** Embeddings of Google's embedding models (`:predict`). */
  embedder: VertexEmbedder;
  /** Vertex refused the bearer token (401) on a Google route: the next request should get a fresh one. */
  onUnauthenticated: () => void;
}

/**
 * Vertex AI (`kind: vertex`): one provider serves Anthropic's Claude models in Anthropic's wire format
 * and Google's Gemini models in Gemini's, under one project, location and service account. The offer's
 * upstream_model picks the publisher; each half is the anthropic or gemini adapter pointed at Vertex's
 * paths with the service account's bearer token, and reports this provider's id, so the reasoning
 * signatures either half issues go back only to this provider.
 */
export class VertexAdapter implements ProviderAdapterV1 {
  readonly specificationVersion = 'v1' as const;
  readonly kind = 'vertex';
  readonly providerId: string;
  private readonly claude: ProviderAdapterV1;
  private readonly gemini: ProviderAdapterV1;
  private readonly embedder: VertexEmbedder;
  /** Rethrows a failure, dropping the token first when Vertex refused it. */
  private readonly afterFailure: (error: unknown) => never;

  constructor(options: VertexAdapterOptions) {
    this.providerId = options.providerId;
    this.claude = options.claude;
    this.gemini = options.gemini;
    this.embedder = options.embedder;
    const onUnauthenticated = options.onUnauthenticated;
    this.afterFailure = (error) => {
      if (error instanceof ProviderError && error.httpStatus === 401) onUnauthenticated();
      throw error;
    };
  }

  // The Claude half drops a refused token itself (its httpError option); the Gemini half is watched here.

  chat(request: AdapterChatRequest, signal: AttemptSignal): Promise<AdapterChatResult> {
    if (isClaudeModel(request.upstreamModel)) return this.claude.chat(request, signal);
    return this.gemini.chat(request, signal).catch(this.afterFailure);
  }

  chatStream(request: AdapterChatRequest, signal: AttemptSignal): AsyncIterable<AdapterStreamPart> {
    if (isClaudeModel(request.upstreamModel)) return this.claude.chatStream(request, signal);
    return watchFirstPart(this.gemini.chatStream(request, signal), this.afterFailure);
  }

  embed(request: AdapterEmbedRequest, signal: AttemptSignal): Promise<AdapterEmbedResult> {
    if (isClaudeModel(request.upstreamModel)) {
      return Promise.reject(new ProviderError('misconfigured', `${request.upstreamModel} is a chat model: Claude has no embeddings`));
    }
    return this.embedder.embed(request, signal).catch(this.afterFailure);
  }

  async close(): Promise<void> {
    await Promise.all([this.claude.close(), this.gemini.close(), this.embedder.close()]);
  }
}

/**
 * The stream as it is, with `onFailure` seeing a failure of its first part (where an HTTP refusal
 * surfaces); later parts pass straight through, without a generator of their own.
 */
function watchFirstPart<T>(stream: AsyncIterable<T>, onFailure: (error: unknown) => never): AsyncIterable<T> {
  return {
    [Symbol.asyncIterator]() {
      const iterator = stream[Symbol.asyncIterator]();
      let first = true;
      return {
        next() {
          if (!first) return iterator.next();
          first = false;
          return iterator.next().catch(onFailure);
        },
        return(value?: unknown) {
          return iterator.return ? iterator.return(value) : Promise.resolve({ done: true, value: undefined as T });
        },
      };
    },
  };
}
