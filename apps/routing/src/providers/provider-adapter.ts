import type { ChatChoice, ChatRequest, ChatStreamDelta, Usage } from '@gateway/proto';
import type { CallerSignal } from '@gateway/platform';

/**
 * The one adapter contract (CONVENTIONS 2), versioned so a later shape can live beside this one while
 * adapters migrate. An adapter speaks one provider wire format; routing, failover and metering stay
 * outside it.
 */
export interface ProviderAdapterV1 {
  readonly specificationVersion: 'v1';
  readonly providerId: string;
  /** Adapter kind from the catalog (`openai`, `simulated`, ...). */
  readonly kind: string;
  chat(request: AdapterChatRequest, signal: AttemptSignal): Promise<AdapterChatResult>;
  /** Deltas as the provider sends them, then at most one usage part. Ends normally only on a complete stream. */
  chatStream(request: AdapterChatRequest, signal: AttemptSignal): AsyncIterable<AdapterStreamPart>;
  /**
   * The same stream read by the router (optional): the parts of each upstream read at once, one promise
   * per read instead of an async generator step per part. An adapter without it is read through
   * chatStream (`streamReader` below); with it, chatStream is this reader's parts one by one.
   */
  chatStreamReader?(request: AdapterChatRequest, signal: AttemptSignal): AdapterStreamReader;
  /**
   * Capabilities beyond chat are optional (DESIGN §6): a provider without them is not a candidate for
   * their endpoints, whatever offers the catalog lists.
   */
  embed?(request: AdapterEmbedRequest, signal: AttemptSignal): Promise<AdapterEmbedResult>;
  moderate?(request: AdapterModerateRequest, signal: AttemptSignal): Promise<AdapterModerateResult>;
  generateImages?(request: AdapterImageRequest, signal: AttemptSignal): Promise<AdapterImageResult>;
  editImages?(request: AdapterImageEditRequest, signal: AttemptSignal): Promise<AdapterImageResult>;
  /**
   * Resolves once the provider answered with its headers (a refusal rejects here, before any byte is
   * relayed); the audio then arrives as the provider produces it.
   */
  speak?(request: AdapterSpeakRequest, signal: AttemptSignal): Promise<AdapterSpeechResult>;
  transcribe?(request: AdapterTranscribeRequest, signal: AttemptSignal): Promise<AdapterTranscribeResult>;
  /** Releases connections (catalog change, shutdown). */
  close(): Promise<void>;
}

export type ProviderAdapter = ProviderAdapterV1;

/**
 * Reads a secret by the environment-variable name the catalog gave (the catalog names the variable,
 * never the secret). Secrets are never logged.
 */
export type SecretSource = (envName: string) => string | undefined;

/**
 * The cancellation of one provider attempt: the part of an AbortSignal adapters use (an AbortSignal
 * is one). The router passes a lighter object of its own: an AbortController (an EventTarget) per
 * attempt was about a tenth of routing's CPU per request.
 */
export interface AttemptSignal extends CallerSignal {
  readonly reason: unknown;
  throwIfAborted(): void;
  /**
   * The transport wrote the whole request (body included) to the upstream: from here the provider has
   * the prompt and may bill it, so a caller who leaves still pays for it (docs/billing.md, "A caller who
   * leaves before the answer"). Optional: a plain AbortSignal has none.
   */
  requestSent?(): void;
  /**
   * A stream's provider reported the prompt's counts before any content (Anthropic's `message_start`),
   * output counts 0: what a caller who leaves before the first content is charged. Optional.
   */
  promptReported?(usage: Usage): void;
  /**
   * The canonical parameters (libs/platform PARAMETERS names) the request set that the adapter's
   * converter could not send (its `unsent`, as vercel/ai's converters return warnings): the answer names
   * them in dropped_params, so nothing is left out silently. Called once per attempt, before the request
   * goes out, only when there are some. Optional: a plain AbortSignal has none.
   */
  parametersUnsent?(names: readonly string[]): void;
}

export interface AdapterChatRequest {
  /** The provider's own name of the model (the offer's upstream_model). */
  upstreamModel: string;
  /** Canonical request with unsupported parameters already removed. */
  chat: ChatRequest;
  /**
   * The catalog model's max_output_tokens, for providers that require an output bound when the request
   * sets none (admission already reserved for this many).
   */
  modelMaxOutputTokens?: number | undefined;
}

