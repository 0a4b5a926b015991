import type { Request, Response } from 'express';
import type { Batch, JobsServiceClient } from '@gateway/proto';
import type { PromiseClient } from '@gateway/platform';
import type { EdgeContext } from '../context.js';
import { edgeErrors } from '../errors.js';
import { sendJson } from '../http.js';
import { presentedApiKey } from '../inference/credentials.js';
import { requestIdOf } from '../request-id.js';

/**
 * What the account routes served by an API key (files, batches, message batches, stored responses,
 * generations) ask first: the caller's key, verified (401 when none is presented or it is not a live key).
 */
export async function verifyCallerKey(context: EdgeContext, request: Request, response: Response) {
  const key = presentedApiKey(request);
  if (key === undefined) throw edgeErrors.missingApiKey();
  return context.apiKeys.verify(key, requestIdOf(response));
}

/** The jobs service; an edge started without one answers its routes as unknown routes. */
export function jobsOf(context: EdgeContext, request: Request): PromiseClient<JobsServiceClient> {
  if (!context.jobs) throw edgeErrors.routeNotFound(request.method, request.path);
  return context.jobs;
}

/**
 * GET …/{id} and POST …/{id}/cancel of both batch APIs (OpenAI's batches, Anthropic's message batches): the
 * caller's batch, the id its path names (checked by `batchIdOf`), read or cancelled, answered in the API's shape.
 */
export function batchCallHandler(
  context: EdgeContext,
  call: 'getBatch' | 'cancelBatch',
  batchIdOf: (request: Request) => string,
  render: (batch: Batch, request: Request) => unknown,
  deadlineMs: number,
) {
  return async (request: Request, response: Response): Promise<void> => {
    const jobs = jobsOf(context, request);
    const key = await verifyCallerKey(context, request, response);
    const answer = await jobs[call]({ accountId: key.accountId, batchId: batchIdOf(request) }, { requestId: requestIdOf(response), deadlineMs });
    sendJson(response, 200, render(answer.batch!, request));
  };
}
