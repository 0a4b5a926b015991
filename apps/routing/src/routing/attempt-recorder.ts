import { ProviderError, toProviderError } from '../providers/provider-adapter.js';
import type { Candidate } from '../strategies/index.js';
import type { AttemptControl } from './attempt-control.js';
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
 * The one place an upstream attempt's outcome is recorded: the attempt metric (AttemptObserver) and the
 * provider's health together, for every endpoint family. The failover loop records every attempt it
 * ends; a stream's attempt, which goes on after the loop, is ended by its ServedAttempt's `finish`.
 * Health counts a success and a retryable failure (an error, a timeout, a stream cut after content);
 * a verdict on the request itself and the caller's cancellation say nothing about the provider.
 * One per router: it holds no per-request state.
 */
export class AttemptRecorder {
  constructor(private readonly options: Pick<RouterOptions, 'attempts' | 'health'>) {}

  succeeded(providerId: string, modelId: string, sample: HealthSample = NO_SAMPLE): void {
    this.options.attempts?.attempt(providerId, 'success');
    this.options.health.recordSuccess(providerId, modelId, sample);
  }

  /** `failure` ended the attempt before its answer (`afterContent`: a stream cut after content reached the caller). */
  failed(providerId: string, modelId: string, failure: ProviderError, afterContent = false): void {
    const timedOut = failure.kind === 'timeout';
    this.options.attempts?.attempt(providerId, afterContent ? 'failed_after_content' : !failure.retryable ? 'rejected' : timedOut ? 'timeout' : 'error');
    if (failure.retryable) this.options.health.recordFailure(providerId, modelId);
  }

  cancelled(providerId: string): void {
    this.options.attempts?.attempt(providerId, 'cancelled');
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
  ) {
    this.open = recording;
  }

  finish(outcome: 'success', sample: HealthSample): void;
  finish(outcome: 'cancelled'): void;
  finish(outcome: 'failed_after_content', failure: ProviderError): void;
  finish(outcome: 'success' | 'cancelled' | 'failed_after_content', detail?: HealthSample | ProviderError): void {
    if (!this.open) return;
    this.open = false;
    const providerId = this.candidate.offer.providerId;
    if (outcome === 'success') this.recorder?.succeeded(providerId, this.modelId, detail as HealthSample);
    else if (outcome === 'cancelled') this.recorder?.cancelled(providerId);
    else this.recorder?.failed(providerId, this.modelId, detail as ProviderError, true);
  }
}
