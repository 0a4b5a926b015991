import type { Pool } from 'undici';
import type { ZodType } from 'zod';
import { ProviderError, toProviderError, type AdapterChatRequest, type AdapterChatResult, type AdapterEmbedRequest, type AdapterEmbedResult, type AdapterStreamPart, type AttemptSignal, type ProviderAdapterV1 } from '../provider-adapter.js';
import { bufferedRequest, MAX_RESPONSE_BYTES } from '../http/buffered-request.js';
import { createProviderPool } from '../http/provider-pool.js';
import { readServerSentEvents } from '../http/server-sent-events.js';
import { streamingRequest } from '../http/streaming-request.js';
import { geminiEmbedResponseSchema, parseGeminiResponse } from './gemini-api-types.js';
import { geminiHttpError, geminiStreamError } from './gemini-error.js';
import { convertGeminiAnswers } from './convert-gemini-answer.js';
import { GeminiStreamConverter } from './convert-gemini-stream.js';
import { convertGeminiUsage } from './convert-gemini-usage.js';
import { convertToGeminiRequest } from './convert-to-gemini-request.js';
import { parseJsonAnswer, providerJson } from '../http/json-answer.js';

/** Most requests batchEmbedContents takes in one call. */
export const MAX_EMBED_BATCH = 100;

export type GeminiMethod = 'generateContent' | 'streamGenerateContent' | 'batchEmbedContents';

export interface GeminiAdapterOptions {
  providerId: string;
  /** The adapter kind reported to the router (`gemini`, or `vertex` when Vertex AI reuses this adapter). */
  kind: string;
  /** The provider's base URL; its origin is where the connections go. */
  baseUrl: string;
  /**
   * The request path (on the origin of `baseUrl`, starting with `/`, without query) of a model's
   * method, e.g. `/v1beta/models/gemini-2.5-flash:generateContent`. Streaming adds `?alt=sse` itself.
   */
  modelPath: (model: string, method: GeminiMethod) => string;
  /**
   * The authentication headers of one request (`x-goog-api-key` for the Gemini API, a Bearer token on
   * Vertex AI). Returning the same object again (a fixed key) lets the adapter reuse its merged headers.
   */
  authHeaders: () => Promise<Record<string, string>> | Record<string, string>;
  /** Static extra request headers (catalog `headers`); the adapter's own auth and content headers win. */
  headers?: Record<string, string>;
  /** Keep-alive connections per provider origin. */
  connections?: number;
  /**
   * Turns an HTTP error answer into a ProviderError (default geminiHttpError); Vertex wraps it to drop
   * a token the service refused.
   */
  httpError?: (status: number, bodyText: string) => ProviderError;
}

/** The request headers for one auth value, merged once per distinct auth object. */
interface MergedHeaders {
  auth: Record<string, string> | undefined;
  json: Record<string, string>;
  stream: Record<string, string>;
}

function parseJson<Schema extends ZodType>(schema: Schema, text: string, what: string): ReturnType<Schema['parse']> {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ProviderError('connection', `${what} is not JSON`);
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) throw new ProviderError('connection', `malformed ${what}: ${parsed.error.message.slice(0, 300)}`);
  return parsed.data as ReturnType<Schema['parse']>;
}

/** The auth headers being fetched, given up on when the attempt is cancelled (the fetch itself goes on for the next request). */
function untilAborted<T>(pending: Promise<T>, signal: AttemptSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    pending.then(
      (value) => { signal.removeEventListener('abort', onAbort); resolve(value); },
      (error: unknown) => { signal.removeEventListener('abort', onAbort); reject(error); },
    );
  });
}

/**
 * Gemini `generateContent` (`kind: gemini`; also the Gemini models of `kind: vertex`, which differ only
 * in their paths and auth): chat, streamed chat (SSE of GenerateContentResponse) and embeddings.
 */
export class GeminiAdapter implements ProviderAdapterV1 {
  readonly specificationVersion = 'v1' as const;
  readonly kind: string;
  readonly providerId: string;
  private readonly pool: Pool;
  private readonly modelPath: GeminiAdapterOptions['modelPath'];
  private readonly authHeaders: GeminiAdapterOptions['authHeaders'];
  private readonly extraHeaders: Record<string, string>;
  private readonly httpError: (status: number, bodyText: string) => ProviderError;
  private merged: MergedHeaders = { auth: undefined, json: {}, stream: {} };

  constructor(options: GeminiAdapterOptions) {
    this.providerId = options.providerId;
    this.kind = options.kind;
    this.modelPath = options.modelPath;
    this.authHeaders = options.authHeaders;
    this.extraHeaders = options.headers ?? {};
    this.httpError = options.httpError ?? geminiHttpError;
    this.pool = createProviderPool(new URL(options.baseUrl).origin, options.connections);
  }

  /** The merged headers for the current auth value; no promise when the auth is a fixed object (a key). */
  private headers(): MergedHeaders | Promise<MergedHeaders> {
    const provided = this.authHeaders();
    return provided instanceof Promise ? provided.then((auth) => this.mergedFor(auth)) : this.mergedFor(provided);
  }

  private mergedFor(auth: Record<string, string>): MergedHeaders {
    if (auth === this.merged.auth) return this.merged;
    const json = { ...this.extraHeaders, 'content-type': 'application/json', accept: 'application/json', ...auth };
    this.merged = { auth, json, stream: { ...json, accept: 'text/event-stream' } };
    return this.merged;
  }

