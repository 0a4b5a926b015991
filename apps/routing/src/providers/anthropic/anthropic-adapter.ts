import type { Pool } from 'undici';
import { ProviderError, toProviderError, type AdapterChatRequest, type AdapterChatResult, type AdapterResponseIdentity, type AdapterStreamPart, type AttemptSignal, type ProviderAdapterV1 } from '../provider-adapter.js';
import { bufferedRequest, MAX_RESPONSE_BYTES } from '../http/buffered-request.js';
import { createProviderPool } from '../http/provider-pool.js';
import { readServerSentEvents } from '../http/server-sent-events.js';
import { streamingRequest } from '../http/streaming-request.js';
import { anthropicMessageSchema, anthropicStreamEventSchema, type AnthropicRequestBody, type AnthropicUsage } from './anthropic-api-types.js';
import { anthropicHttpError } from './anthropic-error.js';
import { convertAnthropicAnswer } from './convert-anthropic-answer.js';
import { AnthropicStreamConverter } from './convert-anthropic-stream.js';
import { convertAnthropicUsage } from './convert-anthropic-usage.js';
import { convertToAnthropicRequest } from './convert-to-anthropic-request.js';
import { parseJsonAnswer, providerJson } from '../http/json-answer.js';

export interface AnthropicAdapterOptions {
  providerId: string;
  /**
   * The API root, as the Anthropic SDK's baseURL: `https://api.anthropic.com`. The adapter appends
   * `/v1/messages`; a base URL that already ends in `/v1` (written like an `openai` kind's) works too.
   */
  baseUrl: string;
  apiKey: string | undefined;
  /** Static extra request headers (catalog `headers`); the adapter's own auth and content headers win. */
  headers?: Record<string, string> | undefined;
  /** Keep-alive connections per provider origin. */
  connections?: number;
  /** The kind the adapter reports (default `anthropic`; Claude on Vertex reports `vertex`). */
  kind?: string;
  /**
   * The request path per model and streaming (default: `{base path}/v1/messages` for every model). The
   * origin stays the base URL's.
   */
  requestPath?: (upstreamModel: string, stream: boolean) => string;
  /** Rewrites the Messages body before it is sent (Vertex: the model goes into the path, `anthropic_version` into the body). */
  transformBody?: (body: AnthropicRequestBody) => object;
  /**
   * Headers of the current credentials (an OAuth bearer token), asked for before every request; they win
   * over all others. While the same object comes back, the merged request headers are reused.
   */
  authHeaders?: (signal: AttemptSignal) => Promise<Record<string, string>> | Record<string, string>;
  /** Maps an HTTP error answer (default anthropicHttpError; Vertex also drops a token it refused). */
  httpError?: (status: number, bodyText: string) => ProviderError;
}

/** The API version whose wire format this adapter speaks (anthropic-api-types.ts). */
export const ANTHROPIC_VERSION = '2023-06-01';

/** A whole Messages answer checked against its schema. */
const checkMessage = (json: unknown) => anthropicMessageSchema.safeParse(json);

/** Stream event types this adapter knows; others (a newer API's) are skipped without parsing. */
const KNOWN_EVENTS = new Set([
  'message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop', 'ping', 'error',
]);

/**
 * The Anthropic Messages API (`kind: anthropic`). Chat only: Anthropic has no embeddings endpoint. The
 * options for path, body and auth let Claude on Vertex (vertex/) speak the same format through it.
 */
export class AnthropicAdapter implements ProviderAdapterV1 {
  readonly specificationVersion = 'v1' as const;
  readonly kind: string;
  readonly providerId: string;
  private readonly pool: Pool;
  private readonly messagesPath: string;
  private readonly headers: Record<string, string>;
  private readonly streamHeaders: Record<string, string>;
  private readonly requestPath: ((upstreamModel: string, stream: boolean) => string) | undefined;
  private readonly transformBody: ((body: AnthropicRequestBody) => object) | undefined;
  private readonly authHeaders: AnthropicAdapterOptions['authHeaders'];
  private readonly httpError: (status: number, bodyText: string) => ProviderError;
  /** The last auth headers seen and the request headers merged with them (plain and streaming). */
  private lastAuth: Record<string, string> | undefined = undefined;
  private authedHeaders: Record<string, string> = {};
  private authedStreamHeaders: Record<string, string> = {};

  constructor(options: AnthropicAdapterOptions) {
    this.providerId = options.providerId;
    this.kind = options.kind ?? 'anthropic';
    this.requestPath = options.requestPath;
    this.transformBody = options.transformBody;
    this.authHeaders = options.authHeaders;
    this.httpError = options.httpError ?? anthropicHttpError;
    const url = new URL(options.baseUrl);
    this.messagesPath = `${url.pathname.replace(/\/+$/, '').replace(/\/v1$/, '')}/v1/messages`;
    this.pool = createProviderPool(url.origin, options.connections);
    this.headers = {
      ...options.headers,
      'content-type': 'application/json',
      accept: 'application/json',
      'anthropic-version': ANTHROPIC_VERSION,
      ...(options.apiKey ? { 'x-api-key': options.apiKey } : {}),
    };
    this.streamHeaders = { ...this.headers, accept: 'text/event-stream' };
  }

