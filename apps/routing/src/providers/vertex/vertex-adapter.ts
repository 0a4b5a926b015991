import {
  type AdapterChatRequest,
  type AdapterChatResult,
  type AdapterStreamPart,
  type AttemptSignal,
  type ProviderAdapterV1,
} from '../provider-adapter.js';
import { isClaudeModel } from './vertex-paths.js';

export interface VertexAdapterOptions {
  providerId: string;
  /** Claude models (`publishers/anthropic`, rawPredict / streamRawPredict). */
  claude: ProviderAdapterV1;
  /** Every other model (`publishers/google`, Gemini's generateContent). */
  gemini: ProviderAdapterV1;
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

  constructor(options: VertexAdapterOptions) {
    this.providerId = options.providerId;
    this.claude = options.claude;
    this.gemini = options.gemini;
  }

  chat(request: AdapterChatRequest, signal: AttemptSignal): Promise<AdapterChatResult> {
    return (isClaudeModel(request.upstreamModel) ? this.claude : this.gemini).chat(request, signal);
  }

  chatStream(request: AdapterChatRequest, signal: AttemptSignal): AsyncIterable<AdapterStreamPart> {
    return (isClaudeModel(request.upstreamModel) ? this.claude : this.gemini).chatStream(request, signal);
  }

  async close(): Promise<void> {
    await Promise.all([this.claude.close(), this.gemini.close()]);
  }
}
