import { z } from 'zod';

/**
 * Wire format of the Bedrock Runtime Converse and ConverseStream operations (REST-JSON; blobs are base64
 * strings). Checked against aws/aws-sdk-js-v3 clients/client-bedrock-runtime/src/models: enums.ts
 * (StopReason incl. guardrail_intervened / content_filtered / model_context_window_exceeded, ImageFormat,
 * DocumentFormat, CachePointType `default`, CacheTTL `5m` | `1h`, ToolResultStatus, ConversationRole) and
 * models_0.ts (the exception classes this adapter maps: AccessDenied, InternalServer, Throttling,
 * Validation, ResourceNotFound, ServiceQuotaExceeded, ServiceUnavailable); the union members of
 * ContentBlock / ContentBlockDelta (text, toolUse, reasoningContent {text, signature, redactedContent},
 * citation) and TokenUsage's cache fields as the SDK generators publish the same service model.
 * Answers are read loosely: unknown fields pass and unknown content block members are skipped, so a
 * newer API version does not break the adapter.
 */

// ----- request (built by convert-to-bedrock-request.ts) -----

export interface BedrockCachePoint {
  cachePoint: { type: 'default'; ttl?: '5m' | '1h' };
}

export type BedrockImageFormat = 'png' | 'jpeg' | 'gif' | 'webp';
export type BedrockDocumentFormat = 'pdf' | 'csv' | 'doc' | 'docx' | 'xls' | 'xlsx' | 'html' | 'txt' | 'md';

export interface BedrockTextBlock { text: string }
export interface BedrockImageBlock { image: { format: BedrockImageFormat; source: { bytes: string } } }
export interface BedrockDocumentBlock { document: { format: BedrockDocumentFormat; name: string; source: { bytes: string } } }
export interface BedrockToolUseBlock { toolUse: { toolUseId: string; name: string; input: unknown } }
export interface BedrockToolResultBlock {
  toolResult: {
    toolUseId: string;
    content: (BedrockTextBlock | BedrockImageBlock | BedrockDocumentBlock)[];
    status?: 'success' | 'error';
  };
}
export interface BedrockReasoningBlock {
  reasoningContent: { reasoningText: { text: string; signature?: string } } | { redactedContent: string };
}

export type BedrockContentBlock =
  | BedrockTextBlock
  | BedrockImageBlock
  | BedrockDocumentBlock
  | BedrockToolUseBlock
  | BedrockToolResultBlock
  | BedrockReasoningBlock
  | BedrockCachePoint;

export interface BedrockMessage {
  role: 'user' | 'assistant';
  content: BedrockContentBlock[];
}

export interface BedrockToolSpec {
  toolSpec: { name: string; description?: string; inputSchema: { json: Record<string, unknown> } };
}

export type BedrockToolChoice = { auto: Record<string, never> } | { any: Record<string, never> } | { tool: { name: string } };

export interface BedrockToolConfig {
  tools: (BedrockToolSpec | BedrockCachePoint)[];
  toolChoice?: BedrockToolChoice;
}

export interface BedrockInferenceConfig {
  maxTokens?: number;
  temperature?: number;
  topP?: number;
  stopSequences?: string[];
}

/** The Converse body (the model id is in the path, not here). */
export interface BedrockRequestBody {
  messages: BedrockMessage[];
  system?: (BedrockTextBlock | BedrockCachePoint)[];
  inferenceConfig?: BedrockInferenceConfig;
  toolConfig?: BedrockToolConfig;
  additionalModelRequestFields?: Record<string, unknown>;
  additionalModelResponseFieldPaths?: string[];
  [field: string]: unknown;
}

// ----- answers -----

const tokenUsageSchema = z.looseObject({
  /** Prompt tokens NOT read from or written to the cache. */
  inputTokens: z.number().int().nonnegative().nullish(),
  outputTokens: z.number().int().nonnegative().nullish(),
  totalTokens: z.number().int().nonnegative().nullish(),
  cacheReadInputTokens: z.number().int().nonnegative().nullish(),
  cacheWriteInputTokens: z.number().int().nonnegative().nullish(),
});
export type BedrockUsage = z.infer<typeof tokenUsageSchema>;

/** One content block of an answer: a union where exactly one member is set; we read the ones we know. */
const answerBlockSchema = z.looseObject({
  text: z.string().nullish(),
  toolUse: z.looseObject({ toolUseId: z.string(), name: z.string(), input: z.unknown() }).nullish(),
  reasoningContent: z
    .looseObject({
      reasoningText: z.looseObject({ text: z.string().nullish(), signature: z.string().nullish() }).nullish(),
      redactedContent: z.string().nullish(),
    })
    .nullish(),
});
export type BedrockAnswerBlock = z.infer<typeof answerBlockSchema>;

export const bedrockConverseResponseSchema = z.looseObject({
  output: z.looseObject({
    message: z.looseObject({ role: z.string().nullish(), content: z.array(answerBlockSchema) }).nullish(),
  }),
  stopReason: z.string().nullish(),
  usage: tokenUsageSchema.nullish(),
  additionalModelResponseFields: z.unknown().optional(),
});
export type BedrockConverseResponse = z.infer<typeof bedrockConverseResponseSchema>;

export const bedrockErrorSchema = z.looseObject({ message: z.string().nullish(), Message: z.string().nullish() });

// ----- stream events: the payload of each eventstream frame, named by its :event-type header -----

