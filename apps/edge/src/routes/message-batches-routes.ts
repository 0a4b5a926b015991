import type { Request, Response } from 'express';
import { z } from 'zod';
import type { Batch, ChatRequest, JobsServiceClient, MessageBatchRequestItem } from '@gateway/proto';
import type { PromiseClient } from '@gateway/platform';
import type { CatalogModel } from '../catalog-cache.js';
import type { EdgeContext } from '../context.js';
import { EdgeError, edgeErrors, messagesErrorType } from '../errors.js';
import { readJsonBody, sendJson } from '../http.js';
import { batchCallHandler, jobsOf, verifyCallerKey } from './caller.js';
import { resolveModel } from '../inference/model-resolution.js';
import { checkContextWindow, fitsContextWindow, measurePrompt } from '../inference/request-bounds.js';
import { hasRoutingChoices } from '../inference/routing-choices.js';
import { requestIdOf } from '../request-id.js';
import { parseWith } from '../account/account-schemas.js';
import { convertMessagesRequest, MESSAGES_ENDPOINT } from '../dialects/messages/convert-messages-request.js';
import { parseMessagesRequest } from '../dialects/messages/messages-schema.js';
import { renderMessage } from '../dialects/messages/render-messages.js';

/**
 * Anthropic Message Batches (docs/jobs.md "Message Batches"): POST /v1/messages/batches, GET one, GET the
 * list (before_id / after_id / limit), POST …/cancel, GET …/results (JSONL), DELETE (ended batches only).
 * Every request of a batch is parsed, its model resolved and converted here exactly as POST /v1/messages
 * does it, before anything is stored: one bad request refuses the whole batch with a 400 naming it. The
 * jobs service runs the converted requests through the one batch runner (admission per line at the
 * batch prices); the results are its recorded Router answers, rendered here as Messages `message`s.
 * Errors use the messages envelope (every /v1/messages/ path does, app.ts).
 */

const CALL_DEADLINE_MS = 15_000;
/** Bound of a create body (Anthropic's is 256 MB; this gateway keeps 16 MiB, docs/jobs.md "Limits"). */
export const MESSAGE_BATCH_MAX_BYTES = 16 * 1024 * 1024;
/** Bound of requests in one batch (Anthropic: 100,000; the jobs service holds the same bound). */
export const MESSAGE_BATCH_MAX_REQUESTS = 10_000;
const MESSAGE_BATCH_ID = /^msgbatch_[0-9a-f]{24}$/;
const RESULTS_PAGE = 500;

const createBody = z.strictObject({
  requests: z
    .array(z.strictObject({
      custom_id: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'expected 1..64 letters, digits, _ or -'),
      params: z.record(z.string(), z.unknown()),
    }))
    .min(1)
    .max(MESSAGE_BATCH_MAX_REQUESTS),
});

const listQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(1_000).optional(),
  after_id: z.string().max(100).optional(),
  before_id: z.string().max(100).optional(),
});

function batchIdOf(request: Request): string {
  const id = request.params.batchId;
  if (typeof id !== 'string' || !MESSAGE_BATCH_ID.test(id)) throw edgeErrors.notFound('No such message batch.');
  return id;
}

const rfc3339 = (seconds: bigint) => (seconds === 0n ? null : new Date(Number(seconds) * 1000).toISOString());

/** The edge's own origin, for `results_url`: EDGE_PUBLIC_URL, else the Host it was asked on. */
function originOf(context: EdgeContext, request: Request): string {
  if (context.publicUrl !== undefined) return new URL(context.publicUrl).origin;
  const secure = (request.socket as { encrypted?: boolean }).encrypted === true;
  return `${secure ? 'https' : 'http'}://${request.headers.host ?? 'localhost'}`;
}

const PROCESSING_STATUS: Readonly<Record<string, string>> = {
  validating: 'in_progress',
  in_progress: 'in_progress',
  finalizing: 'in_progress',
  cancelling: 'canceling',
  completed: 'ended',
  cancelled: 'ended',
  expired: 'ended',
  failed: 'ended',
};

