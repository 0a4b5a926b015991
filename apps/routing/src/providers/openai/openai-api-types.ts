import { z } from 'zod';

/** Wire format of OpenAI-compatible chat completions: only the fields we read; unknown fields pass. */

export const openaiUsageSchema = z.looseObject({
  prompt_tokens: z.number().int().nonnegative().nullish(),
  completion_tokens: z.number().int().nonnegative().nullish(),
  total_tokens: z.number().int().nonnegative().nullish(),
  prompt_tokens_details: z.looseObject({ cached_tokens: z.number().int().nonnegative().nullish() }).nullish(),
  completion_tokens_details: z.looseObject({ reasoning_tokens: z.number().int().nonnegative().nullish() }).nullish(),
});
export type OpenAIUsage = z.infer<typeof openaiUsageSchema>;

const toolCallSchema = z.looseObject({
  id: z.string(),
  type: z.string().optional(),
  function: z.looseObject({ name: z.string(), arguments: z.string().nullish() }),
});

export const openaiChatResponseSchema = z.looseObject({
  id: z.string().nullish(),
  created: z.number().nullish(),
  model: z.string().nullish(),
  choices: z.array(
    z.looseObject({
      index: z.number().int().nonnegative().default(0),
      message: z.looseObject({
        role: z.string().nullish(),
        content: z.string().nullish(),
        refusal: z.string().nullish(),
        // Reasoning text as OpenAI-compatible servers (vLLM, DeepSeek, OpenRouter) return it.
        reasoning_content: z.string().nullish(),
        reasoning: z.string().nullish(),
        tool_calls: z.array(toolCallSchema).nullish(),
      }),
      finish_reason: z.string().nullish(),
    }),
  ),
  usage: openaiUsageSchema.nullish(),
});
export type OpenAIChatResponse = z.infer<typeof openaiChatResponseSchema>;

export const openaiErrorSchema = z.looseObject({
  error: z.looseObject({
    message: z.string().nullish(),
    type: z.string().nullish(),
    code: z.union([z.string(), z.number()]).nullish(),
    param: z.string().nullish(),
  }),
});
export type OpenAIErrorBody = z.infer<typeof openaiErrorSchema>;

export const openaiChunkSchema = z.looseObject({
  id: z.string().nullish(),
  choices: z
    .array(
      z.looseObject({
        index: z.number().int().nonnegative().default(0),
        delta: z
          .looseObject({
            role: z.string().nullish(),
            content: z.string().nullish(),
            refusal: z.string().nullish(),
            reasoning_content: z.string().nullish(),
            reasoning: z.string().nullish(),
            tool_calls: z
              .array(
                z.looseObject({
                  index: z.number().int().nonnegative().default(0),
                  id: z.string().nullish(),
                  function: z.looseObject({ name: z.string().nullish(), arguments: z.string().nullish() }).nullish(),
                }),
              )
              .nullish(),
          })
          .nullish(),
        finish_reason: z.string().nullish(),
      }),
    )
    .nullish(),
  usage: openaiUsageSchema.nullish(),
  error: openaiErrorSchema.shape.error.nullish(),
});
export type OpenAIChunk = z.infer<typeof openaiChunkSchema>;

/** Request body we send (built by convert-to-openai-request.ts). */
export interface OpenAIChatRequestBody {
  model: string;
  messages: unknown[];
  stream?: boolean;
  stream_options?: { include_usage: boolean };
  [field: string]: unknown;
}

export const openaiEmbeddingResponseSchema = z.looseObject({
  data: z.array(z.looseObject({ index: z.number().int().nonnegative(), embedding: z.array(z.number()) })),
  usage: z.looseObject({ prompt_tokens: z.number().int().nonnegative().nullish() }).nullish(),
});