export const bedrockStreamEventSchemas = {
  messageStart: z.looseObject({ role: z.string().nullish() }),
  contentBlockStart: z.looseObject({
    contentBlockIndex: z.number().int().nonnegative(),
    start: z.looseObject({ toolUse: z.looseObject({ toolUseId: z.string(), name: z.string() }).nullish() }).nullish(),
  }),
  contentBlockDelta: z.looseObject({
    contentBlockIndex: z.number().int().nonnegative(),
    delta: z.looseObject({
      text: z.string().nullish(),
      toolUse: z.looseObject({ input: z.string().nullish() }).nullish(),
      reasoningContent: z
        .looseObject({ text: z.string().nullish(), signature: z.string().nullish(), redactedContent: z.string().nullish() })
        .nullish(),
    }),
  }),
  contentBlockStop: z.looseObject({ contentBlockIndex: z.number().int().nonnegative() }),
  messageStop: z.looseObject({ stopReason: z.string().nullish(), additionalModelResponseFields: z.unknown().optional() }),
  metadata: z.looseObject({ usage: tokenUsageSchema.nullish() }),
} as const;

export type BedrockStreamEventType = keyof typeof bedrockStreamEventSchemas;
export type BedrockStreamEvent = {
  [Type in BedrockStreamEventType]: { type: Type; payload: z.infer<(typeof bedrockStreamEventSchemas)[Type]> };
}[BedrockStreamEventType];

/** The stop sequence Claude reports in additionalModelResponseFields when asked for `/stop_sequence`. */
export function reportedStopSequence(fields: unknown): string {
  if (typeof fields !== 'object' || fields === null) return '';
  const value = (fields as { stop_sequence?: unknown }).stop_sequence;
  return typeof value === 'string' ? value : '';
}

// ----- the usual path without zod -----

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);
const nullishString = (value: unknown) => value == null || typeof value === 'string';
const isIndex = (value: unknown) => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
const nullishCount = (value: unknown) => value == null || isIndex(value);

function isUsage(usage: unknown): boolean {
  return (
    usage == null
    || (isObject(usage) && nullishCount(usage.inputTokens) && nullishCount(usage.outputTokens) && nullishCount(usage.totalTokens)
      && nullishCount(usage.cacheReadInputTokens) && nullishCount(usage.cacheWriteInputTokens))
  );
}

function isAnswerBlock(block: unknown): boolean {
  if (!isObject(block) || !nullishString(block.text)) return false;
  const toolUse = block.toolUse;
  if (toolUse != null && !(isObject(toolUse) && typeof toolUse.toolUseId === 'string' && typeof toolUse.name === 'string')) return false;
  const reasoning = block.reasoningContent;
  if (reasoning == null) return true;
  if (!isObject(reasoning) || !nullishString(reasoning.redactedContent)) return false;
  const text = reasoning.reasoningText;
  return text == null || (isObject(text) && nullishString(text.text) && nullishString(text.signature));
}

type Parsed<Data> = { success: true; data: Data } | { success: false; error: { message: string } };

/**
 * A Converse answer as `bedrockConverseResponseSchema.safeParse` would accept it, checked by hand on the
 * usual path (a zod parse per answer and per stream event was a large share of the adapter's own CPU);
 * anything the hand check does not accept goes through zod, which gives the verdict and the error.
 */
export function parseBedrockAnswer(json: unknown): Parsed<BedrockConverseResponse> {
  if (isObject(json) && isObject(json.output) && nullishString(json.stopReason) && isUsage(json.usage)) {
    const message = json.output.message;
    if (message == null || (isObject(message) && nullishString(message.role) && Array.isArray(message.content) && message.content.every(isAnswerBlock))) {
      return { success: true, data: json as BedrockConverseResponse };
    }
  }
  return bedrockConverseResponseSchema.safeParse(json);
}

function isUsualDelta(delta: unknown): boolean {
  if (!isObject(delta) || !nullishString(delta.text)) return false;
  const toolUse = delta.toolUse;
  if (toolUse != null && !(isObject(toolUse) && nullishString(toolUse.input))) return false;
  const reasoning = delta.reasoningContent;
  return reasoning == null || (isObject(reasoning) && nullishString(reasoning.text) && nullishString(reasoning.signature) && nullishString(reasoning.redactedContent));
}

/** Hand checks of each stream event's payload: each accepts only what its schema in bedrockStreamEventSchemas accepts. */
const usualStreamEvents: Record<BedrockStreamEventType, (payload: Json) => boolean> = {
  messageStart: (payload) => nullishString(payload.role),
  contentBlockStart: (payload) => {
    if (!isIndex(payload.contentBlockIndex)) return false;
    const start = payload.start;
    if (start == null) return true;
    if (!isObject(start)) return false;
    const toolUse = start.toolUse;
    return toolUse == null || (isObject(toolUse) && typeof toolUse.toolUseId === 'string' && typeof toolUse.name === 'string');
  },
  contentBlockDelta: (payload) => isIndex(payload.contentBlockIndex) && isUsualDelta(payload.delta),
  contentBlockStop: (payload) => isIndex(payload.contentBlockIndex),
  messageStop: (payload) => nullishString(payload.stopReason),
  metadata: (payload) => isUsage(payload.usage),
};

/** The payload of a stream event of `type` as its schema would accept it: by hand on the usual path, else zod. */
export function parseBedrockStreamEvent(type: BedrockStreamEventType, json: unknown): Parsed<BedrockStreamEvent['payload']> {
  if (isObject(json) && usualStreamEvents[type](json)) return { success: true, data: json as BedrockStreamEvent['payload'] };
  return bedrockStreamEventSchemas[type].safeParse(json);
}
