import type { Provider } from '@gateway/proto';

/**
 * Every name the gateway takes from the OpenTelemetry GenAI semantic conventions
 * (open-telemetry/semantic-conventions-genai, status "Development": names still move), in one module so
 * a rename is a change here and in docs/operations.md ("GenAI semantic conventions"). Nothing else in the
 * gateway spells a `gen_ai.*` name.
 *
 * Checked against the conventions repository's docs/gen-ai as its v0.1.0 tag and main branch have them
 * (gen-ai-metrics.md, client-inference.md, gen-ai-token-metrics.md). The duration histograms keep the names
 * of the metrics page (gen-ai-metrics.md), which issue 40 names too: `gen_ai.client.operation.{duration,
 * time_to_first_chunk,time_per_output_chunk}`; the newer client-inference.md draft calls them
 * `gen_ai.client.inference.*` — a change of the three strings below once the metrics page follows. The
 * per-operation token histograms `gen_ai.client.inference.operation.{input,output}_tokens` are that draft's;
 * `gen_ai.client.token.usage` (by gen_ai.token.type) the metrics page's.
 */

// ---- span -----------------------------------------------------------------------------------------

export const GEN_AI = {
  operationName: 'gen_ai.operation.name',
  providerName: 'gen_ai.provider.name',
  requestModel: 'gen_ai.request.model',
  requestStream: 'gen_ai.request.stream',
  requestMaxTokens: 'gen_ai.request.max_tokens',
  requestTemperature: 'gen_ai.request.temperature',
  requestTopP: 'gen_ai.request.top_p',
  requestTopK: 'gen_ai.request.top_k',
  requestStopSequences: 'gen_ai.request.stop_sequences',
  requestPresencePenalty: 'gen_ai.request.presence_penalty',
  requestFrequencyPenalty: 'gen_ai.request.frequency_penalty',
  requestSeed: 'gen_ai.request.seed',
  requestReasoningLevel: 'gen_ai.request.reasoning.level',
  outputType: 'gen_ai.output.type',
  responseFinishReasons: 'gen_ai.response.finish_reasons',
  responseId: 'gen_ai.response.id',
  responseModel: 'gen_ai.response.model',
  responseTimeToFirstChunk: 'gen_ai.response.time_to_first_chunk',
  usageInputTokens: 'gen_ai.usage.input_tokens',
  usageOutputTokens: 'gen_ai.usage.output_tokens',
  usageCacheReadInputTokens: 'gen_ai.usage.cache_read.input_tokens',
  usageCacheWriteInputTokens: 'gen_ai.usage.cache_write.input_tokens',
  usageReasoningOutputTokens: 'gen_ai.usage.reasoning.output_tokens',
  tokenType: 'gen_ai.token.type',
  tokenModality: 'gen_ai.token.modality',
  errorType: 'error.type',
  // Opt-in content (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT): JSON in the conventions' message schema.
  systemInstructions: 'gen_ai.system_instructions',
  inputMessages: 'gen_ai.input.messages',
  outputMessages: 'gen_ai.output.messages',
  toolDefinitions: 'gen_ai.tool.definitions',
  serverAddress: 'server.address',
  serverPort: 'server.port',
} as const;

/** `gen_ai.operation.name` per gateway endpoint: the conventions' well-known values where one applies. */
export function genAiOperationName(endpoint: string): string {
  switch (endpoint) {
    case 'chat.completions':
    case 'messages':
    case 'responses':
      return 'chat';
    case 'completions':
      return 'text_completion';
    case 'embeddings':
      return 'embeddings';
    // Image and speech generation, transcription and moderation are multimodal content generation
    // (the well-known value the conventions give for Gemini's generateContent); the endpoint itself is
    // on the span as gateway.endpoint.
    default:
      return 'generate_content';
  }
}

/** `gen_ai.provider.name` per catalog provider kind: the registry's well-known values. */
export function genAiProviderName(kind: string): string {
  switch (kind) {
    case 'openai': return 'openai';
    case 'anthropic': return 'anthropic';
    case 'bedrock': return 'aws.bedrock';
    case 'azure-openai': return 'azure.ai.openai';
    case 'gemini': return 'gcp.gemini';
    case 'vertex': return 'gcp.vertex_ai';
    // `simulated` (the in-process test provider) and any future kind: a custom value, the kind itself.
    default: return kind;
  }
}

/** The variable the OpenTelemetry GenAI instrumentations read to record message content (off unless `true`). */
export const CAPTURE_MESSAGE_CONTENT_ENV = 'OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT';

/** `error.type` of an attempt the caller cancelled (the others are the ProviderError kind). */
export const ERROR_TYPE_CANCELLED = 'cancelled';

// ---- metrics --------------------------------------------------------------------------------------

/** Advisory bucket boundaries of the duration histograms, in seconds. */
export const GEN_AI_DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
/** Advisory bucket boundaries of gen_ai.client.token.usage, in tokens. */
export const GEN_AI_TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864];

export interface GenAiMetricName {
  /** The OpenTelemetry name (OTLP). */
  otel: string;
  /** The name on Prometheus's scrape, as an OpenTelemetry-to-Prometheus translation writes it (unit suffix, `_total`). */
  prometheus: string;
  unit: string;
  description: string;
}

export interface GenAiHistogramName extends GenAiMetricName {
  buckets: number[];
}

/**
 * The Prometheus name the OpenTelemetry-to-Prometheus translation gives an instrument: dots become
 * underscores, the unit `s` adds `_seconds` (an annotation unit such as `{token}` adds nothing), a
 * counter ends in `_total`.
 */
function prometheusName(otel: string, unit: string, counter: boolean): string {
  return `${otel.replaceAll('.', '_')}${unit === 's' ? '_seconds' : ''}${counter ? '_total' : ''}`;
}

