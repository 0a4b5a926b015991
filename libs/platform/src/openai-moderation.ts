import type { ModerateResponse } from '@gateway/proto';

/**
 * OpenAI's moderation object (`id`, `model`, `results`) of a moderation answer: the body of
 * POST /v1/moderations, and of a moderations batch line before its usage and provider.
 */
export function openAiModerationJson(answer: ModerateResponse) {
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
