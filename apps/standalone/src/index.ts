export { startStack, type StackOptions, type RunningStack } from './stack.js';
export { ensureDevAccount, type DevKeys } from './dev-account.js';
export { startEmbeddedPostgres, freePort } from './embedded-postgres.js';
