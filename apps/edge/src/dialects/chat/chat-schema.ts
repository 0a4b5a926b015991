import { z } from 'zod';
import { cacheControlSchema } from '../../canonical/cache-control.js';
import { parseBody } from '../../canonical/validation.js';
import { routingStrategy } from '../../inference/strategy.js';
import { primaryModelFromModels, routingChoiceFields } from '../../inference/routing-choices.js';
import type { FreeFormField } from '../../json-depth.js';
import { plainChatRequest } from './plain-chat-request.js';

/*
 * The chat-completions request of spec §4.8. Optional fields accept null as "absent" (many clients
 * send explicit nulls). Unknown top-level fields are kept (`loose`): a model's extra_parameters pass
 * through, anything else is dropped later.
 */

/** OpenRouter's convention: a text, image, file or audio part may end a cacheable prefix (canonical/cache-control.ts). */
const cacheControl = cacheControlSchema.nullish();
const textBlock = z.object({ type: z.literal('text'), text: z.string(), cache_control: cacheControl });
const refusalBlock = z.object({ type: z.literal('refusal'), refusal: z.string() });
const imageBlock = z.object({
  type: z.literal('image_url'),
  image_url: z.object({ url: z.string().min(1), detail: z.enum(['low', 'high', 'auto']).nullish() }),
  cache_control: cacheControl,
});
const fileBlock = z.object({
  type: z.literal('file'),
  file: z
    .object({
      filename: z.string().nullish(),
      file_data: z.string().min(1).nullish(),
      file_url: z.string().min(1).nullish(),
      file_id: z.string().nullish(),
    })
    .refine((file) => file.file_data != null || file.file_url != null || file.file_id != null, {
      message: 'one of file_data, file_url or file_id is required',
    }),
  cache_control: cacheControl,
});
const audioBlock = z.object({
  type: z.literal('input_audio'),
  input_audio: z.object({ data: z.string().min(1), format: z.enum(['wav', 'mp3']) }),
  cache_control: cacheControl,
});
const contentBlock = z.discriminatedUnion('type', [textBlock, imageBlock, fileBlock, audioBlock, refusalBlock]);
export type ContentBlock = z.infer<typeof contentBlock>;

const toolCall = z.object({
  id: z.string().min(1),
  type: z.literal('function').optional(),
  function: z.object({ name: z.string().min(1), arguments: z.string() }),
  // Google's OpenAI-compatibility carrier of a Gemini call's thought signature, as the gateway returned
  // it (issuer-tagged); other vendors' extras are accepted and ignored.
  extra_content: z
    .object({ google: z.object({ thought_signature: z.string().nullish() }).loose().nullish() })
    .loose()
    .nullish(),
});

/**
 * OpenRouter's reasoning_details entries (wire-formats.md) on replayed assistant turns: text (with a
 * signature when signed), encrypted, or a summary. Signatures and data carry the gateway's issuer tag.
 */
const reasoningDetail = z
  .object({
    type: z.enum(['reasoning.text', 'reasoning.encrypted', 'reasoning.summary']),
    text: z.string().nullish(),
    signature: z.string().nullish(),
    data: z.string().nullish(),
    summary: z.string().nullish(),
  })
  .loose();

const message = z.object({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
  reasoning: z.string().nullish(),
  reasoning_details: z.array(reasoningDetail).nullish(),
  content: z.union([z.string(), z.array(contentBlock)]).nullish(),
  name: z.string().nullish(),
  tool_calls: z.array(toolCall).nullish(),
  tool_call_id: z.string().nullish(),
});
export type ChatMessageInput = z.infer<typeof message>;
export type ChatToolCallInput = z.infer<typeof toolCall>;

const tool = z.object({
  type: z.literal('function'),
  function: z.object({
    name: z.string().min(1),
    description: z.string().nullish(),
    parameters: z.record(z.string(), z.unknown()).nullish(),
    strict: z.boolean().nullish(),
  }),
  // OpenRouter's tool caching: the tool list up to this one is a cacheable prefix.
  cache_control: cacheControl,
});

const toolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.object({ type: z.literal('function'), function: z.object({ name: z.string().min(1) }) }),
]);

const responseFormat = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }),
  z.object({ type: z.literal('json_object') }),
  z.object({
    type: z.literal('json_schema'),
    json_schema: z.object({
      name: z.string().min(1),
      schema: z.record(z.string(), z.unknown()).nullish(),
      strict: z.boolean().nullish(),
      description: z.string().nullish(),
    }),
  }),
]);

/**
 * The fields below that hold free-form JSON (records of unknown): a body nested too deep inside one is
 * refused naming the field (src/json-depth.ts). Unknown top-level fields are free-form too; they are
 * named by their first two segments anyway.
 */
export const CHAT_FREE_FORM_FIELDS: readonly FreeFormField[] = [
  ['tools', '*', 'function', 'parameters'],
  ['response_format', 'json_schema', 'schema'],
  ['prediction'],
  ['web_search_options'],
];

const ASPECT_RATIOS = ['1:1', '2:3', '3:2', '3:4', '4:3', '4:5', '5:4', '9:16', '16:9', '21:9'] as const;

export const chatCompletionRequest = z
  .object({
    model: z.string().min(1),
    messages: z.array(message).min(1),
    tools: z.array(tool).nullish(),
    tool_choice: toolChoice.nullish(),
    response_format: responseFormat.nullish(),
    temperature: z.number().min(0).max(2).nullish(),
    top_p: z.number().min(0).max(1).nullish(),
    stream: z.boolean().nullish(),
    stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
    stop: z.union([z.string(), z.array(z.string())]).nullish(),
    max_completion_tokens: z.number().int().min(1).max(4_294_967_295, 'must be at most 4294967295').nullish(),
    max_tokens: z.number().int().min(1).max(4_294_967_295, 'must be at most 4294967295').nullish(),
    // OpenAI's levels, as /v1/responses and the catalog take them: `none` is a current model's default.
    reasoning_effort: z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh']).nullish(),
    presence_penalty: z.number().min(-2).max(2).nullish(),
    frequency_penalty: z.number().min(-2).max(2).nullish(),
    logit_bias: z.record(z.string(), z.number()).nullish(),
    parallel_tool_calls: z.boolean().nullish(),
    prediction: z.record(z.string(), z.unknown()).nullish(),
    web_search_options: z.record(z.string(), z.unknown()).nullish(),
    image_config: z.object({ aspect_ratio: z.enum(ASPECT_RATIOS).nullish() }).nullish(),
    routing: routingStrategy.nullish(),
    user: z.string().nullish(),
    verbosity: z.enum(['low', 'medium', 'high']).nullish(),
    store: z.boolean().nullish(),
    seed: z.number().int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER).nullish(),
    // Several choices: a model that lists `n`, served by an OpenAI-wire kind (docs/providers.md); 128 is OpenAI's bound.
    n: z.number().int().min(1, 'n must be at least 1').max(128, 'n must be at most 128').nullish(),
    logprobs: z.boolean().nullish(),
    top_logprobs: z.number().int().min(0, 'top_logprobs must be at least 0').max(20, 'top_logprobs must be at most 20').nullish(),
    // Cache affinity (routing/candidates.ts): same account and key, same provider while it is healthy.
    prompt_cache_key: z.string().nullish(),
    // Automatic caching (OpenRouter, Anthropic): the conversation's last block ends the cacheable prefix.
    cache_control: cacheControl,
    // Model fallbacks and provider preferences (OpenRouter's `models` and `provider`).
    ...routingChoiceFields,
  })
  .loose();

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequest>;

/** Validates a parsed body; a failure is a 400 whose message names the field path (`body.messages.0.role: ...`). */
export function parseChatCompletionRequest(body: unknown): ChatCompletionRequest {
  const json = primaryModelFromModels(body);
  // The usual body (a model, text messages, scalar parameters) checked by hand; any other by the schema.
  return (plainChatRequest(json) as ChatCompletionRequest | undefined) ?? parseBody(chatCompletionRequest, json);
}
