import type { InferenceDialect } from '../../inference/dialect.js';
import { convertResponsesRequest, RESPONSES_ENDPOINT } from './convert-responses-request.js';
import { renderResponse } from './render-responses.js';
import { parseResponsesRequest, RESPONSES_FREE_FORM_FIELDS, type ResponsesRequest } from './responses-schema.js';
import { ResponsesStreamWriter } from './responses-stream-writer.js';

/** POST /v1/responses (spec §4.9). Errors use the OpenAI envelope, as chat completions do. No keep-alive: never committed before content. */
export const responsesDialect: InferenceDialect<ResponsesRequest> = {
  endpoint: RESPONSES_ENDPOINT,
  errorDialect: 'chat',
  freeFormFields: RESPONSES_FREE_FORM_FIELDS,
  parse: parseResponsesRequest,
  modelName: (body) => body.model,
  routing: (body) => body.routing,
  convert: convertResponsesRequest,
  render: renderResponse,
  streamWriter: (answerContext, body) => new ResponsesStreamWriter(answerContext, body),
};
