import type { InferenceDialect } from '../../inference/dialect.js';
import { compactionTriggered, convertTriggeredCompaction, renderTriggeredCompaction } from './compaction.js';
import { convertResponsesRequest, RESPONSES_ENDPOINT } from './convert-responses-request.js';
import { renderResponse } from './render-responses.js';
import { parseResponsesRequest, RESPONSES_FREE_FORM_FIELDS, type ResponsesRequest } from './responses-schema.js';
import { ResponsesStreamWriter } from './responses-stream-writer.js';

/**
 * POST /v1/responses (spec §4.9). Errors use the OpenAI envelope, as chat completions do. No keep-alive: never committed before content.
 * A request whose last input item is `compaction_trigger` (Codex's in-band compaction) is a compaction: its
 * own conversion, answer and stream (compaction.ts), the same pipeline.
 */
export const responsesDialect: InferenceDialect<ResponsesRequest> = {
  endpoint: RESPONSES_ENDPOINT,
  errorDialect: 'chat',
  freeFormFields: RESPONSES_FREE_FORM_FIELDS,
  parse: parseResponsesRequest,
  modelName: (body) => body.model,
  routing: (body) => body.routing,
  convert: (body, model, tags) => (compactionTriggered(body) ? convertTriggeredCompaction(body, model, tags) : convertResponsesRequest(body, model, tags)),
  render: (answer, answerContext, body) => (compactionTriggered(body) ? renderTriggeredCompaction(answer, answerContext, body) : renderResponse(answer, answerContext, body)),
  streamWriter: (answerContext, body) => new ResponsesStreamWriter(answerContext, body, compactionTriggered(body)),
};
