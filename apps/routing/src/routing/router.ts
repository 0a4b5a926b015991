import { createHash } from 'node:crypto';
import {
  Cancellation,
  ErrorReason,
  GatewayError,
  GrpcStatus,
  errors,
  newRequestId,
  otelTrace,
  tracingEnabled,
  type CallerSignal,
  type Logger,
} from '@gateway/platform';
import {
  UsageOutcome,
  type ChatMessage,
  type ChatRequest,
  type ChatResponse,
  type ChatStreamDelta,
  type ChatStreamResponse,
  type EditImagesRequest,
  type EditImagesResponse,
  type EmbedRequest,
  type EmbedResponse,
  type GenerateImagesRequest,
  type GenerateImagesResponse,
  ModerationInputForm,
  type ModerateRequest,
  type ModerateResponse,
  type SpeakRequest,
  type SpeakResponse,
  type TranscribeRequest,
  type TranscribeResponse,
  type Model,
  type RequestContext,
  type Usage,
} from '@gateway/proto';
import type { CatalogCache } from '../catalog/catalog-cache.js';
import {
  MODERATION_IMAGE_TOKENS, ProviderError, toProviderError, type AdapterImageRequest, type AdapterImageResult, type AdapterModerateRequest, type AdapterModerationPart, type AdapterStreamPart,
  type AttemptSignal, type ProviderAdapter,
} from '../providers/provider-adapter.js';
import { strategyNamed, type Candidate, type ProviderHealth } from '../strategies/index.js';
import type { StreamCheckpoint } from '../usage/stream-checkpoints.js';
import { countInputTokens, countTextTokens, emptyUsage, meterCounted, meterUsage, tokenizerBudget, type DeliveredOutput } from '../usage/token-counter.js';
import type { UsagePublisher } from '../usage/usage-publisher.js';
import type { AttemptObserver } from './attempt-observer.js';
import { dropUnsupportedParameters } from './drop-unsupported-parameters.js';
import { lazyRequestLog, newCompletionId, type RequestLog } from './request-hot-path.js';
import { Reservation } from './reservation.js';

export interface RouterOptions {
  catalog: CatalogCache;
  health: ProviderHealth;
  usage: UsagePublisher;
  logger: Logger;
  /** Per provider attempt: whole answer (Chat) or time to the first and between stream parts (ChatStream). */
  attemptTimeoutMs: number;
  /** Most provider attempts per request, failovers included. */
  maxAttempts: number;
  random?: () => number;
  /** Counts provider attempts and failovers (metrics). */
  attempts?: AttemptObserver;
}

const NO_UPSTREAM_MESSAGE = 'No upstream available.';
const NO_UPSTREAM_RETRY_AFTER_SECONDS = 2;
/** Characters of the conversation that decide cache affinity: the stable prefix, not the newest turn. */
const CONVERSATION_KEY_CHARACTERS = 4_096;
/** Most inputs in one embeddings request (OpenAI's own bound). */
const MAX_EMBEDDING_INPUTS = 2_048;

/** Which adapters can serve an endpoint: every adapter chats; other capabilities are optional. */
type Capable = (adapter: ProviderAdapter) => boolean;
const canChat: Capable = () => true;
const canEmbed: Capable = (adapter) => adapter.embed !== undefined;
const canModerate: Capable = (adapter) => adapter.moderate !== undefined;
const canGenerateImages: Capable = (adapter) => adapter.generateImages !== undefined;
const canEditImages: Capable = (adapter) => adapter.editImages !== undefined;
const canSpeak: Capable = (adapter) => adapter.speak !== undefined;
const canTranscribe: Capable = (adapter) => adapter.transcribe !== undefined;

/** Output tokens metered per image when the provider counted none (spec §2.1). */
const IMAGE_OUTPUT_TOKENS_DEFAULT = 2_048;
const IMAGE_SIZE = /^[1-9]\d{0,4}x[1-9]\d{0,4}$/;

class AttemptTimeout extends Error {
  override name = 'TimeoutError';
}

/** Where one request may go: the model, its ordered candidates and the identity its usage event carries. */
interface RoutingTarget {
  /** The request's hold: released or settled exactly once (reservation.ts). */
  hold: Reservation;
  requestId: string;
  context: RequestContext | undefined;
  model: Model;
  endpoint: string;
  strategyName: string;
  candidates: Candidate[];
  timeoutMs: number;
  logger: RequestLog;
}

interface FailoverPolicy {
  /** The attempt goes on after `call` resolves (a stream): the control is handed back and the caller records the outcome. */
  continues?: boolean;
  /**
   * The image prompt screen's moderation offers instead of the request's candidates: the gateway's own
   * check, so every failure moves on (a verdict too) and none is counted against the request's providers.
   */
  screen?: Candidate[];
}

interface PreparedRequest extends RoutingTarget {
  request: ChatRequest;
  dropped: string[];
}

function noUpstream(cause?: unknown): GatewayError {
  return new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, NO_UPSTREAM_MESSAGE, {
    retryAfterSeconds: NO_UPSTREAM_RETRY_AFTER_SECONDS,
    cause,
  });
}

/** A provider's verdict on the request itself, in the caller's terms (spec §7: 400, never 502). */
function verdictError(error: ProviderError): GatewayError {
  if (error.kind === 'content_filter') {
    return new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_CONTENT_MODERATION, 'Request rejected by upstream content moderation.', {
      code: 'content_moderation',
      cause: error,
    });
  }
  return new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_UPSTREAM_REJECTED, `Upstream returned an error: ${error.providerMessage}`, {
    cause: error,
  });
}

