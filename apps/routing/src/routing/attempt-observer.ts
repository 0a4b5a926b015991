/**
 * How one provider attempt ended, as metrics count it: `error` and `timeout` are retryable (the router
 * fails over when another candidate is left), `rejected` is the provider's verdict on the request
 * itself (a 4xx, content filter: no failover), `failed_after_content` a stream that broke after
 * content reached the caller.
 */
export type AttemptOutcome = 'success' | 'error' | 'timeout' | 'rejected' | 'cancelled' | 'failed_after_content';

/** What the router reports about provider attempts (observability/routing-metrics.ts counts them). */
export interface AttemptObserver {
  attempt(providerId: string, outcome: AttemptOutcome): void;
  /** The request moves on from `fromProviderId`, which failed, to the next candidate. */
  failover(fromProviderId: string): void;
}
