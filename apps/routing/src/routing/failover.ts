import { ErrorReason, GatewayError, GrpcStatus, otelTrace, tracingEnabled, type CallerSignal } from '@gateway/platform';
import { ProviderError, toProviderError } from '../providers/provider-adapter.js';
import type { ChatRequest } from '@gateway/proto';
import type { Candidate } from '../strategies/index.js';
import { AttemptControl } from './attempt-control.js';
import { attemptTimeout, type RoutingTarget } from './candidates.js';
import { learnRefusal } from './learned-requests.js';
import type { RouterOptions } from './router-options.js';

const NO_UPSTREAM_MESSAGE = 'No upstream available.';
export const NO_UPSTREAM_RETRY_AFTER_SECONDS = 2;

export interface FailoverPolicy {
  /** The attempt goes on after `call` resolves (a stream): the control is handed back and the caller records the outcome. */
  continues?: boolean;
  /**
   * The image prompt screen's moderation offers instead of the request's candidates: the gateway's own
   * check, so every failure moves on (a verdict too) and none is counted against the request's providers.
   */
  screen?: Candidate[];
  /**
   * Chat: a caller who leaves after an attempt's request reached its upstream pays for that prompt (the
   * provider bills its prefill). The hold is then left open with `hold.promptSentTo` set, for the caller
   * to charge; otherwise (and for every other endpoint) the cancellation releases it uncharged.
   */
  chargesSentPrompt?: boolean;
}

export function noUpstream(cause?: unknown): GatewayError {
  return new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, NO_UPSTREAM_MESSAGE, {
    retryAfterSeconds: NO_UPSTREAM_RETRY_AFTER_SECONDS,
    cause,
  });
}

/** A provider's verdict on the request itself, in the caller's terms (spec §7: 400, never 502). */
export function verdictError(error: ProviderError): GatewayError {
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

/**
 * The one failover loop. Tries the candidates in order with a per-attempt timeout. Retryable failures
 * move on; a provider's verdict, the caller's cancellation or running out of candidates end the request
 * and release its hold. A stream pulls its first part inside `call` (failover ends with the first
 * content) and passes `continues`: its attempt goes on, so the control is handed back undisposed and
 * the caller records the attempt's outcome.
 */
export async function withFailover<Result>(
  options: Pick<RouterOptions, 'attempts' | 'health' | 'catalog' | 'learned'>,
  target: RoutingTarget,
  signal: CallerSignal,
  call: (candidate: Candidate, control: AttemptControl) => Promise<Result>,
  policy: FailoverPolicy = {},
): Promise<{ result: Result; candidate: Candidate; durationMs: number; control: AttemptControl }> {
  const screening = policy.screen !== undefined;
  const candidates = policy.screen ?? target.candidates;
  // A screen is the gateway's own check: no attempt metrics, health or provider on the request's event.
  const attempts = screening ? undefined : options.attempts;
  let lastFailure: ProviderError | undefined;
  let lastProvider = '';
  // The candidate already retried once without a parameter it refused (learned-capabilities.ts).
  let retriedWithout = -1;
  for (let index = 0; index < candidates.length; index++) {
    const candidate = candidates[index]!;
    const providerId = candidate.offer.providerId;
    if (lastFailure) attempts?.failover(lastProvider);
    lastProvider = providerId;
    if (!screening) target.hold.providerId = providerId;
    // Model fallbacks: a candidate of another model switches the request (its usage event, prices and answer) to it.
    if (candidate.model !== undefined && candidate.model !== target.model && !screening) switchModel(target, candidate);
    const control = new AttemptControl(signal, attemptTimeout(options, target, candidate));
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
      if (!screening && tracingEnabled()) otelTrace.getActiveSpan()?.setAttribute('gateway.attempts', index + 1);
      return { result, candidate, durationMs: Date.now() - startedAt, control };
    } catch (error) {
      if (signal.aborted) {
        attempts?.attempt(providerId, 'cancelled');
        // Only the attempt in flight counts: an earlier attempt that failed is the provider's failure,
        // never charged (as a request whose every attempt fails is not).
        if (policy.chargesSentPrompt && control.sent && !screening) {
          target.hold.promptSentTo = providerId;
          // The provider's own prompt counts when it reported them before content; else the gateway counts.
          target.hold.nativeUsage = control.reportedPrompt;
        } else {
          target.hold.release();
        }
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
      // A 400 naming a parameter the upstream model lacks: learned for the pair, and this candidate is
      // tried once more without it (the call builds its request from the learned map) — not a failover.
      if (failure.unsupportedParameter !== '' && !screening && learnRefusal(options, target, candidate, failure) && retriedWithout !== index) {
        retriedWithout = index--;
        continue;
      }
      if (!failure.retryable && !screening) {
        // A refusal a fallback model may not share (moderation, a context too long) moves on to the next
        // model; any other verdict is on the request itself and ends it.
        const nextModel = modelRefusal(failure) ? nextModelAt(candidates, index) : -1;
        if (nextModel < 0) {
          target.hold.release();
          throw verdictError(failure);
        }
        target.logger.warn({ provider: providerId, failure: failure.message }, 'model refused the request; trying the next model');
        lastFailure = failure;
        index = nextModel - 1;
        continue;
      }
      if (!screening) {
        options.health.recordFailure(providerId, target.model.id);
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

/** The request goes on with the candidate's model: the answer, the usage event and its prices name it. */
function switchModel(target: RoutingTarget, candidate: Candidate): void {
  target.model = candidate.model!;
  target.hold.resolved(candidate.model!, target.strategyName);
  if (candidate.request !== undefined) (target as RoutingTarget & { request?: ChatRequest }).request = candidate.request;
}

/** Context too long, in the words providers use for it (a 400 that another model with a larger window may accept). */
const CONTEXT_TOO_LONG = /context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long|input is too long/i;

/** A verdict that concerns the model rather than the request: a moderation refusal or a context too long. */
function modelRefusal(failure: ProviderError): boolean {
  return failure.kind === 'content_filter' || CONTEXT_TOO_LONG.test(failure.providerMessage);
}

/** Index of the first candidate after `index` that serves another model, -1 when none does. */
function nextModelAt(candidates: readonly Candidate[], index: number): number {
  const model = candidates[index]!.model;
  if (model === undefined) return -1;
  for (let next = index + 1; next < candidates.length; next++) if (candidates[next]!.model !== model) return next;
  return -1;
}