/** Signed or encrypted reasoning only goes back to the provider that issued it (field-failures: cross-provider). */
function stripForeignReasoning(messages: ChatMessage[], providerId: string): ChatMessage[] {
  // Most conversations carry no reasoning at all: then the same array goes on, uncopied.
  if (!messages.some((message) => message.reasoning.length > 0)) return messages;
  return messages.map((message) =>
    message.reasoning.length === 0
      ? message
      : {
          ...message,
          reasoning: message.reasoning.filter(
            (part) => part.providerId === providerId || (part.signature === '' && part.encryptedData === ''),
          ),
        },
  );
}

function conversationKey(request: ChatRequest): string {
  const hash = createHash('sha256');
  let remaining = CONVERSATION_KEY_CHARACTERS;
  for (const message of request.messages) {
    if (remaining <= 0) break;
    for (const part of message.content) {
      if (part.part?.$case !== 'text') continue;
      const text = part.part.value.slice(0, remaining);
      hash.update(message.role).update('\0').update(text);
      remaining -= text.length;
    }
  }
  return hash.digest('hex');
}

/**
 * One attempt's cancellation: the caller's cancellation or a restartable per-attempt timer, whichever
 * comes first. It is the AttemptSignal adapters get, so no AbortController is made per attempt.
 */
class AttemptControl extends Cancellation implements AttemptSignal {
  private timer: NodeJS.Timeout | undefined;
  private readonly onCallerAbort = () => this.abort(this.caller.reason);

  constructor(private readonly caller: CallerSignal, private readonly timeoutMs: number) {
    super();
    if (caller.aborted) this.abort(caller.reason);
    else caller.addEventListener('abort', this.onCallerAbort, { once: true });
  }

  get timedOut() {
    return this.reason instanceof AttemptTimeout;
  }

  override abort(reason: unknown) {
    if (this.aborted) return;
    this.disarm();
    super.abort(reason);
  }

  throwIfAborted() {
    if (this.aborted) throw this.reason;
  }

  arm() {
    this.disarm();
    this.timer = setTimeout(() => this.abort(new AttemptTimeout(`no answer within ${this.timeoutMs} ms`)), this.timeoutMs);
  }

  disarm() {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  dispose() {
    this.disarm();
    this.caller.removeEventListener('abort', this.onCallerAbort);
  }
}

/** What a stream delivered, and (for its checkpoints, StreamProgress) how often that changed. */
class DeliveredContent {
  /** Bumped on every delta and on the provider's usage report. */
  changes = 0;
  private readonly content = new Map<number, string>();
  private readonly reasoning = new Map<number, string>();
  private readonly toolCalls = new Map<string, { name: string; arguments: string }>();
  /** Checkpoints only (long streams): the prompt's count, and how much of each text is already counted. */
  private inputTokens = -1;
  private outputTokens = 0;
  private counted: Map<string, number> | null = null;

  add(part: Extract<AdapterStreamPart, { type: 'delta' }>['delta']) {
    this.changes++;
    if (part.content) this.content.set(part.choiceIndex, (this.content.get(part.choiceIndex) ?? '') + part.content);
    if (part.reasoning) this.reasoning.set(part.choiceIndex, (this.reasoning.get(part.choiceIndex) ?? '') + part.reasoning);
    for (const call of part.toolCalls) {
      const key = `${part.choiceIndex}:${call.index}`;
      const existing = this.toolCalls.get(key) ?? { name: '', arguments: '' };
      this.toolCalls.set(key, { name: existing.name || call.name, arguments: existing.arguments + call.arguments });
    }
  }

  get output(): DeliveredOutput {
    return {
      content: [...this.content.values()].join(''),
      reasoning: [...this.reasoning.values()].join(''),
      toolCalls: [...this.toolCalls.values()],
    };
  }

  /**
   * The usage metered so far, by meterUsage's rules, for a stream checkpoint. Checkpoints of a long
   * stream come every 200 ms: the prompt is counted once and only the output added since the last
   * checkpoint is tokenized (pieces may count a token more at their seams than the whole would).
   */
  usageSoFar(reported: Usage | undefined, request: ChatRequest): Usage {
    if (this.inputTokens < 0) this.inputTokens = countInputTokens(request.messages, request.tools);
    const counted = (this.counted ??= new Map());
    const countNew = (key: string, text: string) => {
      const from = counted.get(key) ?? 0;
      if (text.length <= from) return;
      this.outputTokens += countTextTokens(text.slice(from));
      counted.set(key, text.length);
    };
    for (const [choice, text] of this.content) countNew(`c${choice}`, text);
    for (const [choice, text] of this.reasoning) countNew(`r${choice}`, text);
    for (const [key, call] of this.toolCalls) {
      countNew(`n${key}`, call.name);
      countNew(`a${key}`, call.arguments);
    }
    const deliveredSomething = this.content.size > 0 || this.reasoning.size > 0 || this.toolCalls.size > 0;
    return meterCounted(reported, this.inputTokens, this.outputTokens, deliveredSomething);
  }
}

/**
 * Routing domain: picks offers by strategy, calls adapters with failover, meters usage and publishes
 * the request's one UsageEvent. Plain class: the gRPC layer only decodes, calls and encodes.
 */
export class Router {
  private readonly random: () => number;
  /** Usage of streams that already ended, still on its way to the bus (chatStream); stop waits for them. */
  private readonly settling = new Set<Promise<void>>();

  constructor(private readonly options: RouterOptions) {
    this.random = options.random ?? Math.random;
  }

  /** Resolves once the usage of every stream that ended so far is stored (or handed to the background). */
  async settled(): Promise<void> {
    while (this.settling.size > 0) await Promise.allSettled([...this.settling]);
  }

