// Generated contracts (proto/gateway/v1) re-exported as one module. Never edit src/gen by hand: `npm run gen`.
export * from './gen/gateway/v1/common.js';
export * from './gen/gateway/v1/auth.js';
export * from './gen/gateway/v1/catalog.js';
export * from './gen/gateway/v1/ledger.js';
export * from './gen/gateway/v1/router.js';
export * from './gen/gateway/v1/media.js';
export * from './gen/gateway/v1/jobs.js';
export * from './gen/gateway/v1/events.js';
export * from './gen/gateway/v1/responses_store.js';
export * from './gen/gateway/v1/audit.js';
export { protobufPackage, protobufFileName, type MessageFns, type DeepPartial } from './gen/gateway/v1/common.js';
export { idempotencyLevels, type IdempotencyLevel } from './gen/idempotency.js';
export { FILE_DESCRIPTOR_SET_BASE64 } from './gen/descriptor-set.js';
// Encoding helpers for hot paths that send many messages (routing's streams and usage batches).
export { reusedWriterEncoder, asBuffer } from './wire/reused-writer.js';
export { encodeRepeatedBytes } from './wire/length-delimited.js';
