import { newRequestId, type CallerSignal } from '@gateway/platform';
import type { ChatRequest, RequestContext, Usage } from '@gateway/proto';
import type { Candidate } from '../strategies/index.js';
import type { AttemptControl } from './attempt-control.js';
import { AttemptRecorder, type ServedAttempt } from './attempt-recorder.js';
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
  /** Every upstream attempt's outcome, metrics and provider health together (attempt-recorder.ts). */
  readonly recorder: AttemptRecorder;

  constructor(readonly options: RouterOptions) {
    this.random = options.random ?? Math.random;
    this.recorder = new AttemptRecorder(options);
  }

  /**
   * Runs a unary request with its hold: whatever `body` throws (or forgets), the hold is released once
   * it returns; after `hold.settle` the release is a no-op.
   */
  async admitted<Result>(
    context: RequestContext | undefined, modelId: string, endpoint: string, body: (hold: Reservation) => Promise<Result>,
  ): Promise<Result> {
    using hold = this.hold(context, modelId, endpoint, false);
    return await body(hold);
  }

  /**
   * A stream's hold, taken over from the edge's admission, for its generator to hold with `using`: the
   * stream's wrapper as `admitted` is the unary one. Whatever the stream throws, returns early or leaves
   * when its consumer stops reading, the hold is released as the generator ends (Reservation's dispose);
   * after a settle the release is a no-op. A scope rather than a generator around the stream: a `yield*`
   * wrapper would add a promise and an iterator result to every part streamed.
   */
  admittedStream(context: RequestContext | undefined, modelId: string, endpoint: string, streamed: boolean): Reservation {
    return this.hold(context, modelId, endpoint, streamed);
  }

  /** The request's hold, taken over from the edge's admission: released or settled exactly once. */
  private hold(context: RequestContext | undefined, modelId: string, endpoint: string, streamed: boolean): Reservation {
    return new Reservation(this.options.usage, context?.requestId || newRequestId(), context, modelId, endpoint, streamed);
  }

  /** Model, endpoint and ordered candidates (candidates.ts). Unknown model: MODEL_NOT_FOUND (the hold's scope releases it). */
  resolve(hold: Reservation, modelId: string, strategyName: string, timeoutMs: number, conversation: () => string, capable: Capable = canChat): RoutingTarget {
    return resolveTarget(this.options, this.random, hold, modelId, strategyName, timeoutMs, conversation, capable);
  }

  prepare(raw: ChatRequest, hold: Reservation): PreparedRequest {
    return prepareChat(this.options, this.random, raw, hold);
  }

  /** The one failover loop (failover.ts), recording every attempt's outcome. */
  withFailover<Result>(
    target: RoutingTarget,
    signal: CallerSignal,
    call: (candidate: Candidate, control: AttemptControl) => Promise<Result>,
    policy?: FailoverPolicy<Result>,
  ): Promise<ServedAttempt<Result>> {
    return withFailover(this.options, this.recorder, target, signal, call, policy);
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
