export * from './event-bus.js';
export { NatsEventBus } from './nats-bus.js';
export { InProcessEventBus } from './memory-bus.js';
