import type { Pool } from 'undici';
import { ProviderError, toProviderError, type AdapterChatRequest, type AdapterChatResult, type AdapterEmbedRequest, type AdapterEmbedResult, type AdapterImageEditRequest, type AdapterImageRequest, type AdapterImageResult, type AdapterModerateRequest, type AdapterModerateResult, type AdapterSpeakRequest, type AdapterSpeechResult, type AdapterTranscribeRequest, type AdapterTranscribeResult, type AdapterStreamPart, type AdapterStreamReader, type AttemptSignal, type ProviderAdapterV1 } from '../provider-adapter.js';
import { openaiEmbeddingResponseSchema, parseOpenAIChatResponse } from './openai-api-types.js';
import { emptyUsage } from '../../usage/token-counter.js';
import { convertOpenAIUsage } from './convert-openai-usage.js';
import { convertToOpenAIRequest } from './convert-to-openai-request.js';
import { convertOpenAIAnswer } from './convert-openai-answer.js';
import { FILTERED_ANSWER_MESSAGE, OpenAIStreamReader } from './openai-stream-reader.js';
import { openAIHttpError } from './openai-error.js';
import { bufferedRequest, MAX_RESPONSE_BYTES } from '../http/buffered-request.js';
import { createProviderPool } from '../http/provider-pool.js';
import { streamingRequest } from '../http/streaming-request.js';
import { multipartBody, type MultipartPart } from '../http/multipart-body.js';
import { openaiImagesResponseSchema, openaiModerationResponseSchema, openaiTranscriptionSchema } from './openai-media-types.js';
import { parseJsonAnswer } from '../http/json-answer.js';

/** The OpenAI routes the adapter calls, relative to the API root. */
export type OpenAIRoute =
  | '/chat/completions'
  | '/embeddings'
  | '/moderations'
  | '/images/generations'
  | '/images/edits'
  | '/audio/speech'
  | '/audio/transcriptions'
  | '/audio/translations';

export interface OpenAIAdapterOptions {
  providerId: string;
  /** e.g. https://api.openai.com/v1 */
  baseUrl: string;
  apiKey: string | undefined;
  /** Static extra request headers (catalog `headers`); the adapter's own auth and content headers win. */
  headers?: Record<string, string> | undefined;
  /** Keep-alive connections per provider origin. */
  connections?: number;
  /**
   * The request path (with any query) of a route for an upstream model. Default: the base URL's path
   * followed by the route. Servers that put the model into the URL (Azure deployments) pass their own.
   */
  pathFor?: ((route: OpenAIRoute, upstreamModel: string) => string) | undefined;
  /** The header(s) that carry the key. Default: `authorization: Bearer <key>`. */
  authHeaders?: ((apiKey: string) => Record<string, string>) | undefined;
  /** Maps an HTTP error answer onto a ProviderError. Default: openAIHttpError. */
  httpError?: ((status: number, bodyText: string) => ProviderError) | undefined;
  /**
   * True: an answer (or stream) that finishes with `content_filter` fails as a content_filter
   * ProviderError instead of ending normally (servers that withhold filtered output, such as Azure).
   */
  filteredAnswerFails?: boolean | undefined;
}

export { FILTERED_ANSWER_MESSAGE };

/** Any OpenAI-compatible chat-completions server (OpenAI, vLLM, OpenRouter, Groq, ...). */
export class OpenAIAdapter implements ProviderAdapterV1 {
  readonly specificationVersion = 'v1' as const;
  readonly kind = 'openai';
  readonly providerId: string;
  private readonly pool: Pool;
  private readonly pathFor: (route: OpenAIRoute, upstreamModel: string) => string;
  private readonly httpError: (status: number, bodyText: string) => ProviderError;
  private readonly filteredAnswerFails: boolean;
  private readonly headers: Record<string, string>;
  private readonly streamHeaders: Record<string, string>;

