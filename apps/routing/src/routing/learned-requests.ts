import type { ChatRequest } from '@gateway/proto';
import type { AdapterChatRequest, ProviderError } from '../providers/provider-adapter.js';
import type { Candidate } from '../strategies/index.js';
import type { PreparedRequest, RoutingTarget } from './candidates.js';
import { requestSets, withoutParameters } from './learned-parameters.js';
import { requestFor } from './reasoning-provenance.js';
import type { RouterOptions } from './router-options.js';

// How the learned capability map (learned-capabilities.ts) meets a chat request: the attempt's request
// without what its provider × upstream model refused, the names that were left out (the answer's
// dropped_params, shown in x-gateway-dropped-params), and learning from a refusal inside the failover loop.

type Learned = Pick<RouterOptions, 'learned'>;

const NONE: readonly string[] = [];

/** The chat request a candidate takes: the candidate's own (a fallback model's) or the request's. */
function chatOf(target: RoutingTarget, candidate: Candidate): ChatRequest | undefined {
  return candidate.request ?? (target as RoutingTarget & { request?: ChatRequest }).request;
}

/**
 * One attempt's adapter request: reasoning only its provider may read, and nothing its upstream model
 * refused; `dropped` names what it went without (the serving attempt's are the answer's dropped_params,
 * with what the adapter's converter reported it could not send: AttemptSignal.parametersUnsent).
 */
export function learnedRequestFor(options: Learned, prepared: PreparedRequest, candidate: Candidate): { request: AdapterChatRequest; dropped: readonly string[] } {
  const adapterRequest = requestFor(prepared, candidate);
  const learnedNames = options.learned?.droppedFor(candidate.offer.providerId, candidate.offer.upstreamModel, accountOf(prepared)) ?? NONE;
  if (learnedNames.length === 0) return { request: adapterRequest, dropped: NONE };
  const { request, dropped } = withoutParameters(adapterRequest.chat, learnedNames);
  return { request: dropped.length === 0 ? adapterRequest : { ...adapterRequest, chat: request }, dropped };
}

/** The account a request's evidence counts for: the edge's RequestContext (never anything the caller wrote). */
function accountOf(target: RoutingTarget): string {
  return target.context?.accountId ?? '';
}

/**
 * A refusal that named a parameter: one account's evidence, learned for the candidate's provider × upstream model. True when
 * the attempt's request set it, so the same candidate is worth one more try without it.
 */
export function learnRefusal(options: Learned, target: RoutingTarget, candidate: Candidate, failure: ProviderError): boolean {
  const learned = options.learned;
  const request = chatOf(target, candidate);
  if (learned === undefined || request === undefined) return false;
  const name = failure.unsupportedParameter;
  if (!requestSets(request, name)) return false;
  const { providerId, upstreamModel } = candidate.offer;
  const account = accountOf(target);
  // Already learned and still refused: the drop did not help, so no second retry of the same name.
  if (learned.droppedFor(providerId, upstreamModel, account).includes(name)) return false;
  learned.learn(providerId, upstreamModel, name, account);
  target.logger.warn({ provider: providerId, upstream_model: upstreamModel, parameter: name }, 'upstream refused a parameter; learned for its provider and upstream model');
  // The refused account's own requests go without it at once (learned-capabilities.ts), this retry too.
  return learned.droppedFor(providerId, upstreamModel, account).includes(name);
}