  /** The request's hold, taken over from the edge's admission: released or settled exactly once. */
  private admit(context: RequestContext | undefined, modelId: string, endpoint: string, streamed = false): Reservation {
    return new Reservation(this.options.usage, context?.requestId || newRequestId(), context, modelId, endpoint, streamed);
  }

  /**
   * Runs a unary request with its hold: whatever `body` throws (or forgets), the hold is released once
   * it returns; after `hold.settle` the release is a no-op.
   */
  private async admitted<Result>(
    context: RequestContext | undefined, modelId: string, endpoint: string, body: (hold: Reservation) => Promise<Result>,
  ): Promise<Result> {
    const hold = this.admit(context, modelId, endpoint);
    try {
      return await body(hold);
    } finally {
      hold.release();
    }
  }

  /** Model, endpoint and ordered candidates. Unknown model: releases the reservation, then MODEL_NOT_FOUND. */
  private resolve(
    hold: Reservation,
    modelId: string,
    strategyName: string,
    timeoutMs: number,
    conversation: () => string,
    capable: Capable = canChat,
  ): RoutingTarget {
    const { requestId, context, endpoint } = hold;
    const logger = lazyRequestLog(this.options.logger, requestId);
    const model = this.options.catalog.model(modelId);
    if (!model) {
      // The edge reserved before calling: release it rather than leave it to the sweeper.
      hold.release(false);
      throw new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_MODEL_NOT_FOUND, `The model '${modelId}' does not exist.`, {
        param: 'model',
        code: 'model_not_found',
      });
    }
    const strategy = strategyNamed(strategyName);
    const available: Candidate[] = [];
    for (const offer of model.offers) {
      if (!offer.endpoints.includes(endpoint)) continue;
      const adapter = this.options.catalog.provider(offer.providerId)?.adapter;
      if (adapter && capable(adapter)) available.push({ offer, adapter });
    }
    // One offer is its own order under every strategy: no health figures or ordering per request then.
    const ordered = available.length <= 1
      ? available
      : strategy.order(available, {
          modelId: model.id,
          pricing: model.pricing,
          health: this.options.health,
          conversationKey: strategy.name === 'cache' ? conversation() : '',
          random: this.random,
        });
    const candidates = ordered.slice(0, this.options.maxAttempts);
    hold.resolved(model, strategy.name);
    return {
      hold,
      requestId,
      context,
      model,
      endpoint,
      strategyName: strategy.name,
      candidates,
      timeoutMs: timeoutMs > 0 ? timeoutMs : this.options.attemptTimeoutMs,
      logger,
    };
  }

  private prepare(raw: ChatRequest, hold: Reservation): PreparedRequest {
    const target = this.resolve(hold, raw.modelId, raw.routingStrategy, raw.timeoutMs, () => conversationKey(raw));
    const { request, dropped } = dropUnsupportedParameters(raw, target.model);
    // Added to the target rather than spread into a copy: in V8 11 (Node 20) a spread copy's hidden class
    // sits outside the transition tree, so each property added to it made fresh Maps per request (README
    // "Performance": such objects kept request graphs alive through young-generation GCs).
    return Object.assign(target, { request, dropped });
  }

  /**
   * The one failover loop. Tries the candidates in order with a per-attempt timeout. Retryable failures
   * move on; a provider's verdict, the caller's cancellation or running out of candidates end the request
   * and release its hold. A stream pulls its first part inside `call` (failover ends with the first
   * content) and passes `continues`: its attempt goes on, so the control is handed back undisposed and
   * the caller records the attempt's outcome.
   */
  private async withFailover<Result>(
    target: RoutingTarget,
    signal: CallerSignal,
    call: (candidate: Candidate, control: AttemptControl) => Promise<Result>,
    policy: FailoverPolicy = {},
  ): Promise<{ result: Result; candidate: Candidate; durationMs: number; control: AttemptControl }> {
    const screening = policy.screen !== undefined;
    const candidates = policy.screen ?? target.candidates;
    // A screen is the gateway's own check: no attempt metrics, health or provider on the request's event.
    const attempts = screening ? undefined : this.options.attempts;
    let lastFailure: ProviderError | undefined;
    let lastProvider = '';
    for (const candidate of candidates) {
      const providerId = candidate.offer.providerId;
      if (lastFailure) attempts?.failover(lastProvider);
      lastProvider = providerId;
      if (!screening) target.hold.providerId = providerId;
      const control = new AttemptControl(signal, target.timeoutMs);
      const startedAt = Date.now();
      let handedOver = false;
      control.arm();
      try {
        const result = await call(candidate, control);
        if (policy.continues) {
          control.disarm();
          handedOver = true;
        } else {
          attempts?.attempt(providerId, 'success');
        }
        if (!screening && tracingEnabled()) otelTrace.getActiveSpan()?.setAttribute('gateway.attempts', candidates.indexOf(candidate) + 1);
        return { result, candidate, durationMs: Date.now() - startedAt, control };
      } catch (error) {
        if (signal.aborted) {
          attempts?.attempt(providerId, 'cancelled');
          target.hold.release();
          throw new GatewayError(GrpcStatus.CANCELLED, ErrorReason.ERROR_REASON_UNSPECIFIED, 'The caller cancelled the request.');
        }
        if (error instanceof GatewayError) {
          // A typed verdict on the request itself (e.g. an unusable json_schema), reached before any
          // provider call: the caller's error as it is, no failover, nothing held against the provider.
          target.hold.release();
          throw error;
        }
        const failure = control.timedOut ? new ProviderError('timeout', 'attempt timed out', 0, { cause: error }) : toProviderError(error, control);
        attempts?.attempt(providerId, !failure.retryable ? 'rejected' : control.timedOut ? 'timeout' : 'error');
        if (!failure.retryable && !screening) {
          target.hold.release();
          throw verdictError(failure);
        }
        if (!screening) {
          this.options.health.recordFailure(providerId, target.model.id);
          target.logger.warn({ provider: providerId, failure: failure.message }, 'provider attempt failed; failing over');
        }
        lastFailure = failure;
      } finally {
        if (!handedOver) control.dispose();
      }
    }
    target.hold.release();
    if (screening) target.logger.warn({ err: lastFailure }, 'prompt screening unavailable; image request refused');
    throw noUpstream(lastFailure);
  }

