import type { Request, Response } from 'express';
import { z } from 'zod';
import { parseWith, queryCursor, queryInteger } from '../account/account-schemas.js';
import type { EdgeContext } from '../context.js';
import { edgeErrors } from '../errors.js';
import { sendJson } from '../http.js';
import { verifyCallerKey } from './caller.js';
import { readAccountBody } from './account-routes.js';
import { requestIdOf } from '../request-id.js';
import { conversationNotFound, renderConversation, renderItemList, type ConversationsClient } from '../dialects/responses/conversations-client.js';

/*
 * OpenAI's Conversations API (issue 41 item 6, docs/stored-responses.md "Conversations"):
 * POST /v1/conversations, GET|POST|DELETE /v1/conversations/{id}, GET|POST /v1/conversations/{id}/items,
 * GET|DELETE /v1/conversations/{id}/items/{item_id}. The caller's API key names the account; every call
 * to the store carries it, so another account's conversation is the same 404 as an unknown one.
 */

const ID_MAX_LENGTH = 200;
/** OpenAI's bound on the items one create or add call carries. */
const MAX_ITEMS_PER_CALL = 20;
/** A conversation call's body: 20 items, each bounded again by the store (1 Mi characters). */
const CONVERSATION_BODY_MAX_BYTES = 24 * 1024 * 1024;

const item = z.looseObject({}, { error: 'must be an item object' });
const metadata = z.record(z.string(), z.string({ error: 'values must be strings' }), { error: 'must be an object of strings' }).nullish();

const createBody = z.strictObject({
  items: z.array(item).max(MAX_ITEMS_PER_CALL, { error: `at most ${MAX_ITEMS_PER_CALL} items at a time` }).nullish(),
  metadata,
});
const updateBody = z.strictObject({ metadata });
const addBody = z.strictObject({
  items: z.array(item).min(1, { error: 'at least one item' }).max(MAX_ITEMS_PER_CALL, { error: `at most ${MAX_ITEMS_PER_CALL} items at a time` }),
});
const listQuery = z.object({
  limit: queryInteger(1, 100).optional(),
  order: z.enum(['asc', 'desc'], { error: "must be 'asc' or 'desc'" }).optional(),
  after: queryCursor(ID_MAX_LENGTH).optional(),
  // Accepted and ignored, as on input_items: stored items carry what they had.
  include: z.unknown().optional(),
});

async function caller(context: EdgeContext, request: Request, response: Response): Promise<{ accountId: string; conversations: ConversationsClient; requestId: string }> {
  const { accountId } = await verifyCallerKey(context, request, response);
  const store = context.storedResponses;
  if (store === undefined) throw edgeErrors.notFound('This gateway runs without stored responses (no jobs service address): it keeps no conversations.');
  return { accountId, conversations: store.conversations, requestId: requestIdOf(response) };
}

/**
 * The conversation id of the path, once every answer of it this edge still holds to be stored is stored
 * (their turns are then in it): a list or item read right after a response made in the conversation sees it.
 */
async function settledConversationId(context: EdgeContext, request: Request, accountId: string): Promise<string> {
  const id = idParam(request, 'id');
  await context.storedResponses?.settledConversation(accountId, id);
  return id;
}

function idParam(request: Request, name: 'id' | 'itemId'): string {
  const id = request.params[name];
  if (typeof id !== 'string' || id === '' || id.length > ID_MAX_LENGTH) {
    if (name === 'id') throw conversationNotFound(typeof id === 'string' ? id : '');
    throw edgeErrors.notFound(`Item with id '${typeof id === 'string' ? id.slice(0, 40) : ''}' not found.`);
  }
  return id;
}

/** POST /v1/conversations: `items` (at most 20) and `metadata`, both optional. */
export function createConversationHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { accountId, conversations, requestId } = await caller(context, request, response);
    const body = parseWith(createBody, 'body', await readAccountBody(context, request, CONVERSATION_BODY_MAX_BYTES));
    const created = await conversations.create(accountId, body.metadata, body.items ?? [], Math.floor(context.now() / 1000), requestId);
    sendJson(response, 200, renderConversation(created));
  };
}

export function retrieveConversationHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { accountId, conversations, requestId } = await caller(context, request, response);
    sendJson(response, 200, renderConversation(await conversations.get(accountId, await settledConversationId(context, request, accountId), requestId)));
  };
}

/** POST /v1/conversations/{id}: replaces its metadata. */
export function updateConversationHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { accountId, conversations, requestId } = await caller(context, request, response);
    const id = await settledConversationId(context, request, accountId);
    const body = parseWith(updateBody, 'body', await readAccountBody(context, request));
    sendJson(response, 200, renderConversation(await conversations.update(accountId, id, body.metadata, requestId)));
  };
}

export function deleteConversationHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { accountId, conversations, requestId } = await caller(context, request, response);
    const id = await settledConversationId(context, request, accountId);
    await conversations.delete(accountId, id, requestId);
    sendJson(response, 200, { id, object: 'conversation.deleted', deleted: true });
  };
}

/** GET /v1/conversations/{id}/items: OpenAI's cursor page (`after`, `limit` 1..100 default 20, `order` desc by default). */
export function listConversationItemsHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { accountId, conversations, requestId } = await caller(context, request, response);
    const id = await settledConversationId(context, request, accountId);
    const query = parseWith(listQuery, 'query', request.query);
    const page = await conversations.list(accountId, id, { after: query.after ?? '', limit: query.limit ?? 20, ascending: query.order === 'asc' }, requestId);
    sendJson(response, 200, renderItemList(page.items, page.hasMore));
  };
}

/** POST /v1/conversations/{id}/items: appends up to 20 items, answered with their ids. */
export function addConversationItemsHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { accountId, conversations, requestId } = await caller(context, request, response);
    const id = await settledConversationId(context, request, accountId);
    const body = parseWith(addBody, 'body', await readAccountBody(context, request, CONVERSATION_BODY_MAX_BYTES));
    sendJson(response, 200, renderItemList(await conversations.add(accountId, id, body.items, requestId), false));
  };
}

export function retrieveConversationItemHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { accountId, conversations, requestId } = await caller(context, request, response);
    sendJson(response, 200, await conversations.item(accountId, await settledConversationId(context, request, accountId), idParam(request, 'itemId'), requestId));
  };
}

/** DELETE /v1/conversations/{id}/items/{item_id}: answers the conversation (as OpenAI does). */
export function deleteConversationItemHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { accountId, conversations, requestId } = await caller(context, request, response);
    sendJson(response, 200, renderConversation(await conversations.deleteItem(accountId, await settledConversationId(context, request, accountId), idParam(request, 'itemId'), requestId)));
  };
}