/** Anthropic's MessageBatch object (times as RFC 3339), `results_url` once ended. */
export function renderMessageBatch(batch: Batch, origin: string): Record<string, unknown> {
  const status = PROCESSING_STATUS[batch.status] ?? 'in_progress';
  const counts = batch.messageCounts;
  return {
    id: batch.id,
    type: 'message_batch',
    processing_status: status,
    request_counts: {
      processing: counts?.processing ?? 0,
      succeeded: counts?.succeeded ?? 0,
      errored: counts?.errored ?? 0,
      canceled: counts?.canceled ?? 0,
      expired: counts?.expired ?? 0,
    },
    ended_at: status === 'ended' ? rfc3339(batch.endedAt) : null,
    created_at: rfc3339(batch.createdAt),
    expires_at: rfc3339(batch.expiresAt),
    cancel_initiated_at: rfc3339(batch.cancellingAt),
    archived_at: null,
    results_url: status === 'ended' ? `${origin}/v1/messages/batches/${batch.id}/results` : null,
  };
}

/** A request's failure, its message prefixed with where it stands in the batch. */
function inRequest(index: number, error: unknown): unknown {
  if (!(error instanceof EdgeError)) return error;
  const where = `requests.${index}.params`;
  const message = error.apiError.message.startsWith('body') ? `${where}${error.apiError.message.slice(4)}` : `${where}: ${error.apiError.message}`;
  return new EdgeError({ ...error.apiError, message, ...(error.apiError.param ? { param: `${where}.${error.apiError.param.replace(/^body\.?/, '')}` } : {}) });
}

export function createMessageBatchHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const jobs = jobsOf(context, request);
    const key = await verifyCallerKey(context, request, response);
    const body = parseWith(createBody, 'body', await readJsonBody(request, { ...context.bodyLimits, maxBytes: MESSAGE_BATCH_MAX_BYTES }));
    const seen = new Set<string>();
    const items: MessageBatchRequestItem[] = [];
    // Every request checked and converted before anything is stored or run: one bad request refuses the batch.
    for (const [index, entry] of body.requests.entries()) {
      if (seen.has(entry.custom_id)) throw edgeErrors.invalidRequest(`requests.${index}.custom_id: duplicate custom_id`, `requests.${index}.custom_id`);
      seen.add(entry.custom_id);
      let chat: ChatRequest;
      try {
        const params = parseMessagesRequest(entry.params);
        if (params.stream === true) throw edgeErrors.invalidRequest('body.stream: a batch request cannot stream', 'body.stream');
        if (hasRoutingChoices(params)) throw edgeErrors.invalidRequest('body: model fallbacks and provider preferences are not supported in a batch', 'body.models');
        const model = resolveModel(context, params.model, MESSAGES_ENDPOINT, key);
        const converted = convertMessagesRequest(params, model, context.reasoningTags);
        if (converted.filePathOf) throw edgeErrors.invalidRequest('body.messages: file references are not supported in a batch', 'body.messages');
        const measure = measurePrompt(converted.request);
        if (!fitsContextWindow(model, converted.request, measure)) await checkContextWindow(model, converted.request, measure, converted.outputField);
        chat = converted.request;
      } catch (error) {
        throw inRequest(index, error);
      }
      items.push({ customId: entry.custom_id, request: chat });
    }
    const created = await jobs.createMessageBatch(
      { accountId: key.accountId, keyId: key.keyId, tier: key.tier, requests: items },
      { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS },
    );
    sendJson(response, 200, renderMessageBatch(created.batch!, originOf(context, request)));
  };
}

export function getMessageBatchHandler(context: EdgeContext) {
  return batchCallHandler(context, 'getBatch', batchIdOf, (batch, request) => renderMessageBatch(batch, originOf(context, request)), CALL_DEADLINE_MS);
}

export function cancelMessageBatchHandler(context: EdgeContext) {
  return batchCallHandler(context, 'cancelBatch', batchIdOf, (batch, request) => renderMessageBatch(batch, originOf(context, request)), CALL_DEADLINE_MS);
}