  /** Publishes the SERVED event of an answer not yet sent; when it cannot be stored the answer is withheld. */
  private async recordServed(target: RoutingTarget, providerId: string, usage: Usage): Promise<void> {
    try {
      await target.hold.settle(providerId, usage);
    } catch (error) {
      target.logger.error({ err: error }, 'usage event not stored; answer withheld');
      throw error;
    }
  }

  private requestFor(prepared: PreparedRequest, candidate: Candidate) {
    const messages = stripForeignReasoning(prepared.request.messages, candidate.offer.providerId);
    return {
      upstreamModel: candidate.offer.upstreamModel,
      chat: messages === prepared.request.messages ? prepared.request : { ...prepared.request, messages },
      modelMaxOutputTokens: prepared.model.maxOutputTokens,
    };
  }

  chat(raw: ChatRequest, signal: CallerSignal): Promise<ChatResponse> {
    return this.admitted(raw.context, raw.modelId, raw.endpoint || 'chat.completions', (hold) => this.chatHolding(raw, signal, hold));
  }

  private async chatHolding(raw: ChatRequest, signal: CallerSignal, hold: Reservation): Promise<ChatResponse> {
    const prepared = this.prepare(raw, hold);
    const { result, candidate, durationMs } = await this.withFailover(prepared, signal, (candidate, attemptSignal) =>
      candidate.adapter.chat(this.requestFor(prepared, candidate), attemptSignal),
    );
    const providerId = candidate.offer.providerId;
    if (tracingEnabled()) otelTrace.getActiveSpan()?.setAttribute('gen_ai.response.finish_reasons', result.choices.map((choice) => choice.finishReason));
    const delivered: DeliveredOutput = {
      content: result.choices.map((choice) => choice.message?.content ?? '').join(''),
      reasoning: result.choices.flatMap((choice) => choice.message?.reasoning ?? []).map((part) => part.text).join(''),
      toolCalls: result.choices.flatMap((choice) => choice.message?.toolCalls ?? []),
    };
    const usage = meterUsage(result.usage, prepared.request.messages, prepared.request.tools, delivered);
    this.options.health.recordSuccess(providerId, prepared.model.id, { outputTokens: usage.outputTokens, durationMs });
    await this.recordServed(prepared, providerId, usage);
    return {
      id: newCompletionId(),
      modelId: prepared.model.id,
      created: BigInt(Math.floor(Date.now() / 1000)),
      choices: result.choices,
      usage,
      providerId,
      routingStrategy: prepared.strategyName,
      droppedParams: prepared.dropped,
    };
  }

  embed(raw: EmbedRequest, signal: CallerSignal): Promise<EmbedResponse> {
    return this.admitted(raw.context, raw.modelId, 'embeddings', (hold) => this.embedHolding(raw, signal, hold));
  }

  private async embedHolding(raw: EmbedRequest, signal: CallerSignal, hold: Reservation): Promise<EmbedResponse> {
    const target = this.resolve(hold, raw.modelId, raw.routingStrategy, 0, () => '', canEmbed);
    if (raw.texts.length === 0 && raw.tokenInputs.length === 0) throw errors.invalidRequest('input must not be empty', 'input');
    if (raw.texts.length > MAX_EMBEDDING_INPUTS || raw.tokenInputs.length > MAX_EMBEDDING_INPUTS) {
      throw errors.invalidRequest(`input holds more than ${MAX_EMBEDDING_INPUTS} items`, 'input');
    }
    // `dimensions` goes only to models that list it (spec 4.7: dropped where the provider has no such parameter).
    const dimensions = raw.dimensions !== undefined && target.model.supportedParameters.includes('dimensions') ? raw.dimensions : undefined;
    const { result, candidate } = await this.withFailover(target, signal, (candidate, attemptSignal) =>
      candidate.adapter.embed!(
        { upstreamModel: candidate.offer.upstreamModel, texts: raw.texts, tokenInputs: raw.tokenInputs.map((input) => input.ids), dimensions },
        attemptSignal,
      ),
    );
    // Counted only when the provider reported nothing: the tokenizer is synchronous work.
    const counted = () => {
      const budget = tokenizerBudget();
      return raw.texts.reduce((sum, text) => sum + countTextTokens(text, budget), 0) + raw.tokenInputs.reduce((sum, input) => sum + input.ids.length, 0);
    };
    const usage: Usage =
      result.usage && result.usage.inputTokens > 0 ? result.usage : { ...emptyUsage(), inputTokens: counted(), estimated: true };
    await this.recordServed(target, candidate.offer.providerId, usage);
    return {
      modelId: target.model.id,
      embeddings: result.embeddings.map((values) => ({ values })),
      usage,
      providerId: candidate.offer.providerId,
      routingStrategy: target.strategyName,
    };
  }

  moderate(raw: ModerateRequest, signal: CallerSignal): Promise<ModerateResponse> {
    return this.admitted(raw.context, raw.modelId, 'moderations', (hold) => this.moderateHolding(raw, signal, hold));
  }

