import {
  activeTraceparent,
  endSpanWithError,
  ErrorReason,
  GatewayError,
  GrpcStatus,
  otelTrace,
  SpanKind,
  tracer,
  tracingEnabled,
} from '@gateway/platform';
import { UsageOutcome, type Model, type RequestContext, type Usage, type UsageEvent } from '@gateway/proto';
import type { StreamCheckpoint } from '../usage/stream-checkpoints.js';
import { emptyUsage } from '../usage/token-counter.js';
import type { UsagePublisher } from '../usage/usage-publisher.js';

/**
 * The one owner of an admitted request's hold. The edge reserved (or took a lease's share) before it
 * called the Router; the request's one usage event ends that hold: SERVED settles it with the metered
 * usage, FAILED releases it. A Reservation is made when the Router takes the request and ends exactly
 * once: the first of `release`, `settle`, `settleStream` or `settleInBackground` publishes, every later
 * call is a no-op. It is disposable: every request holds it with `using` (RoutingCore.admitted for unary
 * requests, RoutingCore.admittedStream in a stream's generator), so whatever was not ended is released
 * when the request's scope ends, and a path that throws cannot leave the hold to the ledger's sweeper.
 */
export class Reservation implements Disposable {
  /** The provider of the latest attempt: the FAILED event names it (failover sets it). */
  providerId = '';
  /** The answer's finish reason (canonical; '' none yet), for the generation record. */
  finishReason = '';
  /** Date.now() when the provider's first content (or a unary answer) arrived; 0: none yet. */
  firstByteAt = 0;
  /** The caller went away before the answer ended. */
  cancelled = false;
  /** Zero-completion insurance (zero-completion.ts): why nothing is charged; '' charges as usual. */
  insuredReason = '';
  /**
   * The provider whose attempt had the whole request (prompt included) when the caller went away before
   * any content ('' none): chat charges that prompt (chat-requests.ts, chargeSentPrompt).
   */
  promptSentTo = '';
  /** The usage as the provider reported it, before metering; undefined: none reported. */
  nativeUsage: Usage | undefined = undefined;
  /** When routing took the request: latency and generation time count from here. */
  private readonly startedAt = Date.now();
  private model: Model | undefined;
  private strategyName = '';
  private ended = false;

  constructor(
    private readonly usage: UsagePublisher,
    readonly requestId: string,
    readonly context: RequestContext | undefined,
    private readonly modelId: string,
    readonly endpoint: string,
    /** Releases of a streamed endpoint (chat streams) are marked streamed; also read by routing (Gemini's `n`). */
    readonly streamed: boolean,
  ) {}

  /** The catalog's model once resolved: its id and prices go on the event. */
  resolved(model: Model, strategyName: string): void {
    this.model = model;
    this.strategyName = strategyName;
  }

  /** True until the usage event is out (or being published). */
  get open(): boolean {
    return !this.ended;
  }

  /** A FAILED event releases the hold; losing it only delays that to the ledger's sweeper. A no-op once ended. */
  release(streamed = this.streamed): void {
    if (this.ended) return;
    this.ended = true;
    this.usage.publishInBackground(this.event(UsageOutcome.USAGE_OUTCOME_FAILED, this.providerId, emptyUsage(), streamed));
  }

  /**
   * The end of the request's scope: the one place a hold nothing ended is released. A request whose model
   * never resolved (an unknown model) was routed nowhere, so its release is not marked streamed.
   */
  [Symbol.dispose](): void {
    this.release(this.streamed && this.model !== undefined);
  }

