import { z } from 'zod';

/**
 * Wire format of Gemini `generateContent` / `streamGenerateContent` / `batchEmbedContents` (v1beta, and
 * the same bodies on Vertex AI's publishers/google models). Field names checked against the official
 * SDK googleapis/js-genai (read at commit 6e9b35c; src/types.ts: Part, FunctionCall, FunctionResponse, FunctionDeclaration with
 * `parametersJsonSchema`, GenerationConfig with `responseJsonSchema`, ThinkingConfig, Candidate,
 * GenerateContentResponse, GenerateContentResponseUsageMetadata, GenerateContentResponsePromptFeedback;
 * src/converters/_models_converters.ts: `displayName` on Blob/FileData is refused by the Gemini API,
 * batchEmbedContents takes `requests[]` of `{model, content, outputDimensionality}`). Answers are read
 * leniently: unknown fields pass, unknown part kinds are kept as objects and skipped.
 */

// ----- request (built by convert-to-gemini-request.ts) -----

export interface GeminiPart {
  text?: string;
  thought?: boolean;
  thoughtSignature?: string;
  inlineData?: { mimeType: string; data: string };
  fileData?: { mimeType?: string; fileUri: string };
  functionCall?: { name: string; args: Record<string, unknown>; id?: string };
  functionResponse?: { name: string; response: Record<string, unknown>; id?: string };
}

export interface GeminiContent {
  role: 'user' | 'model';
  parts: GeminiPart[];
}

export interface GeminiFunctionDeclaration {
  name: string;
  description?: string;
  /** JSON Schema as written (`parameters` takes only Google's OpenAPI subset and refuses additionalProperties). */
  parametersJsonSchema?: Record<string, unknown>;
}

export interface GeminiToolConfig {
  functionCallingConfig: { mode: 'AUTO' | 'ANY' | 'NONE' | 'VALIDATED'; allowedFunctionNames?: string[] };
}

export interface GeminiThinkingConfig {
  includeThoughts?: boolean;
  thinkingBudget?: number;
  thinkingLevel?: 'MINIMAL' | 'LOW' | 'MEDIUM' | 'HIGH';
}

export interface GeminiGenerationConfig {
  temperature?: number;
  topP?: number;
  topK?: number;
  maxOutputTokens?: number;
  stopSequences?: string[];
  presencePenalty?: number;
  seed?: number;
  frequencyPenalty?: number;
  /** Several candidates (chat `n`); generateContent only. */
  candidateCount?: number;
  /** The chosen tokens' log probabilities (chat `logprobs`). */
  responseLogprobs?: boolean;
  /** Top candidates per step, 0–20 (chat `top_logprobs`); only with responseLogprobs. */
  logprobs?: number;
  responseMimeType?: string;
  responseJsonSchema?: unknown;
  thinkingConfig?: GeminiThinkingConfig;
  imageConfig?: { aspectRatio: string };
}

export interface GeminiRequestBody {
  contents: GeminiContent[];
  systemInstruction?: { parts: { text: string }[] };
  tools?: { functionDeclarations: GeminiFunctionDeclaration[] }[];
  toolConfig?: GeminiToolConfig;
  generationConfig?: GeminiGenerationConfig;
  [extra: string]: unknown;
}

// ----- answers -----

const count = z.number().int().nonnegative().nullish();

export const geminiUsageSchema = z.object({
  promptTokenCount: count,
  candidatesTokenCount: count,
  thoughtsTokenCount: count,
  cachedContentTokenCount: count,
  toolUsePromptTokenCount: count,
  totalTokenCount: count,
});
export type GeminiUsage = z.infer<typeof geminiUsageSchema>;

export const geminiPartSchema = z.object({
  text: z.string().nullish(),
  thought: z.boolean().nullish(),
  thoughtSignature: z.string().nullish(),
  functionCall: z
    .object({ name: z.string().nullish(), args: z.record(z.string(), z.unknown()).nullish(), id: z.string().nullish() })
    .nullish(),
  inlineData: z.object({ mimeType: z.string().nullish(), data: z.string().nullish() }).nullish(),
});
export type GeminiAnswerPart = z.infer<typeof geminiPartSchema>;

const logprobsCandidateSchema = z.object({ token: z.string().nullish(), logProbability: z.number().nullish(), tokenId: z.number().nullish() });

/** A candidate's `logprobsResult` (asked for with responseLogprobs): chosen tokens and the top ones per step. */
export const geminiLogprobsResultSchema = z.object({
  chosenCandidates: z.array(logprobsCandidateSchema).nullish(),
  topCandidates: z.array(z.object({ candidates: z.array(logprobsCandidateSchema).nullish() })).nullish(),
});
export type GeminiLogprobsResult = z.infer<typeof geminiLogprobsResultSchema>;

