import type { InferenceDialect } from '../../inference/dialect.js';
import { compactionTriggered, convertTriggeredCompaction, renderTriggeredCompaction, RESPONSES_REQUEST } from './compaction.js';
import { convertResponsesRequest } from './convert-responses-request.js';
import { renderResponse } from './render-responses.js';
import type { ResponsesRequest } from './responses-schema.js';
import { ResponsesStreamWriter } from './responses-stream-writer.js';

/**
 * POST /v1/responses (spec §4.9). Errors use the OpenAI envelope, as chat completions do. No keep-alive: never committed before content.
 * A request whose last input item is `compaction_trigger` (Codex's in-band compaction) is a compaction: its
 * own conversion, answer and stream (compaction.ts), the same pipeline.
 */
export const responsesDialect: InferenceDialect<ResponsesRequest> = {
  ...RESPONSES_REQUEST,
  convert: (body, model, tags) => (compactionTriggered(body) ? convertTriggeredCompaction(body, model, tags) : convertResponsesRequest(body, model, tags)),
  render: (answer, answerContext, body) => (compactionTriggered(body) ? renderTriggeredCompaction(answer, answerContext, body) : renderResponse(answer, answerContext, body)),
  streamWriter: (answerContext, body) => new ResponsesStreamWriter(answerContext, body, compactionTriggered(body)),
};