  /**
   * SERVED, awaiting the bus's ack, for an answer not yet sent: when it cannot be stored the answer is
   * withheld (USAGE_NOT_RECORDED) and the hold is left to the ledger (a SERVED whose ack was lost may be
   * stored, so no FAILED follows it). A no-op once ended.
   */
  async settle(providerId: string, usage: Usage, streamed = false): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    try {
      await this.publish(this.event(UsageOutcome.USAGE_OUTCOME_SERVED, providerId, usage, streamed));
    } catch (error) {
      throw new GatewayError(
        GrpcStatus.FAILED_PRECONDITION,
        ErrorReason.ERROR_REASON_USAGE_NOT_RECORDED,
        'The usage of this request could not be recorded, so the answer was withheld.',
        { cause: error },
      );
    }
  }

  /**
   * SERVED for content that already reached the caller: `stored` settles once the bus has it or, when
   * the publish failed, the background does. `checkpoint` (the stream's crash insurance) is retired only
   * once the final event is stored. `event` is what is published (the edge keeps a copy until `stored`:
   * ChatStreamResponse.settlement). Undefined once ended.
   */
  settleStream(
    providerId: string, usage: Usage, checkpoint: StreamCheckpoint | undefined, onRetry: (error: unknown) => void,
  ): { event: UsageEvent; stored: Promise<void> } | undefined {
    if (this.ended) return undefined;
    this.ended = true;
    const event = this.event(UsageOutcome.USAGE_OUTCOME_SERVED, providerId, usage, true);
    const stored = this.publish(event).then(
      () => checkpoint?.finalStored(),
      (error: unknown) => {
        onRetry(error);
        this.usage.publishInBackground(event, checkpoint);
      },
    );
    return { event, stored };
  }

  /** SERVED straight to the background (the caller went away; nobody is left to wait). A no-op once ended. */
  settleInBackground(providerId: string, usage: Usage, streamed: boolean, checkpoint?: StreamCheckpoint): void {
    if (this.ended) return;
    this.ended = true;
    this.usage.publishInBackground(this.event(UsageOutcome.USAGE_OUTCOME_SERVED, providerId, usage, streamed), checkpoint);
  }

  /** The request's usage event (a stream's checkpoints are built with it too); records nothing by itself. */
  event(outcome: UsageOutcome, providerId: string, usage: Usage, streamed: boolean): UsageEvent {
    const context = this.context;
    const model = this.model;
    const now = Date.now();
    if (tracingEnabled()) {
      // The request's routing span (the exchange's or the RPC's): the request as the gateway bills it. The
      // GenAI conventions' attributes are on each upstream attempt's own span (observability/gen-ai-telemetry.ts).
      otelTrace.getActiveSpan()?.setAttributes({
        'gateway.endpoint': this.endpoint,
        'gateway.model': model?.id ?? this.modelId,
        'gateway.provider': providerId,
        'gateway.usage.input_tokens': usage.inputTokens,
        'gateway.usage.output_tokens': usage.outputTokens,
        'gateway.routing.strategy': this.strategyName,
        'gateway.usage.outcome': UsageOutcome[outcome] ?? String(outcome),
        'gateway.streamed': streamed,
      });
    }
    return {
      requestId: this.requestId,
      accountId: context?.accountId ?? '',
      keyId: context?.keyId ?? '',
      modelId: model?.id ?? this.modelId,
      providerId,
      endpoint: this.endpoint,
      outcome,
      usage,
      prices: model?.pricing,
      occurredAtMs: BigInt(now),
      streamed,
      leaseId: context?.leaseId || undefined,
      traceParent: activeTraceparent(),
      finishReason: this.finishReason,
      latencyMs: this.firstByteAt > 0 ? Math.max(0, this.firstByteAt - this.startedAt) : 0,
      generationTimeMs: Math.max(0, now - this.startedAt),
      cancelled: this.cancelled,
      // Only a SERVED event carries insurance (a FAILED one is never charged anyway).
      insuredReason: outcome === UsageOutcome.USAGE_OUTCOME_SERVED ? this.insuredReason : '',
      nativeUsage: this.nativeUsage,
    };
  }

  /** Publishes and waits for the bus's ack; a PRODUCER span around it when tracing. */
  private async publish(event: UsageEvent): Promise<void> {
    if (!tracingEnabled()) return this.usage.publish(event);
    const span = tracer().startSpan('usage publish', {
      kind: SpanKind.PRODUCER,
      attributes: { 'messaging.system': 'nats', 'messaging.operation.type': 'send', 'messaging.destination.name': 'usage', 'gateway.request_id': event.requestId },
    });
    try {
      await this.usage.publish(event);
      span.end();
    } catch (error) {
      endSpanWithError(span, error);
      throw error;
    }
  }
}