export const geminiCandidateSchema = z.object({
  content: z.object({ role: z.string().nullish(), parts: z.array(geminiPartSchema).nullish() }).nullish(),
  finishReason: z.string().nullish(),
  finishMessage: z.string().nullish(),
  index: z.number().int().nullish(),
  logprobsResult: geminiLogprobsResultSchema.nullish(),
});
export type GeminiCandidate = z.infer<typeof geminiCandidateSchema>;

export const geminiPromptFeedbackSchema = z.object({
  blockReason: z.string().nullish(),
  blockReasonMessage: z.string().nullish(),
});

export const geminiResponseSchema = z.object({
  candidates: z.array(geminiCandidateSchema).nullish(),
  promptFeedback: geminiPromptFeedbackSchema.nullish(),
  usageMetadata: geminiUsageSchema.nullish(),
  modelVersion: z.string().nullish(),
  responseId: z.string().nullish(),
});
export type GeminiResponse = z.infer<typeof geminiResponseSchema>;

export const geminiEmbedResponseSchema = z.object({
  embeddings: z.array(z.object({ values: z.array(z.number()) })),
});

/** google.rpc.Status as Google APIs answer errors: `{error: {code, message, status, details}}`. */
export const geminiErrorSchema = z.object({
  error: z.object({
    code: z.number().nullish(),
    message: z.string().nullish(),
    status: z.string().nullish(),
    details: z.array(z.object({ '@type': z.string().nullish(), reason: z.string().nullish() }).passthrough()).nullish(),
  }),
});

// ----- the usual path without zod -----

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);
const nullishString = (value: unknown) => value == null || typeof value === 'string';
const nullishCount = (value: unknown) => value == null || (typeof value === 'number' && Number.isInteger(value) && value >= 0);

const USAGE_COUNTS = ['promptTokenCount', 'candidatesTokenCount', 'thoughtsTokenCount', 'cachedContentTokenCount', 'toolUsePromptTokenCount', 'totalTokenCount'] as const;

function isPart(part: unknown): boolean {
  if (!isObject(part) || !nullishString(part.text) || !nullishString(part.thoughtSignature)) return false;
  if (part.thought != null && typeof part.thought !== 'boolean') return false;
  const call = part.functionCall;
  if (call != null && (!isObject(call) || !nullishString(call.name) || !nullishString(call.id) || !(call.args == null || isObject(call.args)))) return false;
  const data = part.inlineData;
  return data == null || (isObject(data) && nullishString(data.mimeType) && nullishString(data.data));
}

function isLogprobsCandidate(entry: unknown): boolean {
  return isObject(entry) && nullishString(entry.token) && (entry.logProbability == null || typeof entry.logProbability === 'number')
    && (entry.tokenId == null || typeof entry.tokenId === 'number');
}

/** Present only when the request asked for logprobs. */
function isLogprobsResult(result: unknown): boolean {
  if (!isObject(result)) return false;
  if (result.chosenCandidates != null && !(Array.isArray(result.chosenCandidates) && result.chosenCandidates.every(isLogprobsCandidate))) return false;
  return result.topCandidates == null || (Array.isArray(result.topCandidates) && result.topCandidates.every((step) =>
    isObject(step) && (step.candidates == null || (Array.isArray(step.candidates) && step.candidates.every(isLogprobsCandidate)))));
}

function isCandidate(candidate: unknown): boolean {
  if (!isObject(candidate) || !nullishString(candidate.finishReason) || !nullishString(candidate.finishMessage)) return false;
  if (candidate.index != null && !(typeof candidate.index === 'number' && Number.isInteger(candidate.index))) return false;
  if (candidate.logprobsResult != null && !isLogprobsResult(candidate.logprobsResult)) return false;
  const content = candidate.content;
  if (content == null) return true;
  if (!isObject(content) || !nullishString(content.role)) return false;
  return content.parts == null || (Array.isArray(content.parts) && content.parts.every(isPart));
}

function isUsage(usage: unknown): boolean {
  return usage == null || (isObject(usage) && USAGE_COUNTS.every((name) => nullishCount(usage[name])));
}

/**
 * A GenerateContentResponse (a whole answer or one stream chunk) as `geminiResponseSchema.safeParse`
 * would accept it, checked by hand on the usual path (zod per answer and per chunk was most of the
 * adapter's own CPU); anything unusual goes through zod, which gives the error.
 */
export function parseGeminiResponse(json: unknown): { success: true; data: GeminiResponse } | { success: false; error: { message: string } } {
  if (
    isObject(json) && nullishString(json.modelVersion) && nullishString(json.responseId) && isUsage(json.usageMetadata)
    && (json.candidates == null || (Array.isArray(json.candidates) && json.candidates.every(isCandidate)))
    && (json.promptFeedback == null || (isObject(json.promptFeedback) && nullishString(json.promptFeedback.blockReason) && nullishString(json.promptFeedback.blockReasonMessage)))
  ) {
    return { success: true, data: json as GeminiResponse };
  }
  return geminiResponseSchema.safeParse(json);
}
