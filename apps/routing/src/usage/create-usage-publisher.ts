import type { EventBus, Logger } from '@gateway/platform';
import { GroupCommitUsagePublisher } from './group-commit-publisher.js';
import { UsageOutbox } from './usage-outbox.js';
import { JetStreamUsagePublisher, type UsagePublisher } from './usage-publisher.js';

export interface UsagePublisherOptions {
  bus: EventBus;
  logger: Logger;
  /** `group-commit` (default): ≤ lingerMs / maxEventsPerBatch per JetStream message; `single`: one message per event. */
  publisher?: 'group-commit' | 'single';
  /** Group commit: how long a batch gathers (default 2 ms). */
  lingerMs?: number;
  /** Group commit: most events per message (default 256). */
  maxEventsPerBatch?: number;
  /**
   * Directory of the durable outbox (one per process) for usage nobody waits for — above all a
   * stream already answered whose publish failed. Unset: such events are retried from memory only.
   */
  outboxDirectory?: string;
  /** Bound of the outbox's events log on disk (default 64 MiB; its checkpoint log has 16 MiB more). */
  outboxMaxBytes?: number;
  /** Stream checkpoint timing (tests shorten it; see stream-checkpoints.ts for the defaults). */
  checkpoints?: { firstAfterMs?: number; intervalMs?: number; rewriteAfterMs?: number };
  /** Observes every group-commit batch acknowledged. */
  onBatch?: (batch: { batchId: string; events: number; bytes: number }) => void;
}

/** Opens the outbox (replaying what a previous run left in it) and builds the chosen publisher. */
export async function createUsagePublisher(options: UsagePublisherOptions): Promise<UsagePublisher & { backgroundDurable(): Promise<void> }> {
  const opened = options.outboxDirectory
    ? await UsageOutbox.open({ directory: options.outboxDirectory, logger: options.logger, maxBytes: options.outboxMaxBytes })
    : undefined;
  const common = { bus: options.bus, logger: options.logger, outbox: opened?.outbox, recovered: opened?.recovered, checkpoints: options.checkpoints };
  if ((options.publisher ?? 'group-commit') === 'single') return new JetStreamUsagePublisher(common);
  return new GroupCommitUsagePublisher({ ...common, lingerMs: options.lingerMs, maxEvents: options.maxEventsPerBatch, onBatch: options.onBatch });
}
