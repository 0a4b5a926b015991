import { z } from 'zod';
import type { ModerateResponse, ModerationInput } from '@gateway/proto';
import { requireFetchableUrl } from '../../canonical/urls.js';
import { sendJson } from '../../http.js';
import { endpointHeaders, pricePico, type EndpointFamily } from '../../inference/endpoint-pipeline.js';
import { countTokens, ENDPOINT_DEADLINE_MS, readJson } from '../shared.js';

const MAX_MODERATION_INPUTS = 1_000;

const moderationPart = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('text'), text: z.string() }),
  z.looseObject({ type: z.literal('image_url'), image_url: z.looseObject({ url: z.string().min(1).max(20 * 1024 * 1024) }) }),
]);

export const moderationsSchema = z.looseObject({
  model: z.string().min(1),
  input: z.union([
    z.string(),
    z.array(z.string()).min(1).max(MAX_MODERATION_INPUTS),
    z.array(moderationPart).min(1).max(MAX_MODERATION_INPUTS),
  ]),
});
type ModerationsBody = z.infer<typeof moderationsSchema>;

function inputsOf(body: ModerationsBody): ModerationInput[] {
  const input = body.input;
  if (typeof input === 'string') return [{ input: { $case: 'text', value: input } }];
  return input.map((item, index): ModerationInput =>
    typeof item === 'string'
      ? { input: { $case: 'text', value: item } }
      : item.type === 'text'
        ? { input: { $case: 'text', value: item.text } }
        : { input: { $case: 'imageUrl', value: requireFetchableUrl(item.image_url.url, `body.input.${index}.image_url.url`) } },
  );
}

export function renderModeration(answer: ModerateResponse) {
  return {
    id: answer.id,
    model: answer.modelId,
    results: answer.results.map((result) => ({
      flagged: result.flagged,
      categories: result.categories,
      category_scores: result.categoryScores,
      category_applied_input_types: Object.fromEntries(Object.entries(result.categoryAppliedInputTypes).map(([name, applied]) => [name, applied.types])),
    })),
  };
}

/** POST /v1/moderations (spec §2.3, §4.6). */
export const moderationsFamily: EndpointFamily<ModerationsBody, { inputs: ModerationInput[]; modelId: string }> = {
  endpoint: 'moderations',
  read: (request, context) => readJson(request, context, moderationsSchema),
  modelName: (body) => body.model,
  async prepare(body, model) {
    const inputs = inputsOf(body);
    const tokens = (await countTokens(inputs.map((item) => (item.input?.$case === 'text' ? item.input.value : '')))).reduce((sum, count) => sum + count, 0);
    // An image input is bounded like a chat image (at most ~2,000 tokens at any provider we know).
    const images = inputs.filter((item) => item.input?.$case === 'imageUrl').length;
    return { prepared: { inputs, modelId: model.id }, holdPico: pricePico(model, 'perInputToken', tokens + images * 2_000) };
  },
  async answer(prepared, job) {
    const answer = await job.context.router.moderate(
      { context: job.routerContext, modelId: prepared.modelId, routingStrategy: job.strategy, inputs: prepared.inputs },
      { requestId: job.requestId, deadlineMs: ENDPOINT_DEADLINE_MS, signal: job.signal },
    );
    sendJson(job.response, 200, renderModeration(answer), endpointHeaders(job.strategy));
    return answer.usage;
  },
};