  private async moderateHolding(raw: ModerateRequest, signal: CallerSignal, hold: Reservation): Promise<ModerateResponse> {
    const target = this.resolve(hold, raw.modelId, raw.routingStrategy, 0, () => '', canModerate);
    const input = moderationInput(raw);
    const expected = input.form === 'strings' ? input.texts.length : 1;
    const { result, candidate } = await this.withFailover(target, signal, (candidate, attemptSignal) =>
      candidate.adapter.moderate!({ upstreamModel: candidate.offer.upstreamModel, input }, attemptSignal),
    );
    if (result.results.length !== expected) {
      throw noUpstream(new ProviderError('connection', `expected ${expected} moderation results, got ${result.results.length}`));
    }
    // Counted only when the provider reported nothing: the tokenizer is synchronous work.
    const counted = () => {
      const budget = tokenizerBudget();
      const parts: AdapterModerationPart[] =
        input.form === 'string' ? [{ type: 'text', text: input.text }] : input.form === 'strings' ? input.texts.map((text) => ({ type: 'text', text })) : input.parts;
      return parts.reduce((sum, part) => sum + (part.type === 'text' ? countTextTokens(part.text, budget) : MODERATION_IMAGE_TOKENS), 0);
    };
    const usage: Usage = result.usage && result.usage.inputTokens > 0 ? result.usage : { ...emptyUsage(), inputTokens: counted(), estimated: true };
    await this.recordServed(target, candidate.offer.providerId, usage);
    return {
      id: `modr-${target.requestId.replace(/[^A-Za-z0-9]/g, '').slice(0, 32)}`,
      modelId: target.model.id,
      results: result.results.map((item) => ({
        flagged: item.flagged,
        categories: item.categories,
        categoryScores: item.categoryScores,
        categoryAppliedInputTypes: Object.fromEntries(Object.entries(item.categoryAppliedInputTypes).map(([name, types]) => [name, { types }])),
      })),
      usage,
      providerId: candidate.offer.providerId,
    };
  }

  generateImages(raw: GenerateImagesRequest, signal: CallerSignal): Promise<GenerateImagesResponse> {
    return this.admitted(raw.context, raw.modelId, 'images.generations', (hold) => this.generateImagesHolding(raw, signal, hold));
  }

  private async generateImagesHolding(raw: GenerateImagesRequest, signal: CallerSignal, hold: Reservation): Promise<GenerateImagesResponse> {
    const target = this.resolve(hold, raw.modelId, raw.routingStrategy, 0, () => '', canGenerateImages);
    const request = this.imageRequest(target, raw);
    await this.screenPrompt(target, raw.prompt, signal);
    const { result, candidate } = await this.withFailover(target, signal, (candidate, attemptSignal) =>
      candidate.adapter.generateImages!({ ...request, upstreamModel: candidate.offer.upstreamModel }, attemptSignal),
    );
    return this.imagesAnswer(target, raw, result, candidate.offer.providerId);
  }

  editImages(raw: EditImagesRequest, signal: CallerSignal): Promise<EditImagesResponse> {
    const generation = raw.generation;
    return this.admitted(generation?.context, generation?.modelId ?? '', 'images.edits', (hold) => this.editImagesHolding(raw, signal, hold));
  }

  private async editImagesHolding(raw: EditImagesRequest, signal: CallerSignal, hold: Reservation): Promise<EditImagesResponse> {
    const generation = raw.generation;
    const target = this.resolve(hold, generation?.modelId ?? '', generation?.routingStrategy ?? '', 0, () => '', canEditImages);
    if (!generation) throw errors.invalidRequest('EditImagesRequest.generation is required', 'generation');
    const request = this.imageRequest(target, generation);
    if (raw.images.length === 0) throw errors.invalidRequest('at least one image is required', 'image');
    // An edit's prompt is screened like a generation's (issue 29: edits skipped the screen).
    await this.screenPrompt(target, generation.prompt, signal);
    const asInput = (image: { data: Uint8Array; filename: string; mediaType: string }) => ({ data: image.data, filename: image.filename, mediaType: image.mediaType });
    const { result, candidate } = await this.withFailover(target, signal, (candidate, attemptSignal) =>
      candidate.adapter.editImages!(
        { ...request, upstreamModel: candidate.offer.upstreamModel, images: raw.images.map(asInput), mask: raw.mask ? asInput(raw.mask) : undefined },
        attemptSignal,
      ),
    );
    return { result: await this.imagesAnswer(target, generation, result, candidate.offer.providerId) };
  }

  /** Checks n and size (the edge checked them too) and builds the adapter request. */
  private imageRequest(target: RoutingTarget, raw: GenerateImagesRequest): Omit<AdapterImageRequest, 'upstreamModel'> {
    const n = raw.n || 1;
    const maxImages = target.model.maxImages ?? 1;
    const refuse = (message: string, param: string) => errors.invalidRequest(message, param);
    if (n > maxImages) throw refuse(`n must be at most ${maxImages} for ${target.model.id}`, 'n');
    if (raw.size !== undefined && !IMAGE_SIZE.test(raw.size)) throw refuse("size must be written '{width}x{height}', e.g. '1024x1024'", 'size');
    if (!raw.prompt) throw refuse('prompt must not be empty', 'prompt');
    const supports = (name: string) => target.model.supportedParameters.includes(name);
    return {
      prompt: raw.prompt,
      n,
      size: raw.size,
      quality: supports('quality') ? raw.quality : undefined,
      background: supports('background') ? raw.background : undefined,
    };
  }

