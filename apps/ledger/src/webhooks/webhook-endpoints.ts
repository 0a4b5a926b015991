import { randomBytes } from 'node:crypto';
import { errors, UNATTRIBUTED_AUDIT, WEBHOOK_EVENT_TYPES, type AuditCallContext } from '@gateway/platform';
import { appendAudit, auditedTransaction, sql } from '@gateway/platform/db';
import type { LedgerDatabase } from '../ledger-db.js';
import { isSealed, openWebhookSecret, sealWebhookSecret, type WebhookSecretKey } from './secret-box.js';
import { newWebhookSecret, refuseWebhookUrl } from './webhook-target.js';

/*
 * An account's webhook endpoints and their deliveries (docs/governance.md "Webhooks"). Every query
 * names the account: another account's endpoint or delivery is not found. Each change of an endpoint
 * is in the ledger's audit chain, in the change's transaction (never the secret).
 */

/** The event types an endpoint may subscribe to: one list for the ledger, the edge and the console. */
export { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '@gateway/platform';
/** Endpoints per account. */
export const MAX_WEBHOOK_ENDPOINTS = 16;
/** Deliveries listed per page. */
export const MAX_LISTED_DELIVERIES = 100;
const AUDIT_CHAIN = 'ledger';
const ID_MAX_LENGTH = 64;

export interface WebhookEndpoint {
  id: string;
  accountId: string;
  url: string;
  eventTypes: string[];
  enabled: boolean;
  createdAt: Date;
  updatedAt: Date;
}

export interface WebhookDelivery {
  id: string;
  eventId: string;
  eventType: string;
  state: 'pending' | 'delivered' | 'dead';
  attempts: number;
  lastStatus: number | null;
  lastError: string;
  lastAttemptAt: Date | null;
  nextAttemptAt: Date | null;
  createdAt: Date;
  finishedAt: Date | null;
}

type EndpointRow = { id: string; account_id: string; url: string; event_types: string[]; enabled: boolean; created_at: Date; updated_at: Date };

const toEndpoint = (row: EndpointRow): WebhookEndpoint => ({
  id: row.id, accountId: row.account_id, url: row.url, eventTypes: row.event_types, enabled: row.enabled, createdAt: row.created_at, updatedAt: row.updated_at,
});
const audited = (endpoint: WebhookEndpoint | undefined) => endpoint === undefined ? null : ({ url: endpoint.url, event_types: endpoint.eventTypes, enabled: endpoint.enabled });

export function parseEventTypes(values: readonly string[]): string[] {
  if (values.length === 0) throw errors.invalidRequest('event_types must name at least one event type', 'event_types');
  for (const value of values) {
    if (!(WEBHOOK_EVENT_TYPES as readonly string[]).includes(value)) {
      throw errors.invalidRequest(`event_types must be among ${WEBHOOK_EVENT_TYPES.join(', ')}`, 'event_types');
    }
  }
  return [...new Set(values)].sort();
}

async function checkUrl(url: string, allowPrivate: boolean): Promise<void> {
  const refusal = await refuseWebhookUrl(url, allowPrivate);
  if (refusal !== null) throw errors.invalidRequest(refusal, 'url', 'webhook_url_refused');
}

const validId = (id: string) => id !== '' && id.length <= ID_MAX_LENGTH;

export async function createWebhookEndpoint(
  db: LedgerDatabase,
  box: WebhookSecretKey,
  input: { accountId: string; url: string; eventTypes: string[]; enabled: boolean },
  allowPrivate: boolean,
  audit: AuditCallContext = UNATTRIBUTED_AUDIT,
): Promise<{ endpoint: WebhookEndpoint; secret: string }> {
  const eventTypes = parseEventTypes(input.eventTypes);
  await checkUrl(input.url, allowPrivate);
  const id = `whe_${randomBytes(12).toString('hex')}`;
  const secret = newWebhookSecret();
  return auditedTransaction(db, async (trx) => {
    // Serialises creations of one account, so the bound holds under concurrent calls.
    await sql`select pg_advisory_xact_lock(hashtext('webhook_endpoints:' || ${input.accountId}))`.execute(trx);
    const count = (await sql<{ count: string }>`select count(*)::text as count from webhook_endpoints where account_id = ${input.accountId}`.execute(trx)).rows[0]!;
    if (Number(count.count) >= MAX_WEBHOOK_ENDPOINTS) {
      throw errors.invalidRequest(`an account holds at most ${MAX_WEBHOOK_ENDPOINTS} webhook endpoints`, '', 'webhook_limit_reached');
    }
    const row = (await sql<EndpointRow>`
      insert into webhook_endpoints (id, account_id, url, event_types, enabled, secret)
      values (${id}, ${input.accountId}, ${input.url}, ${eventTypes}::text[], ${input.enabled}, ${sealWebhookSecret(box, id, secret)})
      returning id, account_id, url, event_types, enabled, created_at, updated_at`.execute(trx)).rows[0]!;
    const endpoint = toEndpoint(row);
    await appendAudit(trx, AUDIT_CHAIN, {
      ...audit, accountId: input.accountId, action: 'webhook.create', targetType: 'webhook_endpoint', targetId: id, before: null, after: audited(endpoint),
    });
    return { endpoint, secret };
  });
}

export async function listWebhookEndpoints(db: LedgerDatabase, accountId: string): Promise<WebhookEndpoint[]> {
  const rows = await sql<EndpointRow>`
    select id, account_id, url, event_types, enabled, created_at, updated_at from webhook_endpoints
    where account_id = ${accountId} order by created_at, id`.execute(db);
  return rows.rows.map(toEndpoint);
}

export async function getWebhookEndpoint(db: LedgerDatabase, accountId: string, id: string): Promise<WebhookEndpoint> {
  if (!validId(id)) throw errors.notFound('No such webhook endpoint.');
  const row = (await sql<EndpointRow>`
    select id, account_id, url, event_types, enabled, created_at, updated_at from webhook_endpoints
    where account_id = ${accountId} and id = ${id}`.execute(db)).rows[0];
  if (!row) throw errors.notFound('No such webhook endpoint.');
  return toEndpoint(row);
}

export async function updateWebhookEndpoint(
  db: LedgerDatabase,
  input: { accountId: string; id: string; url?: string; eventTypes?: string[]; enabled?: boolean },
  allowPrivate: boolean,
  audit: AuditCallContext = UNATTRIBUTED_AUDIT,
): Promise<WebhookEndpoint> {
  if (!validId(input.id)) throw errors.notFound('No such webhook endpoint.');
  const eventTypes = input.eventTypes === undefined ? undefined : parseEventTypes(input.eventTypes);
  if (input.url !== undefined) await checkUrl(input.url, allowPrivate);
  return auditedTransaction(db, async (trx) => {
    const before = (await sql<EndpointRow>`
      select id, account_id, url, event_types, enabled, created_at, updated_at from webhook_endpoints
      where account_id = ${input.accountId} and id = ${input.id} for update`.execute(trx)).rows[0];
    if (!before) throw errors.notFound('No such webhook endpoint.');
    const row = (await sql<EndpointRow>`
      update webhook_endpoints set
        url = coalesce(${input.url ?? null}::text, url),
        event_types = coalesce(${eventTypes ?? null}::text[], event_types),
        enabled = coalesce(${input.enabled ?? null}::boolean, enabled),
        updated_at = now()
      where account_id = ${input.accountId} and id = ${input.id}
      returning id, account_id, url, event_types, enabled, created_at, updated_at`.execute(trx)).rows[0]!;
    const endpoint = toEndpoint(row);
    await appendAudit(trx, AUDIT_CHAIN, {
      ...audit, accountId: input.accountId, action: 'webhook.update', targetType: 'webhook_endpoint', targetId: input.id,
      before: audited(toEndpoint(before)), after: audited(endpoint),
    });
    return endpoint;
  });
}

/** Removes an endpoint and its deliveries (pending ones are not sent). */
export async function deleteWebhookEndpoint(db: LedgerDatabase, accountId: string, id: string, audit: AuditCallContext = UNATTRIBUTED_AUDIT): Promise<void> {
  if (!validId(id)) throw errors.notFound('No such webhook endpoint.');
  await auditedTransaction(db, async (trx) => {
    const deleted = (await sql<EndpointRow>`
      delete from webhook_endpoints where account_id = ${accountId} and id = ${id}
      returning id, account_id, url, event_types, enabled, created_at, updated_at`.execute(trx)).rows[0];
    if (!deleted) throw errors.notFound('No such webhook endpoint.');
    await appendAudit(trx, AUDIT_CHAIN, {
      ...audit, accountId, action: 'webhook.delete', targetType: 'webhook_endpoint', targetId: id, before: audited(toEndpoint(deleted)), after: null,
    });
  });
}

/** How long deliveries still carry a signature with the secret a rotation replaced (default 24 h). */
export const DEFAULT_WEBHOOK_SECRET_OVERLAP_MS = 24 * 3_600_000;

/**
 * Gives an endpoint a new signing secret, answered this once. The replaced secret still signs deliveries
 * beside the new one for `overlapMs` (both in `webhook-signature`), so a receiver switches without losing
 * an event; a second rotation in that window drops the older one. Audited without either secret.
 */
export async function rotateWebhookSecret(
  db: LedgerDatabase, box: WebhookSecretKey, accountId: string, id: string, overlapMs: number, audit: AuditCallContext = UNATTRIBUTED_AUDIT,
): Promise<{ endpoint: WebhookEndpoint; secret: string; previousSecretUntil: Date }> {
  if (!validId(id)) throw errors.notFound('No such webhook endpoint.');
  const secret = newWebhookSecret();
  return auditedTransaction(db, async (trx) => {
    const row = (await sql<EndpointRow & { previous_secret_until: Date }>`
      update webhook_endpoints set previous_secret = secret, secret = ${sealWebhookSecret(box, id, secret)},
        previous_secret_until = now() + ${overlapMs} * interval '1 millisecond', updated_at = now()
      where account_id = ${accountId} and id = ${id}
      returning id, account_id, url, event_types, enabled, created_at, updated_at, previous_secret_until`.execute(trx)).rows[0];
    if (!row) throw errors.notFound('No such webhook endpoint.');
    const endpoint = toEndpoint(row);
    await appendAudit(trx, AUDIT_CHAIN, {
      ...audit, accountId, action: 'webhook.rotate_secret', targetType: 'webhook_endpoint', targetId: id,
      before: audited(endpoint), after: { ...audited(endpoint), previous_secret_expires_at: row.previous_secret_until.toISOString() },
    });
    return { endpoint, secret, previousSecretUntil: row.previous_secret_until };
  });
}

type DeliveryRow = {
  id: string; event_id: string; type: string; state: WebhookDelivery['state']; attempts: number; last_status: number | null; last_error: string | null;
  last_attempt_at: Date | null; next_attempt_at: Date; created_at: Date; finished_at: Date | null;
};

/** An endpoint's deliveries, newest first (`beforeId`: the page after that delivery). */
export async function listWebhookDeliveries(
  db: LedgerDatabase, accountId: string, endpointId: string, limit: number, beforeId: string,
): Promise<WebhookDelivery[]> {
  await getWebhookEndpoint(db, accountId, endpointId);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LISTED_DELIVERIES) throw errors.invalidRequest(`limit must be between 1 and ${MAX_LISTED_DELIVERIES}`, 'limit');
  if (beforeId !== '' && !/^[1-9][0-9]{0,17}$/.test(beforeId)) throw errors.invalidRequest('cursor is not one this service issued', 'cursor');
  const rows = await sql<DeliveryRow>`
    select d.id::text as id, e.event_id, e.type, d.state, d.attempts, d.last_status, d.last_error, d.last_attempt_at, d.next_attempt_at, d.created_at, d.finished_at
    from webhook_deliveries d join webhook_events e on e.id = d.event_row_id
    where d.account_id = ${accountId} and d.endpoint_id = ${endpointId} and (${beforeId} = '' or d.id < ${beforeId === '' ? '0' : beforeId}::bigint)
    order by d.id desc limit ${limit}`.execute(db);
  return rows.rows.map((row) => ({
    id: row.id, eventId: row.event_id, eventType: row.type, state: row.state, attempts: Number(row.attempts), lastStatus: row.last_status,
    lastError: row.last_error ?? '', lastAttemptAt: row.last_attempt_at, nextAttemptAt: row.state === 'pending' ? row.next_attempt_at : null,
    createdAt: row.created_at, finishedAt: row.finished_at,
  }));
}

