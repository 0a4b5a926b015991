import type { EdgeContext } from '../../context.js';
import { requestIdOf } from '../../request-id.js';
import { readJsonBody, sendJson } from '../../http.js';
import { resolveModel } from '../../inference/model-resolution.js';
import { authenticate, type InferenceHandler } from '../../inference/pipeline.js';
import { countRequestTokens } from '../../inference/request-bounds.js';
import { convertMessagesRequest, MESSAGES_ENDPOINT } from './convert-messages-request.js';
import { MESSAGES_FREE_FORM_FIELDS, parseCountTokensRequest } from './messages-schema.js';

/**
 * POST /v1/messages/count_tokens: `{input_tokens}` of the prompt a messages request would send, by the
 * gateway's own tokenizer over the canonical request (inference/request-bounds.ts), so it agrees with
 * the context-window check. The same key, body checks, model resolution (400/403/410) and conversion
 * as POST /v1/messages; no admission and no usage: counting is free and reaches no provider. Documents
 * by URL are not fetched here (they count nothing).
 */
export function countTokensHandler(context: EdgeContext): InferenceHandler {
  return async (request, response) => {
    const key = await authenticate(context, request, requestIdOf(response));
    const body = parseCountTokensRequest(await readJsonBody(request, context.bodyLimits, MESSAGES_FREE_FORM_FIELDS));
    const model = resolveModel(context, body.model, MESSAGES_ENDPOINT, key);
    const converted = convertMessagesRequest(body, model, context.reasoningTags);
    sendJson(response, 200, { input_tokens: await countRequestTokens(converted.request) });
  };
}
