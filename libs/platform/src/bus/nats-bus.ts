import { connect, nanos, type NatsConnection } from '@nats-io/transport-node';
import {
  AckPolicy,
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type JetStreamClient,
  type JsMsg,
} from '@nats-io/jetstream';
import type { Logger } from 'pino';
import {
  USAGE_DEDUP_WINDOW_MS,
  USAGE_STREAM,
  type DurableConsumerOptions,
  type DurableMessage,
  type EventBus,
  type Subscription,
} from './event-bus.js';
import { JetStreamPublisher } from './jetstream-publisher.js';
import type { KeyValueBucket, KeyValueBucketOptions } from './key-value.js';
import { JetStreamKeyValueBucket } from './nats-key-value.js';

const MSG_ID_HEADER = 'Nats-Msg-Id';

/** NATS JetStream implementation: stream USAGE with msg-id dedup, durable pull consumers, explicit acks. */
export class NatsEventBus implements EventBus {
  /** Follows the connection's disconnect/reconnect events (the client reconnects by itself, forever). */
  private connected = true;
  /** Usage publishes: one reply subscription instead of the client's request machinery per publish. */
  private readonly publisher: JetStreamPublisher;
  /** Key-value buckets opened on this connection, by name (each opened once). */
  private readonly buckets = new Map<string, Promise<JetStreamKeyValueBucket>>();

  private constructor(
    private readonly connection: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly logger: Logger,
    private readonly prefix: string,
    readonly streamName: string,
    private readonly namespace: string,
  ) {
    this.publisher = new JetStreamPublisher(connection, 5_000);
    void (async () => {
      for await (const status of connection.status()) {
        if (status.type === 'disconnect') {
          this.connected = false;
          logger.warn({ server: status.server }, 'NATS connection lost; reconnecting');
        } else if (status.type === 'reconnect') {
          this.connected = true;
          logger.info({ server: status.server }, 'NATS connection back');
        }
      }
    })().catch(() => undefined);
  }

  isConnected(): boolean {
    return this.connected && !this.connection.isClosed();
  }

  /**
   * `namespace` isolates several gateways (or test runs) on one NATS server: subjects are prefixed
   * with it and the stream is named USAGE_<NAMESPACE>.
   */
  static async connect(url: string, logger: Logger, options: { name?: string; namespace?: string } = {}): Promise<NatsEventBus> {
    const namespace = options.namespace ?? '';
    if (namespace && !/^[A-Za-z0-9_-]{1,32}$/.test(namespace)) throw new Error(`bad NATS namespace: ${namespace}`);
    const prefix = namespace ? `${namespace}.` : '';
    const streamName = namespace ? `${USAGE_STREAM}_${namespace.toUpperCase().replaceAll('-', '_')}` : USAGE_STREAM;
    // noAsyncTraces: otherwise every request (each JetStream publish) captures two Error stacks up
    // front just in case it fails, a measurable part of a publish's CPU.
    const connection = await connect({ servers: url, name: options.name ?? 'gateway', maxReconnectAttempts: -1, reconnectTimeWait: 500, noAsyncTraces: true });
    const manager = await jetstreamManager(connection);
    const config = {
      name: streamName,
      subjects: [`${prefix}usage.>`, `${prefix}accounts.>`],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      duplicate_window: nanos(USAGE_DEDUP_WINDOW_MS),
      max_age: nanos(7 * 24 * 3_600_000),
    };
    try {
      await manager.streams.info(streamName);
      // A stream made before account events existed gains their subjects here.
      await manager.streams.update(streamName, { subjects: config.subjects, duplicate_window: config.duplicate_window, max_age: config.max_age });
    } catch {
      await manager.streams.add(config);
    }
    return new NatsEventBus(connection, jetstream(connection), logger, prefix, streamName, namespace);
  }

  /** Deletes this namespace's stream and the key-value buckets this connection opened (tests clean up with it). */
  async destroyStream(): Promise<void> {
    const manager = await jetstreamManager(this.connection);
    await manager.streams.delete(this.streamName).catch(() => undefined);
    for (const opening of this.buckets.values()) await (await opening.catch(() => undefined))?.destroy();
  }

