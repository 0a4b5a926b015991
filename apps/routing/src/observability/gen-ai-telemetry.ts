import {
  boundCounter, boundHistogram, meter, otelContext, otelMetricsEnabled, otelTrace, SpanKind, SpanStatusCode, tracer, tracingEnabled,
  type BoundCounter, type BoundCounterSeries, type BoundHistogram, type BoundHistogramSeries, type OtelContext, type OtelAttributes, type OtelCounter, type OtelHistogram, type Registry, type Span,
} from '@gateway/platform';
import type { ChatRequest, Usage } from '@gateway/proto';
import {
  ERROR_TYPE_CANCELLED, GEN_AI, GEN_AI_COUNTERS, GEN_AI_HISTOGRAMS, GEN_AI_LABELS, genAiOperationName,
  type GenAiMetricName, type GenAiUpstream,
} from './gen-ai-conventions.js';
import { inputContentAttributes, outputMessagesAttribute, type AnswerChoice } from './gen-ai-content.js';

/*
 * One upstream attempt as the OpenTelemetry GenAI semantic conventions describe it: a CLIENT span named
 * `{gen_ai.operation.name} {gen_ai.request.model}` and the client metrics (duration, time to first
 * chunk, time per output chunk, token usage). The failover loop's one recorder (routing/attempt-recorder.ts)
 * begins an attempt and ends it with its outcome, so a failover is two attempts. The names live in
 * gen-ai-conventions.ts.
 *
 * Cost: nothing per stream frame (a stream's chunks are counted by the stream's own metering and read
 * once at its end). Per attempt: one span when tracing is on, a handful of histogram/counter updates whose
 * label and attribute sets are made once per (operation, provider, model, server[, error, token type]),
 * each Prometheus series bound to its set once (libs/platform's bound-series.ts) so an update is a number
 * added, not a label set checked and hashed by prom-client again (issue 39).
 * With neither a metrics registry, OTLP metrics nor tracing, `begin` returns undefined and nothing is made.
 *
 * Message content (prompts, answers, tool arguments and definitions: the conventions' opt-in
 * gen_ai.system_instructions, gen_ai.input.messages, gen_ai.output.messages, gen_ai.tool.definitions) is
 * recorded on a chat attempt's span only when the operator opted in (`captureMessageContent`, from
 * OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT) and tracing is on: the request's when the span starts,
 * the answer's once when it ends (a stream's from what it delivered; gen-ai-content.ts). Off, nothing of it
 * is made.
 */

/** What an attempt is, as its span and metrics describe it. */
export interface GenAiAttemptStart {
  /** The catalog offer the attempt calls (its label sets are kept per offer object: a catalog reload brings new ones). */
  offer: object;
  /** The gateway endpoint (chat.completions, embeddings, …). */
  endpoint: string;
  upstream: GenAiUpstream;
  /** The model name the upstream is asked for (the offer's upstream_model). */
  requestModel: string;
  stream: boolean;
  /** Chat: the request as this attempt sends it (its recommended request attributes). */
  request: ChatRequest | undefined;
  /** Gateway ids, on the span only (never metric labels beyond the conventions'). */
  providerId: string;
  modelId: string;
  attempt: number;
}

/** What a served attempt's answer says (chat): its usage and finish reasons, and a stream's part count. */
export interface GenAiResponse {
  usage?: Usage | undefined;
  finishReasons?: readonly string[] | undefined;
  /** A stream's parts received, the first one included (time per output chunk = the rest over parts - 1). */
  chunks?: number | undefined;
  /** The operation makes no output tokens (embeddings, moderation): no output usage is recorded rather than a 0. */
  inputOnly?: boolean | undefined;
  /** The provider's name for its answer (gen_ai.response.id) and the model that produced it (gen_ai.response.model); '' or absent when it sent none. */
  id?: string | undefined;
  model?: string | undefined;
  /** Chat: what the answer said (a stream: what it delivered), read only when content is recorded. */
  output?: (() => readonly AnswerChoice[]) | undefined;
}