  private async post(path: string, body: unknown, signal: AttemptSignal): Promise<string> {
    let answer: { statusCode: number; text: string };
    try {
      const pending = this.headers();
      const { json } = pending instanceof Promise ? await untilAborted(pending, signal) : pending;
      answer = await bufferedRequest(this.pool, { method: 'POST', path, headers: json, body: JSON.stringify(body) }, signal, MAX_RESPONSE_BYTES);
    } catch (error) {
      throw toProviderError(error, signal);
    }
    if (answer.statusCode >= 300) throw this.httpError(answer.statusCode, answer.text);
    return answer.text;
  }

  async chat(request: AdapterChatRequest, signal: AttemptSignal): Promise<AdapterChatResult> {
    const { body, names, unsent } = convertToGeminiRequest(request.chat, { providerId: this.providerId, upstreamModel: request.upstreamModel });
    if (unsent.length > 0) signal.parametersUnsent?.(unsent);
    const text = await this.post(this.modelPath(request.upstreamModel, 'generateContent'), body, signal);
    const answer = parseJsonAnswer(text, parseGeminiResponse);
    return {
      choices: convertGeminiAnswers(answer, this.providerId, names), usage: convertGeminiUsage(answer.usageMetadata),
      response: { id: answer.responseId ?? '', model: answer.modelVersion ?? '' },
    };
  }

  async *chatStream(request: AdapterChatRequest, signal: AttemptSignal): AsyncIterable<AdapterStreamPart> {
    const { body, names, unsent } = convertToGeminiRequest(request.chat, { providerId: this.providerId, upstreamModel: request.upstreamModel });
    if (unsent.length > 0) signal.parametersUnsent?.(unsent);
    let headers: MergedHeaders;
    try {
      const pending = this.headers();
      headers = pending instanceof Promise ? await untilAborted(pending, signal) : pending;
    } catch (error) {
      throw toProviderError(error, signal);
    }
    const response = await streamingRequest(
      this.pool,
      { method: 'POST', path: `${this.modelPath(request.upstreamModel, 'streamGenerateContent')}?alt=sse`, headers: headers.stream, body: JSON.stringify(body) },
      signal,
      this.httpError,
    );
    const converter = new GeminiStreamConverter(this.providerId, names);
    let ended = false;
    // Each chunk as parsed; after the loop, the last one (finish reason, final usage) names the answer (read once).
    let parsed: ReturnType<typeof parseGeminiResponse> | undefined;
    try {
      for await (const event of readServerSentEvents(response.body)) {
        const json = providerJson(event.data, 'stream event');
        // A failure after the 200 comes as an error object in the stream.
        if (json !== null && typeof json === 'object' && 'error' in json) throw geminiStreamError(event.data);
        parsed = parseGeminiResponse(json);
        if (!parsed.success) throw new ProviderError('connection', `malformed stream chunk: ${parsed.error.message.slice(0, 300)}`);
        for (const delta of converter.accept(parsed.data)) yield { type: 'delta', delta };
      }
      ended = true;
    } catch (error) {
      throw toProviderError(error, signal);
    } finally {
      if (!ended) response.body.destroy();
    }
    // Gemini ends a complete stream with a chunk holding the finish reason (and the final usage) and then
    // closes the body: a body that closes before that chunk was cut.
    if (!converter.complete) throw new ProviderError('connection', 'stream ended before a finish reason');
    const usage = converter.usage;
    const last = parsed?.success ? parsed.data : undefined;
    if (usage) yield { type: 'usage', usage, response: last && { id: last.responseId ?? '', model: last.modelVersion ?? '' } };
  }

  async embed(request: AdapterEmbedRequest, signal: AttemptSignal): Promise<AdapterEmbedResult> {
    if (request.texts.length === 0) throw new ProviderError('rejected', 'this provider embeds text only, not token ids', 400);
    const model = request.upstreamModel.includes('/') ? request.upstreamModel : `models/${request.upstreamModel}`;
    const path = this.modelPath(request.upstreamModel, 'batchEmbedContents');
    const dimensions = request.dimensions !== undefined ? { outputDimensionality: request.dimensions } : {};
    // The API takes at most 100 requests per batch: larger inputs go as several batches, side by side.
    const batches: Promise<number[][]>[] = [];
    for (let start = 0; start < request.texts.length; start += MAX_EMBED_BATCH) {
      const texts = request.texts.slice(start, start + MAX_EMBED_BATCH);
      const body = { requests: texts.map((text) => ({ model, content: { parts: [{ text }] }, ...dimensions })) };
      batches.push(this.post(path, body, signal).then((text) => {
        const answer = parseJson(geminiEmbedResponseSchema, text, 'embeddings answer');
        if (answer.embeddings.length !== texts.length) throw new ProviderError('connection', `expected ${texts.length} embeddings, got ${answer.embeddings.length}`);
        return answer.embeddings.map((embedding) => embedding.values);
      }));
    }
    const embeddings = (await Promise.all(batches)).flat();
    // batchEmbedContents reports no token counts: the router counts them.
    return { embeddings, usage: undefined };
  }

  async close(): Promise<void> {
    await this.pool.close().catch(() => undefined);
  }
}
