import { z } from 'zod';

/**
 * Wire format of the Anthropic Messages API (anthropic-version 2023-06-01): the request we send and the
 * parts of answers we read. Unknown fields pass; unknown content block and delta types are kept as
 * objects with a `type` so a newer API version does not break the adapter (they are skipped).
 */

// ----- request (built by convert-to-anthropic-request.ts) -----

export interface AnthropicCacheControl {
  type: 'ephemeral';
  ttl?: string;
}

export interface AnthropicTextBlock {
  type: 'text';
  text: string;
  cache_control?: AnthropicCacheControl;
}

export interface AnthropicImageBlock {
  type: 'image';
  source: { type: 'base64'; media_type: string; data: string } | { type: 'url'; url: string };
  cache_control?: AnthropicCacheControl;
}

export interface AnthropicDocumentBlock {
  type: 'document';
  source:
    | { type: 'base64'; media_type: 'application/pdf'; data: string }
    | { type: 'text'; media_type: 'text/plain'; data: string }
    | { type: 'url'; url: string };
  title?: string;
  context?: string;
  cache_control?: AnthropicCacheControl;
}

export interface AnthropicToolUseBlock {
  type: 'tool_use';
  id: string;
  name: string;
  input: Record<string, unknown>;
  cache_control?: AnthropicCacheControl;
}

export interface AnthropicToolResultBlock {
  type: 'tool_result';
  tool_use_id: string;
  content?: (AnthropicTextBlock | AnthropicImageBlock | AnthropicDocumentBlock)[];
  is_error?: boolean;
  cache_control?: AnthropicCacheControl;
}

export interface AnthropicThinkingBlock {
  type: 'thinking';
  thinking: string;
  signature: string;
}

export interface AnthropicRedactedThinkingBlock {
  type: 'redacted_thinking';
  data: string;
}

export type AnthropicUserBlock = AnthropicTextBlock | AnthropicImageBlock | AnthropicDocumentBlock | AnthropicToolResultBlock;
export type AnthropicAssistantBlock = AnthropicThinkingBlock | AnthropicRedactedThinkingBlock | AnthropicTextBlock | AnthropicToolUseBlock;

export type AnthropicMessage =
  | { role: 'user'; content: AnthropicUserBlock[] }
  | { role: 'assistant'; content: AnthropicAssistantBlock[] };

export interface AnthropicTool {
  name: string;
  description?: string;
  input_schema: Record<string, unknown>;
  cache_control?: AnthropicCacheControl;
}

export type AnthropicToolChoice =
  | { type: 'auto' | 'any'; disable_parallel_tool_use?: boolean }
  | { type: 'tool'; name: string; disable_parallel_tool_use?: boolean }
  | { type: 'none' };

export interface AnthropicRequestBody {
  model: string;
  max_tokens: number;
  messages: AnthropicMessage[];
  system?: AnthropicTextBlock[];
  tools?: AnthropicTool[];
  tool_choice?: AnthropicToolChoice;
  thinking?: { type: 'enabled'; budget_tokens: number } | { type: 'adaptive' };
  /** The effort level (Claude Opus 4.5 and later); sent only when the client wrote it (messages `output_config.effort`). */
  output_config?: { effort: string };
  temperature?: number;
  top_p?: number;
  top_k?: number;
  stop_sequences?: string[];
  metadata?: { user_id: string };
  stream?: boolean;
  /** extra_body fields (the model's extra_parameters), passed through unchecked. */
  [field: string]: unknown;
}

// ----- answers -----

const count = z.number().int().nonnegative().nullish();

export const anthropicUsageSchema = z.looseObject({
  /** Prompt tokens NOT read from or written to the cache. */
  input_tokens: count,
  output_tokens: count,
  cache_creation_input_tokens: count,
  cache_read_input_tokens: count,
});
export type AnthropicUsage = z.infer<typeof anthropicUsageSchema>;

const textBlockSchema = z.looseObject({ type: z.literal('text'), text: z.string() });
const thinkingBlockSchema = z.looseObject({ type: z.literal('thinking'), thinking: z.string(), signature: z.string().nullish() });
const redactedThinkingBlockSchema = z.looseObject({ type: z.literal('redacted_thinking'), data: z.string() });
const toolUseBlockSchema = z.looseObject({ type: z.literal('tool_use'), id: z.string(), name: z.string(), input: z.unknown() });
/** Any other block (server tool use and results, citations of newer versions): skipped. */
const otherBlockSchema = z.looseObject({ type: z.string() });