  /**
   * The catalog's moderation model judges an image prompt before any image is made. Flagged: 403 and the
   * reservation released (nothing charged). Screening is the gateway's own cost: no usage event of its own.
   * A configured screen that cannot answer refuses the request rather than skipping the check.
   */
  private async screenPrompt(target: RoutingTarget, prompt: string, signal: CallerSignal): Promise<void> {
    const screenId = this.options.catalog.moderationModel;
    if (!screenId) return;
    const screen = this.options.catalog.model(screenId);
    const candidates = (screen?.offers ?? []).flatMap((offer) => {
      const adapter = offer.endpoints.includes('moderations') ? this.options.catalog.provider(offer.providerId)?.adapter : undefined;
      return adapter?.moderate ? [{ offer, adapter }] : [];
    });
    const { result: verdict } = await this.withFailover(
      target,
      signal,
      (candidate, control) => candidate.adapter.moderate!({ upstreamModel: candidate.offer.upstreamModel, input: { form: 'string', text: prompt } }, control),
      { screen: candidates },
    );
    const result = verdict.results[0];
    if (!result) {
      target.logger.warn({ moderation_model: screenId }, 'prompt screening answered no verdict; image request refused');
      throw noUpstream();
    }
    if (!result.flagged) return;
    const flagged = Object.entries(result.categories).filter(([, value]) => value).map(([name]) => name);
    throw new GatewayError(
      GrpcStatus.PERMISSION_DENIED,
      ErrorReason.ERROR_REASON_FORBIDDEN,
      `The prompt was flagged by content moderation (${flagged.join(', ') || 'policy'}); no image was generated and nothing was charged.`,
      { code: 'content_policy_violation', param: 'prompt' },
    );
  }

  private async imagesAnswer(target: RoutingTarget, raw: GenerateImagesRequest, result: AdapterImageResult, providerId: string): Promise<GenerateImagesResponse> {
    const reported = result.usage;
    const pricesText = target.model.pricing?.perInputTextToken !== undefined;
    const usage: Usage = {
      ...emptyUsage(),
      outputImageTokens: reported?.outputImageTokens || IMAGE_OUTPUT_TOKENS_DEFAULT * result.images.length,
      // Spec §2.1: zero input tokens on a model that prices no input text token.
      inputTextTokens: pricesText ? reported?.inputTextTokens || countTextTokens(raw.prompt) : 0,
      inputImageTokens: reported?.inputImageTokens ?? 0,
      estimated: !reported,
    };
    await this.recordServed(target, providerId, usage);
    return {
      created: BigInt(Math.floor(Date.now() / 1000)),
      data: result.images.map((image) => ({
        b64Json: Buffer.from(image.data).toString('base64'),
        ...(image.revisedPrompt ? { revisedPrompt: image.revisedPrompt } : {}),
      })),
      usage,
      providerId,
      routingStrategy: target.strategyName,
    };
  }