  constructor(options: OpenAIAdapterOptions) {
    this.providerId = options.providerId;
    const url = new URL(options.baseUrl);
    const pathPrefix = url.pathname.replace(/\/+$/, '');
    this.pathFor = options.pathFor ?? ((route) => `${pathPrefix}${route}`);
    this.httpError = options.httpError ?? openAIHttpError;
    this.filteredAnswerFails = options.filteredAnswerFails === true;
    this.pool = createProviderPool(url.origin, options.connections);
    this.headers = {
      ...options.headers,
      'content-type': 'application/json',
      accept: 'application/json',
      ...(options.apiKey ? (options.authHeaders ? options.authHeaders(options.apiKey) : { authorization: `Bearer ${options.apiKey}` }) : {}),
    };
    this.streamHeaders = { ...this.headers, accept: 'text/event-stream' };
  }

  /** A whole (non-streamed) answer as text; an error status becomes the ProviderError it stands for. */
  private async postForText(body: unknown, signal: AttemptSignal, route: OpenAIRoute, upstreamModel: string): Promise<string> {
    let answer: { statusCode: number; text: string };
    try {
      answer = await bufferedRequest(this.pool, { method: 'POST', path: this.pathFor(route, upstreamModel), headers: this.headers, body: JSON.stringify(body) }, signal, MAX_RESPONSE_BYTES);
    } catch (error) {
      throw toProviderError(error, signal);
    }
    if (answer.statusCode >= 300) throw this.httpError(answer.statusCode, answer.text);
    return answer.text;
  }

  /** A multipart upload whose answer is read whole (image edits, transcriptions). */
  private async postMultipart(parts: readonly MultipartPart[], signal: AttemptSignal, route: OpenAIRoute, upstreamModel: string, accept = 'application/json'): Promise<string> {
    const { body, contentType } = multipartBody(parts);
    let answer: { statusCode: number; text: string };
    try {
      answer = await bufferedRequest(
        this.pool,
        { method: 'POST', path: this.pathFor(route, upstreamModel), headers: { ...this.headers, 'content-type': contentType, accept }, body },
        signal,
        MAX_RESPONSE_BYTES,
      );
    } catch (error) {
      throw toProviderError(error, signal);
    }
    if (answer.statusCode >= 300) throw this.httpError(answer.statusCode, answer.text);
    return answer.text;
  }

  /** A streamed answer: the response body is read as it arrives. */
  private postForStream(body: unknown, signal: AttemptSignal, upstreamModel: string) {
    return streamingRequest(
      this.pool,
      { method: 'POST', path: this.pathFor('/chat/completions', upstreamModel), headers: this.streamHeaders, body: JSON.stringify(body) },
      signal,
      this.httpError,
    );
  }

  async chat(request: AdapterChatRequest, signal: AttemptSignal): Promise<AdapterChatResult> {
    const converted = convertToOpenAIRequest(request.chat, { upstreamModel: request.upstreamModel, stream: false });
    if (converted.unsent.length > 0) signal.parametersUnsent?.(converted.unsent);
    const text = await this.postForText(converted.body, signal, '/chat/completions', request.upstreamModel);
    const parsed = parseJsonAnswer(text, parseOpenAIChatResponse);
    const choices = convertOpenAIAnswer(parsed, this.providerId);
    if (this.filteredAnswerFails && choices.some((choice) => choice.finishReason === 'content_filter')) {
      throw new ProviderError('content_filter', FILTERED_ANSWER_MESSAGE);
    }
    return { choices, usage: convertOpenAIUsage(parsed.usage), response: { id: parsed.id ?? '', model: parsed.model ?? '' } };
  }

  async *chatStream(request: AdapterChatRequest, signal: AttemptSignal): AsyncIterable<AdapterStreamPart> {
    const reader = this.chatStreamReader(request, signal);
    try {
      for (let parts = await reader.next(); parts !== undefined; parts = await reader.next()) yield* parts;
    } finally {
      reader.close();
    }
  }

  chatStreamReader(request: AdapterChatRequest, signal: AttemptSignal): AdapterStreamReader {
    const converted = convertToOpenAIRequest(request.chat, { upstreamModel: request.upstreamModel, stream: true });
    if (converted.unsent.length > 0) signal.parametersUnsent?.(converted.unsent);
    return new OpenAIStreamReader(this.postForStream(converted.body, signal, request.upstreamModel), signal, this.filteredAnswerFails);
  }

