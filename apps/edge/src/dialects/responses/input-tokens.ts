import type { EdgeContext } from '../../context.js';
import { requestIdOf } from '../../request-id.js';
import { readJsonBody, sendJson } from '../../http.js';
import { resolveModel } from '../../inference/model-resolution.js';
import { authenticate, type InferenceHandler } from '../../inference/pipeline.js';
import { countRequestTokens } from '../../inference/request-bounds.js';
import { convertResponsesRequest, RESPONSES_ENDPOINT } from './convert-responses-request.js';
import { parseInputTokensRequest, RESPONSES_FREE_FORM_FIELDS } from './responses-schema.js';

/**
 * POST /v1/responses/input_tokens (the `openai` SDK's `responses.inputTokens.count`): the prompt a
 * /v1/responses request with this body would send, counted by the gateway's own tokenizer over the
 * canonical request, as messages count_tokens does (count-tokens.ts): the same key, body checks,
 * model resolution and conversion as POST /v1/responses; no admission and no usage, nothing reaches a
 * provider. Every field is optional, as in OpenAI's API: a body with no `input` and no `instructions` counts
 * the empty prompt, and one with no `model` is counted for the catalog's default model for responses. The answer is OpenAI's `{object: 'response.input_tokens', input_tokens}`.
 */
export function inputTokensHandler(context: EdgeContext): InferenceHandler {
  return async (request, response) => {
    const key = await authenticate(context, request, requestIdOf(response));
    const body = parseInputTokensRequest(await readJsonBody(request, context.bodyLimits, RESPONSES_FREE_FORM_FIELDS));
    // No `model`: the catalog's default for responses (resolveModel), judged like a named one.
    const model = resolveModel(context, body.model ?? '', RESPONSES_ENDPOINT, key);
    const converted = convertResponsesRequest({ ...body, model: model.id }, model, context.reasoningTags);
    sendJson(response, 200, { object: 'response.input_tokens', input_tokens: await countRequestTokens(converted.request) });
  };
}
