import type { Request, Response } from 'express';
import { z } from 'zod';
import { WEBHOOK_EVENT_TYPES } from '@gateway/platform';
import type { WebhookDelivery, WebhookEndpoint } from '@gateway/proto';
import { auditActor } from '../account/audit-actor.js';
import { parseWith, queryCursor, queryInteger } from '../account/account-schemas.js';
import type { EdgeContext } from '../context.js';
import { edgeErrors } from '../errors.js';
import { sendJson } from '../http.js';
import { requestIdOf } from '../request-id.js';
import { accountFor, readAccountBody } from './account-routes.js';

/*
 * Webhook endpoints over HTTP (docs/governance.md "Webhooks"): the account's owner (or a signed-in
 * owner/admin) registers receivers of its events; the ledger keeps them, signs and sends the events,
 * and refuses a receiver that is not a public https URL (400 in the envelope, code webhook_url_refused).
 * Another account's endpoint or delivery is a 404, whatever the call.
 */

const CALL_DEADLINE_MS = 10_000;
const WEBHOOK_BODY_MAX_BYTES = 8 * 1024;
const URL_MAX_LENGTH = 2_048;
const ID_MAX_LENGTH = 64;

const url = z.string({ error: (issue) => (issue.input === undefined ? 'is required' : 'must be a string') })
  .min(1, { error: 'must not be empty' })
  .max(URL_MAX_LENGTH, { error: `must be at most ${URL_MAX_LENGTH} characters` });
const eventTypes = z.array(z.enum(WEBHOOK_EVENT_TYPES, { error: `must be among ${WEBHOOK_EVENT_TYPES.join(', ')}` }), { error: 'must be an array of event types' })
  .min(1, { error: 'must name at least one event type' })
  .max(WEBHOOK_EVENT_TYPES.length * 2, { error: 'names too many event types' });
const enabled = z.boolean({ error: 'must be a boolean' });

export const createWebhookBody = z.strictObject({ url, event_types: eventTypes, enabled: enabled.optional() }, { error: 'must be a JSON object' });
export const updateWebhookBody = z.strictObject({ url: url.optional(), event_types: eventTypes.optional(), enabled: enabled.optional() }, { error: 'must be a JSON object' });
const deliveriesQuery = z.object({ limit: queryInteger(1, 100).optional(), cursor: queryCursor(20).optional() });

const seconds = (ms: bigint) => (ms === 0n ? null : Number(ms / 1000n));

function endpointRecord(endpoint: WebhookEndpoint) {
  return {
    object: 'webhook_endpoint', id: endpoint.id, url: endpoint.url, event_types: endpoint.eventTypes, enabled: endpoint.enabled,
    created_at: seconds(endpoint.createdAtMs), updated_at: seconds(endpoint.updatedAtMs),
  };
}

function deliveryRecord(delivery: WebhookDelivery) {
  return {
    object: 'webhook_delivery', id: delivery.id, event_id: delivery.eventId, event_type: delivery.eventType, state: delivery.state,
    dead_lettered: delivery.state === 'dead', attempts: delivery.attempts, last_status: delivery.lastStatus === 0 ? null : delivery.lastStatus,
    last_error: delivery.lastError === '' ? null : delivery.lastError, last_attempt_at: seconds(delivery.lastAttemptAtMs),
    next_attempt_at: seconds(delivery.nextAttemptAtMs), created_at: seconds(delivery.createdAtMs), finished_at: seconds(delivery.finishedAtMs),
  };
}

const options = (response: Response) => ({ requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS });

function pathId(request: Request, name: 'webhookId' | 'deliveryId'): string {
  const value = (request.params as Record<string, string | undefined>)[name] ?? '';
  if (value === '' || value.length > ID_MAX_LENGTH) throw edgeErrors.notFound(name === 'webhookId' ? 'No such webhook endpoint.' : 'No such webhook delivery.');
  return value;
}

/** POST /v1/account/webhooks: 201 with the endpoint and its signing secret (shown this once). */
export function createWebhookHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'webhooks.write');
    const body = parseWith(createWebhookBody, 'body', await readAccountBody(context, request, WEBHOOK_BODY_MAX_BYTES));
    const created = await context.ledger.createWebhookEndpoint(
      { accountId: account.accountId, url: body.url, eventTypes: body.event_types, enabled: body.enabled ?? true },
      { ...options(response), actor: auditActor(request, account.actor.kind, account.actor.id) },
    );
    if (!created.endpoint) throw new Error('the ledger answered CreateWebhookEndpoint without an endpoint');
    sendJson(response, 201, { ...endpointRecord(created.endpoint), secret: created.secret });
  };
}

