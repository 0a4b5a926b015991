import { describe, expect, it } from 'vitest';
import { Provider } from '@gateway/proto';
import { GEN_AI_COUNTERS, GEN_AI_HISTOGRAMS, genAiOperationName, genAiUpstreamOf } from './gen-ai-conventions.js';

describe('GenAI conventions: what a catalog provider and an endpoint are called', () => {
  it.each([
    [{ kind: 'openai' }, { providerName: 'openai', serverAddress: 'api.openai.com', serverPort: 443 }],
    [{ kind: 'openai', baseUrl: 'http://10.0.0.7:8000/v1' }, { providerName: 'openai', serverAddress: '10.0.0.7', serverPort: 8000 }],
    [{ kind: 'anthropic' }, { providerName: 'anthropic', serverAddress: 'api.anthropic.com', serverPort: 443 }],
    [{ kind: 'gemini' }, { providerName: 'gcp.gemini', serverAddress: 'generativelanguage.googleapis.com', serverPort: 443 }],
    [{ kind: 'vertex', location: 'europe-west4' }, { providerName: 'gcp.vertex_ai', serverAddress: 'europe-west4-aiplatform.googleapis.com', serverPort: 443 }],
    [{ kind: 'vertex', location: 'global' }, { providerName: 'gcp.vertex_ai', serverAddress: 'aiplatform.googleapis.com', serverPort: 443 }],
    [{ kind: 'bedrock', region: 'eu-central-1' }, { providerName: 'aws.bedrock', serverAddress: 'bedrock-runtime.eu-central-1.amazonaws.com', serverPort: 443 }],
    [{ kind: 'azure-openai', baseUrl: 'https://acme.openai.azure.com' }, { providerName: 'azure.ai.openai', serverAddress: 'acme.openai.azure.com', serverPort: 443 }],
    [{ kind: 'simulated' }, { providerName: 'simulated', serverAddress: '', serverPort: 0 }],
  ])('%o is %o', (config, expected) => {
    expect(genAiUpstreamOf(Provider.fromPartial({ id: 'p', ...config }))).toEqual(expected);
  });

  it('names each endpoint with the well-known operation that applies', () => {
    expect(['chat.completions', 'messages', 'responses', 'embeddings', 'images.generations', 'audio.speech'].map(genAiOperationName))
      .toEqual(['chat', 'chat', 'chat', 'embeddings', 'generate_content', 'generate_content']);
  });

  it('keeps one description per provider entry (a catalog reload brings a new entry, and a new description)', () => {
    const provider = Provider.fromPartial({ id: 'p', kind: 'openai' });
    expect(genAiUpstreamOf(provider)).toBe(genAiUpstreamOf(provider));
    expect(genAiUpstreamOf(Provider.fromPartial({ id: 'p', kind: 'openai', baseUrl: 'http://127.0.0.1:9999' })).serverPort).toBe(9999);
  });

  it('names each metric on the Prometheus scrape as the OpenTelemetry-to-Prometheus translation does', () => {
    expect(Object.values({ ...GEN_AI_HISTOGRAMS, ...GEN_AI_COUNTERS }).map((metric) => [metric.otel, metric.prometheus])).toEqual([
      ['gen_ai.client.operation.duration', 'gen_ai_client_operation_duration_seconds'],
      ['gen_ai.client.operation.time_to_first_chunk', 'gen_ai_client_operation_time_to_first_chunk_seconds'],
      ['gen_ai.client.operation.time_per_output_chunk', 'gen_ai_client_operation_time_per_output_chunk_seconds'],
      ['gen_ai.client.token.usage', 'gen_ai_client_token_usage'],
      ['gen_ai.client.inference.operation.input_tokens', 'gen_ai_client_inference_operation_input_tokens'],
      ['gen_ai.client.inference.operation.output_tokens', 'gen_ai_client_inference_operation_output_tokens'],
      ['gen_ai.client.inference.usage.input_tokens', 'gen_ai_client_inference_usage_input_tokens_total'],
      ['gen_ai.client.inference.usage.output_tokens', 'gen_ai_client_inference_usage_output_tokens_total'],
      ['gen_ai.client.inference.usage.cache_read.input_tokens', 'gen_ai_client_inference_usage_cache_read_input_tokens_total'],
      ['gen_ai.client.inference.usage.cache_write.input_tokens', 'gen_ai_client_inference_usage_cache_write_input_tokens_total'],
      ['gen_ai.client.inference.usage.reasoning.output_tokens', 'gen_ai_client_inference_usage_reasoning_output_tokens_total'],
    ]);
  });
});
