import type { IncomingMessage } from 'node:http';

/**
 * Load shedding (spec §7: 503 with Retry-After under overload). The edge bounds the requests it has
 * in flight and the request-body bytes they declared; a request past either bound is refused BEFORE
 * its body is read and before admission, so a refused request never holds or spends credits, and a
 * request once admitted here is never refused later for load — except a chunked body (no
 * content-length), whose bytes are counted as they are read and which is refused with the same 503
 * when they take the total past the bound (still before admission). Past the bound a fast 503 is better for
 * everyone than queueing into multi-second latencies: the client (or its load balancer) retries
 * elsewhere or after Retry-After.
 */
export interface OverloadLimits {
  /** Most requests in flight (admitted and not yet answered, streams included). */
  maxInFlightRequests: number;
  /**
   * Most request-body bytes of the requests in flight: what they declared (content-length), and for a
   * chunked body what has been read of it so far. Each request counts at most the body limit.
   */
  maxInFlightBodyBytes: number;
  /** Retry-After of the 503. */
  retryAfterSeconds: number;
}

/**
 * Sized from the benchmark (docs/performance.md): its open-loop phases keep at most 2,000 requests in
 * flight against one edge, and its bodies are small; twice that is never reached by the bench, while
 * a 2-core replica already answers in seconds at that depth.
 */
export const DEFAULT_OVERLOAD_LIMITS: OverloadLimits = {
  maxInFlightRequests: 4_096,
  maxInFlightBodyBytes: 512 * 1024 * 1024,
  retryAfterSeconds: 1,
};

export type ShedReason = 'in_flight' | 'body_bytes';

/** The two counters; admit and leave are called exactly once each per admitted request. */
export class InFlightLimiter {
  private requests = 0;
  private bodyBytes = 0;

  constructor(readonly limits: OverloadLimits) {
    if (!(Number.isInteger(limits.maxInFlightRequests) && limits.maxInFlightRequests >= 1)) {
      throw new Error(`maxInFlightRequests must be a positive integer: ${limits.maxInFlightRequests}`);
    }
    if (!(Number.isSafeInteger(limits.maxInFlightBodyBytes) && limits.maxInFlightBodyBytes >= 1)) {
      throw new Error(`maxInFlightBodyBytes must be a positive integer: ${limits.maxInFlightBodyBytes}`);
    }
    if (!(Number.isInteger(limits.retryAfterSeconds) && limits.retryAfterSeconds >= 1)) {
      throw new Error(`retryAfterSeconds must be a positive integer: ${limits.retryAfterSeconds}`);
    }
  }

  /** Takes a place for a request declaring `bodyBytes`, or says which bound refuses it. */
  admit(bodyBytes: number): ShedReason | undefined {
    if (this.requests >= this.limits.maxInFlightRequests) return 'in_flight';
    // A request alone over the byte bound is still let in when nothing else holds bytes: its own body
    // limit (413) answers it, not a 503 that no retry could ever get past.
    if (bodyBytes > 0 && this.bodyBytes > 0 && this.bodyBytes + bodyBytes > this.limits.maxInFlightBodyBytes) return 'body_bytes';
    this.requests++;
    this.bodyBytes += bodyBytes;
    return undefined;
  }

  /**
   * More body bytes of a request already in (a chunked body as it is read); `own`: what it holds so far.
   * Refused when they take the total past the bound while others hold bytes too.
   */
  grow(own: number, bodyBytes: number): ShedReason | undefined {
    if (this.bodyBytes - own > 0 && this.bodyBytes + bodyBytes > this.limits.maxInFlightBodyBytes) return 'body_bytes';
    this.bodyBytes += bodyBytes;
    return undefined;
  }

  leave(bodyBytes: number): void {
    this.requests--;
    this.bodyBytes -= bodyBytes;
  }

  get inFlight(): { requests: number; bodyBytes: number } {
    return { requests: this.requests, bodyBytes: this.bodyBytes };
  }
}

/** Per request: counts body bytes as they are read (set by the request tracker for chunked bodies). */
const bodyMeters = new WeakMap<IncomingMessage, (bytes: number) => Error | undefined>();

export function meterBody(request: IncomingMessage, meter: (bytes: number) => Error | undefined): void {
  bodyMeters.set(request, meter);
}

/** Called by the body readers for every chunk: the 503 to answer when the chunk takes the in-flight bytes past their bound. */
export function countBodyBytes(request: IncomingMessage, bytes: number): Error | undefined {
  return bodyMeters.get(request)?.(bytes);
}
