import { describe, expect, it } from 'vitest';
import { edgeErrors, renderErrorBody, toApiError } from '../errors.js';
import { DEFAULT_OVERLOAD_LIMITS, InFlightLimiter } from './overload.js';

describe('in-flight bounds', () => {
  it('admits up to the request bound, then refuses until one leaves', () => {
    const limiter = new InFlightLimiter({ ...DEFAULT_OVERLOAD_LIMITS, maxInFlightRequests: 2 });
    expect(limiter.admit(0)).toBeUndefined();
    expect(limiter.admit(10)).toBeUndefined();
    expect(limiter.admit(0)).toBe('in_flight');
    limiter.leave(10);
    expect(limiter.inFlight).toEqual({ requests: 1, bodyBytes: 0 });
    expect(limiter.admit(0)).toBeUndefined();
  });

  it('bounds the declared body bytes in flight, but never refuses a lone request for its own size', () => {
    const limiter = new InFlightLimiter({ ...DEFAULT_OVERLOAD_LIMITS, maxInFlightBodyBytes: 1_000 });
    expect(limiter.admit(5_000)).toBeUndefined();
    expect(limiter.admit(1)).toBe('body_bytes');
    // Bodyless requests (GETs) are not held back by bytes.
    expect(limiter.admit(0)).toBeUndefined();
    limiter.leave(5_000);
    expect(limiter.admit(600)).toBeUndefined();
    expect(limiter.admit(400)).toBeUndefined();
    expect(limiter.admit(1)).toBe('body_bytes');
    expect(limiter.inFlight).toEqual({ requests: 3, bodyBytes: 1_000 });
  });

  it('refuses nonsensical bounds at start-up', () => {
    expect(() => new InFlightLimiter({ ...DEFAULT_OVERLOAD_LIMITS, maxInFlightRequests: 0 })).toThrow(/maxInFlightRequests/);
    expect(() => new InFlightLimiter({ ...DEFAULT_OVERLOAD_LIMITS, retryAfterSeconds: 0.5 })).toThrow(/retryAfterSeconds/);
  });

  it('answers 503 overloaded with Retry-After in either dialect’s envelope', () => {
    const apiError = toApiError(edgeErrors.overloaded(2));
    expect(apiError).toMatchObject({ status: 503, type: 'service_unavailable', code: 'overloaded', retryAfterSeconds: 2 });
    expect(renderErrorBody(apiError, 'chat')).toEqual({
      error: { type: 'service_unavailable', code: 'overloaded', message: 'The gateway is overloaded; retry after 2 seconds.' },
    });
    expect(renderErrorBody(apiError, 'messages')).toEqual({
      type: 'error', error: { type: 'overloaded_error', message: 'The gateway is overloaded; retry after 2 seconds.' },
    });
  });
});
