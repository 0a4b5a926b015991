import { genAiUpstreamOf } from '../observability/gen-ai-conventions.js';
import type { GenAiAttempt, GenAiResponse } from '../observability/gen-ai-telemetry.js';
import { ProviderError, toProviderError } from '../providers/provider-adapter.js';
import type { Candidate } from '../strategies/index.js';
import type { AttemptControl } from './attempt-control.js';
import type { RoutingTarget } from './candidates.js';
import type { RouterOptions } from './router-options.js';

/** What a served attempt tells provider health beyond its success (strategies/provider-health.ts). */
export interface HealthSample {
  ttftMs?: number;
  outputTokens?: number;
  durationMs?: number;
}

const NO_SAMPLE: HealthSample = {};

/** An attempt's failure in the router's terms: its own timer ran out (a timeout), else what the error says. */
export function attemptFailure(error: unknown, control: AttemptControl, timeoutMessage = 'attempt timed out'): ProviderError {
  return control.timedOut ? new ProviderError('timeout', timeoutMessage, 0, { cause: error }) : toProviderError(error, control);
}

/**
 * The one place an upstream attempt's outcome is recorded: the attempt metric (AttemptObserver), the
 * provider's health and the attempt's GenAI span and client metrics (observability/gen-ai-telemetry.ts)
 * together, for every endpoint family. The failover loop begins and records every attempt it ends; a
 * stream's attempt, which goes on after the loop, is ended by its ServedAttempt's `finish`.
 * Health counts a success and a retryable failure (an error, a timeout, a stream cut after content);
 * a verdict on the request itself and the caller's cancellation say nothing about the provider.
 * One per router: it holds no per-request state.
 */
export class AttemptRecorder {
  constructor(private readonly options: Pick<RouterOptions, 'attempts' | 'health' | 'catalog' | 'genAi'>) {}

  /** An attempt starts: its GenAI span and clock (undefined when no telemetry is on). `attempt`: its position in the request, from 1. */
  begin(target: RoutingTarget, candidate: Candidate, stream: boolean, attempt: number): GenAiAttempt | undefined {
    const telemetry = this.options.genAi;
    if (telemetry === undefined) return undefined;
    const provider = this.options.catalog.provider(candidate.offer.providerId)?.provider;
    if (provider === undefined) return undefined;
    return telemetry.begin({
      offer: candidate.offer,
      endpoint: target.endpoint,
      upstream: genAiUpstreamOf(provider),
      requestModel: candidate.offer.upstreamModel,
      stream,
      request: target.request,
      providerId: candidate.offer.providerId,
      modelId: (candidate.model ?? target.model).id,
      attempt,
    });
  }

  succeeded(providerId: string, modelId: string, sample: HealthSample = NO_SAMPLE, genAi?: GenAiAttempt, response?: GenAiResponse): void {
    this.options.attempts?.attempt(providerId, 'success');
    this.options.health.recordSuccess(providerId, modelId, sample);
    genAi?.succeeded(response);
  }

  /** `failure` ended the attempt before its answer (`afterContent`: a stream cut after content reached the caller). */
  failed(providerId: string, modelId: string, failure: ProviderError, afterContent = false, genAi?: GenAiAttempt, response?: GenAiResponse): void {
    const timedOut = failure.kind === 'timeout';
    this.options.attempts?.attempt(providerId, afterContent ? 'failed_after_content' : !failure.retryable ? 'rejected' : timedOut ? 'timeout' : 'error');
    if (failure.retryable) this.options.health.recordFailure(providerId, modelId);
    // error.type: the failure's kind (connection, timeout, overloaded, misconfigured, rejected, content_filter).
    genAi?.failed(failure.kind, response);
  }

  cancelled(providerId: string, genAi?: GenAiAttempt): void {
    this.options.attempts?.attempt(providerId, 'cancelled');
    genAi?.cancelled();
  }

  /** The request moves on from `fromProviderId`, which failed, to its next attempt. */
  failover(fromProviderId: string): void {
    this.options.attempts?.failover(fromProviderId);
  }
}

/**
 * The attempt that answered, as the failover loop hands it back. A unary attempt is already recorded.
 * A stream's (FailoverPolicy.continues) goes on with its control armed by the caller, and the caller ends
 * it with `finish` once: its outcome goes to the same recorder; a second `finish` does nothing.
 */
export class ServedAttempt<Result> {
  private open: boolean;

  constructor(
    readonly result: Result,
    readonly candidate: Candidate,
    /** From the attempt's start until `result` (a stream's: its first content). */
    readonly durationMs: number,
    readonly control: AttemptControl,
    private readonly recorder: AttemptRecorder | undefined,
    private readonly modelId: string,
    /** False once recorded (a unary attempt is recorded by the loop). */
    recording: boolean,
    /** The attempt's GenAI telemetry, ended with it. */
    private readonly genAi?: GenAiAttempt,
  ) {
    this.open = recording;
  }

  /** `response`: what the stream's answer said (usage, finish reasons, parts), for its GenAI span and metrics. */
  finish(outcome: 'success', sample: HealthSample, response?: GenAiResponse): void;
  finish(outcome: 'cancelled'): void;
  finish(outcome: 'failed_after_content', failure: ProviderError, response?: GenAiResponse): void;
  finish(outcome: 'success' | 'cancelled' | 'failed_after_content', detail?: HealthSample | ProviderError, response?: GenAiResponse): void {
    if (!this.open) return;
    this.open = false;
    const providerId = this.candidate.offer.providerId;
    if (outcome === 'success') this.recorder?.succeeded(providerId, this.modelId, detail as HealthSample, this.genAi, response);
    else if (outcome === 'cancelled') this.recorder?.cancelled(providerId, this.genAi);
    else this.recorder?.failed(providerId, this.modelId, detail as ProviderError, true, this.genAi, response);
  }
}