function histogramName(otel: string, unit: string, buckets: number[], description: string): GenAiHistogramName {
  return { otel, prometheus: prometheusName(otel, unit, false), unit, description, buckets };
}

/** The usage counters all count tokens. */
function tokenCounterName(otel: string, description: string): GenAiMetricName {
  return { otel, prometheus: prometheusName(otel, '{token}', true), unit: '{token}', description };
}

export const GEN_AI_HISTOGRAMS = {
  duration: histogramName('gen_ai.client.operation.duration', 's', GEN_AI_DURATION_BUCKETS,
    'GenAI operation duration: one upstream attempt, from its start to its answer (a stream: to its end) or its error.'),
  timeToFirstChunk: histogramName('gen_ai.client.operation.time_to_first_chunk', 's', GEN_AI_DURATION_BUCKETS, 'Time from the start of a streamed attempt to its first chunk of content.'),
  timePerOutputChunk: histogramName('gen_ai.client.operation.time_per_output_chunk', 's', GEN_AI_DURATION_BUCKETS,
    'Mean time between the chunks of a streamed attempt after its first one (one value per stream).'),
  tokenUsage: histogramName('gen_ai.client.token.usage', '{token}', GEN_AI_TOKEN_BUCKETS, 'Input and output tokens of one attempt, by gen_ai.token.type.'),
  operationInputTokens: histogramName('gen_ai.client.inference.operation.input_tokens', '{token}', GEN_AI_TOKEN_BUCKETS,
    'Input tokens of one answered attempt (a distribution for percentiles; the usage counters are the totals).'),
  operationOutputTokens: histogramName('gen_ai.client.inference.operation.output_tokens', '{token}', GEN_AI_TOKEN_BUCKETS,
    'Output tokens of one answered attempt (a distribution for percentiles; the usage counters are the totals).'),
} as const satisfies Record<string, GenAiHistogramName>;

export const GEN_AI_COUNTERS = {
  usageInputTokens: tokenCounterName('gen_ai.client.inference.usage.input_tokens', 'Input (prompt) tokens used, cached ones included.'),
  usageOutputTokens: tokenCounterName('gen_ai.client.inference.usage.output_tokens', 'Output (completion) tokens used, reasoning ones included.'),
  usageCacheReadInputTokens: tokenCounterName('gen_ai.client.inference.usage.cache_read.input_tokens', 'Input tokens served from the provider\'s prompt cache (a subset of the input tokens).'),
  usageCacheWriteInputTokens: tokenCounterName('gen_ai.client.inference.usage.cache_write.input_tokens', 'Input tokens written to the provider\'s prompt cache (a subset of the input tokens).'),
  usageReasoningOutputTokens: tokenCounterName('gen_ai.client.inference.usage.reasoning.output_tokens', 'Output tokens spent on reasoning (a subset of the output tokens).'),
} as const satisfies Record<string, GenAiMetricName>;

/** Prometheus label names of the metric attributes (dots become underscores, as the translation does). */
export const GEN_AI_LABELS = {
  operationName: 'gen_ai_operation_name',
  providerName: 'gen_ai_provider_name',
  requestModel: 'gen_ai_request_model',
  errorType: 'error_type',
  serverAddress: 'server_address',
  serverPort: 'server_port',
  tokenType: 'gen_ai_token_type',
  tokenModality: 'gen_ai_token_modality',
} as const;

// ---- the upstream ---------------------------------------------------------------------------------

/** What the conventions say about a catalog provider: its registry name and the server it calls. */
export interface GenAiUpstream {
  providerName: string;
  /** '' when the provider calls no server (simulated). */
  serverAddress: string;
  serverPort: number;
}

const upstreams = new WeakMap<Provider, GenAiUpstream>();

/**
 * The GenAI description of a catalog provider: computed once per provider entry (a catalog reload
 * brings new entries; the old ones are collected with it).
 */
export function genAiUpstreamOf(provider: Provider): GenAiUpstream {
  let upstream = upstreams.get(provider);
  if (upstream === undefined) {
    upstream = { providerName: genAiProviderName(provider.kind), ...serverOf(provider) };
    upstreams.set(provider, upstream);
  }
  return upstream;
}

function serverOf(provider: Provider): { serverAddress: string; serverPort: number } {
  const url = provider.baseUrl || defaultBaseUrl(provider);
  if (url === '') return { serverAddress: '', serverPort: 0 };
  try {
    const parsed = new URL(url);
    const port = parsed.port !== '' ? Number(parsed.port) : parsed.protocol === 'http:' ? 80 : 443;
    return { serverAddress: parsed.hostname, serverPort: port };
  } catch {
    return { serverAddress: '', serverPort: 0 };
  }
}

/** Where a provider kind's adapter goes when the catalog names no base URL (the adapters' own defaults). */
function defaultBaseUrl(provider: Provider): string {
  switch (provider.kind) {
    case 'openai': return 'https://api.openai.com';
    case 'anthropic': return 'https://api.anthropic.com';
    case 'gemini': return 'https://generativelanguage.googleapis.com';
    case 'vertex': return vertexBaseUrl(provider.location);
    case 'bedrock': return provider.region ? `https://bedrock-runtime.${provider.region}.amazonaws.com` : '';
    default: return '';
  }
}

/** Vertex AI's API root for a location, as its adapter picks it (vertex-paths.ts). */
function vertexBaseUrl(location: string): string {
  switch (location) {
    case '': return '';
    case 'global': return 'https://aiplatform.googleapis.com';
    case 'us': return 'https://aiplatform.us.rep.googleapis.com';
    case 'eu': return 'https://aiplatform.eu.rep.googleapis.com';
    default: return `https://${location}-aiplatform.googleapis.com`;
  }
}
