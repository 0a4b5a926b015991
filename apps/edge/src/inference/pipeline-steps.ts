import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RequestContext, Usage } from '@gateway/proto';
import type { Cancellation } from '@gateway/platform';
import type { VerifiedApiKey } from './auth-cache.js';
import type { AnswerSink } from './answer-sink.js';
import type { CatalogModel } from '../catalog-cache.js';
import type { EdgeContext } from '../context.js';
import type { FreeFormField } from '../json-depth.js';
import type { InferenceEndpoint } from './model-resolution.js';
import type { RoutingStrategy } from './strategy.js';

/** What a route's prepare step hands on: at least the request's worst-case cost, which admission holds. */
export interface Hold {
  /** Worst-case cost in pico-credits; a paid model holds at least the 0.05 minimum whatever this says. */
  holdPico: bigint;
  /**
   * Every model that may serve the request, the job's model first, when that is more than one (model
   * fallbacks); absent or undefined: the job's model alone. Admission covers each of them.
   */
  readonly candidates?: readonly CatalogModel[] | undefined;
}

/**
 * The steps a route supplies to THE inference pipeline (pipeline.ts, DESIGN §6). The pipeline runs, in
 * order: credential (before the body), `read`, the strategy header, the model `modelName` names
 * (alias, 410, tier 403, `endpoint`), `prepare`, admission of `prepare`'s hold, then `exchange`, and
 * finishes the reservation exactly once. A chat dialect's steps are `chatSteps(dialect)` (chat-steps.ts);
 * an endpoint family (endpoints/<family>/) is an object of these steps itself.
 */
export interface InferenceSteps<Body, Prepared extends Hold, Sink extends AnswerSink = AnswerSink> {
  /** The endpoint the catalog offers and the router routes by. */
  readonly endpoint: InferenceEndpoint;
  /**
   * The body step, one of two forms. `parse`: a JSON route validates the JSON the pipeline read (bounded,
   * nesting named by `freeFormFields`); a 400 names the field path. `read`: a route that reads its own body
   * (a bounded multipart upload); `response` is whose end frees what reading held (spooled uploads).
   */
  parse?(json: unknown): Body;
  readonly freeFormFields?: readonly FreeFormField[];
  read?(request: IncomingMessage, context: EdgeContext, response: ServerResponse): Promise<Body>;
  modelName(body: Body): string;
  /** The body's own routing strategy, where the route has one (it wins over the header). */
  routing?(body: Body): RoutingStrategy | null | undefined;
  /** Checks against the resolved model and the worst-case cost: no provider call, nothing held yet. */
  prepare(body: Body, model: CatalogModel, context: EdgeContext, job: InferenceJob<Body>): Prepared | Promise<Prepared>;
  /**
   * A request handed to another service to run later (a background response, run and admitted by the
   * jobs service): answered here instead of admitted and exchanged. `false` (synchronously) for an
   * ordinary request, so it pays no promise; a promise of true once the request was handed on and answered.
   */
  detach?(prepared: Prepared, job: InferenceJob<Body>, sink: Sink, context: EdgeContext): false | Promise<true>;
  /** An admission refusal (429, 402, ...) as the route words it; absent: as admission threw it. */
  refused?(error: unknown, prepared: Prepared): unknown;
  /**
   * The Router call and the answer. Calls `job.commit(usage)` at its point of no return (the Router
   * answered, or a stream's first bytes went out) and again with the final usage of a stream. A throw
   * before the commit is an ordinary error answer and the reservation is released; after it the
   * reservation is settled with what was committed.
   */
  exchange(prepared: Prepared, job: InferenceJob<Body>, sink: Sink, context: EdgeContext): Promise<void>;
}

/**
 * One inference request as it moves through the pipeline: who asks (set before the model is known),
 * what they asked for and how it was routed (set by the pipeline before the exchange), and how far the
 * answer got (set by the exchange). Every field exists from the constructor on (one hidden class).
 */
export class InferenceJob<Body = unknown> {
  /** The resolved model (set before `prepare`; declared so the field exists, undefined, from the start). */
  model!: CatalogModel;
  /** Body's, header's or key's strategy, else `balanced` (set before `prepare`). */
  strategy: RoutingStrategy = 'balanced';
  /** The RequestContext every Router call of this request carries: its reservation's identity (set once admitted). */
  routerContext!: RequestContext;
  /** Past the point of no return: the Router answered, or bytes reached the client. The reservation is then settled, never released. */
  committed = false;
  /** The answer's usage, as far as it is known. */
  usage: Usage | undefined = undefined;
  /** A committed answer then failed (a stream ended by its error events): not an answer to keep for an Idempotency-Key. */
  failedAfterCommit = false;
  /** The request's `anthropic-beta` header (messages: passed on through an allowlist), when it has one. */
  anthropicBeta: string | undefined = undefined;

  constructor(
    /** The gateway's id of the request: the key its money moves under. */
    readonly requestId: string,
    readonly key: VerifiedApiKey,
    readonly body: Body,
    /** The `x-gateway-strategy` header's strategy, if the caller sent one. */
    readonly headerStrategy: RoutingStrategy | undefined,
    /** Aborted when the client is gone: cancels the Router call, which stops the provider call behind it. */
    readonly signal: Cancellation,
  ) {}

  /** The answer is committed (see InferenceSteps.exchange), with its usage as far as known. */
  commit(usage: Usage | undefined): void {
    this.committed = true;
    this.usage = usage;
  }
}
