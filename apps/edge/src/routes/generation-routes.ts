import type { Request, Response } from 'express';
import type { Generation, Usage } from '@gateway/proto';
import { GENERATIONS_LIMIT_DEFAULT, generationsQuery, parseWith } from '../account/account-schemas.js';
import type { EdgeContext } from '../context.js';
import { edgeErrors } from '../errors.js';
import { sendJson } from '../http.js';
import { presentedProvisioningKey } from '../inference/credentials.js';
import { requestIdOf } from '../request-id.js';
import { accountFor, verifyProvisioningKey } from './account-routes.js';
import { verifyCallerKey } from './caller.js';
import { hasMachineCredential, sessionFor } from '../sign-in/principal.js';

/**
 * GET /v1/generation?id=<request id>: the generation record of one request, as the ledger settled it
 * (LedgerService.GetGeneration; the record is written in the charge's transaction). The names follow
 * OpenRouter's get-a-generation answer where one exists. Either credential of the owning account may
 * ask: an API key (Bearer or x-api-key) or the account's provisioning key (Bearer `gw-prov-…`). An id
 * of another account answers exactly like an unknown one. Before the request settled: 404 with
 * `retry_after` (body) and `Retry-After` (header).
 */

const CALL_DEADLINE_MS = 5_000;
/** Longest id looked up (the ledger's identifier bound). */
const ID_MAX_LENGTH = 200;
/** Usage settles within tens of milliseconds of the answer; one second is a polite retry. */
export const GENERATION_RETRY_AFTER_SECONDS = 1;
const PROVISIONING_PREFIX = 'gw-prov-';

/** The account the caller's credential belongs to. */
async function callerAccount(context: EdgeContext, request: Request, response: Response): Promise<string> {
  if (!hasMachineCredential(request, true)) {
    const session = await sessionFor(context, request, response, 'generations.read');
    if (session !== undefined) return session.accountId;
  }
  const bearer = presentedProvisioningKey(request);
  if (bearer !== undefined && bearer.startsWith(PROVISIONING_PREFIX)) {
    return (await verifyProvisioningKey(context, request, response)).accountId;
  }
  return (await verifyCallerKey(context, request, response)).accountId;
}

export function generationHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const accountId = await callerAccount(context, request, response);
    const id = (request.query as Record<string, unknown>).id;
    if (typeof id !== 'string' || id === '') throw edgeErrors.invalidRequest('query.id: a request id is required', 'id');
    if (id.length > ID_MAX_LENGTH) throw edgeErrors.notFound('No generation with this id.');
    const answer = await context.ledger.getGeneration({ accountId, requestId: id }, { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS });
    if (answer.found && answer.generation) {
      sendJson(response, 200, { data: renderGeneration(answer.generation) });
      return;
    }
    if (!answer.pending) throw edgeErrors.notFound('No generation with this id.');
    sendJson(
      response,
      404,
      {
        error: { type: 'not_found_error', code: 'generation_pending', message: 'This generation has not settled yet; retry shortly.' },
        retry_after: GENERATION_RETRY_AFTER_SECONDS,
      },
      { 'retry-after': String(GENERATION_RETRY_AFTER_SECONDS) },
    );
  };
}

/**
 * GET /v1/account/generations?limit=&cursor=&key_id=: the account's generation records, newest first
 * (LedgerService.ListGenerations), each rendered as GET /v1/generation renders its `data`. Provisioning
 * key only, like every /v1/account/ route. `next_cursor` (opaque) asks for the next page; null on the
 * last. A `key_id` of another account matches none of this account's records: an empty list.
 */
export function listGenerationsHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'generations.read');
    const query = parseWith(generationsQuery, 'query', request.query);
    const page = await context.ledger.listGenerations(
      { accountId: account.accountId, limit: query.limit ?? GENERATIONS_LIMIT_DEFAULT, cursor: query.cursor ?? '', keyId: query.key_id ?? '' },
      { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS },
    );
    sendJson(response, 200, { data: page.generations.map(renderGeneration), next_cursor: page.nextCursor === '' ? null : page.nextCursor });
  };
}

/** The record as JSON: credits as decimal strings (never floats), times in milliseconds, created_at in Unix seconds. */
export function renderGeneration(generation: Generation) {
  const usage = generation.usage;
  const native = generation.nativeUsage;
  const details = generation.costDetails;
  return {
    id: generation.requestId,
    model: generation.modelId,
    provider_name: generation.providerId,
    endpoint: generation.endpoint,
    streamed: generation.streamed,
    cancelled: generation.cancelled,
    finish_reason: generation.finishReason || null,
    latency: generation.latencyMs,
    generation_time: generation.generationTimeMs,
    tokens_prompt: usage?.inputTokens ?? 0,
    tokens_completion: usage?.outputTokens ?? 0,
    tokens_reasoning: usage?.reasoningTokens ?? 0,
    tokens_cached: usage?.cachedInputTokens ?? 0,
    tokens_cache_write: usage?.cacheWriteTokens ?? 0,
    native_tokens_prompt: native ? native.inputTokens : null,
    native_tokens_completion: native ? native.outputTokens : null,
    native_tokens_reasoning: native ? native.reasoningTokens : null,
    native_tokens_cached: native ? native.cachedInputTokens : null,
    native_tokens_cache_write: native ? native.cacheWriteTokens : null,
    // The provider's own total (for reconciliation with its bill; never priced), null when it gave none.
    native_tokens_total: native?.providerTotalTokens ?? null,
    usage: usageCounts(usage),
    estimated: usage?.estimated ?? false,
    total_cost: generation.cost,
    cost_details: {
      input: details?.input ?? '0',
      output: details?.output ?? '0',
      cache_read: details?.cacheRead ?? '0',
      cache_write: details?.cacheWrite ?? '0',
      reasoning: details?.reasoning ?? '0',
    },
    insured: generation.insuredReason !== '',
    insured_reason: generation.insuredReason || null,
    created_at: Math.floor(Number(generation.createdAtMs) / 1000),
  };
}

/** Every metered count of the charge, by kind (non-text units included), as the ledger holds them. */
function usageCounts(usage: Usage | undefined) {
  return {
    input_tokens: usage?.inputTokens ?? 0,
    cached_input_tokens: usage?.cachedInputTokens ?? 0,
    cache_write_tokens: usage?.cacheWriteTokens ?? 0,
    output_tokens: usage?.outputTokens ?? 0,
    reasoning_tokens: usage?.reasoningTokens ?? 0,
    input_audio_tokens: usage?.inputAudioTokens ?? 0,
    output_audio_tokens: usage?.outputAudioTokens ?? 0,
    input_audio_ms: usage?.inputAudioMs ?? 0,
    output_audio_ms: usage?.outputAudioMs ?? 0,
    input_text_tokens: usage?.inputTextTokens ?? 0,
    output_text_tokens: usage?.outputTextTokens ?? 0,
    input_text_characters: usage?.inputTextCharacters ?? 0,
    output_text_characters: usage?.outputTextCharacters ?? 0,
    input_image_tokens: usage?.inputImageTokens ?? 0,
    output_image_tokens: usage?.outputImageTokens ?? 0,
  };
}
