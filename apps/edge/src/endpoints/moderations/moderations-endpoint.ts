import { z } from 'zod';
import { openAiModerationJson } from '@gateway/platform';
import { ModerationInputForm, type ModerationInput } from '@gateway/proto';
import { edgeErrors } from '../../errors.js';
import { requireFetchableUrl } from '../../canonical/urls.js';
import { sendJson } from '../../http.js';
import { gatewayHeaders } from '../../inference/gateway-headers.js';
import { countTokens, ENDPOINT_DEADLINE_MS, pricePico, jsonBody, type EndpointFamily } from '../shared.js';

const MAX_MODERATION_INPUTS = 1_000;
/** OpenAI refuses a multimodal moderation input with more than one image (400 `too_many_images`). */
const MAX_MODERATION_IMAGES = 1;
/** Tokens held per image (routing charges the same when the provider reports no usage). */
const MODERATION_IMAGE_TOKENS = 2_000;

const moderationPart = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('text'), text: z.string() }),
  z.looseObject({ type: z.literal('image_url'), image_url: z.looseObject({ url: z.string().min(1).max(20 * 1024 * 1024) }) }),
]);

export const moderationsSchema = z.looseObject({
  // Optional, as in OpenAI's API: absent, the catalog's default for moderations (model-resolution.ts).
  model: z.string().min(1).nullish(),
  input: z.union([
    z.string(),
    z.array(z.string()).min(1).max(MAX_MODERATION_INPUTS),
    z.array(moderationPart).min(1).max(MAX_MODERATION_INPUTS),
  ]),
});
type ModerationsBody = z.infer<typeof moderationsSchema>;

/**
 * The input as the client wrote it (OpenAI's three forms): a string and each string of an array is an
 * input of its own; an array of `text` / `image_url` objects is ONE multimodal input (one result), with at
 * most one image as OpenAI accepts.
 */
function inputOf(body: ModerationsBody): { inputs: ModerationInput[]; inputForm: ModerationInputForm } {
  const input = body.input;
  if (typeof input === 'string') return { inputs: [{ input: { $case: 'text', value: input } }], inputForm: ModerationInputForm.MODERATION_INPUT_FORM_STRING };
  if (input.every((item) => typeof item === 'string')) {
    return { inputs: input.map((text) => ({ input: { $case: 'text', value: text } })), inputForm: ModerationInputForm.MODERATION_INPUT_FORM_STRINGS };
  }
  const parts = input as z.infer<typeof moderationPart>[];
  const images = parts.filter((part) => part.type === 'image_url').length;
  if (images > MAX_MODERATION_IMAGES) {
    throw edgeErrors.invalidRequest(`input holds ${images} images; a multimodal moderation input takes at most ${MAX_MODERATION_IMAGES}.`, 'input', 'too_many_images');
  }
  return {
    inputs: parts.map((part, index): ModerationInput =>
      part.type === 'text'
        ? { input: { $case: 'text', value: part.text } }
        : { input: { $case: 'imageUrl', value: requireFetchableUrl(part.image_url.url, `body.input.${index}.image_url.url`) } },
    ),
    inputForm: ModerationInputForm.MODERATION_INPUT_FORM_MULTIMODAL,
  };
}


/** POST /v1/moderations (spec §2.3, §4.6). */
export const moderationsFamily: EndpointFamily<ModerationsBody, { inputs: ModerationInput[]; inputForm: ModerationInputForm; modelId: string }> = {
  endpoint: 'moderations',
  parse: jsonBody(moderationsSchema),
  modelName: (body) => body.model ?? '',
  async prepare(body, model) {
    const { inputs, inputForm } = inputOf(body);
    const texts = inputs.flatMap((item) => (item.input?.$case === 'text' ? [item.input.value] : []));
    const tokens = (await countTokens(texts)).reduce((sum, count) => sum + count, 0);
    // An image is held (and, when the provider reports no usage, charged) as MODERATION_IMAGE_TOKENS.
    const images = inputs.length - texts.length;
    return { prepared: { inputs, inputForm, modelId: model.id }, holdPico: pricePico(model, 'perInputToken', tokens + images * MODERATION_IMAGE_TOKENS) };
  },
  async exchange({ prepared }, job, http, context) {
    const answer = await context.router.moderate(
      { context: job.routerContext, modelId: prepared.modelId, routingStrategy: job.strategy, inputs: prepared.inputs, inputForm: prepared.inputForm },
      { requestId: job.requestId, deadlineMs: ENDPOINT_DEADLINE_MS, signal: job.signal },
    );
    job.commit(answer.usage);
    sendJson(http.response, 200, openAiModerationJson(answer), gatewayHeaders(job.strategy));
  },
};
