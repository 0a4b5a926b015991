import type { ChatRequest, ChatResponse, ChatStreamDelta, ChatStreamStart, Usage } from '@gateway/proto';
import type { Logger } from '@gateway/platform';
import type { CatalogModel } from '../catalog-cache.js';
import type { FilePathOf } from '../canonical/file-parts.js';
import type { ReasoningTags } from '../canonical/reasoning-tags.js';
import type { ApiError, Dialect as ErrorDialect } from '../errors.js';
import type { FreeFormField } from '../json-depth.js';
import type { InferenceEndpoint } from './model-resolution.js';
import type { RoutingStrategy } from './strategy.js';

/**
 * A request dialect (DESIGN §6): the four pieces that differ between chat completions, messages and
 * responses — schema, converter into the canonical request, JSON renderer, stream writer — and
 * nothing else. Everything the dialects share (credential, body, model resolution, admission, the
 * router call, the stream relay and its commit point, usage) is the pipeline's (pipeline.ts).
 */
export interface InferenceDialect<Body> {
  /** The endpoint the catalog offers and the router routes by. */
  readonly endpoint: InferenceEndpoint;
  /** Which error envelope the route's failures get (errors.ts). */
  readonly errorDialect: ErrorDialect;
  /** Body fields holding free-form JSON (json-depth.ts names them in nesting errors). */
  readonly freeFormFields: readonly FreeFormField[];
  /** The zod-validated body; a failure is a 400 naming the field path. */
  parse(json: unknown): Body;
  modelName(body: Body): string;
  /** The body's own routing strategy field, when the dialect has one. */
  routing(body: Body): RoutingStrategy | null | undefined;
  /** Dialect -> canonical request for the resolved model (drops, modality and tool-pair checks). */
  convert(body: Body, model: CatalogModel, tags: ReasoningTags): ConvertedRequest;
  /** A whole answer in the dialect's JSON. */
  render(answer: ChatResponse, answerContext: AnswerContext, body: Body): unknown;
  /** The SSE writer of one streamed answer. */
  streamWriter(answerContext: AnswerContext, body: Body): StreamWriter;
}

/** A dialect's modelName and routing where its body names them `model` and `routing` (chat, messages and responses all do). */
export const BODY_MODEL_AND_ROUTING = {
  modelName: (body: { model: string }): string => body.model,
  routing: (body: { routing?: RoutingStrategy | null | undefined }): RoutingStrategy | null | undefined => body.routing,
};

export interface ConvertedRequest {
  /** The Router request; the pipeline sets `context` and `routingStrategy` once admitted. */
  request: ChatRequest;
  stream: boolean;
  /** Request fields not forwarded to any provider (the model does not support them), in the dialect's spelling. */
  droppedParams: string[];
  /**
   * Routing's drops (canonical names) in the client's spelling (the dialect's ParameterGate); absent:
   * as routing names them.
   */
  spelling?: {
    clientSpelling(routerDropped: readonly string[]): readonly string[];
    /** The forwarded parameters a fallback model that served lacks (routing cleared them), in the client's spelling. */
    lackedBy?(model: CatalogModel): readonly string[];
  };
  /** Tools the client offered that no provider runs (the responses dialect's hosted tools), dropped before the provider: `x-gateway-dropped-tools`. */
  droppedTools?: string[];
  /** The client's path of a file part, for errors while files are read (default: chat's spelling). */
  filePathOf?: FilePathOf;
  /** The dialect's name of the output-token bound, in context-window and credit refusals (default: chat's max_completion_tokens). */
  outputField?: string;
}

/** What a renderer knows besides the answer. */
export interface AnswerContext {
  /** The gateway's id of the request (dialect ids are derived from it). */
  requestId: string;
  model: CatalogModel;
  /** Tags every signature and encrypted reasoning with its issuer (canonical/reasoning-tags.ts). */
  tags: ReasoningTags;
  /** Seconds since the epoch at which the answer was created. */
  created: number;
  /** For what a renderer repairs rather than refuses (a provider's unparsable tool arguments). */
  logger: Logger;
}

/**
 * One streamed answer as SSE text. The pipeline writes nothing before the first content (the router
 * fails over until then), then `open()` with the headers, each delta, and `end()` — or, after the
 * commit point, `fail()`, which must never look like a clean end.
 */
export interface StreamWriter {
  /** The router's start (provider, its id), before any delta. */
  start(start: ChatStreamStart): void;
  /** Events written right after the headers, before the first delta ('' for none). */
  open(): string;
  delta(delta: ChatStreamDelta): string;
  /** After the last delta of a complete stream: usage and the closing events. */
  end(usage: Usage | undefined): string;
  /** A failure after the commit point: the events that end the stream as failed. */
  fail(error: ApiError, usage: Usage | undefined): string;
  /**
   * A keep-alive event for a stream with nothing to say yet. Absent: the dialect has none, and its
   * stream is never committed before the first content. Present: the pipeline commits the stream
   * (headers, `open()`) when the first content is slow in coming, then pings while it waits.
   */
  ping?(): string;
}
