import { anthropicBetas, GatewayError, type Logger } from '@gateway/platform';
import type { AnswerSink } from './answer-sink.js';
import type { CatalogModel } from '../catalog-cache.js';
import { resolveFileParts } from '../canonical/file-parts.js';
import { routerRequest } from '../canonical/request.js';
import type { EdgeContext } from '../context.js';
import type { AnswerContext, ConvertedRequest, InferenceDialect } from './dialect.js';
import { EdgeError, toApiError } from '../errors.js';
import { gatewayHeaders } from './gateway-headers.js';
import { ClientGoneBeforeRouterError } from '../http.js';
import type { FreeFormField } from '../json-depth.js';
import type { InferenceEndpoint } from './model-resolution.js';
import type { ReasoningTags } from '../canonical/reasoning-tags.js';
import type { Hold, InferenceJob, InferenceSteps } from './pipeline-steps.js';
import { checkContextWindow, costBound, fitsContextWindow, measurePrompt, MINIMUM_HOLD_PICO, worstCaseHint, type CostBound, type PromptMeasure } from './request-bounds.js';
import { chooseModels, hasRoutingChoices, routingChoices } from './routing-choices.js';
import { relayStream } from './stream-relay.js';
import type { RoutingStrategy } from './strategy.js';

/** Bound on one non-streamed answer, failover included. */
const CHAT_DEADLINE_MS = 10 * 60_000;

/**
 * A chat request converted and bounded before admission, and the context its answer is rendered in: one
 * object per request serves both (the renderers and stream writers read it as their AnswerContext).
 */
export class ChatCall implements AnswerContext, Hold {
  readonly holdPico: bigint;
  /** Seconds since the epoch at which the answer was created: set when the Router is called. */
  created = 0;

  constructor(
    readonly requestId: string,
    /** The model the answer names: the request's, or the fallback that served it (set once the Router says which). */
    public model: CatalogModel,
    readonly tags: ReasoningTags,
    readonly logger: Logger,
    readonly converted: ConvertedRequest,
    readonly measure: PromptMeasure,
    readonly bound: CostBound,
    /** Every model that may serve (model fallbacks), the first one first; undefined: `model` alone. */
    readonly candidates: readonly CatalogModel[] | undefined,
  ) {
    this.holdPico = bound.holdPico;
  }
}

/**
 * The pipeline's steps of a chat dialect (DESIGN §6): the dialect's four pieces (schema, converter,
 * renderer, stream writer) fitted into the one pipeline. Everything else a chat request goes through —
 * context window, worst-case cost, files, the Router call, the stream relay — is the same for every
 * dialect and lives here and in stream-relay.ts. One object per dialect, made once: methods on the
 * prototype, no closure per request.
 */
class ChatSteps<Body> implements InferenceSteps<Body, ChatCall> {
  readonly endpoint: InferenceEndpoint;
  readonly freeFormFields: readonly FreeFormField[];

  constructor(private readonly dialect: InferenceDialect<Body>) {
    this.endpoint = dialect.endpoint;
    this.freeFormFields = dialect.freeFormFields;
  }

  parse(json: unknown): Body {
    return this.dialect.parse(json);
  }

  modelName(body: Body): string {
    return this.dialect.modelName(body);
  }

  routing(body: Body): RoutingStrategy | null | undefined {
    return this.dialect.routing(body);
  }

  /**
   * Conversion (drops, 400s), then the context window and the worst-case cost, before admission and any
   * provider call. Synchronous unless the prompt's byte bound does not fit the window (then it is counted).
   */
  prepare(body: Body, model: CatalogModel, context: EdgeContext, job: InferenceJob<Body>): ChatCall | Promise<ChatCall> {
    // `models` or `provider` in the body: its own path (routing-choices.ts); an ordinary request pays two property reads.
    if (hasRoutingChoices(body)) return this.prepareChoosing(body, model, context, job);
    const { requestId } = job;
    const converted = this.dialect.convert(body, model, context.reasoningTags);
    if (job.anthropicBeta !== undefined) this.withAnthropicBeta(converted, job.anthropicBeta);
    const measure = measurePrompt(converted.request);
    if (fitsContextWindow(model, converted.request, measure)) return chatCall(requestId, model, context, converted, measure);
    return checkContextWindow(model, converted.request, measure, converted.outputField).then(() => chatCall(requestId, model, context, converted, measure));
  }

