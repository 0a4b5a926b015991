import { newRequestId, type CallerSignal } from '@gateway/platform';
import type { ChatRequest, RequestContext, Usage } from '@gateway/proto';
import type { Candidate } from '../strategies/index.js';
import type { AttemptControl } from './attempt-control.js';
import { canChat, prepareChat, resolveTarget, type Capable, type PreparedRequest, type RoutingTarget } from './candidates.js';
import { withFailover, type FailoverPolicy } from './failover.js';
import { Reservation } from './reservation.js';
import type { RouterOptions } from './router-options.js';

export type { RouterOptions } from './router-options.js';

/**
 * What every endpoint's request uses: the hold taken over from the edge (admit, admitted), candidate
 * resolution, the one failover loop and the SERVED event of a unary answer. The endpoint files
 * (chat-requests, embeddings-moderations, image-requests, audio-requests) hold the per-endpoint steps.
 */
export class RoutingCore {
  readonly random: () => number;
  /** Usage of streams that already ended, still on its way to the bus (chatStream); stop waits for them. */
  readonly settling = new Set<Promise<void>>();

  constructor(readonly options: RouterOptions) {
    this.random = options.random ?? Math.random;
  }

  /** The request's hold, taken over from the edge's admission: released or settled exactly once. */
  admit(context: RequestContext | undefined, modelId: string, endpoint: string, streamed = false): Reservation {
    return new Reservation(this.options.usage, context?.requestId || newRequestId(), context, modelId, endpoint, streamed);
  }

  /**
   * Runs a unary request with its hold: whatever `body` throws (or forgets), the hold is released once
   * it returns; after `hold.settle` the release is a no-op.
   */
  async admitted<Result>(
    context: RequestContext | undefined, modelId: string, endpoint: string, body: (hold: Reservation) => Promise<Result>,
  ): Promise<Result> {
    const hold = this.admit(context, modelId, endpoint);
    try {
      return await body(hold);
    } finally {
      hold.release();
    }
  }

  /** Model, endpoint and ordered candidates (candidates.ts). Unknown model: released, then MODEL_NOT_FOUND. */
  resolve(hold: Reservation, modelId: string, strategyName: string, timeoutMs: number, conversation: () => string, capable: Capable = canChat): RoutingTarget {
    return resolveTarget(this.options, this.random, hold, modelId, strategyName, timeoutMs, conversation, capable);
  }

  prepare(raw: ChatRequest, hold: Reservation): PreparedRequest {
    return prepareChat(this.options, this.random, raw, hold);
  }

  /** The one failover loop (failover.ts). */
  withFailover<Result>(
    target: RoutingTarget,
    signal: CallerSignal,
    call: (candidate: Candidate, control: AttemptControl) => Promise<Result>,
    policy?: FailoverPolicy,
  ): Promise<{ result: Result; candidate: Candidate; durationMs: number; control: AttemptControl }> {
    return withFailover(this.options, target, signal, call, policy);
  }

  /** Publishes the SERVED event of an answer not yet sent; when it cannot be stored the answer is withheld. */
  async recordServed(target: RoutingTarget, providerId: string, usage: Usage): Promise<void> {
    // A unary answer's first byte is the whole answer (chat sets it as the answer arrives).
    if (target.hold.firstByteAt === 0) target.hold.firstByteAt = Date.now();
    try {
      await target.hold.settle(providerId, usage);
    } catch (error) {
      target.logger.error({ err: error }, 'usage event not stored; answer withheld');
      throw error;
    }
  }
}