  async embed(request: AdapterEmbedRequest, signal: AttemptSignal): Promise<AdapterEmbedResult> {
    const body = {
      model: request.upstreamModel,
      input: request.texts.length > 0 ? request.texts : request.tokenInputs,
      encoding_format: 'float',
      ...(request.dimensions !== undefined ? { dimensions: request.dimensions } : {}),
    };
    const text = await this.postForText(body, signal, '/embeddings', request.upstreamModel);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (error) {
      throw toProviderError(error, signal);
    }
    const parsed = openaiEmbeddingResponseSchema.safeParse(json);
    if (!parsed.success) throw new ProviderError('connection', `malformed embeddings answer: ${parsed.error.message.slice(0, 300)}`);
    const expected = Math.max(request.texts.length, request.tokenInputs.length);
    const ordered = [...parsed.data.data].sort((a, b) => a.index - b.index);
    if (ordered.length !== expected) throw new ProviderError('connection', `expected ${expected} embeddings, got ${ordered.length}`);
    const promptTokens = parsed.data.usage?.prompt_tokens;
    return {
      embeddings: ordered.map((item) => item.embedding),
      usage: promptTokens ? { ...emptyUsage(), inputTokens: promptTokens } : undefined,
    };
  }

  async moderate(request: AdapterModerateRequest, signal: AttemptSignal): Promise<AdapterModerateResult> {
    // The form the client wrote, as OpenAI reads it: an array of objects is ONE multimodal input.
    const source = request.input;
    const input =
      source.form === 'string'
        ? source.text
        : source.form === 'strings'
          ? source.texts
          : source.parts.map((part) => (part.type === 'text' ? { type: 'text', text: part.text } : { type: 'image_url', image_url: { url: part.url } }));
    const parsed = parseAnswer(openaiModerationResponseSchema, await this.postForText({ model: request.upstreamModel, input }, signal, '/moderations', request.upstreamModel), 'moderation');
    return {
      results: parsed.results.map((result) => ({
        flagged: result.flagged,
        categories: Object.fromEntries(Object.entries(result.categories).map(([name, value]) => [name, value === true])),
        categoryScores: result.category_scores,
        categoryAppliedInputTypes: result.category_applied_input_types ?? Object.fromEntries(Object.keys(result.category_scores).map((name) => [name, ['text']])),
      })),
      usage: undefined,
    };
  }

  async generateImages(request: AdapterImageRequest, signal: AttemptSignal): Promise<AdapterImageResult> {
    const body = {
      model: request.upstreamModel,
      prompt: request.prompt,
      n: request.n,
      response_format: 'b64_json',
      ...(request.size ? { size: request.size } : {}),
      ...(request.quality ? { quality: request.quality } : {}),
      ...(request.background ? { background: request.background } : {}),
    };
    return imagesResult(await this.postForText(body, signal, '/images/generations', request.upstreamModel));
  }

  async editImages(request: AdapterImageEditRequest, signal: AttemptSignal): Promise<AdapterImageResult> {
    const parts: MultipartPart[] = [
      { name: 'model', value: request.upstreamModel },
      { name: 'prompt', value: request.prompt },
      { name: 'n', value: String(request.n) },
      { name: 'response_format', value: 'b64_json' },
      ...(request.size ? [{ name: 'size', value: request.size }] : []),
      ...(request.quality ? [{ name: 'quality', value: request.quality }] : []),
      ...(request.background ? [{ name: 'background', value: request.background }] : []),
      ...request.images.map((image) => ({ name: 'image[]', filename: image.filename, contentType: image.mediaType, data: image.data })),
      ...(request.mask ? [{ name: 'mask', filename: request.mask.filename, contentType: request.mask.mediaType, data: request.mask.data }] : []),
    ];
    return imagesResult(await this.postMultipart(parts, signal, '/images/edits', request.upstreamModel));
  }

