import { subjects, type EventBus, type Logger } from '@gateway/platform';
import { UsageEvent } from '@gateway/proto';
import { reusedWriterEncoder } from '@gateway/proto';
import { BackgroundUsage, type BackgroundUsageOptions } from './background-usage.js';
import type { StreamCheckpoint, StreamProgress } from './stream-checkpoints.js';
import type { UsageOutbox, OutboxEntry } from './usage-outbox.js';

/**
 * Where usage events go. Resolves once the event is durably stored; rejects when it could not be.
 * One interface so the group-commit publisher (DESIGN §2: ≤2 ms / 256 events per message) and the
 * per-event one are interchangeable without touching the router.
 */
export interface UsagePublisher {
  publish(event: UsageEvent): Promise<void>;
  /**
   * For events that must not be lost although nobody waits (streams whose content was sent, releases):
   * kept in the durable outbox when one is configured, and republished until the bus accepts them.
   * `checkpoint`: the stream this is the final event of, retired once the event is stored.
   */
  publishInBackground(event: UsageEvent, checkpoint?: StreamCheckpoint): void;
  /**
   * A stream committed: its provisional usage (`checkpointEvent`, built off the stream's path) is kept
   * in the outbox while it runs, so a crash before its final event is stored still charges what
   * reached the caller (stream-checkpoints.ts). Call `finalStored()` once the final event is stored.
   */
  trackStream(progress: StreamProgress, checkpointEvent: () => UsageEvent): StreamCheckpoint;
  stop(): Promise<void>;
  /** What waits to be stored right now (metrics). */
  backlog?(): UsageBacklog;
}

/** Usage not yet accepted by the bus, and the durable outbox's size. */
export interface UsageBacklog {
  /** Background events not yet accepted by the bus (in memory, being appended, or being sent). */
  backgroundEvents: number;
  /** Outbox records not yet acknowledged: unsent events and checkpoints of streams in flight. */
  outboxRecords: number;
  outboxBytes: number;
}

export interface JetStreamUsagePublisherOptions {
  bus: EventBus;
  logger: Logger;
  /** Attempts of an awaited publish before giving up (the msg-id makes retries safe). */
  attempts?: number;
  /** The durable outbox for background events; without it they are retried from memory only. */
  outbox?: UsageOutbox;
  /** Events a previous process left in the outbox, republished first. */
  recovered?: OutboxEntry[];
  /** Most background events held in memory awaiting the bus (the outbox has its own byte bound). */
  maxBacklog?: number;
  /** Stream checkpoint timing (tests shorten it). */
  checkpoints?: BackgroundUsageOptions['checkpoints'];
}

/** Every usage event is encoded here, on one reused writer. */
export const encodeUsageEvent = reusedWriterEncoder(UsageEvent);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Publishes with jittered exponential backoff; the msg-id makes every retry safe. */
export async function publishWithRetry(
  bus: EventBus,
  subject: string,
  data: Uint8Array,
  msgId: string,
  attempts: number,
  onRetry: (error: unknown, attempt: number) => void,
): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await bus.publishDurable(subject, data, msgId);
      return;
    } catch (error) {
      if (attempt >= attempts) throw error;
      onRetry(error, attempt);
      await sleep(50 * 2 ** attempt * (0.5 + Math.random() / 2));
    }
  }
}

/**
 * Where both publishers keep events no caller waits for (streams already answered): single-event
 * publishes, so a republish after a crash is deduplicated by JetStream whichever process sends it.
 */
export function backgroundUsageFor(
  options: Pick<JetStreamUsagePublisherOptions, 'bus' | 'logger' | 'outbox' | 'recovered' | 'maxBacklog' | 'checkpoints'>,
): BackgroundUsage {
  return new BackgroundUsage({
    send: (event) => publishSingleEvent(options.bus, event),
    outbox: options.outbox,
    recovered: options.recovered,
    logger: options.logger,
    maxBacklog: options.maxBacklog,
    checkpoints: options.checkpoints,
  });
}

/** The single-event publish of a background event: msg-id = request id, so every republish is deduplicated. */
export function publishSingleEvent(bus: EventBus, event: UsageEvent): Promise<void> {
  return bus.publishDurable(subjects.usageEvents, encodeUsageEvent(event), event.requestId);
}

/** One JetStream message per event, msg-id = request id (JetStream dedups retries). */
export class JetStreamUsagePublisher implements UsagePublisher {
  private readonly attempts: number;
  private readonly background: BackgroundUsage;

  constructor(private readonly options: JetStreamUsagePublisherOptions) {
    this.attempts = options.attempts ?? 3;
    this.background = backgroundUsageFor(options);
  }

  async publish(event: UsageEvent): Promise<void> {
    await publishWithRetry(this.options.bus, subjects.usageEvents, encodeUsageEvent(event), event.requestId, this.attempts, (error, attempt) => {
      this.options.logger.warn({ err: error, request_id: event.requestId, attempt }, 'usage publish failed; retrying');
    });
  }

  publishInBackground(event: UsageEvent, checkpoint?: StreamCheckpoint): void {
    this.background.submit(event, checkpoint);
  }

  trackStream(progress: StreamProgress, checkpointEvent: () => UsageEvent): StreamCheckpoint {
    return this.background.trackStream(progress, checkpointEvent);
  }

  /** Resolves once every background event submitted so far is in the outbox (or memory, without one). */
  backgroundDurable(): Promise<void> {
    return this.background.durable();
  }

  backlog(): UsageBacklog {
    return this.background.backlogSizes();
  }

  async stop(): Promise<void> {
    await this.background.stop();
  }
}