/** GET /v1/account/webhooks. */
export function listWebhooksHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'webhooks.read');
    const listed = await context.ledger.listWebhookEndpoints({ accountId: account.accountId }, options(response));
    sendJson(response, 200, { object: 'list', data: listed.endpoints.map(endpointRecord) });
  };
}

/** GET /v1/account/webhooks/{id}. */
export function getWebhookHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'webhooks.read');
    const found = await context.ledger.getWebhookEndpoint({ accountId: account.accountId, endpointId: pathId(request, 'webhookId') }, options(response));
    if (!found.endpoint) throw new Error('the ledger answered GetWebhookEndpoint without an endpoint');
    sendJson(response, 200, endpointRecord(found.endpoint));
  };
}

/** PATCH /v1/account/webhooks/{id}: url, event_types, enabled (what is given). */
export function updateWebhookHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'webhooks.write');
    const endpointId = pathId(request, 'webhookId');
    const body = parseWith(updateWebhookBody, 'body', await readAccountBody(context, request, WEBHOOK_BODY_MAX_BYTES));
    const updated = await context.ledger.updateWebhookEndpoint(
      {
        accountId: account.accountId, endpointId,
        ...(body.url !== undefined ? { url: body.url } : {}),
        eventTypes: body.event_types ?? [], setEventTypes: body.event_types !== undefined,
        ...(body.enabled !== undefined ? { enabled: body.enabled } : {}),
      },
      { ...options(response), actor: auditActor(request, account.actor.kind, account.actor.id) },
    );
    if (!updated.endpoint) throw new Error('the ledger answered UpdateWebhookEndpoint without an endpoint');
    sendJson(response, 200, endpointRecord(updated.endpoint));
  };
}

/** DELETE /v1/account/webhooks/{id}: the endpoint and its deliveries. */
export function deleteWebhookHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'webhooks.write');
    const endpointId = pathId(request, 'webhookId');
    await context.ledger.deleteWebhookEndpoint({ accountId: account.accountId, endpointId }, { ...options(response), actor: auditActor(request, account.actor.kind, account.actor.id) });
    sendJson(response, 200, { id: endpointId, object: 'webhook_endpoint', deleted: true });
  };
}

/** GET /v1/account/webhooks/{id}/deliveries?limit=1..100&cursor=: newest first. */
export function listWebhookDeliveriesHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'webhooks.read');
    const endpointId = pathId(request, 'webhookId');
    const query = parseWith(deliveriesQuery, 'query', request.query);
    const listed = await context.ledger.listWebhookDeliveries(
      { accountId: account.accountId, endpointId, limit: query.limit ?? 20, cursor: query.cursor ?? '' }, options(response),
    );
    sendJson(response, 200, { object: 'list', data: listed.deliveries.map(deliveryRecord), has_more: listed.nextCursor !== '', next_cursor: listed.nextCursor === '' ? null : listed.nextCursor });
  };
}

/** POST /v1/account/webhooks/{id}/deliveries/{delivery_id}/redeliver: a dead-lettered delivery is sent again. */
export function redeliverWebhookHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'webhooks.write');
    const endpointId = pathId(request, 'webhookId');
    const deliveryId = pathId(request, 'deliveryId');
    await context.ledger.redeliverWebhook({ accountId: account.accountId, endpointId, deliveryId }, options(response));
    sendJson(response, 202, { id: deliveryId, object: 'webhook_delivery', state: 'pending' });
  };
}

/**
 * POST /v1/account/webhooks/{id}/rotate-secret: the endpoint with its new signing secret (shown this once)
 * and until when deliveries are also signed with the old one (`previous_secret_expires_at`).
 */
export function rotateWebhookSecretHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'webhooks.write');
    const endpointId = pathId(request, 'webhookId');
    const rotated = await context.ledger.rotateWebhookSecret(
      { accountId: account.accountId, endpointId }, { ...options(response), actor: auditActor(request, account.actor.kind, account.actor.id) },
    );
    if (!rotated.endpoint) throw new Error('the ledger answered RotateWebhookSecret without an endpoint');
    sendJson(response, 200, { ...endpointRecord(rotated.endpoint), secret: rotated.secret, previous_secret_expires_at: seconds(rotated.previousSecretExpiresAtMs) });
  };
}
