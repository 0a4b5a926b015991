export {
  startStack, startEdgeReplica, startJobsReplica, startLedgerReplica, startRoutingReplica, type StackOptions, type RunningStack, type StackAddresses,
  type EdgeOptions, type EdgeReplicaOptions, type RunningEdge, type LedgerServiceOptions, type RunningLedgerService,
  type RoutingServiceOptions, type RunningRoutingService, type JobsServiceOptions, type RunningJobsService,
} from './stack.js';
export { ensureDevAccount, type DevKeys } from './dev-account.js';
export { startEmbeddedPostgres, freePort } from './embedded-postgres.js';