  /**
   * A request with model fallbacks or provider preferences: every named model resolved and the
   * preferences the edge can judge applied (chooseModels), the request converted for the first model
   * left (it becomes the job's model), its window checked, and the hold made the dearest worst case of
   * all the models left, so whichever serves, the hold covers it.
   */
  private async prepareChoosing(body: Body, named: CatalogModel, context: EdgeContext, job: InferenceJob<Body>): Promise<ChatCall> {
    const chosen = chooseModels(context, body, named, this.endpoint, job.key);
    // A prompt too long for a model's window moves on to the next model (as a provider's refusal would);
    // when it fits none, the first model's refusal is the answer.
    // chooseModels never answers an empty list, and the last model's refusal is thrown: the loop ends by `break`.
    let converted: ConvertedRequest;
    let measure: PromptMeasure;
    let tooLong: unknown;
    for (;;) {
      converted = this.dialect.convert(body, chosen.models[0]!, context.reasoningTags);
      if (job.anthropicBeta !== undefined) this.withAnthropicBeta(converted, job.anthropicBeta);
      measure = measurePrompt(converted.request);
      try {
        await checkContextWindow(chosen.models[0]!, converted.request, measure, converted.outputField);
        break;
      } catch (error) {
        if (!(error instanceof EdgeError) || error.apiError.code !== 'context_length_exceeded' || chosen.models.length === 1) throw tooLong ?? error;
        tooLong ??= error;
        chosen.models.shift();
      }
    }
    const model = chosen.models[0]!;
    job.model = model;
    let bound = costBound(model, converted.request, measure);
    for (let index = 1; index < chosen.models.length; index++) {
      const candidate = costBound(chosen.models[index]!, converted.request, measure);
      if (candidate.holdPico > bound.holdPico) bound = candidate;
    }
    converted.request.routingChoices = routingChoices(converted.request, chosen);
    // Every model left may serve: admission covers them all (paid, hold, credit limit, rate windows).
    const candidates = chosen.models.length > 1 ? chosen.models : undefined;
    return new ChatCall(job.requestId, model, context.reasoningTags, context.logger, converted, measure, bound, candidates);
  }

  /**
   * The messages dialect's `anthropic-beta` header (issue 37 item 8): the allowlisted values go on
   * (routing sends them to Anthropic-wire upstreams and names `anthropic-beta` where the serving kind
   * has no such header); any other value is dropped here and `anthropic-beta` named. Other dialects
   * have no such header: it is not theirs to read.
   */
  private withAnthropicBeta(converted: ConvertedRequest, header: string): void {
    if (this.endpoint !== 'messages') return;
    const { betas, droppedSome } = anthropicBetas(header);
    if (betas.length > 0) converted.request.anthropicBeta = betas.join(',');
    if (droppedSome && !converted.droppedParams.includes('anthropic-beta')) converted.droppedParams = [...converted.droppedParams, 'anthropic-beta'].sort();
  }

  /** A 402 of a request that held more than 0.05: the same refusal, saying what the hold was made of. */
  refused(error: unknown, prepared: ChatCall): unknown {
    const { bound } = prepared;
    if (!(error instanceof GatewayError) || bound.holdPico <= MINIMUM_HOLD_PICO || toApiError(error).status !== 402) return error;
    return new GatewayError(error.status, error.reason, error.message + worstCaseHint(bound, prepared.converted.outputField), { code: error.code, param: error.param, cause: error });
  }