export interface GenAiTelemetryOptions {
  /** Record message content on chat attempt spans (when tracing): the operator's opt-in. Default off. */
  captureMessageContent?: boolean | undefined;
}

/**
 * The GenAI response of a served non-chat attempt from the usage its provider reported (images, moderation,
 * transcription): totals made from the per-modality counts when the adapter reported only those (images:
 * text in, image out; transcription: audio and text in, text out). Nothing when the provider reported no
 * token at all (a transcription billed in seconds, OpenAI's moderations): no usage rather than zeros.
 * `inputOnly`: the operation has no output tokens.
 */
export function reportedUsageResponse(reported: Usage | undefined, inputOnly = false): GenAiResponse {
  if (reported === undefined) return { inputOnly };
  const input = Math.max(reported.inputTokens, reported.inputTextTokens + reported.inputAudioTokens + reported.inputImageTokens);
  const output = Math.max(reported.outputTokens, reported.outputTextTokens + reported.outputAudioTokens + reported.outputImageTokens);
  if (input === 0 && output === 0) return { inputOnly };
  const usage = input === reported.inputTokens && output === reported.outputTokens ? reported : { ...reported, inputTokens: input, outputTokens: output };
  return { usage, inputOnly };
}

/**
 * The label set (Prometheus) and attribute set (OpenTelemetry) of one metric point, made once and kept,
 * and the Prometheus series of each metric updated at this point, bound at its first update: an update
 * is then a number added to a series, without prom-client checking and hashing the label set each time.
 */
interface PointLabels {
  prom: Record<string, string | number>;
  otel: OtelAttributes;
  histograms: Partial<Histograms<BoundHistogramSeries>>;
  counters: Partial<Counters<BoundCounterSeries>>;
}

function pointLabels(prom: Record<string, string | number>, otel: OtelAttributes): PointLabels {
  return { prom, otel, histograms: {}, counters: {} };
}

/** The labels of one (operation, provider, model, server) and the sets derived from it, each made once. */
class AttemptLabels {
  private readonly errors = new Map<string, PointLabels>();
  private readonly tokenTypes = new Map<string, PointLabels>();
  private readonly modalities = new Map<string, PointLabels>();

  constructor(readonly operation: string, readonly base: PointLabels) {}

  withError(errorType: string): PointLabels {
    return this.extended(this.errors, errorType, GEN_AI_LABELS.errorType, GEN_AI.errorType);
  }

  tokenType(type: 'input' | 'output'): PointLabels {
    return this.extended(this.tokenTypes, type, GEN_AI_LABELS.tokenType, GEN_AI.tokenType);
  }

  modality(modality: string): PointLabels {
    return this.extended(this.modalities, modality, GEN_AI_LABELS.tokenModality, GEN_AI.tokenModality);
  }

  /** The base labels plus one more, made once per value and kept. */
  private extended(made: Map<string, PointLabels>, value: string, label: string, attribute: string): PointLabels {
    let labels = made.get(value);
    if (labels === undefined) {
      labels = extend(this.base, label, attribute, value);
      made.set(value, labels);
    }
    return labels;
  }
}

function extend(base: PointLabels, label: string, attribute: string, value: string): PointLabels {
  return pointLabels({ ...base.prom, [label]: value }, { ...base.otel, [attribute]: value });
}


type Histograms<T> = Record<keyof typeof GEN_AI_HISTOGRAMS, T>;
type Counters<T> = Record<keyof typeof GEN_AI_COUNTERS, T>;
type PromLabel = (typeof GEN_AI_LABELS)[keyof typeof GEN_AI_LABELS];

const EMBEDDINGS = genAiOperationName('embeddings');