/**
 * Sends a dead-lettered delivery again: it is pending once more with a fresh attempt budget, at its
 * place in the endpoint's order (the endpoint's later deliveries wait behind it again).
 */
export async function redeliverWebhook(db: LedgerDatabase, accountId: string, endpointId: string, deliveryId: string): Promise<void> {
  await getWebhookEndpoint(db, accountId, endpointId);
  if (!/^[1-9][0-9]{0,17}$/.test(deliveryId)) throw errors.notFound('No such webhook delivery.');
  const row = (await sql<{ state: string }>`
    select state from webhook_deliveries where account_id = ${accountId} and endpoint_id = ${endpointId} and id = ${deliveryId}::bigint`.execute(db)).rows[0];
  if (!row) throw errors.notFound('No such webhook delivery.');
  const updated = await sql`
    update webhook_deliveries set state = 'pending', attempts = 0, next_attempt_at = now(), lease_token = null, lease_until = null,
      finished_at = null, created_at = now()
    where account_id = ${accountId} and endpoint_id = ${endpointId} and id = ${deliveryId}::bigint and state = 'dead'`.execute(db);
  if (Number(updated.numAffectedRows ?? 0n) === 0) {
    throw errors.invalidRequest('only a dead-lettered delivery can be redelivered', 'delivery_id', 'delivery_not_dead');
  }
}

