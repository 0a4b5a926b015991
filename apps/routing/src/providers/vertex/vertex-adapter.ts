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

  constructor(options: VertexAdapterOptions) {
    this.providerId = options.providerId;
    this.claude = options.claude;
    this.gemini = options.gemini;
    this.embedder = options.embedder;
  }

  chat(request: AdapterChatRequest, signal: AttemptSignal): Promise<AdapterChatResult> {
    return (isClaudeModel(request.upstreamModel) ? this.claude : this.gemini).chat(request, signal);
  }

  chatStream(request: AdapterChatRequest, signal: AttemptSignal): AsyncIterable<AdapterStreamPart> {
    return (isClaudeModel(request.upstreamModel) ? this.claude : this.gemini).chatStream(request, signal);
  }

  embed(request: AdapterEmbedRequest, signal: AttemptSignal): Promise<AdapterEmbedResult> {
    if (isClaudeModel(request.upstreamModel)) {
      return Promise.reject(new ProviderError('misconfigured', `${request.upstreamModel} is a chat model: Claude has no embeddings`));
    }
    return this.embedder.embed(request, signal);
  }

  async close(): Promise<void> {
    await Promise.all([this.claude.close(), this.gemini.close(), this.embedder.close()]);
  }
}