const HISTOGRAM_LABELS: PromLabel[] = [
  GEN_AI_LABELS.operationName, GEN_AI_LABELS.providerName, GEN_AI_LABELS.requestModel, GEN_AI_LABELS.serverAddress, GEN_AI_LABELS.serverPort, GEN_AI_LABELS.errorType,
];
/** The per-operation token histograms: no error.type (like gen_ai.client.token.usage). */
const OPERATION_TOKEN_LABELS: PromLabel[] = [
  GEN_AI_LABELS.operationName, GEN_AI_LABELS.providerName, GEN_AI_LABELS.requestModel, GEN_AI_LABELS.serverAddress, GEN_AI_LABELS.serverPort,
];

/**
 * The GenAI client telemetry of one routing service: its Prometheus instruments (in the service's
 * registry, on /metrics) and, once the OpenTelemetry SDK exports metrics, the same instruments over OTLP.
 */
export class GenAiTelemetry {
  private readonly prom: { histograms: Histograms<BoundHistogram<PromLabel>>; counters: Counters<BoundCounter<PromLabel>> } | undefined;
  private otel: { histograms: Histograms<OtelHistogram>; counters: Counters<OtelCounter> } | undefined;
  /** Per catalog offer object, per operation: made once, collected with the catalog snapshot that held the offer. */
  private readonly labelSets = new WeakMap<object, Map<string, AttemptLabels>>();

  private readonly captureContent: boolean;

  constructor(registry: Registry | undefined, options: GenAiTelemetryOptions = {}) {
    this.prom = registry === undefined ? undefined : promInstruments(registry);
    this.captureContent = options.captureMessageContent === true;
  }

  /** An attempt's telemetry from its start; undefined when nothing would record it. */
  begin(start: GenAiAttemptStart): GenAiAttempt | undefined {
    const tracing = tracingEnabled();
    const otelMetrics = otelMetricsEnabled();
    if (!tracing && !otelMetrics && this.prom === undefined) return undefined;
    if (otelMetrics) this.otel ??= otelInstruments();
    const operation = genAiOperationName(start.endpoint);
    const content = tracing && this.captureContent && start.request !== undefined;
    const span = tracing ? startAttemptSpan(operation, start, content) : undefined;
    return new GenAiAttempt(this, this.labelsFor(operation, start), start.stream, span, content);
  }

  private labelsFor(operation: string, start: GenAiAttemptStart): AttemptLabels {
    const { upstream } = start;
    let byOperation = this.labelSets.get(start.offer);
    if (byOperation === undefined) {
      byOperation = new Map();
      this.labelSets.set(start.offer, byOperation);
    }
    let labels = byOperation.get(operation);
    if (labels === undefined) {
      const prom: Record<string, string | number> = {
        [GEN_AI_LABELS.operationName]: operation,
        [GEN_AI_LABELS.providerName]: upstream.providerName,
        [GEN_AI_LABELS.requestModel]: start.requestModel,
      };
      const otel: OtelAttributes = {
        [GEN_AI.operationName]: operation,
        [GEN_AI.providerName]: upstream.providerName,
        [GEN_AI.requestModel]: start.requestModel,
      };
      if (upstream.serverAddress !== '') {
        prom[GEN_AI_LABELS.serverAddress] = upstream.serverAddress;
        prom[GEN_AI_LABELS.serverPort] = upstream.serverPort;
        otel[GEN_AI.serverAddress] = upstream.serverAddress;
        otel[GEN_AI.serverPort] = upstream.serverPort;
      }
      labels = new AttemptLabels(operation, pointLabels(prom, otel));
      byOperation.set(operation, labels);
    }
    return labels;
  }

