export * from './event-bus.js';
export { NatsEventBus } from './nats-bus.js';
export { JetStreamPublisher, JetStreamPublishError } from './jetstream-publisher.js';
export { InProcessEventBus } from './memory-bus.js';