  async speak(request: AdapterSpeakRequest, signal: AttemptSignal): Promise<AdapterSpeechResult> {
    const body = {
      model: request.upstreamModel,
      input: request.input,
      voice: request.voice,
      ...(request.speed !== undefined ? { speed: request.speed } : {}),
      ...(request.instructions ? { instructions: request.instructions } : {}),
      ...(request.responseFormat ? { response_format: request.responseFormat } : {}),
    };
    const response = await streamingRequest(
      this.pool,
      { method: 'POST', path: this.pathFor('/audio/speech', request.upstreamModel), headers: { ...this.headers, accept: 'audio/*' }, body: JSON.stringify(body) },
      signal,
      this.httpError,
    );
    const header = response.headers['content-type'];
    const contentType = (Array.isArray(header) ? header[0] : header) || undefined;
    async function* audio(): AsyncGenerator<Uint8Array> {
      try {
        for await (const chunk of response.body as AsyncIterable<Buffer>) yield chunk;
      } catch (error) {
        throw toProviderError(error, signal);
      }
    }
    return { contentType, audio: audio(), usage: () => undefined };
  }

  async transcribe(request: AdapterTranscribeRequest, signal: AttemptSignal): Promise<AdapterTranscribeResult> {
    const parts: MultipartPart[] = [
      { name: 'model', value: request.upstreamModel },
      { name: 'file', filename: request.filename, contentType: request.mediaType, data: request.audio },
      { name: 'response_format', value: request.responseFormat },
      ...(request.prompt ? [{ name: 'prompt', value: request.prompt }] : []),
      ...(request.language && !request.translate ? [{ name: 'language', value: request.language }] : []),
      ...(request.temperature !== undefined ? [{ name: 'temperature', value: String(request.temperature) }] : []),
    ];
    const text = await this.postMultipart(parts, signal, request.translate ? '/audio/translations' : '/audio/transcriptions', request.upstreamModel, '*/*');
    if (request.responseFormat !== 'json' && request.responseFormat !== 'verbose_json') return { text: text.trim(), content: text, usage: undefined };
    const parsed = parseAnswer(openaiTranscriptionSchema, text, 'transcription');
    const usage = parsed.usage;
    const durationMs = parsed.duration !== undefined ? Math.round(parsed.duration * 1000) : usage?.seconds !== undefined ? Math.round(usage.seconds * 1000) : 0;
    return {
      text: parsed.text,
      content: request.responseFormat === 'verbose_json' ? text : '',
      usage:
        durationMs || usage?.input_tokens
          ? {
              ...emptyUsage(),
              inputAudioMs: durationMs,
              inputAudioTokens: usage?.input_token_details?.audio_tokens ?? 0,
              inputTextTokens: usage?.input_token_details?.text_tokens ?? 0,
              outputTextTokens: usage?.output_tokens ?? 0,
            }
          : undefined,
    };
  }

  async close(): Promise<void> {
    await this.pool.close().catch(() => undefined);
  }
}

/** A JSON answer checked with its schema; unreadable or malformed is a broken answer (the router fails over). */
function parseAnswer<Schema extends import('zod').ZodType>(schema: Schema, text: string, what: string): import('zod').infer<Schema> {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ProviderError('connection', `malformed ${what} answer: not JSON`);
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) throw new ProviderError('connection', `malformed ${what} answer: ${parsed.error.message.slice(0, 300)}`);
  return parsed.data;
}

function imagesResult(text: string): AdapterImageResult {
  const parsed = parseAnswer(openaiImagesResponseSchema, text, 'images');
  const images = parsed.data.map((item) => {
    if (!item.b64_json) throw new ProviderError('connection', 'images answer without b64_json data');
    return { data: Buffer.from(item.b64_json, 'base64'), mediaType: 'image/png', revisedPrompt: item.revised_prompt ?? undefined };
  });
  const usage = parsed.usage;
  return {
    images,
    usage: usage?.output_tokens
      ? {
          ...emptyUsage(),
          outputImageTokens: usage.output_tokens,
          inputTextTokens: usage.input_tokens_details?.text_tokens ?? usage.input_tokens ?? 0,
          inputImageTokens: usage.input_tokens_details?.image_tokens ?? 0,
        }
      : undefined,
  };
}