export interface AdapterChatResult {
  choices: ChatChoice[];
  /** Undefined when the provider reported no usage (the router counts tokens itself then). */
  usage: Usage | undefined;
  /** The provider's id and model name of its answer, when it names them (telemetry only). */
  response?: AdapterResponseIdentity | undefined;
}

/**
 * How the provider names its answer: its id (OpenAI `id`, Anthropic `id`, Gemini `responseId`) and the
 * model that produced it (`model`, Gemini `modelVersion`); '' for what it did not send. The attempt's
 * GenAI span shows them (gen_ai.response.id, gen_ai.response.model); nothing else reads them.
 */
export interface AdapterResponseIdentity {
  id: string;
  model: string;
}

export interface AdapterEmbedRequest {
  upstreamModel: string;
  /** Text inputs, or else token-id inputs (one entry per input). */
  texts: string[];
  tokenInputs: number[][];
  dimensions: number | undefined;
}

export interface AdapterEmbedResult {
  /** One vector per input, in input order. */
  embeddings: number[][];
  usage: Usage | undefined;
}

/** One part of a multimodal moderation input; an image is its URL (https: or data:). */
export type AdapterModerationPart = { type: 'text'; text: string } | { type: 'image_url'; url: string };

/**
 * Input tokens of one image in a moderation input, charged when the provider reports no usage (OpenAI
 * reports none for moderations); the edge holds the same per image.
 */
export const MODERATION_IMAGE_TOKENS = 2_000;

export interface AdapterModerateRequest {
  upstreamModel: string;
  /**
   * The input in the form the client wrote it (OpenAI's three forms), sent to the provider in that form:
   * one string (one result), an array of strings (one result each, in order), or an array of text and
   * image parts that together are ONE input (one result).
   */
  input: { form: 'string'; text: string } | { form: 'strings'; texts: string[] } | { form: 'multimodal'; parts: AdapterModerationPart[] };
}

export interface AdapterModerationResult {
  flagged: boolean;
  categories: Record<string, boolean>;
  /** Each in [0, 1]. */
  categoryScores: Record<string, number>;
  /** Category name to the input types (`text`, `image`, as OpenAI names them) its score applies to. */
  categoryAppliedInputTypes: Record<string, string[]>;
}

export interface AdapterModerateResult {
  /** One per input, in input order: one for `string` and `multimodal`, one per text for `strings`. */
  results: AdapterModerationResult[];
  usage: Usage | undefined;
}

export interface AdapterImageRequest {
  upstreamModel: string;
  prompt: string;
  n: number;
  /** `{w}x{h}`, already checked by the edge. */
  size: string | undefined;
  /** Pass-through knobs: set only when the model lists them in supported_parameters. */
  quality: string | undefined;
  background: string | undefined;
}

export interface AdapterInputImage {
  data: Uint8Array;
  filename: string;
  mediaType: string;
}

export interface AdapterImageEditRequest extends AdapterImageRequest {
  images: AdapterInputImage[];
  mask: AdapterInputImage | undefined;
}

export interface AdapterImage {
  /** The image bytes (adapters always ask the provider for b64_json). */
  data: Uint8Array;
  /** e.g. image/png. */
  mediaType: string;
  revisedPrompt: string | undefined;
}

export interface AdapterImageResult {
  images: AdapterImage[];
  /** Undefined when the provider reported none (the router meters 2048 output tokens per image then). */
  usage: Usage | undefined;
}

export interface AdapterSpeakRequest {
  upstreamModel: string;
  input: string;
  voice: string;
  speed: number | undefined;
  instructions: string | undefined;
  /** mp3 | opus | aac | flac | wav | pcm; undefined: the provider's default. */
  responseFormat: string | undefined;
}

export interface AdapterSpeechResult {
  /** The container the provider named; undefined when it named none (the caller then sees audio/mpeg). */
  contentType: string | undefined;
  /** Audio bytes as produced. Throws (ProviderError) when the provider cuts the answer short. */
  audio: AsyncIterable<Uint8Array>;
  /** Read after `audio` ended: what the provider reported, if anything. */
  usage(): Usage | undefined;
}