  /**
   * Speech, streamed: failover only until the first audio bytes exist (they are pulled before anything is
   * yielded); after that a provider failure ends the stream with an error. The usage event (characters,
   * plus audio tokens when the provider reports them) is published after the last byte, then yielded.
   */
  async *speak(raw: SpeakRequest, signal: CallerSignal): AsyncGenerator<SpeakResponse> {
    const hold = this.admit(raw.context, raw.modelId, 'audio.speech');
    let providerId = '';
    let control: AttemptControl | undefined;
    let iterator: AsyncIterator<Uint8Array> | undefined;
    const charged = (): Usage => ({ ...emptyUsage(), inputTextCharacters: [...raw.input].length });
    try {
      const target = this.resolve(hold, raw.modelId, raw.routingStrategy, 0, () => '', canSpeak);
      if (!raw.input) throw errors.invalidRequest('input must not be empty', 'input');
      const request = {
        input: raw.input,
        voice: raw.voice,
        speed: raw.speed,
        instructions: raw.instructions,
        responseFormat: raw.responseFormat || undefined,
      };
      const { result, candidate } = await this.withFailover(target, signal, async (candidate, attemptSignal) => {
        const speech = await candidate.adapter.speak!({ ...request, upstreamModel: candidate.offer.upstreamModel }, attemptSignal);
        const audio = speech.audio[Symbol.asyncIterator]();
        let first: IteratorResult<Uint8Array>;
        try {
          first = await audio.next();
        } catch (error) {
          void audio.return?.(undefined)?.catch?.(() => undefined);
          throw error;
        }
        return { speech, audio, first };
      });
      providerId = candidate.offer.providerId;
      iterator = result.audio;
      // The attempt's own control ended with the first bytes; the rest of the stream gets its own idle bound.
      control = new AttemptControl(signal, target.timeoutMs);
      yield { event: { $case: 'contentType', value: result.speech.contentType ?? '' } };
      let next = result.first;
      while (!next.done) {
        if (next.value.length > 0) yield { event: { $case: 'audio', value: Buffer.from(next.value.buffer, next.value.byteOffset, next.value.byteLength) } };
        control.arm();
        try {
          next = await iterator.next();
        } finally {
          control.disarm();
        }
      }
      iterator = undefined;
      const usage: Usage = { ...charged(), outputAudioTokens: result.speech.usage()?.outputAudioTokens ?? 0 };
      await this.recordServed(target, providerId, usage);
      this.options.health.recordSuccess(providerId, target.model.id, { outputTokens: 0, durationMs: 0 });
      yield { event: { $case: 'usage', value: usage } };
    } catch (error) {
      // Before the first bytes (a refusal, or no provider answered) the finally releases the hold.
      if (!providerId || error instanceof GatewayError) throw error;
      // Audio already reached the caller: it is charged, and the caller learns the answer was cut short.
      hold.settleInBackground(providerId, charged(), true);
      const failure = control?.timedOut ? new ProviderError('timeout', 'speech stream went silent', 0, { cause: error }) : toProviderError(error, control ?? new AttemptControl(signal, 1));
      throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, `The upstream provider failed during the speech stream: ${failure.providerMessage}`, {
        retryAfterSeconds: NO_UPSTREAM_RETRY_AFTER_SECONDS,
        cause: failure,
      });
    } finally {
      control?.dispose();
      if (iterator) void iterator.return?.(undefined)?.catch?.(() => undefined);
      // The caller went away after the first bytes: what it received is charged. Else nothing was: released.
      if (providerId) hold.settleInBackground(providerId, charged(), true);
      else hold.release();
    }
  }

  transcribe(raw: TranscribeRequest, signal: CallerSignal): Promise<TranscribeResponse> {
    const endpoint = raw.translate ? 'audio.translations' : 'audio.transcriptions';
    return this.admitted(raw.context, raw.modelId, endpoint, (hold) => this.transcribeHolding(raw, signal, hold));
  }

  private async transcribeHolding(raw: TranscribeRequest, signal: CallerSignal, hold: Reservation): Promise<TranscribeResponse> {
    const target = this.resolve(hold, raw.modelId, raw.routingStrategy, 0, () => '', canTranscribe);
    if (raw.audio.length === 0) throw errors.invalidRequest('file must not be empty', 'file');
    const { result, candidate } = await this.withFailover(target, signal, (candidate, attemptSignal) =>
      candidate.adapter.transcribe!(
        {
          upstreamModel: candidate.offer.upstreamModel,
          audio: raw.audio,
          filename: raw.filename || 'audio',
          mediaType: raw.mediaType || 'application/octet-stream',
          prompt: raw.prompt || undefined,
          language: raw.language || undefined,
          temperature: raw.temperature,
          translate: raw.translate,
          responseFormat: raw.responseFormat || 'json',
        },
        attemptSignal,
      ),
    );
    const reported = result.usage;
    const usage: Usage = {
      ...emptyUsage(),
      ...(reported ?? {}),
      inputAudioMs: reported?.inputAudioMs || raw.audioDurationMs,
      estimated: !reported?.inputAudioMs,
    };
    await this.recordServed(target, candidate.offer.providerId, usage);
    return { text: result.text, content: result.content, usage, providerId: candidate.offer.providerId };
  }

  /**
   * A chat stream. Failover (withFailover) lasts until the first content: each attempt pulls parts until
   * its first delta (or its end: an empty stream is still an answer). After that a provider failure ends
   * the stream with an error, and what was delivered is charged. `combinedStart`: the caller reads
   * ChatStreamStart.first_delta (ChatStreamRequest.combined_start).
   */
  async *chatStream(raw: ChatRequest, signal: CallerSignal, options: { combinedStart?: boolean } = {}): AsyncGenerator<ChatStreamResponse> {
    // Exactly one usage event per request: the hold ends once, FAILED or SERVED (reservation.ts).
    const hold = this.admit(raw.context, raw.modelId, raw.endpoint || 'chat.completions', true);
    let servingProvider = '';
    let reported: Usage | undefined;
    const delivered = new DeliveredContent();
    let checkpoint: StreamCheckpoint | undefined;
    let active: { control: AttemptControl; iterator: AsyncIterator<AdapterStreamPart> } | undefined;
    let prepared: PreparedRequest | undefined;
    const meter = () => meterUsage(reported, prepared!.request.messages, prepared!.request.tools, delivered.output);
    try {
      const target = (prepared = this.prepare(raw, hold));
      const { logger } = target;
      let opened;
      try {
        opened = await this.withFailover(target, signal, (candidate, control) => this.firstStreamPart(target, candidate, control), { continues: true });
      } catch (error) {
        // The caller went away before any content: the stream just ends (its hold is released).
        if (signal.aborted) return;
        throw error;
      }
      const { result: first, candidate, durationMs: ttftMs, control } = opened;
      const providerId = (servingProvider = candidate.offer.providerId);
      const iterator = first.iterator;
      reported = first.reported;
      const firstPartAt = Date.now();
      const start = (firstDelta?: ChatStreamDelta): ChatStreamResponse => ({
        event: {
          $case: 'start',
          value: {
            id: newCompletionId(),
            modelId: target.model.id,
            created: BigInt(Math.floor(Date.now() / 1000)),
            providerId,
            routingStrategy: target.strategyName,
            droppedParams: target.dropped,
            ...(firstDelta ? { firstDelta } : {}),
          },
        },
      });
      /**
       * The stream's SERVED usage, published; `stored` settles once the bus has it or, when the publish
       * failed, the background does (the content already reached the caller, so it is retried apart). The
       * checkpoint is retired only once the final event is stored (bus or outbox), never before.
       */
      const settleServed = (): { usage: Usage; stored: Promise<void> } => {
        const usage = meter();
        const stored = hold.settleStream(providerId, usage, checkpoint, (error) =>
          logger.error({ err: error }, 'usage event of a stream not stored yet; retrying in the background')) ?? Promise.resolve();
        return { usage, stored };
      };
      if (!first.delta) {
        // A complete stream with nothing in it is still this provider's answer.
        control.dispose();
        yield start();
      } else {
        active = { control, iterator };
        try {
          delivered.add(first.delta);
          // From here the caller has content: its usage must survive a crash (a Set insert; no disk unless
          // the stream is still running at the first checkpoint). The event is built on the checkpoint
          // timer, never on this path.
          checkpoint = this.options.usage.trackStream(delivered, () =>
            hold.event(UsageOutcome.USAGE_OUTCOME_SERVED, providerId, delivered.usageSoFar(reported, target.request), true));
          // A caller that reads first_delta gets the first content in the start: one message (one HTTP/2
          // write: grpc-js writes each message after the previous one's callback) less before it.
          if (options.combinedStart) {
            yield start(first.delta);
          } else {
            yield start();
            yield this.deltaMessage(first.delta);
          }
          for (;;) {
            control.arm();
            const next = await iterator.next();
            control.disarm();
            if (next.done) break;
            const part = next.value;
            if (part.type === 'usage') { reported = part.usage; delivered.changes++; continue; }
            delivered.add(part.delta);
            yield this.deltaMessage(part.delta);
          }
          control.dispose();
          active = undefined;
        } catch (error) {
          control.dispose();
          active = undefined;
          void iterator.return?.(undefined)?.catch?.(() => undefined);
          // Typed errors are the caller's answer as they are. The finally charges what was delivered.
          if (error instanceof GatewayError) throw error;
          if (signal.aborted) { this.options.attempts?.attempt(providerId, 'cancelled'); return; }
          const failure = control.timedOut ? new ProviderError('timeout', 'attempt timed out', 0, { cause: error }) : toProviderError(error, control);
          this.options.attempts?.attempt(providerId, 'failed_after_content');
          if (failure.retryable) this.options.health.recordFailure(providerId, target.model.id);
          logger.warn({ provider: providerId, failure: failure.message }, 'stream failed after content was sent');
          await settleServed().stored;
          if (!failure.retryable) throw verdictError(failure);
          throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'The upstream provider failed during the stream.', {
            retryAfterSeconds: NO_UPSTREAM_RETRY_AFTER_SECONDS,
            cause: failure,
          });
        }
      }
      // A complete stream ends at once: its usage message and end go out with its last deltas (one write
      // to the edge) while the publish finishes apart. Waiting for the ack would protect nothing: the
      // content is with the caller either way, and a failed publish is retried from the background.
      const { usage, stored } = settleServed();
      this.settling.add(stored);
      void stored.finally(() => this.settling.delete(stored));
      this.options.attempts?.attempt(providerId, 'success');
      this.options.health.recordSuccess(providerId, target.model.id, { ttftMs, outputTokens: usage.outputTokens, durationMs: Date.now() - firstPartAt });
      yield { event: { $case: 'usage', value: usage } };
    } finally {
      if (active) {
        // The consumer stopped reading mid-stream: stop the upstream request too.
        active.control.abort(new Error('caller went away'));
        active.control.dispose();
        void active.iterator.return?.(undefined)?.catch?.(() => undefined);
      }
      // Still open when the caller went away (cancellation or the consumer stopped reading), or nothing
      // was delivered: SERVED for what reached the caller, else FAILED. A no-op once the hold ended.
      if (hold.open) {
        if (servingProvider) hold.settleInBackground(servingProvider, meter(), true, checkpoint);
        else hold.release();
      }
    }
  }

  /** One delta as a stream message (and its finish reason on the span when tracing). */
  private deltaMessage(delta: ChatStreamDelta): ChatStreamResponse {
    if (delta.finishReason !== '' && tracingEnabled()) otelTrace.getActiveSpan()?.setAttribute('gen_ai.response.finish_reasons', [delta.finishReason]);
    return { event: { $case: 'delta', value: delta } };
  }

  /**
   * One stream attempt up to its first content: the parts before the first delta (a usage report) are
   * kept; no delta at all is an empty, complete answer. Each part gets the attempt's idle bound.
   */
  private async firstStreamPart(target: PreparedRequest, candidate: Candidate, control: AttemptControl) {
    const iterator = candidate.adapter.chatStream(this.requestFor(target, candidate), control)[Symbol.asyncIterator]();
    let reported: Usage | undefined;
    try {
      for (;;) {
        control.arm();
        const next = await iterator.next();
        if (next.done) return { iterator, delta: undefined, reported };
        // Adapters drop empty deltas, so the first delta is the first content: failover ends here.
        if (next.value.type === 'delta') return { iterator, delta: next.value.delta, reported };
        reported = next.value.usage;
      }
    } catch (error) {
      void iterator.return?.(undefined)?.catch?.(() => undefined);
      throw error;
    }
  }
}