  /** A KV bucket named `<name>` (`<name>_<NAMESPACE>` in a namespace), opened on first use. */
  keyValue(options: KeyValueBucketOptions): Promise<KeyValueBucket> {
    let opening = this.buckets.get(options.name);
    if (!opening) {
      const bucket = this.namespace ? `${options.name}_${this.namespace.toUpperCase().replaceAll('-', '_')}` : options.name;
      opening = jetstreamManager(this.connection).then((manager) => JetStreamKeyValueBucket.open(this.connection, this.js, manager, bucket, options));
      // A failed open (bus down) is tried again by the next caller.
      opening.catch(() => this.buckets.delete(options.name));
      this.buckets.set(options.name, opening);
    }
    return opening;
  }

  async publishDurable(subject: string, data: Uint8Array, msgId: string): Promise<void> {
    // Resolves on the stream's ack; a duplicate msg-id is acked as a duplicate and stored once.
    await this.publisher.publish(this.prefix + subject, data, msgId);
  }

  async consumeDurable(
    options: DurableConsumerOptions,
    handler: (batch: DurableMessage[]) => Promise<void>,
  ): Promise<Subscription> {
    const manager = await jetstreamManager(this.connection);
    const consumerConfig = {
      durable_name: options.durable,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: this.prefix + options.subject,
      ack_wait: nanos(options.ackWaitMs ?? 30_000),
      max_ack_pending: Math.max(options.maxBatch * 4, 1_000),
    };
    try {
      await manager.consumers.info(this.streamName, options.durable);
    } catch {
      await manager.consumers.add(this.streamName, consumerConfig);
    }
    const consumer = await this.js.consumers.get(this.streamName, options.durable);
    const messages = await consumer.consume({ max_messages: Math.max(options.maxBatch * 2, 256) });
    const pending: JsMsg[] = [];
    const waiting: Array<() => void> = [];
    let stopped = false;
    const notify = () => { for (const resolve of waiting.splice(0)) resolve(); };

    const reader = (async () => {
      for await (const message of messages) {
        pending.push(message);
        notify();
      }
      stopped = true;
      notify();
    })();

    const work = async () => {
      while (!stopped || pending.length > 0) {
        if (pending.length === 0) {
          await new Promise<void>((resolve) => { waiting.push(resolve); });
          continue;
        }
        if (pending.length < options.maxBatch && options.lingerMs > 0) {
          await new Promise((resolve) => setTimeout(resolve, options.lingerMs));
          if (pending.length === 0) continue; // another worker took them meanwhile
        }
        const batch = pending.splice(0, options.maxBatch);
        try {
          await handler(batch.map((message) => ({
            data: message.data,
            msgId: message.headers?.get(MSG_ID_HEADER) ?? `${message.info.stream}:${message.seq}`,
            redelivered: message.redelivered,
            pending: message.info.pending,
          })));
          for (const message of batch) message.ack();
        } catch (error) {
          this.logger.error({ err: error, size: batch.length, durable: options.durable }, 'batch handler failed; redelivering');
          for (const message of batch) message.nak(1_000);
        }
      }
    };
    const worker = Promise.all(Array.from({ length: Math.max(1, options.concurrency ?? 1) }, work));

    return {
      stop: async () => {
        stopped = true;
        await messages.close();
        notify();
        await Promise.allSettled([reader, worker]);
      },
    };
  }

  broadcast(subject: string, data: Uint8Array): void {
    this.connection.publish(this.prefix + subject, data);
  }

  subscribe(subject: string, handler: (data: Uint8Array) => void): Subscription {
    const subscription = this.connection.subscribe(this.prefix + subject, {
      callback: (error, message) => {
        if (error) { this.logger.warn({ err: error, subject }, 'subscription error'); return; }
        try { handler(message.data); } catch (handlerError) { this.logger.error({ err: handlerError, subject }, 'subscriber failed'); }
      },
    });
    return { stop: async () => { subscription.unsubscribe(); } };
  }

  async close(): Promise<void> {
    await this.connection.drain().catch(() => this.connection.close());
    this.publisher.close();
  }
}
