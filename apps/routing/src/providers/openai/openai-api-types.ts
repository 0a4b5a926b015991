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
      // Relayed as it came (JSON): the chat dialect's client reads OpenAI's shape.
      logprobs: z.unknown().optional(),
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
        logprobs: z.unknown().optional(),
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

// Hand-written checks of exactly what `openaiChatResponseSchema` accepts: a full zod parse of every
// upstream answer cost ~4% of routing's CPU. An answer these reject goes through zod, which then
// produces the same error message as before (and decides: zod is the reference).
const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
const isNullishString = (value: unknown) => value == null || typeof value === 'string';
const isNullishCount = (value: unknown) => value == null || (typeof value === 'number' && Number.isInteger(value) && value >= 0);

function isUsage(value: unknown): boolean {
  if (value == null) return true;
  if (!isObject(value)) return false;
  if (!isNullishCount(value.prompt_tokens) || !isNullishCount(value.completion_tokens) || !isNullishCount(value.total_tokens)) return false;
  const prompt = value.prompt_tokens_details;
  if (prompt != null && (!isObject(prompt) || !isNullishCount(prompt.cached_tokens))) return false;
  const completion = value.completion_tokens_details;
  return completion == null || (isObject(completion) && isNullishCount(completion.reasoning_tokens));
}

function isToolCall(value: unknown): boolean {
  if (!isObject(value) || typeof value.id !== 'string' || (value.type !== undefined && typeof value.type !== 'string')) return false;
  const fn = value.function;
  return isObject(fn) && typeof fn.name === 'string' && isNullishString(fn.arguments);
}

/** The answer as `openaiChatResponseSchema.safeParse` would return it, without zod on the usual path. */
export function parseOpenAIChatResponse(json: unknown): ReturnType<typeof openaiChatResponseSchema.safeParse> {
  if (!isObject(json) || !isNullishString(json.id) || !(json.created == null || typeof json.created === 'number')
    || !isNullishString(json.model) || !Array.isArray(json.choices) || !isUsage(json.usage)) {
    return openaiChatResponseSchema.safeParse(json);
  }
  for (const choice of json.choices) {
    if (!isObject(choice) || !isNullishString(choice.finish_reason)) return openaiChatResponseSchema.safeParse(json);
    if (choice.index !== undefined && !(typeof choice.index === 'number' && Number.isInteger(choice.index) && choice.index >= 0)) {
      return openaiChatResponseSchema.safeParse(json);
    }
    const message = choice.message;
    if (!isObject(message) || !isNullishString(message.role) || !isNullishString(message.content) || !isNullishString(message.refusal)
      || !isNullishString(message.reasoning_content) || !isNullishString(message.reasoning)) {
      return openaiChatResponseSchema.safeParse(json);
    }
    const toolCalls = message.tool_calls;
    if (toolCalls != null && (!Array.isArray(toolCalls) || !toolCalls.every(isToolCall))) return openaiChatResponseSchema.safeParse(json);
  }
  // zod's only transform here: a missing choice index defaults to 0 (copied, the input stays as it was).
  const choices = json.choices.some((choice) => (choice as Record<string, unknown>).index === undefined)
    ? json.choices.map((choice) => ((choice as Record<string, unknown>).index === undefined ? { ...(choice as object), index: 0 } : choice))
    : json.choices;
  return { success: true, data: (choices === json.choices ? json : { ...json, choices }) as OpenAIChatResponse } as ReturnType<typeof openaiChatResponseSchema.safeParse>;
}

function isChunkToolCall(value: unknown): boolean {
  if (!isObject(value) || !isNullishString(value.id)) return false;
  // A missing index is zod's to default: not the usual path.
  if (!(typeof value.index === 'number' && Number.isInteger(value.index) && value.index >= 0)) return false;
  const fn = value.function;
  return fn == null || (isObject(fn) && isNullishString(fn.name) && isNullishString(fn.arguments));
}

/**
 * The stream chunk as `openaiChunkSchema.safeParse` would return it, without zod on the usual path (a
 * zod parse per relayed delta cost ~7% of routing's CPU under 128 concurrent streams, issue 39). Only
 * chunks whose every field the schema reads has the type it wants and needs no default are answered
 * here, as they came; any other (an error chunk, a choice or tool call without an index, a wrong
 * type) goes through zod, which decides and words the error as before.
 */
export function parseOpenAIChunk(json: unknown): ReturnType<typeof openaiChunkSchema.safeParse> {
  if (!isObject(json) || !isNullishString(json.id) || json.error != null || !isUsage(json.usage)) return openaiChunkSchema.safeParse(json);
  const choices = json.choices;
  if (choices != null) {
    if (!Array.isArray(choices)) return openaiChunkSchema.safeParse(json);
    for (const choice of choices) {
      if (!isObject(choice) || !isNullishString(choice.finish_reason)) return openaiChunkSchema.safeParse(json);
      if (!(typeof choice.index === 'number' && Number.isInteger(choice.index) && choice.index >= 0)) return openaiChunkSchema.safeParse(json);
      const delta = choice.delta;
      if (delta == null) continue;
      if (!isObject(delta) || !isNullishString(delta.role) || !isNullishString(delta.content) || !isNullishString(delta.refusal)
        || !isNullishString(delta.reasoning_content) || !isNullishString(delta.reasoning)) {
        return openaiChunkSchema.safeParse(json);
      }
      const toolCalls = delta.tool_calls;
      if (toolCalls != null && (!Array.isArray(toolCalls) || !toolCalls.every(isChunkToolCall))) return openaiChunkSchema.safeParse(json);
    }
  }
  return { success: true, data: json as OpenAIChunk } as ReturnType<typeof openaiChunkSchema.safeParse>;
}