  /** Records one ended attempt's metrics (GenAiAttempt.end). */
  record(labels: AttemptLabels, errorType: string | undefined, seconds: Seconds, response: GenAiResponse | undefined): void {
    const point = errorType === undefined ? labels.base : labels.withError(errorType);
    this.observe('duration', point, seconds.duration);
    if (seconds.firstChunk !== undefined) this.observe('timeToFirstChunk', point, seconds.firstChunk);
    if (seconds.perChunk !== undefined) this.observe('timePerOutputChunk', point, seconds.perChunk);
    const usage = response?.usage;
    if (usage === undefined) {
      // The conventions count every inference operation's usage, a failed one's as 0 of an unknown modality.
      if (errorType !== undefined) {
        const unknown = labels.modality('unknown');
        this.add('usageInputTokens', unknown, 0);
        this.add('usageOutputTokens', unknown, 0);
      }
      return;
    }
    this.tokens(labels, 'input', usage.inputTokens);
    this.byModality('usageInputTokens', labels, usage.inputTokens, usage.inputAudioTokens, usage.inputImageTokens, usage.inputTextTokens);
    // Embeddings and moderations have no output tokens: none recorded rather than a 0 in every output series.
    if (labels.operation !== EMBEDDINGS && response?.inputOnly !== true) {
      this.tokens(labels, 'output', usage.outputTokens);
      this.byModality('usageOutputTokens', labels, usage.outputTokens, usage.outputAudioTokens, usage.outputImageTokens, usage.outputTextTokens);
    }
    const unknown = labels.modality('unknown');
    if (usage.cachedInputTokens > 0) this.add('usageCacheReadInputTokens', unknown, usage.cachedInputTokens);
    if (usage.cacheWriteTokens > 0) this.add('usageCacheWriteInputTokens', unknown, usage.cacheWriteTokens);
    if (usage.reasoningTokens > 0) this.add('usageReasoningOutputTokens', unknown, usage.reasoningTokens);
  }

  /**
   * A usage counter by gen_ai.token.modality: audio and image tokens as the provider reported them, the
   * rest as text when the provider's text count is exactly that rest, else unknown.
   */
  private byModality(name: 'usageInputTokens' | 'usageOutputTokens', labels: AttemptLabels, total: number, audio: number, image: number, text: number): void {
    if (audio > 0) this.add(name, labels.modality('audio'), audio);
    if (image > 0) this.add(name, labels.modality('image'), image);
    const rest = Math.max(0, total - audio - image);
    if (rest > 0 || (audio === 0 && image === 0)) this.add(name, labels.modality(rest > 0 && text === rest ? 'text' : 'unknown'), rest);
  }

  /** gen_ai.client.token.usage of one token type, and the operation's token histogram of that direction. */
  private tokens(labels: AttemptLabels, type: 'input' | 'output', count: number): void {
    this.observe('tokenUsage', labels.tokenType(type), count);
    this.observe(type === 'input' ? 'operationInputTokens' : 'operationOutputTokens', labels.base, count);
  }

  private observe(name: keyof Histograms<unknown>, point: PointLabels, value: number): void {
    if (this.prom !== undefined) (point.histograms[name] ??= this.prom.histograms[name].bind(point.prom)).observe(value);
    this.otel?.histograms[name].record(value, point.otel);
  }

  private add(name: keyof Counters<unknown>, point: PointLabels, value: number): void {
    if (this.prom !== undefined) (point.counters[name] ??= this.prom.counters[name].bind(point.prom)).inc(value);
    this.otel?.counters[name].add(value, point.otel);
  }
}

interface Seconds {
  duration: number;
  firstChunk: number | undefined;
  perChunk: number | undefined;
}

/** One attempt, from `begin` to `succeeded` / `failed` (a second end does nothing). */
export class GenAiAttempt {
  private readonly startedAt = performance.now();
  private firstChunkAt = 0;
  private ended = false;

  constructor(
    private readonly telemetry: GenAiTelemetry,
    private readonly labels: AttemptLabels,
    private readonly stream: boolean,
    /** The attempt's CLIENT span, when tracing. */
    readonly span: Span | undefined,
    /** Message content goes on the span (the opt-in, tracing, a chat request). */
    private readonly content = false,
  ) {}

