import { subjects, type EventBus, type Logger } from '@gateway/platform';
import { UsageEvent } from '@gateway/proto';

/**
 * Where usage events go. Resolves once the event is durably stored; rejects when it could not be.
 * One interface so the group-commit publisher (DESIGN §2: ≤2 ms / 256 events per message) can
 * replace the per-event one without touching the router.
 */
export interface UsagePublisher {
  publish(event: UsageEvent): Promise<void>;
  /** For events that must not be lost although nobody waits (streams whose content was sent). */
  publishInBackground(event: UsageEvent): void;
  stop(): Promise<void>;
}

export interface JetStreamUsagePublisherOptions {
  bus: EventBus;
  logger: Logger;
  /** Attempts of an awaited publish before giving up (the msg-id makes retries safe). */
  attempts?: number;
  /** Most events held for background retry; beyond it the oldest is logged and dropped. */
  maxBacklog?: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One JetStream message per event, msg-id = request id (JetStream dedups retries). */
export class JetStreamUsagePublisher implements UsagePublisher {
  private readonly attempts: number;
  private readonly maxBacklog: number;
  private readonly backlog: UsageEvent[] = [];
  private draining: Promise<void> | undefined;
  private stopped = false;

  constructor(private readonly options: JetStreamUsagePublisherOptions) {
    this.attempts = options.attempts ?? 3;
    this.maxBacklog = options.maxBacklog ?? 10_000;
  }

  async publish(event: UsageEvent): Promise<void> {
    const data = UsageEvent.encode(event).finish();
    for (let attempt = 1; ; attempt++) {
      try {
        await this.options.bus.publishDurable(subjects.usageEvents, data, event.requestId);
        return;
      } catch (error) {
        if (attempt >= this.attempts) throw error;
        this.options.logger.warn({ err: error, request_id: event.requestId, attempt }, 'usage publish failed; retrying');
        await sleep(50 * 2 ** attempt * (0.5 + Math.random() / 2));
      }
    }
  }

  /**
   * Retries until stored or the service stops. In-memory only: a crash loses the backlog, and the
   * ledger's sweeper then releases the reservation (a disk outbox is the follow-up).
   */
  publishInBackground(event: UsageEvent): void {
    if (this.backlog.length >= this.maxBacklog) {
      const dropped = this.backlog.shift();
      this.options.logger.error({ request_id: dropped?.requestId }, 'usage backlog full; event dropped');
    }
    this.backlog.push(event);
    this.draining ??= this.drain().finally(() => { this.draining = undefined; });
  }

  private async drain(): Promise<void> {
    let delayMs = 100;
    while (this.backlog.length > 0 && !this.stopped) {
      const event = this.backlog[0]!;
      try {
        await this.publish(event);
        this.backlog.shift();
        delayMs = 100;
      } catch (error) {
        this.options.logger.error({ err: error, request_id: event.requestId, backlog: this.backlog.length }, 'usage event still not stored');
        await sleep(delayMs);
        delayMs = Math.min(delayMs * 2, 10_000);
      }
    }
  }

  async stop(): Promise<void> {
    // Give the backlog a short chance to drain before the bus closes.
    const deadline = Date.now() + 2_000;
    while (this.draining && this.backlog.length > 0 && Date.now() < deadline) await sleep(50);
    this.stopped = true;
    if (this.backlog.length > 0) this.options.logger.error({ backlog: this.backlog.length }, 'stopping with unpublished usage events');
  }
}
