import type { Logger } from '@gateway/platform';
import type { CatalogCache } from '../../catalog-cache.js';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import type { CatalogModel } from '../../catalog-cache.js';
import { renderResponse, responseId, responseSettings } from './render-responses.js';
import type { ResponsesRequest } from './responses-schema.js';
import { responsesDialect } from './responses-dialect.js';
import { markStoredBody } from './stored-marks.js';
import type { RenderRun } from './stored-responses.js';

/*
 * A background response as GET /v1/responses/{id} and its cancel answer it (docs/stored-responses.md
 * "Background responses"): the object answered at creation (`status: queued`) with the run's status,
 * and once the run completed, the answer rendered exactly as a response the edge relayed itself (the
 * jobs service keeps the router's answer, not the dialect's JSON: the dialect is the edge's).
 */


/** OpenAI's statuses of a background response. */
const STATUSES = new Set(['queued', 'in_progress', 'completed', 'failed', 'cancelled', 'incomplete']);

export function backgroundRenderer(catalogCache: CatalogCache, tags: ReasoningTags, logger: Logger): RenderRun {
  return (queued, run) => {
    const status = STATUSES.has(run.status) ? run.status : 'in_progress';
    if (run.status === 'failed') {
      const error = parseError(run.errorJson);
      return { ...queued, status: 'failed', error: { code: error.code, message: error.message } };
    }
    if (run.status !== 'completed' || run.answer === undefined) return { ...queued, status };
    const model = catalogCache.resolve(run.answer.modelId) ?? catalogCache.resolve(run.modelId);
    const id = typeof queued.id === 'string' ? queued.id : '';
    if (model === undefined || !id.startsWith('resp_')) return { ...queued, status };
    const body = responsesDialect.parse(JSON.parse(run.requestJson));
    markStoredBody(body);
    // The ids of the answer's items derive from the response id's hex, as for an answer relayed at once.
    const rendered = renderResponse(run.answer, { requestId: id.slice('resp_'.length), model, tags, created: Number(queued.created_at) || 0, logger }, body);
    return { ...rendered, background: true, completed_at: rendered.completed_at === null ? null : Number(run.endedAt) || rendered.completed_at };
  };
}

function parseError(text: string): { code: string; message: string } {
  try {
    const parsed = JSON.parse(text) as { code?: unknown; message?: unknown };
    return { code: typeof parsed.code === 'string' ? parsed.code : 'server_error', message: typeof parsed.message === 'string' ? parsed.message : 'The response failed.' };
  } catch {
    return { code: 'server_error', message: 'The response failed.' };
  }
}

/** The object a background request is answered with at once: `queued`, no output yet, its settings echoed. */
export function queuedResponse(requestId: string, model: CatalogModel, created: number, body: ResponsesRequest): Record<string, unknown> {
  return {
    id: responseId(requestId),
    object: 'response',
    created_at: created,
    status: 'queued',
    background: true,
    completed_at: null,
    error: null,
    incomplete_details: null,
    model: model.id,
    output: [],
    ...responseSettings(body),
    usage: null,
  };
}
