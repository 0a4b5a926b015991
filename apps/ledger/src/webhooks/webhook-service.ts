import { auditCallContext, errors, unary, type Logger } from '@gateway/platform';
import type {
  CreateWebhookEndpointRequest, CreateWebhookEndpointResponse, DeleteWebhookEndpointRequest, DeleteWebhookEndpointResponse,
  GetWebhookEndpointRequest, GetWebhookEndpointResponse, LedgerServiceServer, ListWebhookDeliveriesRequest, ListWebhookDeliveriesResponse,
  ListWebhookEndpointsRequest, ListWebhookEndpointsResponse, RedeliverWebhookRequest, RedeliverWebhookResponse,
  RotateWebhookSecretRequest, RotateWebhookSecretResponse,
  UpdateWebhookEndpointRequest, UpdateWebhookEndpointResponse, WebhookEndpoint as WebhookEndpointMessage,
} from '@gateway/proto';
import type { LedgerDatabase } from '../ledger-db.js';
import {
  createWebhookEndpoint, DEFAULT_WEBHOOK_SECRET_OVERLAP_MS, deleteWebhookEndpoint, getWebhookEndpoint, listWebhookDeliveries, listWebhookEndpoints, MAX_LISTED_DELIVERIES,
  redeliverWebhook, rotateWebhookSecret, updateWebhookEndpoint, WEBHOOK_EVENT_TYPES, type WebhookEndpoint,
} from './webhook-endpoints.js';
import type { WebhookSecretKey } from './secret-box.js';
import { MAX_WEBHOOK_URL_LENGTH } from './webhook-target.js';

/** The LedgerService methods of webhooks (the rest is ledger-service.ts). */
export type WebhookMethods =
  | 'createWebhookEndpoint' | 'listWebhookEndpoints' | 'getWebhookEndpoint' | 'updateWebhookEndpoint'
  | 'deleteWebhookEndpoint' | 'listWebhookDeliveries' | 'redeliverWebhook' | 'rotateWebhookSecret';

const MAX_IDENTIFIER_LENGTH = 200;

function requireIdentifier(value: string, param: string): string {
  if (!value) throw errors.invalidRequest(`${param} is required`, param);
  if (value.length > MAX_IDENTIFIER_LENGTH) throw errors.invalidRequest(`${param} is longer than ${MAX_IDENTIFIER_LENGTH} characters`, param);
  return value;
}

function checkEventTypes(values: string[]): string[] {
  if (values.length > WEBHOOK_EVENT_TYPES.length * 2) throw errors.invalidRequest('event_types names too many types', 'event_types');
  return values;
}

function checkUrlLength(url: string): string {
  if (url.length > MAX_WEBHOOK_URL_LENGTH) throw errors.invalidRequest(`url must be at most ${MAX_WEBHOOK_URL_LENGTH} characters`, 'url');
  return url;
}

const endpointAnswer = (endpoint: WebhookEndpoint): WebhookEndpointMessage => ({
  id: endpoint.id, url: endpoint.url, eventTypes: endpoint.eventTypes, enabled: endpoint.enabled,
  createdAtMs: BigInt(endpoint.createdAt.getTime()), updatedAtMs: BigInt(endpoint.updatedAt.getTime()),
});

const ms = (date: Date | null) => BigInt(date?.getTime() ?? 0);

export function webhookServiceImplementation(
  db: LedgerDatabase, logger: Logger, box: WebhookSecretKey, allowPrivate: boolean, secretOverlapMs: number = DEFAULT_WEBHOOK_SECRET_OVERLAP_MS,
): Pick<LedgerServiceServer, WebhookMethods> {
  return {
    createWebhookEndpoint: unary(logger, 'CreateWebhookEndpoint', async (request: CreateWebhookEndpointRequest, call): Promise<CreateWebhookEndpointResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      const created = await createWebhookEndpoint(
        db, box, { accountId, url: checkUrlLength(request.url), eventTypes: checkEventTypes(request.eventTypes), enabled: request.enabled }, allowPrivate, auditCallContext(call.metadata),
      );
      return { endpoint: endpointAnswer(created.endpoint), secret: created.secret };
    }),
    listWebhookEndpoints: unary(logger, 'ListWebhookEndpoints', async (request: ListWebhookEndpointsRequest): Promise<ListWebhookEndpointsResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      return { endpoints: (await listWebhookEndpoints(db, accountId)).map(endpointAnswer) };
    }),
    getWebhookEndpoint: unary(logger, 'GetWebhookEndpoint', async (request: GetWebhookEndpointRequest): Promise<GetWebhookEndpointResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      return { endpoint: endpointAnswer(await getWebhookEndpoint(db, accountId, request.endpointId)) };
    }),
    updateWebhookEndpoint: unary(logger, 'UpdateWebhookEndpoint', async (request: UpdateWebhookEndpointRequest, call): Promise<UpdateWebhookEndpointResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      const endpoint = await updateWebhookEndpoint(db, {
        accountId, id: request.endpointId,
        ...(request.url !== undefined ? { url: checkUrlLength(request.url) } : {}),
        ...(request.setEventTypes ? { eventTypes: checkEventTypes(request.eventTypes) } : {}),
        ...(request.enabled !== undefined ? { enabled: request.enabled } : {}),
      }, allowPrivate, auditCallContext(call.metadata));
      return { endpoint: endpointAnswer(endpoint) };
    }),
    deleteWebhookEndpoint: unary(logger, 'DeleteWebhookEndpoint', async (request: DeleteWebhookEndpointRequest, call): Promise<DeleteWebhookEndpointResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      await deleteWebhookEndpoint(db, accountId, request.endpointId, auditCallContext(call.metadata));
      return { deleted: true };
    }),
    listWebhookDeliveries: unary(logger, 'ListWebhookDeliveries', async (request: ListWebhookDeliveriesRequest): Promise<ListWebhookDeliveriesResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      const limit = request.limit === 0 ? MAX_LISTED_DELIVERIES : request.limit;
      const rows = await listWebhookDeliveries(db, accountId, request.endpointId, limit, request.cursor);
      return {
        deliveries: rows.map((row) => ({
          id: row.id, eventId: row.eventId, eventType: row.eventType, state: row.state, attempts: row.attempts, lastStatus: row.lastStatus ?? 0,
          lastError: row.lastError, lastAttemptAtMs: ms(row.lastAttemptAt), nextAttemptAtMs: ms(row.nextAttemptAt), createdAtMs: ms(row.createdAt),
          finishedAtMs: ms(row.finishedAt),
        })),
        nextCursor: rows.length === limit ? rows[rows.length - 1]!.id : '',
      };
    }),
    redeliverWebhook: unary(logger, 'RedeliverWebhook', async (request: RedeliverWebhookRequest): Promise<RedeliverWebhookResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      await redeliverWebhook(db, accountId, request.endpointId, request.deliveryId);
      return {};
    }),
    rotateWebhookSecret: unary(logger, 'RotateWebhookSecret', async (request: RotateWebhookSecretRequest, call): Promise<RotateWebhookSecretResponse> => {
      const accountId = requireIdentifier(request.accountId, 'account_id');
      const rotated = await rotateWebhookSecret(db, box, accountId, request.endpointId, secretOverlapMs, auditCallContext(call.metadata));
      return { endpoint: endpointAnswer(rotated.endpoint), secret: rotated.secret, previousSecretExpiresAtMs: BigInt(rotated.previousSecretUntil.getTime()) };
    }),
  };
}
