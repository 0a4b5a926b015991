export * from './event-bus.js';
export { NatsEventBus } from './nats-bus.js';
export { JetStreamPublisher, JetStreamPublishError } from './jetstream-publisher.js';
export { InProcessEventBus } from './memory-bus.js';
export { MemoryKeyValueBucket, KeyValueValueTooLarge, KEY_VALUE_KEY, type KeyValueBucket, type KeyValueBucketOptions, type KeyValueEntry } from './key-value.js';
export { JetStreamKeyValueBucket } from './nats-key-value.js';
