import { ErrorReason, GatewayError, GrpcStatus, otelContext, otelTrace, tracingEnabled, type CallerSignal } from '@gateway/platform';
import type { GenAiResponse } from '../observability/gen-ai-telemetry.js';
import type { ProviderError } from '../providers/provider-adapter.js';
import type { Candidate } from '../strategies/index.js';
import { AttemptControl } from './attempt-control.js';
import { AttemptQueue } from './attempt-queue.js';
import { attemptFailure, ServedAttempt, type AttemptRecorder, type HealthSample } from './attempt-recorder.js';
import { attemptTimeout, type RoutingTarget } from './candidates.js';
import { learnRefusal } from './learned-requests.js';
import type { RouterOptions } from './router-options.js';

const NO_UPSTREAM_MESSAGE = 'No upstream available.';
export const NO_UPSTREAM_RETRY_AFTER_SECONDS = 2;

type LoopOptions = Pick<RouterOptions, 'catalog' | 'learned'>;

export interface FailoverPolicy<Result = unknown> {
  /** The attempt goes on after `call` resolves (a stream): its control is handed back, disarmed, and the caller `finish`es it. */
  continues?: boolean;
  /**
   * Chat: a caller who leaves after an attempt's request reached its upstream pays for that prompt (the
   * provider bills its prefill). The hold is then left open with `hold.promptSentTo` set, for the caller
   * to charge; otherwise (and for every other endpoint) the request's wrapper releases it uncharged.
   */
  chargesSentPrompt?: boolean;
  /** A served unary attempt's health sample beyond its duration (chat: its output tokens); none by default. */
  sample?(result: Result, durationMs: number): HealthSample;
  /** What a served unary attempt's answer says for its GenAI span and metrics (chat: usage, finish reasons); none by default. */
  response?(result: Result): GenAiResponse;
  /** Whose attempts these are: the request's own by default (REQUEST_ATTEMPTS). */
  attempts?: AttemptPolicy;
}

/** What a failed attempt leads to, as an attempt policy decides it (or it throws the request's error). */
export type AfterFailure = 'next' | 'retried';

/**
 * Whose attempts the loop makes and what their failures mean. The request's own (REQUEST_ATTEMPTS) are
 * recorded, name the provider on the hold, switch the request to a fallback model, retry a candidate
 * without a refused parameter and end on a verdict. Another policy (the image prompt screen,
 * image-requests.ts) brings its own candidates and decides the same steps for itself.
 */
export interface AttemptPolicy {
  /** The candidates to try, in order. */
  candidates(target: RoutingTarget): readonly Candidate[];
  /** Outcomes go to the recorder (metrics, provider health) and the trace counts the attempts. */
  readonly recorded: boolean;
  /** Before an attempt of `candidate`. */
  begin(target: RoutingTarget, candidate: Candidate): void;
  /** The caller left during an attempt whose request had (`sent`) or had not reached its upstream. */
  cancelled(target: RoutingTarget, candidate: Candidate, control: AttemptControl, chargesSentPrompt: boolean): void;
  /** A failed attempt: try the next one, the same again (queue.retrySame) or skip to the next model; or throw. */
  failed(options: LoopOptions, target: RoutingTarget, candidate: Candidate, failure: ProviderError, queue: AttemptQueue): AfterFailure;
  /** Every attempt failed (the loop then throws noUpstream). */
  exhausted(target: RoutingTarget, lastFailure: ProviderError | undefined): void;
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
 * The one failover loop. Takes attempts from the queue in order, each with its own timeout. Retryable
 * failures move on; a provider's verdict, the caller's cancellation or running out of candidates end
 * the request (the request's wrapper, RoutingCore.admitted or a stream's hold, releases its hold). Every
 * attempt's outcome goes to the one recorder. A stream pulls its first part inside `call` (failover
 * ends with the first content) and passes `continues`: its attempt goes on, so the control is handed
 * back undisposed and the caller ends the attempt with ServedAttempt.finish.
 */