/**
 * Seals the secrets of rows written before encryption at rest (plaintext `whsec_…`), each only if it is
 * still the value read (another replica doing the same at once changes nothing twice). Run at the ledger's
 * start; deliveries read either form meanwhile. Also checks that the key opens an already sealed secret:
 * a ledger started with another key refuses to start rather than sign with nothing.
 */
export async function sealLegacyWebhookSecrets(db: LedgerDatabase, box: WebhookSecretKey): Promise<number> {
  const sample = (await sql<{ id: string; secret: string }>`
    select id, secret from webhook_endpoints where secret like 'gcm1:%' limit 1`.execute(db)).rows[0];
  if (sample) {
    try {
      openWebhookSecret(box, sample.id, sample.secret);
    } catch {
      throw new Error('WEBHOOK_SECRET_KEY does not open the stored webhook secrets (it is not the key they were sealed with)');
    }
  }
  const rows = (await sql<{ id: string; secret: string; previous_secret: string | null }>`
    select id, secret, previous_secret from webhook_endpoints
    where secret not like 'gcm1:%' or previous_secret not like 'gcm1:%'`.execute(db)).rows;
  for (const row of rows) {
    const sealPlain = (value: string | null) => (value === null || isSealed(value) ? value : sealWebhookSecret(box, row.id, value));
    await sql`
      update webhook_endpoints set secret = ${sealPlain(row.secret)}, previous_secret = ${sealPlain(row.previous_secret)}
      where id = ${row.id} and secret = ${row.secret} and previous_secret is not distinct from ${row.previous_secret}`.execute(db);
  }
  return rows.length;
}
