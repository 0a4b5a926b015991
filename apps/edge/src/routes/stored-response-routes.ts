import type { Request, Response } from 'express';
import { z } from 'zod';
import { parseWith, queryCursor, queryInteger } from '../account/account-schemas.js';
import type { EdgeContext } from '../context.js';
import { edgeErrors } from '../errors.js';
import { sendJson } from '../http.js';
import { HttpAnswer } from '../inference/answer-sink.js';
import { verifyCallerKey } from './caller.js';
import { requestIdOf } from '../request-id.js';
import type { StoredResponses } from '../dialects/responses/stored-responses.js';

/*
 * Stored responses (issue 41 item 6, docs/stored-responses.md), OpenAI's routes and shapes:
 * GET /v1/responses/{id}, DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items. The caller's
 * API key names the account; every lookup is made with that account in the key, so another account's
 * id answers exactly as an unknown one: 404 "Response with id '…' not found.".
 */

/** Longest id looked up (a gateway response id is `resp_` and 32 hex digits). */
const ID_MAX_LENGTH = 200;

const retrieveQuery = z.object({
  stream: z.enum(['true', 'false'], { error: 'must be true or false' }).optional(),
  starting_after: queryInteger(0, 1_000_000_000).optional(),
  include_obfuscation: z.enum(['true', 'false'], { error: 'must be true or false' }).optional(),
});

const inputItemsQuery = z.object({
  limit: queryInteger(1, 100).optional(),
  order: z.enum(['asc', 'desc'], { error: "must be 'asc' or 'desc'" }).optional(),
  after: queryCursor(ID_MAX_LENGTH).optional(),
});

async function caller(context: EdgeContext, request: Request, response: Response): Promise<{ accountId: string; store: StoredResponses; id: string }> {
  const { accountId } = await verifyCallerKey(context, request, response);
  const id = request.params.id;
  if (typeof id !== 'string' || id === '' || id.length > ID_MAX_LENGTH) throw edgeErrors.responseNotFound(typeof id === 'string' ? id : '');
  const store = context.storedResponses;
  if (store === undefined) throw edgeErrors.notFound('This gateway runs without stored responses (no jobs service address): no response is stored.');
  return { accountId, store, id };
}

/** GET /v1/responses/{id}: the response as it was answered. */
export function retrieveResponseHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { accountId, store, id } = await caller(context, request, response);
    const query = parseWith(retrieveQuery, 'query', request.query);
    if (query.stream === 'true') {
      // A background response's events: replayed from after `starting_after`, then followed to the run's end.
      // (A response still in this edge's write-behind queue is written first: it is then a 400, not a 404.)
      await store.settled(accountId, id);
      await store.streamRun(new HttpAnswer(response), { accountId, responseId: id, startingAfter: query.starting_after ?? -1, requestId: requestIdOf(response), headers: {} });
      return;
    }
    const found = await store.find(accountId, id, requestIdOf(response));
    if (found === undefined) throw edgeErrors.responseNotFound(id);
    sendJson(response, 200, found.response);
  };
}

/**
 * POST /v1/responses/{id}/cancel: a queued or running background response ends `cancelled` (a running
 * one is aborted upstream); one already finished is answered as it is; a response that is not a
 * background one is a 400 ("Cannot cancel a synchronous response."), as OpenAI answers.
 */
export function cancelResponseHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { accountId, store, id } = await caller(context, request, response);
    const found = await store.cancel(accountId, id, requestIdOf(response));
    if (found === undefined) throw edgeErrors.responseNotFound(id);
    sendJson(response, 200, found.response);
  };
}

/** DELETE /v1/responses/{id}: OpenAI's deletion answer. */
export function deleteResponseHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { accountId, store, id } = await caller(context, request, response);
    if (!(await store.delete(accountId, id, requestIdOf(response)))) throw edgeErrors.responseNotFound(id);
    sendJson(response, 200, { id, object: 'response', deleted: true });
  };
}

/** GET /v1/responses/{id}/input_items: OpenAI's cursor page (`after`, `limit` 1..100 default 20, `order` desc by default). */
export function listInputItemsHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { accountId, store, id } = await caller(context, request, response);
    const query = parseWith(inputItemsQuery, 'query', request.query);
    const page = await store.inputItems(accountId, id, { after: query.after ?? '', limit: query.limit ?? 20, ascending: query.order === 'asc' }, requestIdOf(response));
    if (page === undefined) throw edgeErrors.responseNotFound(id);
    const first = page.items[0];
    const last = page.items[page.items.length - 1];
    sendJson(response, 200, {
      object: 'list',
      data: page.items,
      first_id: typeof first?.id === 'string' ? first.id : null,
      last_id: typeof last?.id === 'string' ? last.id : null,
      has_more: page.hasMore,
    });
  };
}