export async function withFailover<Result>(
  options: LoopOptions,
  recorder: AttemptRecorder,
  target: RoutingTarget,
  signal: CallerSignal,
  call: (candidate: Candidate, control: AttemptControl) => Promise<Result>,
  policy: FailoverPolicy<Result> = DEFAULT_POLICY,
): Promise<ServedAttempt<Result>> {
  const attempts = policy.attempts ?? REQUEST_ATTEMPTS;
  const record = attempts.recorded ? recorder : undefined;
  const queue = new AttemptQueue(attempts.candidates(target));
  let lastFailure: ProviderError | undefined;
  let lastProvider = '';
  let attemptNumber = 0;
  for (let candidate = queue.take(); candidate !== undefined; candidate = queue.take()) {
    const providerId = candidate.offer.providerId;
    if (lastFailure) record?.failover(lastProvider);
    lastProvider = providerId;
    attempts.begin(target, candidate);
    // The attempt's GenAI span and clock (after begin: a fallback model's candidate has switched the request).
    const genAi = record?.begin(target, candidate, policy.continues === true, ++attemptNumber);
    const control = new AttemptControl(signal, attemptTimeout(options, target, candidate));
    const startedAt = Date.now();
    let handedOver = false;
    control.arm();
    try {
      // With tracing, the call runs under the attempt's span (the upstream HTTP span is its child).
      const result = genAi?.span === undefined ? await call(candidate, control) : await otelContext.with(genAi.context(), call, undefined, candidate, control);
      const durationMs = Date.now() - startedAt;
      if (policy.continues) {
        control.disarm();
        handedOver = true;
        genAi?.firstChunk();
      } else {
        record?.succeeded(providerId, target.model.id, policy.sample?.(result, durationMs), genAi, genAi === undefined ? undefined : policy.response?.(result));
      }
      if (record && tracingEnabled()) otelTrace.getActiveSpan()?.setAttribute('gateway.attempts', queue.position);
      return new ServedAttempt(result, candidate, durationMs, control, record, target.model.id, handedOver, genAi);
    } catch (error) {
      if (signal.aborted) {
        record?.cancelled(providerId, genAi);
        attempts.cancelled(target, candidate, control, policy.chargesSentPrompt === true);
        throw new GatewayError(GrpcStatus.CANCELLED, ErrorReason.ERROR_REASON_UNSPECIFIED, 'The caller cancelled the request.');
      }
      // A typed verdict on the request itself (e.g. an unusable json_schema), reached before any
      // provider call: the caller's error as it is, no failover, nothing held against the provider.
      if (error instanceof GatewayError) {
        genAi?.failed(GATEWAY_VERDICT);
        throw error;
      }
      const failure = attemptFailure(error, control);
      record?.failed(providerId, target.model.id, failure, false, genAi);
      if (attempts.failed(options, target, candidate, failure, queue) === 'next') lastFailure = failure;
    } finally {
      if (!handedOver) control.dispose();
    }
  }
  attempts.exhausted(target, lastFailure);
  throw noUpstream(lastFailure);
}

const DEFAULT_POLICY: FailoverPolicy<never> = {};
/** error.type of an attempt the gateway refused before calling its upstream (a typed verdict on the request). */
const GATEWAY_VERDICT = 'gateway_verdict';

/** The request's own attempts: its candidates, recorded against their providers. */
const REQUEST_ATTEMPTS: AttemptPolicy = {
  candidates: (target) => target.candidates,
  recorded: true,
  begin(target, candidate) {
    target.hold.providerId = candidate.offer.providerId;
    // Model fallbacks: a candidate of another model switches the request (its usage event, prices and answer) to it.
    if (candidate.model !== undefined && candidate.model !== target.model) switchModel(target, candidate);
  },
  cancelled(target, candidate, control, chargesSentPrompt) {
    // Only the attempt in flight counts: an earlier attempt that failed is the provider's failure,
    // never charged (as a request whose every attempt fails is not).
    if (chargesSentPrompt && control.sent) {
      target.hold.promptSentTo = candidate.offer.providerId;
      // The provider's own prompt counts when it reported them before content; else the gateway counts.
      target.hold.nativeUsage = control.reportedPrompt;
    }
  },
  failed(options, target, candidate, failure, queue) {
    const providerId = candidate.offer.providerId;
    // A 400 naming a parameter the upstream model lacks: learned for the pair, and this candidate is
    // tried once more without it (the call builds its request from the learned map) — not a failover.
    if (failure.unsupportedParameter !== '' && learnRefusal(options, target, candidate, failure) && queue.retrySame()) return 'retried';
    if (!failure.retryable) {
      // A refusal a fallback model may not share (moderation, a context too long) moves on to the next
      // model; any other verdict is on the request itself and ends it.
      if (!modelRefusal(failure) || !queue.skipToModel()) throw verdictError(failure);
      target.logger.warn({ provider: providerId, failure: failure.message }, 'model refused the request; trying the next model');
      return 'next';
    }
    target.logger.warn({ provider: providerId, failure: failure.message }, 'provider attempt failed; failing over');
    return 'next';
  },
  exhausted() {},
};

/** The request goes on with the candidate's model: the answer, the usage event and its prices name it. */
function switchModel(target: RoutingTarget, candidate: Candidate): void {
  target.model = candidate.model!;
  target.hold.resolved(candidate.model!, target.strategyName);
  if (candidate.request !== undefined) target.request = candidate.request;
}

/** Context too long, in the words providers use for it (a 400 that another model with a larger window may accept). */
const CONTEXT_TOO_LONG = /context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long|input is too long/i;

/** A verdict that concerns the model rather than the request: a moderation refusal or a context too long. */
function modelRefusal(failure: ProviderError): boolean {
  return failure.kind === 'content_filter' || CONTEXT_TOO_LONG.test(failure.providerMessage);
}
