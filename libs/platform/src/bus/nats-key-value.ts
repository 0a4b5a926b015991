import { nanos, type NatsConnection } from '@nats-io/transport-node';
import {
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { KEY_VALUE_KEY, KeyValueValueTooLarge, type KeyValueBucket, type KeyValueBucketOptions, type KeyValueEntry } from './key-value.js';

/**
 * A key-value bucket on JetStream, laid out as NATS's own KV buckets are (stream `KV_<bucket>`, subjects
 * `$KV.<bucket>.<key>`, one message kept per subject), so `nats kv` reads it. The two compare-and-set
 * writes are publishes with an expected last sequence for the key's subject (0: none yet): the stream
 * accepts exactly one of racing writers. Values expire by the stream's max age (`ttlMs` after their last
 * write); past `maxBytes` the stream drops the oldest. Works with nats-server 2.9 (no per-message TTL).
 */
export class JetStreamKeyValueBucket implements KeyValueBucket {
  private readonly subjectPrefix: string;

  private constructor(
    private readonly connection: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly manager: JetStreamManager,
    readonly streamName: string,
    bucket: string,
    private readonly maxValueBytes: number,
  ) {
    this.subjectPrefix = `$KV.${bucket}.`;
  }

  /** Opens the bucket, creating its stream or bringing its limits up to `options`. */
  static async open(
    connection: NatsConnection,
    js: JetStreamClient,
    manager: JetStreamManager,
    bucket: string,
    options: KeyValueBucketOptions,
  ): Promise<JetStreamKeyValueBucket> {
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(bucket)) throw new Error(`bad key-value bucket name: ${bucket}`);
    const streamName = `KV_${bucket}`;
    const limits = {
      max_age: nanos(options.ttlMs),
      max_bytes: options.maxBytes,
      max_msg_size: options.maxValueBytes,
      discard: DiscardPolicy.Old,
      max_msgs_per_subject: 1,
      // The dedup window may not exceed the max age; no msg-ids are used here anyway.
      duplicate_window: nanos(Math.min(options.ttlMs, 2 * 60_000)),
    };
    try {
      await manager.streams.info(streamName);
      await manager.streams.update(streamName, limits);
    } catch (error) {
      if (!(error instanceof JetStreamApiError) || error.code !== JetStreamApiCodes.StreamNotFound) throw error;
      await manager.streams.add({
        name: streamName,
        subjects: [`$KV.${bucket}.>`],
        retention: RetentionPolicy.Limits,
        storage: StorageType.File,
        allow_rollup_hdrs: true,
        deny_delete: true,
        allow_direct: true,
        num_replicas: 1,
        ...limits,
      });
    }
    return new JetStreamKeyValueBucket(connection, js, manager, streamName, bucket, options.maxValueBytes);
  }

  async get(key: string): Promise<KeyValueEntry | undefined> {
    const stored = await this.manager.streams.getMessage(this.streamName, { last_by_subj: this.subject(key) });
    return stored ? { value: stored.data, revision: stored.seq } : undefined;
  }

  create(key: string, value: Uint8Array): Promise<number | undefined> {
    return this.write(key, value, 0);
  }

  update(key: string, value: Uint8Array, revision: number): Promise<number | undefined> {
    return this.write(key, value, revision);
  }

  async changed(key: string, revision: number | undefined, timeoutMs: number): Promise<void> {
    // Every write to the key is a message on its subject: a plain subscription hears it. Subscribed
    // first and read after, so a write between the caller's read and this wait is not missed.
    const subject = this.subject(key);
    let wake!: () => void;
    const woken = new Promise<void>((resolve) => { wake = resolve; });
    const subscription = this.connection.subscribe(subject, { max: 1, callback: () => wake() });
    const timer = setTimeout(wake, timeoutMs);
    try {
      await this.connection.flush();
      const now = await this.get(key).catch(() => undefined);
      if (now?.revision !== revision) return;
      await woken;
    } finally {
      clearTimeout(timer);
      subscription.unsubscribe();
    }
  }

  /** Deletes the bucket's stream (tests clean up with it). */
  async destroy(): Promise<void> {
    await this.manager.streams.delete(this.streamName).catch(() => undefined);
  }

  private async write(key: string, value: Uint8Array, expected: number): Promise<number | undefined> {
    if (value.byteLength > this.maxValueBytes) throw new KeyValueValueTooLarge(`value of ${value.byteLength} bytes is over the bucket's ${this.maxValueBytes}`);
    try {
      const ack = await this.js.publish(this.subject(key), value, { expect: { lastSubjectSequence: expected } });
      return ack.seq;
    } catch (error) {
      if (error instanceof JetStreamApiError && error.code === JetStreamApiCodes.StreamWrongLastSequence) return undefined;
      throw error;
    }
  }

  private subject(key: string): string {
    if (!KEY_VALUE_KEY.test(key)) throw new Error('bad key-value key');
    return this.subjectPrefix + key;
  }
}