  /** Files, then the Router call: the whole answer rendered, or the stream relayed. */
  async exchange(prepared: ChatCall, job: InferenceJob<Body>, sink: AnswerSink, context: EdgeContext): Promise<void> {
    const { requestId, model, signal: clientGone } = job;
    const { converted } = prepared;
    const chat = routerRequest(converted.request, job.routerContext, job.strategy);
    try {
      // File blocks become bytes or text the model can read (media service); after admission, so rate
      // limits and credit checks come before any URL fetch. A request without files skips this.
      await resolveFileParts(chat.messages, model, {
        media: context.media,
        requestId,
        jobs: context.jobs,
        accountId: job.key.accountId,
        signal: clientGone,
        ...(converted.filePathOf ? { pathOf: converted.filePathOf } : {}),
      });
      // Fetched files only now have a size: the window is checked again (the hold already assumed a full window).
      if (prepared.measure.unresolvedFiles) await checkContextWindow(model, chat, measurePrompt(chat), converted.outputField);
    } catch (error) {
      throw clientGone.aborted ? new ClientGoneBeforeRouterError('client left while its files were read') : error;
    }
    if (clientGone.aborted) throw new ClientGoneBeforeRouterError('client left before the router was called');
    prepared.created = Math.floor(context.now() / 1000);
    if (converted.stream) {
      const writer = this.dialect.streamWriter(prepared, job.body);
      // With fallbacks the serving model is known only at the stream's start: the writer is made again for it.
      const retarget = chat.routingChoices && chat.routingChoices.fallbackModels.length > 0
        ? (modelId: string) => {
            servedBy(prepared, job, context, modelId);
            return this.dialect.streamWriter(prepared, job.body);
          }
        : undefined;
      await relayStream(context, sink, job, chat, converted, writer, retarget);
      return;
    }
    const answer = await context.chatRouter.chat(chat, { requestId, deadlineMs: CHAT_DEADLINE_MS, signal: clientGone });
    job.commit(answer.usage);
    // A fallback model served: the answer names it.
    if (answer.modelId !== prepared.model.id) servedBy(prepared, job, context, answer.modelId);
    sink.json(
      this.dialect.render(answer, prepared, job.body),
      gatewayHeaders(answer.routingStrategy || job.strategy, converted.droppedParams, converted.spelling?.clientSpelling(answer.droppedParams) ?? answer.droppedParams, converted.droppedTools),
    );
  }
}

/** The answer came from `modelId` (a fallback): the renderers and stream writers name it. */
function servedBy(prepared: ChatCall, job: InferenceJob, context: EdgeContext, modelId: string): void {
  const model = context.catalogCache.resolve(modelId);
  if (!model) return;
  // Routing cleared the fields this model lacks: the answer names them as dropped.
  const lacked = prepared.converted.spelling?.lackedBy?.(model) ?? [];
  if (lacked.length > 0) prepared.converted.droppedParams = [...new Set([...prepared.converted.droppedParams, ...lacked])].sort();
  prepared.model = model;
  job.model = model;
}

function chatCall(requestId: string, model: CatalogModel, context: EdgeContext, converted: ConvertedRequest, measure: PromptMeasure): ChatCall {
  return new ChatCall(requestId, model, context.reasoningTags, context.logger, converted, measure, costBound(model, converted.request, measure), undefined);
}

const STEPS = new WeakMap<InferenceDialect<unknown>, ChatSteps<unknown>>();

/** The pipeline steps of `dialect`, made once per dialect. */
export function chatSteps<Body>(dialect: InferenceDialect<Body>): InferenceSteps<Body, ChatCall> {
  let steps = STEPS.get(dialect as InferenceDialect<unknown>);
  if (!steps) {
    steps = new ChatSteps(dialect as InferenceDialect<unknown>);
    STEPS.set(dialect as InferenceDialect<unknown>, steps);
  }
  return steps as unknown as InferenceSteps<Body, ChatCall>;
}