  /** The context to make the attempt's call in: its span the parent of the upstream HTTP span. */
  context(): OtelContext {
    return otelTrace.setSpan(otelContext.active(), this.span!);
  }

  /** A stream's first content arrived (the failover loop ends there). */
  firstChunk(): void {
    this.firstChunkAt = performance.now();
  }

  succeeded(response?: GenAiResponse): void {
    this.end(undefined, response);
  }

  /** `errorType`: the conventions' error.type (the ProviderError kind, `cancelled`, …). */
  failed(errorType: string, response?: GenAiResponse): void {
    this.end(errorType, response);
  }

  cancelled(): void {
    this.end(ERROR_TYPE_CANCELLED, undefined);
  }

  private end(errorType: string | undefined, response: GenAiResponse | undefined): void {
    if (this.ended) return;
    this.ended = true;
    const endedAt = performance.now();
    const streamed = this.stream && this.firstChunkAt > 0;
    const chunks = response?.chunks ?? 0;
    const seconds: Seconds = {
      duration: (endedAt - this.startedAt) / 1000,
      firstChunk: streamed ? (this.firstChunkAt - this.startedAt) / 1000 : undefined,
      perChunk: streamed && chunks > 1 ? (endedAt - this.firstChunkAt) / 1000 / (chunks - 1) : undefined,
    };
    this.telemetry.record(this.labels, errorType, seconds, response);
    const span = this.span;
    if (span === undefined) return;
    const attributes: OtelAttributes = {};
    if (seconds.firstChunk !== undefined) attributes[GEN_AI.responseTimeToFirstChunk] = seconds.firstChunk;
    if (response?.finishReasons !== undefined && response.finishReasons.length > 0) attributes[GEN_AI.responseFinishReasons] = [...response.finishReasons];
    if (response?.id) attributes[GEN_AI.responseId] = response.id;
    if (response?.model) attributes[GEN_AI.responseModel] = response.model;
    if (this.content && response?.output !== undefined) attributes[GEN_AI.outputMessages] = outputMessagesAttribute(response.output());
    const usage = response?.usage;
    if (usage !== undefined) {
      attributes[GEN_AI.usageInputTokens] = usage.inputTokens;
      if (this.labels.operation !== EMBEDDINGS && response?.inputOnly !== true) attributes[GEN_AI.usageOutputTokens] = usage.outputTokens;
      if (usage.cachedInputTokens > 0) attributes[GEN_AI.usageCacheReadInputTokens] = usage.cachedInputTokens;
      if (usage.cacheWriteTokens > 0) attributes[GEN_AI.usageCacheWriteInputTokens] = usage.cacheWriteTokens;
      if (usage.reasoningTokens > 0) attributes[GEN_AI.usageReasoningOutputTokens] = usage.reasoningTokens;
      if (usage.estimated) attributes['gateway.usage.estimated'] = true;
    }
    if (errorType !== undefined) {
      attributes[GEN_AI.errorType] = errorType;
      span.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
    }
    span.setAttributes(attributes);
    span.end();
  }
}

/** The attempt's CLIENT span, child of the active one (the request's routing span), with its request attributes. */
function startAttemptSpan(operation: string, start: GenAiAttemptStart, content: boolean): Span {
  const { upstream, request } = start;
  // The attributes the conventions want at creation (sampling decisions), then the recommended ones.
  const attributes: OtelAttributes = {
    [GEN_AI.operationName]: operation,
    [GEN_AI.providerName]: upstream.providerName,
    [GEN_AI.requestModel]: start.requestModel,
    [GEN_AI.requestStream]: start.stream,
    'gateway.endpoint': start.endpoint,
    'gateway.provider': start.providerId,
    'gateway.model': start.modelId,
    'gateway.attempt': start.attempt,
  };
  if (upstream.serverAddress !== '') {
    attributes[GEN_AI.serverAddress] = upstream.serverAddress;
    attributes[GEN_AI.serverPort] = upstream.serverPort;
  }
  if (request !== undefined) {
    requestAttributes(request, attributes);
    if (content) inputContentAttributes(request, attributes);
  }
  return tracer().startSpan(`${operation} ${start.requestModel}`, { kind: SpanKind.CLIENT, attributes });
}

