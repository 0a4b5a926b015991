import type { Request, Response } from 'express';
import { z } from 'zod';
import type { Batch } from '@gateway/proto';
import type { EdgeContext } from '../context.js';
import { edgeErrors } from '../errors.js';
import { readJsonBody, sendJson } from '../http.js';
import { batchCallHandler, jobsOf, verifyCallerKey } from './caller.js';
import { requestIdOf } from '../request-id.js';
import { parseWith } from '../account/account-schemas.js';

/**
 * The OpenAI Batch API (docs/jobs.md): POST /v1/batches, GET /v1/batches, GET /v1/batches/{id},
 * POST /v1/batches/{id}/cancel, served by the jobs service. An API key names the account and the key
 * whose credit limit the lines are admitted against; every batch is looked up with the account.
 */

const CALL_DEADLINE_MS = 15_000;
/** A create body is a few ids and at most 16 metadata pairs. */
const CREATE_BODY_MAX_BYTES = 64 * 1024;
const BATCH_ID = z.string().regex(/^batch_[A-Za-z0-9_-]{1,64}$/);

const createBody = z.strictObject({
  input_file_id: z.string().min(1).max(100),
  endpoint: z.enum(['/v1/chat/completions', '/v1/embeddings', '/v1/moderations', '/v1/responses'], {
    message: 'expected /v1/chat/completions, /v1/embeddings, /v1/moderations or /v1/responses',
  }),
  completion_window: z.literal('24h', { message: 'expected 24h' }),
  metadata: z.record(z.string().min(1).max(64), z.string().max(512)).nullish(),
});

const listQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(100).optional(),
  after: z.string().max(100).optional(),
});

const orNull = (seconds: bigint) => (seconds === 0n ? null : Number(seconds));

/** OpenAI's Batch object; `usage.cost` adds the credits charged for its lines so far. */
export function renderBatch(batch: Batch): Record<string, unknown> {
  return {
    id: batch.id,
    object: 'batch',
    endpoint: batch.endpoint,
    model: batch.model === '' ? null : batch.model,
    errors: batch.errors.length === 0 ? null : {
      object: 'list',
      data: batch.errors.map((error) => ({ code: error.code, message: error.message, param: error.param === '' ? null : error.param, line: error.line === 0 ? null : error.line })),
    },
    input_file_id: batch.inputFileId,
    completion_window: batch.completionWindow,
    status: batch.status,
    output_file_id: batch.outputFileId === '' ? null : batch.outputFileId,
    error_file_id: batch.errorFileId === '' ? null : batch.errorFileId,
    created_at: Number(batch.createdAt),
    in_progress_at: orNull(batch.inProgressAt),
    expires_at: orNull(batch.expiresAt),
    finalizing_at: orNull(batch.finalizingAt),
    completed_at: orNull(batch.completedAt),
    failed_at: orNull(batch.failedAt),
    expired_at: orNull(batch.expiredAt),
    cancelling_at: orNull(batch.cancellingAt),
    cancelled_at: orNull(batch.cancelledAt),
    request_counts: { total: batch.requestCounts?.total ?? 0, completed: batch.requestCounts?.completed ?? 0, failed: batch.requestCounts?.failed ?? 0 },
    metadata: Object.keys(batch.metadata).length === 0 ? null : batch.metadata,
    usage: { cost: batch.cost },
  };
}

function batchIdOf(request: Request): string {
  const id = request.params.batchId;
  if (typeof id !== 'string' || !BATCH_ID.safeParse(id).success) throw edgeErrors.notFound('No such batch.');
  return id;
}

export function createBatchHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const jobs = jobsOf(context, request);
    const key = await verifyCallerKey(context, request, response);
    const body = parseWith(createBody, 'body', await readJsonBody(request, { ...context.bodyLimits, maxBytes: CREATE_BODY_MAX_BYTES }));
    const metadata = body.metadata ?? {};
    if (Object.keys(metadata).length > 16) throw edgeErrors.invalidRequest('body.metadata: at most 16 pairs.', 'metadata');
    const created = await jobs.createBatch(
      { accountId: key.accountId, keyId: key.keyId, tier: key.tier, inputFileId: body.input_file_id, endpoint: body.endpoint, completionWindow: body.completion_window, metadata },
      { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS },
    );
    sendJson(response, 200, renderBatch(created.batch!));
  };
}

export function getBatchHandler(context: EdgeContext) {
  return batchCallHandler(context, 'getBatch', batchIdOf, renderBatch, CALL_DEADLINE_MS);
}

export function cancelBatchHandler(context: EdgeContext) {
  return batchCallHandler(context, 'cancelBatch', batchIdOf, renderBatch, CALL_DEADLINE_MS);
}

export function listBatchesHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const jobs = jobsOf(context, request);
    const key = await verifyCallerKey(context, request, response);
    const query = parseWith(listQuery, 'query', request.query);
    const page = await jobs.listBatches({ accountId: key.accountId, limit: query.limit ?? 0, after: query.after ?? '', kind: 'batch', before: '' }, { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS });
    sendJson(response, 200, {
      object: 'list',
      data: page.batches.map(renderBatch),
      first_id: page.batches[0]?.id ?? null,
      last_id: page.batches.at(-1)?.id ?? null,
      has_more: page.hasMore,
    });
  };
}
