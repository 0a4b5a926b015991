/**
 * The webhook event types other services produce (auth: keys; jobs: batches), relayed to the ledger over
 * the bus from their outboxes (account-event-consumer.ts). The ledger's own types are written where they happen.
 */
export const RELAYED_EVENT_TYPES = ['api_key.created', 'api_key.disabled', 'api_key.deleted', 'api_key.expired', 'batch.completed'] as const;