export function deleteMessageBatchHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const jobs = jobsOf(context, request);
    const key = await verifyCallerKey(context, request, response);
    const id = batchIdOf(request);
    await jobs.deleteBatch({ accountId: key.accountId, batchId: id }, { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS });
    sendJson(response, 200, { id, type: 'message_batch_deleted' });
  };
}

export function listMessageBatchesHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const jobs = jobsOf(context, request);
    const key = await verifyCallerKey(context, request, response);
    const query = parseWith(listQuery, 'query', request.query);
    if (query.after_id !== undefined && query.before_id !== undefined) throw edgeErrors.invalidRequest('query: give after_id or before_id, not both', 'before_id');
    const cursorOk = (id: string | undefined) => id === undefined || MESSAGE_BATCH_ID.test(id);
    if (!cursorOk(query.after_id) || !cursorOk(query.before_id)) throw edgeErrors.invalidRequest('query: the cursor is not a message batch id', query.after_id !== undefined ? 'after_id' : 'before_id');
    const page = await jobs.listBatches(
      { accountId: key.accountId, limit: query.limit ?? 0, after: query.after_id ?? '', before: query.before_id ?? '', kind: 'messages' },
      { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS },
    );
    const origin = originOf(context, request);
    sendJson(response, 200, {
      data: page.batches.map((batch) => renderMessageBatch(batch, origin)),
      has_more: page.hasMore,
      first_id: page.batches[0]?.id ?? null,
      last_id: page.batches.at(-1)?.id ?? null,
    });
  };
}

/**
 * The results as JSONL (`{custom_id, result}` a line, in request order), a page from the jobs service at
 * a time, each written before the next is read: the edge holds one page whatever the batch's size.
 */
export function messageBatchResultsHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const jobs = jobsOf(context, request);
    const key = await verifyCallerKey(context, request, response);
    const batchId = batchIdOf(request);
    const requestId = requestIdOf(response);
    let page = await jobs.listMessageBatchResults({ accountId: key.accountId, batchId, fromIndex: 0, limit: RESULTS_PAGE }, { requestId, deadlineMs: CALL_DEADLINE_MS });
    response.status(200);
    response.setHeader('content-type', 'application/binary');
    for (;;) {
      const lines = page.results.map((result) => `${JSON.stringify({ custom_id: result.customId, result: renderResult(context, result) })}\n`).join('');
      if (!response.write(lines)) await new Promise((resolve) => response.once('drain', resolve));
      if (page.nextIndex === 0) break;
      page = await jobs.listMessageBatchResults({ accountId: key.accountId, batchId, fromIndex: page.nextIndex, limit: RESULTS_PAGE }, { requestId, deadlineMs: CALL_DEADLINE_MS });
    }
    response.end();
  };
}

type ResultOf = Awaited<ReturnType<PromiseClient<JobsServiceClient>['listMessageBatchResults']>>['results'][number];

function renderResult(context: EdgeContext, result: ResultOf): Record<string, unknown> {
  switch (result.type) {
    case 'succeeded': {
      const answer = result.response!;
      // A model retired since keeps its answer: the message names it as served (pricing from the answer's prices).
      const model = context.catalogCache.resolve(answer.modelId) ?? ({ id: answer.modelId, model: { pricing: undefined } } as unknown as CatalogModel);
      const message = renderMessage(answer, { requestId: result.requestId, model, tags: context.reasoningTags, created: 0, logger: context.logger });
      // The ledger's charge of the line, as recorded (batch prices).
      return { type: 'succeeded', message: { ...message, usage: { ...message.usage, cost: result.cost } } };
    }
    case 'errored':
      return {
        type: 'errored',
        error: { type: 'error', error: { type: messagesErrorType(result.errorStatus), message: result.errorMessage }, ...(result.requestId ? { request_id: result.requestId } : {}) },
      };
    default:
      return { type: result.type };
  }
}