export interface AdapterTranscribeRequest {
  upstreamModel: string;
  /** The audio in a container the provider takes (the edge had the media service convert it). */
  audio: Uint8Array;
  filename: string;
  mediaType: string;
  prompt: string | undefined;
  /** ISO 639-1, lower case. */
  language: string | undefined;
  temperature: number | undefined;
  /** True: translate into English (the provider's translations endpoint). */
  translate: boolean;
  /** json | text | srt | vtt | verbose_json. */
  responseFormat: string;
}

export interface AdapterTranscribeResult {
  text: string;
  /** The body in responseFormat as the provider wrote it; empty for json. */
  content: string;
  usage: Usage | undefined;
}

/**
 * A stream's usage part may name the answer (`response`): read from an event the adapter parses anyway
 * (the usage chunk, Anthropic's message_start), never by extra work per frame.
 */
export type AdapterStreamPart = { type: 'delta'; delta: ChatStreamDelta } | { type: 'usage'; usage: Usage; response?: AdapterResponseIdentity | undefined };

/**
 * A chat stream read in batches: `next()` resolves with the parts one upstream read completed (never an
 * empty array), or undefined once the stream ended complete; it rejects as chatStream's iteration would
 * (a ProviderError). One read at a time. `close()` stops reading and drops the upstream request when the
 * stream has not ended; it may be called at any time, more than once.
 */
export interface AdapterStreamReader {
  next(): Promise<AdapterStreamPart[] | undefined>;
  close(): void;
}

/** The adapter's batch reader, or its chatStream read a part at a time (adapters that have none). */
export function streamReader(adapter: ProviderAdapterV1, request: AdapterChatRequest, signal: AttemptSignal): AdapterStreamReader {
  if (adapter.chatStreamReader) return adapter.chatStreamReader(request, signal);
  const iterator = adapter.chatStream(request, signal)[Symbol.asyncIterator]();
  return {
    next: () => iterator.next().then(oneAtATime),
    close: () => void iterator.return?.(undefined)?.catch?.(() => undefined),
  };
}

function oneAtATime(result: IteratorResult<AdapterStreamPart>): AdapterStreamPart[] | undefined {
  return result.done ? undefined : [result.value];
}

/**
 * Why an attempt failed, in the router's terms. `retryable` failures move the request to another
 * provider; the others are the provider's verdict on the request itself and go back to the caller.
 */
export type ProviderFailureKind =
  | 'connection' // reset, refused, cut stream, malformed answer
  | 'timeout'
  | 'overloaded' // 408, 429, 5xx, 529
  | 'misconfigured' // 401, 403, 404: our credentials or model name, not the caller's request
  | 'rejected' // the provider refused this request (400, 413, 422)
  | 'content_filter';

export class ProviderError extends Error {
  override name = 'ProviderError';
  constructor(
    readonly kind: ProviderFailureKind,
    /** The provider's own words (shown to the caller for `rejected`). */
    readonly providerMessage: string,
    readonly httpStatus = 0,
    options: { cause?: unknown; unsupportedParameter?: string } = {},
  ) {
    super(`${kind}${httpStatus ? ` (${httpStatus})` : ''}: ${providerMessage}`, options);
    this.unsupportedParameter = options.unsupportedParameter ?? '';
  }

  /**
   * A `rejected` answer that names one request parameter the upstream model does not take, in the
   * gateway's vocabulary (the chat completions spelling: `temperature`, `top_p`, `stop`,
   * `reasoning_effort`, …) or, for a field the gateway has no name for, as the provider spelled it
   * (an extra_body key). '' when the refusal names none. Routing learns it (learned-capabilities.ts).
   */
  readonly unsupportedParameter: string;

  get retryable(): boolean {
    return this.kind !== 'rejected' && this.kind !== 'content_filter';
  }
}

/** Turns an abort or network failure into a ProviderError; keeps ProviderErrors as they are. */
export function toProviderError(error: unknown, signal: AttemptSignal): ProviderError {
  if (error instanceof ProviderError) return error;
  if (signal.aborted) {
    const reason = signal.reason as { name?: string } | undefined;
    return new ProviderError(reason?.name === 'TimeoutError' ? 'timeout' : 'connection', 'request aborted', 0, { cause: error });
  }
  const message = error instanceof Error ? error.message : String(error);
  return new ProviderError('connection', message, 0, { cause: error });
}
