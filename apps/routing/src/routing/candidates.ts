import { createHash } from 'node:crypto';
import { ErrorReason, errors, GatewayError, GrpcStatus } from '@gateway/platform';
import type { ChatRequest, FallbackModel, Model, RequestContext, RoutingChoices } from '@gateway/proto';
import type { ProviderAdapter } from '../providers/provider-adapter.js';
import { answersChoices, MAX_GEMINI_CANDIDATES } from '../providers/upstream-wire.js';
import { affinityKeyOf, applyProviderPreferences, preferAffine, strategyNamed, type Candidate, type Strategy } from '../strategies/index.js';
import { lazyRequestLog, type RequestLog } from './request-hot-path.js';
import type { Reservation } from './reservation.js';
import { batchPricedModel } from './batch-pricing.js';
import type { RouterOptions } from './router-options.js';

/** Characters of the conversation that decide cache affinity: the stable prefix, not the newest turn. */
const CONVERSATION_KEY_CHARACTERS = 4_096;

/** Which adapters can serve an endpoint: every adapter chats; other capabilities are optional. */
export type Capable = (adapter: ProviderAdapter) => boolean;
export const canChat: Capable = () => true;
export const canEmbed: Capable = (adapter) => adapter.embed !== undefined;
export const canModerate: Capable = (adapter) => adapter.moderate !== undefined;
export const canGenerateImages: Capable = (adapter) => adapter.generateImages !== undefined;
export const canEditImages: Capable = (adapter) => adapter.editImages !== undefined;
export const canSpeak: Capable = (adapter) => adapter.speak !== undefined;
export const canTranscribe: Capable = (adapter) => adapter.transcribe !== undefined;

/** Where one request may go: the model, its ordered candidates and the identity its usage event carries. */
export interface RoutingTarget {
  /** The request's hold: released or settled exactly once (reservation.ts). */
  hold: Reservation;
  requestId: string;
  context: RequestContext | undefined;
  model: Model;
  endpoint: string;
  strategyName: string;
  candidates: Candidate[];
  /** Per attempt: the request's own timeout, else the provider's timeout_ms, else the router's default (attemptTimeout()). */
  timeoutMs: number;
  /** True when timeoutMs is the request's own (it then wins over a provider's timeout_ms). */
  requestTimeout: boolean;
  logger: RequestLog;
  /**
   * The request's prompt-cache affinity key (strategies/cache-affinity.ts), '' when it has none or when
   * there was no choice to make: the provider that serves it is pinned under this key.
   */
  affinityKey: string;
  /** A chat request's request as its current model takes it (a fallback model's own, failover.ts); unset for other endpoints. */
  request?: ChatRequest;
}

export interface PreparedRequest extends RoutingTarget {
  request: ChatRequest;
}

/** The model's offers on `endpoint` whose provider is loaded and can serve it, in catalog order. */
function offersServing(options: RouterOptions, model: Model, endpoint: string, capable: Capable): Candidate[] {
  const available: Candidate[] = [];
  for (const offer of model.offers) {
    if (!offer.endpoints.includes(endpoint)) continue;
    const adapter = options.catalog.provider(offer.providerId)?.adapter;
    if (adapter && capable(adapter)) available.push({ offer, adapter });
  }
  return available;
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

/** Model, endpoint and ordered candidates. Unknown model: MODEL_NOT_FOUND (the request's wrapper releases its hold). */
export function resolveTarget(
  options: RouterOptions,
  random: () => number,
  hold: Reservation,
  modelId: string,
  strategyName: string,
  timeoutMs: number,
  conversation: () => string,
  capable: Capable = canChat,
  affinity?: () => string | undefined,
): RoutingTarget {
  const { requestId, context, endpoint } = hold;
  const logger = lazyRequestLog(options.logger, requestId);
  const found = options.catalog.model(modelId);
  // A batch line (set by the jobs service only) is priced at the model's batch prices.
  const model = found !== undefined && context?.batch === true ? batchPricedModel(found) : found;
  if (!model) {
    throw new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_MODEL_NOT_FOUND, `The model '${modelId}' does not exist.`, {
      param: 'model',
      code: 'model_not_found',
    });
  }
  const strategy = strategyNamed(strategyName);
  const available = offersServing(options, model, endpoint, capable);
  // One offer is its own order under every strategy: no health figures or ordering per request then.
  const ordered = available.length <= 1
    ? available
    : strategy.order(available, {
        modelId: model.id,
        pricing: model.pricing,
        health: options.health,
        conversationKey: strategy.name === 'cache' ? conversation() : '',
        random: random,
      });
  // Cache affinity, whatever the strategy: only a request with a prompt_cache_key or a cache_control
  // breakpoint computes a key (a plain one pays nothing), and only when there is a choice to make.
  const affinityKey = available.length > 1 && affinity ? (affinity() ?? '') : '';
  if (affinityKey !== '') preferAffine(ordered, affinityKey, options.health.affinity, (providerId) => options.health.figures(providerId, model.id).circuitOpen);
  const candidates = ordered.slice(0, options.maxAttempts);
  hold.resolved(model, strategy.name);
  return {
    hold,
    requestId,
    context,
    model,
    endpoint,
    strategyName: strategy.name,
    candidates,
    timeoutMs: timeoutMs > 0 ? timeoutMs : options.attemptTimeoutMs,
    requestTimeout: timeoutMs > 0,
    logger,
    affinityKey,
  };
}

