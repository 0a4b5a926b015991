import { z } from 'zod';

/** OpenAI moderation answer (only what the gateway reads). */
export const openaiModerationResponseSchema = z.looseObject({
  results: z.array(
    z.looseObject({
      flagged: z.boolean(),
      categories: z.record(z.string(), z.boolean().nullable()),
      category_scores: z.record(z.string(), z.number()),
      category_applied_input_types: z.record(z.string(), z.array(z.string())).optional(),
    }),
  ),
});

/** OpenAI images answer with b64_json data; gpt-image models report token usage. */
export const openaiImagesResponseSchema = z.looseObject({
  data: z.array(z.looseObject({ b64_json: z.string().optional(), revised_prompt: z.string().nullish() })),
  usage: z
    .looseObject({
      input_tokens: z.number().int().nonnegative().optional(),
      output_tokens: z.number().int().nonnegative().optional(),
      input_tokens_details: z.looseObject({ text_tokens: z.number().int().optional(), image_tokens: z.number().int().optional() }).optional(),
    })
    .optional(),
});

/** json / verbose_json transcription answers: the text, and where reported the length and token usage. */
export const openaiTranscriptionSchema = z.looseObject({
  text: z.string(),
  duration: z.number().nonnegative().optional(),
  usage: z
    .looseObject({
      type: z.string().optional(),
      input_tokens: z.number().int().optional(),
      output_tokens: z.number().int().optional(),
      seconds: z.number().optional(),
      input_token_details: z.looseObject({ audio_tokens: z.number().int().optional(), text_tokens: z.number().int().optional() }).optional(),
    })
    .optional(),
});