/** The request's input in the form the client wrote it (ModerationInputForm); a 400 when the parts do not fit it. */
function moderationInput(raw: ModerateRequest): AdapterModerateRequest['input'] {
  const parts = raw.inputs.flatMap((input): AdapterModerationPart[] => {
    const value = input.input;
    if (value?.$case === 'text') return [{ type: 'text', text: value.value }];
    if (value?.$case === 'imageUrl') return [{ type: 'image_url', url: value.value }];
    return [];
  });
  if (parts.length === 0) throw errors.invalidRequest('input must not be empty', 'input');
  const texts = parts.flatMap((part) => (part.type === 'text' ? [part.text] : []));
  let form = raw.inputForm;
  if (form === ModerationInputForm.MODERATION_INPUT_FORM_UNSPECIFIED) {
    form = texts.length === parts.length ? ModerationInputForm.MODERATION_INPUT_FORM_STRINGS : ModerationInputForm.MODERATION_INPUT_FORM_MULTIMODAL;
  }
  switch (form) {
    case ModerationInputForm.MODERATION_INPUT_FORM_STRING:
      if (parts.length !== 1 || texts.length !== 1) throw errors.invalidRequest('a string input is exactly one text', 'input');
      return { form: 'string', text: texts[0]! };
    case ModerationInputForm.MODERATION_INPUT_FORM_STRINGS:
      if (texts.length !== parts.length) throw errors.invalidRequest('an array of strings holds only texts', 'input');
      return { form: 'strings', texts };
    case ModerationInputForm.MODERATION_INPUT_FORM_MULTIMODAL:
      return { form: 'multimodal', parts };
    default:
      throw errors.invalidRequest('unknown moderation input form', 'input');
  }
}