export const anthropicContentBlockSchema = z.union([
  textBlockSchema,
  thinkingBlockSchema,
  redactedThinkingBlockSchema,
  toolUseBlockSchema,
  otherBlockSchema,
]);
export type AnthropicContentBlock = z.infer<typeof anthropicContentBlockSchema>;
// The union's catch-all member keeps `type` from narrowing: readers switch on it and cast to these.
export type AnthropicTextContent = z.infer<typeof textBlockSchema>;
export type AnthropicThinkingContent = z.infer<typeof thinkingBlockSchema>;
export type AnthropicRedactedThinkingContent = z.infer<typeof redactedThinkingBlockSchema>;
export type AnthropicToolUseContent = z.infer<typeof toolUseBlockSchema>;

export const anthropicMessageSchema = z.looseObject({
  id: z.string().nullish(),
  type: z.literal('message').nullish(),
  role: z.string().nullish(),
  model: z.string().nullish(),
  content: z.array(anthropicContentBlockSchema),
  stop_reason: z.string().nullish(),
  stop_sequence: z.string().nullish(),
  usage: anthropicUsageSchema.nullish(),
});
export type AnthropicMessageResponse = z.infer<typeof anthropicMessageSchema>;

export const anthropicErrorSchema = z.looseObject({
  type: z.literal('error').nullish(),
  error: z.looseObject({ type: z.string().nullish(), message: z.string().nullish() }),
});
export type AnthropicErrorBody = z.infer<typeof anthropicErrorSchema>;

// ----- stream events (the SSE `event:` name equals the data's `type`) -----

const textDeltaSchema = z.looseObject({ type: z.literal('text_delta'), text: z.string() });
const thinkingDeltaSchema = z.looseObject({ type: z.literal('thinking_delta'), thinking: z.string() });
const signatureDeltaSchema = z.looseObject({ type: z.literal('signature_delta'), signature: z.string() });
const inputJsonDeltaSchema = z.looseObject({ type: z.literal('input_json_delta'), partial_json: z.string() });
const deltaSchema = z.union([
  textDeltaSchema,
  thinkingDeltaSchema,
  signatureDeltaSchema,
  inputJsonDeltaSchema,
  // citations_delta and whatever later versions add: skipped.
  z.looseObject({ type: z.string() }),
]);
export type AnthropicTextDelta = z.infer<typeof textDeltaSchema>;
export type AnthropicThinkingDelta = z.infer<typeof thinkingDeltaSchema>;
export type AnthropicSignatureDelta = z.infer<typeof signatureDeltaSchema>;
export type AnthropicInputJsonDelta = z.infer<typeof inputJsonDeltaSchema>;

export const anthropicStreamEventSchema = z.discriminatedUnion('type', [
  z.looseObject({
    type: z.literal('message_start'),
    message: z.looseObject({ id: z.string().nullish(), model: z.string().nullish(), usage: anthropicUsageSchema.nullish() }),
  }),
  z.looseObject({ type: z.literal('content_block_start'), index: z.number().int().nonnegative(), content_block: anthropicContentBlockSchema }),
  z.looseObject({ type: z.literal('content_block_delta'), index: z.number().int().nonnegative(), delta: deltaSchema }),
  z.looseObject({ type: z.literal('content_block_stop'), index: z.number().int().nonnegative() }),
  z.looseObject({
    type: z.literal('message_delta'),
    delta: z.looseObject({ stop_reason: z.string().nullish(), stop_sequence: z.string().nullish() }),
    /** Cumulative: output_tokens so far, and (newer API) the input counts again. */
    usage: anthropicUsageSchema.nullish(),
  }),
  z.looseObject({ type: z.literal('message_stop') }),
  z.looseObject({ type: z.literal('ping') }),
  z.looseObject({ type: z.literal('error'), error: anthropicErrorSchema.shape.error }),
]);
export type AnthropicStreamEvent = z.infer<typeof anthropicStreamEventSchema>;