  /** The body, and what it goes without reported to the attempt (AttemptSignal.parametersUnsent). */
  private convert(request: AdapterChatRequest, stream: boolean, signal: AttemptSignal) {
    const converted = convertToAnthropicRequest(request.chat, {
      upstreamModel: request.upstreamModel,
      stream,
      providerId: this.providerId,
      modelMaxOutputTokens: request.modelMaxOutputTokens,
    });
    if (converted.unsent.length > 0) signal.parametersUnsent?.(converted.unsent);
    return converted;
  }

  /** The request headers with the current credentials (the static ones when the adapter has no authHeaders). */
  private async authorizedHeaders(stream: boolean, signal: AttemptSignal): Promise<Record<string, string>> {
    const auth = await this.authHeaders!(signal);
    if (auth !== this.lastAuth) {
      this.authedHeaders = { ...this.headers, ...auth };
      this.authedStreamHeaders = { ...this.streamHeaders, ...auth };
      this.lastAuth = auth;
    }
    return stream ? this.authedStreamHeaders : this.authedHeaders;
  }

  private serialize(body: AnthropicRequestBody): string {
    return JSON.stringify(this.transformBody ? this.transformBody(body) : body);
  }

  async chat(request: AdapterChatRequest, signal: AttemptSignal): Promise<AdapterChatResult> {
    const { body, tools } = this.convert(request, false, signal);
    const path = this.requestPath ? this.requestPath(request.upstreamModel, false) : this.messagesPath;
    let answer: { statusCode: number; text: string };
    try {
      const headers = withBetas(this.authHeaders ? await this.authorizedHeaders(false, signal) : this.headers, request.chat.anthropicBeta);
      answer = await bufferedRequest(this.pool, { method: 'POST', path, headers, body: this.serialize(body) }, signal, MAX_RESPONSE_BYTES);
    } catch (error) {
      throw toProviderError(error, signal);
    }
    if (answer.statusCode >= 300) throw this.httpError(answer.statusCode, answer.text);
    const parsed = parseJsonAnswer(answer.text, checkMessage);
    return {
      choices: [convertAnthropicAnswer(parsed, this.providerId, tools)], usage: convertAnthropicUsage(parsed.usage),
      response: { id: parsed.id ?? '', model: parsed.model ?? '' },
    };
  }

  async *chatStream(request: AdapterChatRequest, signal: AttemptSignal): AsyncIterable<AdapterStreamPart> {
    const { body, tools } = this.convert(request, true, signal);
    const path = this.requestPath ? this.requestPath(request.upstreamModel, true) : this.messagesPath;
    let headers = this.streamHeaders;
    if (this.authHeaders) {
      try {
        headers = await this.authorizedHeaders(true, signal);
      } catch (error) {
        throw toProviderError(error, signal);
      }
    }
    headers = withBetas(headers, request.chat.anthropicBeta);
    const response = await streamingRequest(this.pool, { method: 'POST', path, headers, body: this.serialize(body) }, signal, this.httpError);
    const converter = new AnthropicStreamConverter(tools);
    // The answer's id and model, from message_start (read once, with its prompt counts).
    let identity: AdapterResponseIdentity | undefined;
    try {
      for await (const event of readServerSentEvents(response.body)) {
        // Read on to the end of the body after message_stop so the keep-alive connection goes back to the pool.
        if (converter.complete) continue;
        const json = providerJson(event.data, 'stream event');
        // The SDK routes by the `event:` name; the data's `type` says the same (and is all a proxy that drops names leaves).
        const type = event.event || (json as { type?: unknown } | null)?.type;
        if (typeof type !== 'string' || !KNOWN_EVENTS.has(type)) continue;
        const parsed = anthropicStreamEventSchema.safeParse(json);
        if (!parsed.success) throw new ProviderError('connection', `malformed stream event ${type}: ${parsed.error.message.slice(0, 300)}`);
        const delta = converter.accept(parsed.data);
        if (delta) yield { type: 'delta', delta };
        else if (parsed.data.type === 'message_start') {
          const message = parsed.data.message;
          identity = { id: message.id ?? '', model: message.model ?? '' };
          reportPrompt(signal, message.usage);
        }
        if (converter.complete) {
          const usage = converter.usage;
          if (usage) yield { type: 'usage', usage, response: identity };
        }
      }
    } catch (error) {
      throw toProviderError(error, signal);
    } finally {
      if (!converter.complete) response.body.destroy();
    }
    // A stream that ends before message_stop was cut: the caller must not see it as complete.
    if (!converter.complete) throw new ProviderError('connection', 'stream ended before message_stop');
  }

  async close(): Promise<void> {
    await this.pool.close().catch(() => undefined);
  }
}

/**
 * The prompt's counts from `message_start`, before any content: a caller who leaves now pays for them
 * (AttemptSignal.promptReported). Its first output count is not output delivered: 0 here.
 */
function reportPrompt(signal: AttemptSignal, usage: AnthropicUsage | null | undefined): void {
  if (!signal.promptReported) return;
  const prompt = convertAnthropicUsage(usage);
  if (prompt) signal.promptReported({ ...prompt, outputTokens: 0 });
}

/**
 * The client's allowlisted `anthropic-beta` values (the edge kept only libs/platform's ANTHROPIC_BETAS)
 * as the request's header; the shared headers object as it is when there are none (the usual request).
 */
function withBetas(headers: Record<string, string>, betas: string | undefined): Record<string, string> {
  return betas === undefined || betas === '' ? headers : { ...headers, 'anthropic-beta': betas };
}