/** The provider that answered a request with an affinity key: the next request of the prefix goes there first. */
export function pinServed(options: Pick<RouterOptions, 'health'>, target: RoutingTarget, providerId: string): void {
  if (target.affinityKey !== '') options.health.affinity.served(target.affinityKey, providerId);
}

/**
 * A chat request's target. The request goes on as the edge made it: parameters the catalog says a
 * model lacks were dropped at the edge (DESIGN §2 step 3). The router's `droppedParams` answer field
 * names only what a provider itself refused and routing learned (learned-capabilities.ts).
 */
export function prepareChat(options: RouterOptions, random: () => number, request: ChatRequest, hold: Reservation): PreparedRequest {
  const target = resolveTarget(
    options, random, hold, request.modelId, request.routingStrategy, request.timeoutMs, () => conversationKey(request), canChat, () => affinityKeyOf(request),
  );
  if (request.routingChoices) {
    target.candidates = choiceCandidates(options, random, target, request, request.routingChoices);
  }
  // Several choices (`n` above 1): only providers whose wire answers that many (PARAMETERS.n in
  // libs/platform; Gemini's not in a stream); a model with none refuses the request rather than answer one.
  const n = request.n;
  if (n !== undefined && n > 1) {
    // A fallback model that does not list `n` had it cleared (its request asks one choice): not tried either.
    target.candidates = target.candidates.filter((candidate) =>
      answersChoices(candidate.adapter.kind, candidate.offer.upstreamModel, n, hold.streamed) && (candidate.request ?? request).n === n);
    if (target.candidates.length === 0) {
      throw errors.invalidRequest(
        `n: none of the providers of ${target.model.id} answers ${n} choices per ${hold.streamed ? 'streamed ' : ''}request (several choices need an OpenAI-kind provider, or a Gemini one with n at most ${MAX_GEMINI_CANDIDATES} and no stream): n must be 1`, 'n',
      );
    }
  }
  // Added to the target rather than spread into a copy: in V8 11 (Node 20) a spread copy's hidden class
  // sits outside the transition tree, so each property added to it made fresh Maps per request (README
  // "Performance": such objects kept request graphs alive through young-generation GCs).
  return Object.assign(target, { request });
}

/** One attempt's timeout: the request's own, else the provider's configured timeout_ms, else the router's default. */
export function attemptTimeout(options: Pick<RouterOptions, 'catalog'>, target: RoutingTarget, candidate: Candidate): number {
  if (target.requestTimeout) return target.timeoutMs;
  return options.catalog.provider(candidate.offer.providerId)?.provider.timeoutMs || target.timeoutMs;
}

/**
 * The candidates of a request with routing choices: model × provider in one list, for the one failover
 * loop. Each model in turn (the request's, then its fallbacks in order) contributes its offers under the
 * provider preferences (strategies/provider-preferences.ts), up to maxAttempts each. Every candidate
 * carries its model and the request as that model takes it (the fallback's unsupported fields cleared).
 * A fallback the catalog no longer has is skipped (the edge checked it against its own snapshot).
 */
function choiceCandidates(options: RouterOptions, random: () => number, target: RoutingTarget, request: ChatRequest, choices: RoutingChoices): Candidate[] {
  const strategy = strategyNamed(target.strategyName);
  const candidates: Candidate[] = [];
  // Cache affinity still moves the request's own model's pinned provider first, unless the caller ordered or sorted.
  const affinityKey = choices.order.length === 0 && choices.sort === '' ? target.affinityKey : '';
  // A fallback's request keeps the messages, so one conversation key serves every model.
  const conversation = strategy.name === 'cache' ? conversationKey(request) : '';
  addModel(options, random, candidates, strategy, target.model, request, choices, target.endpoint, affinityKey, conversation);
  for (const fallback of choices.fallbackModels) {
    const model = options.catalog.model(fallback.modelId);
    if (!model || model.id === target.model.id) continue;
    addModel(options, random, candidates, strategy, model, fallbackRequest(request, fallback), choices, target.endpoint, '', conversation);
  }
  return candidates;
}

function addModel(
  options: RouterOptions,
  random: () => number,
  into: Candidate[],
  strategy: Strategy,
  model: Model,
  request: ChatRequest,
  choices: RoutingChoices,
  endpoint: string,
  affinityKey: string,
  conversation: string,
): void {
  const chosen = applyProviderPreferences(offersServing(options, model, endpoint, canChat), choices, strategy, {
    modelId: model.id,
    pricing: model.pricing,
    health: options.health,
    conversationKey: conversation,
    random,
  });
  if (affinityKey !== '' && chosen.length > 1) {
    preferAffine(chosen, affinityKey, options.health.affinity, (providerId) => options.health.figures(providerId, model.id).circuitOpen);
  }
  const limit = Math.min(chosen.length, options.maxAttempts);
  for (let index = 0; index < limit; index++) {
    const { offer, adapter } = chosen[index]!;
    into.push({ offer, adapter, model, request });
  }
}

/** The request as a fallback model takes it: a shallow copy without the fields that model lacks. */
function fallbackRequest(request: ChatRequest, fallback: FallbackModel): ChatRequest {
  const copy: ChatRequest = { ...request, modelId: fallback.modelId };
  const fields = copy as unknown as Record<string, unknown>;
  for (const field of fallback.unsupportedFields) {
    if (!(field in fields) || field === 'messages' || field === 'context') continue;
    fields[field] = Array.isArray(fields[field]) ? [] : undefined;
  }
  return copy;
}