/** The conventions' recommended request attributes a chat request sets (never its content). */
function requestAttributes(request: ChatRequest, attributes: OtelAttributes): void {
  if (request.maxOutputTokens !== undefined) attributes[GEN_AI.requestMaxTokens] = request.maxOutputTokens;
  if (request.temperature !== undefined) attributes[GEN_AI.requestTemperature] = request.temperature;
  if (request.topP !== undefined) attributes[GEN_AI.requestTopP] = request.topP;
  if (request.topK !== undefined) attributes[GEN_AI.requestTopK] = request.topK;
  if (request.stop.length > 0) attributes[GEN_AI.requestStopSequences] = request.stop;
  if (request.presencePenalty !== undefined) attributes[GEN_AI.requestPresencePenalty] = request.presencePenalty;
  if (request.frequencyPenalty !== undefined) attributes[GEN_AI.requestFrequencyPenalty] = request.frequencyPenalty;
  if (request.seed !== undefined) attributes[GEN_AI.requestSeed] = Number(request.seed);
  if (request.reasoningEffort !== undefined) attributes[GEN_AI.requestReasoningLevel] = request.reasoningEffort;
  const format = request.responseFormat?.type;
  if (format !== undefined && format !== '') attributes[GEN_AI.outputType] = format === 'text' ? 'text' : 'json';
}

/** One instrument per entry of a table of names, under the same keys. */
function instrumentsOf<Key extends string, Name, Instrument>(names: Record<Key, Name>, make: (name: Name, key: Key) => Instrument): Record<Key, Instrument> {
  return Object.fromEntries(Object.entries<Name>(names).map(([key, name]) => [key, make(name, key as Key)])) as Record<Key, Instrument>;
}

const COUNTER_LABELS: PromLabel[] = [
  GEN_AI_LABELS.operationName, GEN_AI_LABELS.providerName, GEN_AI_LABELS.requestModel, GEN_AI_LABELS.serverAddress, GEN_AI_LABELS.serverPort, GEN_AI_LABELS.tokenModality,
];

function promHelp(metric: GenAiMetricName): string {
  return `${metric.description} (OpenTelemetry ${metric.otel}, ${metric.unit}).`;
}

function promInstruments(registry: Registry) {
  return {
    histograms: instrumentsOf(GEN_AI_HISTOGRAMS, (metric, key) => boundHistogram(registry, {
      name: metric.prometheus, help: promHelp(metric), buckets: metric.buckets,
      labelNames: key === 'tokenUsage' ? [...HISTOGRAM_LABELS, GEN_AI_LABELS.tokenType]
        : key === 'operationInputTokens' || key === 'operationOutputTokens' ? OPERATION_TOKEN_LABELS : HISTOGRAM_LABELS,
    })),
    counters: instrumentsOf(GEN_AI_COUNTERS, (metric) => boundCounter(registry, { name: metric.prometheus, help: promHelp(metric), labelNames: COUNTER_LABELS })),
  };
}

function otelInstruments() {
  const gatewayMeter = meter();
  return {
    histograms: instrumentsOf(GEN_AI_HISTOGRAMS, (metric) =>
      gatewayMeter.createHistogram(metric.otel, { unit: metric.unit, description: metric.description, advice: { explicitBucketBoundaries: metric.buckets } })),
    counters: instrumentsOf(GEN_AI_COUNTERS, (metric) => gatewayMeter.createCounter(metric.otel, { unit: metric.unit, description: metric.description })),
  };
}
