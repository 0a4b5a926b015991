import type { Logger } from 'pino';
import {
  USAGE_DEDUP_WINDOW_MS,
  type DurableConsumerOptions,
  type DurableMessage,
  type EventBus,
  type Subscription,
} from './event-bus.js';

interface Stored {
  subject: string;
  data: Uint8Array;
  msgId: string;
  deliveries: number;
}

/** Most messages kept in memory: beyond it publishers are refused rather than memory growing without bound. */
const MAX_BACKLOG = 100_000;

/**
 * In-process bus for single-process mode (`npm start` without NATS_URL). Same contract as JetStream
 * (dedup by msg-id within the window, batches, ack on success, redelivery on failure) but nothing
 * survives the process: only for development.
 */
export class InProcessEventBus implements EventBus {
  private readonly queues = new Map<string, Stored[]>();
  private readonly seen = new Map<string, number>();
  private readonly durableWaiters = new Map<string, Set<() => void>>();
  private readonly listeners = new Map<string, Set<(data: Uint8Array) => void>>();
  private closed = false;

  constructor(private readonly logger: Logger) {}

  async publishDurable(subject: string, data: Uint8Array, msgId: string): Promise<void> {
    if (this.closed) throw new Error('event bus closed');
    const now = Date.now();
    const firstSeen = this.seen.get(msgId);
    if (firstSeen !== undefined && now - firstSeen < USAGE_DEDUP_WINDOW_MS) return;
    this.pruneSeen(now);
    const queue = this.queueFor(subject);
    if (queue.length >= MAX_BACKLOG) throw new Error(`in-process backlog full on ${subject}`);
    this.seen.set(msgId, now);
    queue.push({ subject, data, msgId, deliveries: 0 });
    for (const wake of this.durableWaiters.get(subject) ?? []) wake();
  }

  async consumeDurable(
    options: DurableConsumerOptions,
    handler: (batch: DurableMessage[]) => Promise<void>,
  ): Promise<Subscription> {
    const queue = this.queueFor(options.subject);
    let stopped = false;
    let wake: (() => void) | null = null;
    const waiter = () => { const resolve = wake; wake = null; resolve?.(); };
    const waiters = this.durableWaiters.get(options.subject) ?? new Set();
    waiters.add(waiter);
    this.durableWaiters.set(options.subject, waiters);

    const worker = (async () => {
      while (!stopped) {
        if (queue.length === 0) {
          await new Promise<void>((resolve) => { wake = resolve; });
          continue;
        }
        if (queue.length < options.maxBatch && options.lingerMs > 0) {
          await new Promise((resolve) => setTimeout(resolve, options.lingerMs));
        }
        const batch = queue.splice(0, options.maxBatch);
        try {
          await handler(batch.map((stored) => ({ data: stored.data, msgId: stored.msgId, redelivered: stored.deliveries++ > 0 })));
        } catch (error) {
          this.logger.error({ err: error, size: batch.length }, 'batch handler failed; redelivering');
          queue.unshift(...batch);
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      }
    })();

    return {
      stop: async () => {
        stopped = true;
        waiters.delete(waiter);
        waiter();
        await worker;
      },
    };
  }

  broadcast(subject: string, data: Uint8Array): void {
    for (const listener of this.listeners.get(subject) ?? []) {
      queueMicrotask(() => {
        try { listener(data); } catch (error) { this.logger.error({ err: error, subject }, 'subscriber failed'); }
      });
    }
  }

  subscribe(subject: string, handler: (data: Uint8Array) => void): Subscription {
    const set = this.listeners.get(subject) ?? new Set();
    set.add(handler);
    this.listeners.set(subject, set);
    return { stop: async () => { set.delete(handler); } };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const waiters of this.durableWaiters.values()) for (const wake of waiters) wake();
  }

  private queueFor(subject: string): Stored[] {
    let queue = this.queues.get(subject);
    if (!queue) { queue = []; this.queues.set(subject, queue); }
    return queue;
  }

  private pruneSeen(now: number): void {
    if (this.seen.size < 10_000) return;
    for (const [msgId, at] of this.seen) {
      if (now - at < USAGE_DEDUP_WINDOW_MS) break;
      this.seen.delete(msgId);
    }
  }
}
