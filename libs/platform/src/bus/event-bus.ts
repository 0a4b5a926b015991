import type { KeyValueBucket, KeyValueBucketOptions } from './key-value.js';

/**
 * The event-bus port. Two kinds of traffic:
 * - durable: usage events. `publishDurable` resolves only once the message is stored (JetStream ack);
 *   the same `msgId` published twice inside the dedup window is stored once. A durable consumer gets
 *   messages in batches and acks the batch after its handler resolves; a throw redelivers the batch.
 * - broadcast: cache invalidations (keys.changed, catalog.changed, provider.stats) and lease recalls. Best effort, no replay.
 */
export interface DurableMessage {
  data: Uint8Array;
  msgId: string;
  /** True when this message was delivered before and not acked (consumer crash, handler failure). */
  redelivered: boolean;
  /**
   * Messages of this consumer the server still held undelivered when it sent this one (JetStream's
   * delivery info: free, no API call). The consumer's backlog as of this message; the in-process bus
   * reports its queue behind the batch.
   */
  pending?: number;
}

export interface DurableConsumerOptions {
  subject: string;
  /** Consumer name; several processes with the same name share the work. */
  durable: string;
  /** Most messages handed to one handler call. */
  maxBatch: number;
  /** How long to wait for a batch to fill once a first message is in hand. */
  lingerMs: number;
  /** How long a delivered message may go unacked before redelivery. */
  ackWaitMs?: number;
  /**
   * Handler calls in flight at once (default 1; the in-process bus always runs one). Batches are then
   * handled out of order, each acked when its own handler resolves; the handler must be safe to run
   * concurrently with itself.
   */
  concurrency?: number;
}

export interface Subscription {
  stop(): Promise<void>;
}

export interface EventBus {
  publishDurable(subject: string, data: Uint8Array, msgId: string): Promise<void>;
  consumeDurable(options: DurableConsumerOptions, handler: (batch: DurableMessage[]) => Promise<void>): Promise<Subscription>;
  broadcast(subject: string, data: Uint8Array): void;
  subscribe(subject: string, handler: (data: Uint8Array) => void): Subscription;
  close(): Promise<void>;
  /** False while the connection to the bus is down (gRPC health reports the service NOT_SERVING). */
  isConnected?(): boolean;
  /**
   * A key-value bucket shared by every process on this bus (JetStream: a KV bucket in the bus's
   * namespace; in process: memory). Opening the same name twice gives the same bucket.
   */
  keyValue?(options: KeyValueBucketOptions): Promise<KeyValueBucket>;
}

/** Subjects in use. Durable ones live on the JetStream stream USAGE (`usage.>` and `accounts.>`). */
export const subjects = {
  usageEvents: 'usage.events',
  usageBatches: 'usage.batches',
  /** AccountEvent from auth's and jobs' outboxes to the ledger's webhooks (msg-id = event id). */
  accountEvents: 'accounts.events',
  keysChanged: 'keys.changed',
  catalogChanged: 'catalog.changed',
  providerStats: 'provider.stats',
  /** LeaseRecall from the ledger to every edge (leased admission). */
  leaseRecall: 'lease.recall',
} as const;

export const USAGE_STREAM = 'USAGE';
/**
 * The ledger's durable JetStream consumers of the usage subjects: one for single events, one for
 * group-commit batches. Part of the wire contract: whoever watches what the settlers still owe (the bench,
 * operators reading `nats consumer info`) names the same consumers.
 */
export const SETTLER_DURABLE = 'ledger-settler';
export const BATCH_SETTLER_DURABLE = 'ledger-settler-batches';
/** The ledger's durable consumer of account events (webhooks). */
export const ACCOUNT_EVENTS_DURABLE = 'ledger-account-events';
/** Dedup window of the USAGE stream: a republish (outbox, retry) within it is stored once. */
export const USAGE_DEDUP_WINDOW_MS = 10 * 60_000;
