import { Pool, type Dispatcher } from 'undici';
import type { ChatChoice, ChatStreamDelta, ToolCallDelta } from '@gateway/proto';
import {
  ProviderError,
  toProviderError,
  type AdapterChatRequest,
  type AdapterChatResult,
  type AdapterEmbedRequest,
  type AdapterEmbedResult,
  type AdapterStreamPart,
  type AttemptSignal,
  type ProviderAdapterV1,
} from '../provider-adapter.js';
import { openaiChunkSchema, openaiEmbeddingResponseSchema, parseOpenAIChatResponse } from './openai-api-types.js';
import { emptyUsage } from '../../usage/token-counter.js';
import { convertOpenAIUsage } from './convert-openai-usage.js';
import { convertToOpenAIRequest } from './convert-to-openai-request.js';
import { mapOpenAIFinishReason } from './map-openai-finish-reason.js';
import { openAIHttpError, openAIStreamError } from './openai-error.js';

export interface OpenAIAdapterOptions {
  providerId: string;
  /** e.g. https://api.openai.com/v1 */
  baseUrl: string;
  apiKey: string | undefined;
  /** Keep-alive connections per provider origin. */
  connections?: number;
}

/** Largest non-streamed answer or error body we read: beyond it the answer is treated as broken. */
const MAX_RESPONSE_BYTES = 32 * 1024 * 1024;
/** Most of an error answer we read: enough for the provider's message. */
const MAX_ERROR_BODY_BYTES = 64 * 1024;
/** Longest single SSE event we buffer while waiting for its blank line. */
const MAX_SSE_EVENT_BYTES = 8 * 1024 * 1024;

/** Any OpenAI-compatible chat-completions server (OpenAI, vLLM, OpenRouter, Groq, ...). */
export class OpenAIAdapter implements ProviderAdapterV1 {
  readonly specificationVersion = 'v1' as const;
  readonly kind = 'openai';
  readonly providerId: string;
  private readonly pool: Pool;
  private readonly pathPrefix: string;
  private readonly headers: Record<string, string>;
  private readonly streamHeaders: Record<string, string>;

  constructor(options: OpenAIAdapterOptions) {
    this.providerId = options.providerId;
    const url = new URL(options.baseUrl);
    this.pathPrefix = url.pathname.replace(/\/+$/, '');
    this.pool = new Pool(url.origin, {
      connections: options.connections ?? 128,
      keepAliveTimeout: 30_000,
      // Timeouts are the router's (per attempt, via the signal); undici's defaults of 300 s would outlive them anyway.
      headersTimeout: 0,
      bodyTimeout: 0,
    });
    this.headers = {
      'content-type': 'application/json',
      accept: 'application/json',
      ...(options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {}),
    };
    this.streamHeaders = { ...this.headers, accept: 'text/event-stream' };
  }

  /**
   * A whole (non-streamed) answer as text; an error status becomes the ProviderError it stands for.
   * Goes through undici's handler interface rather than `request()`: no response stream, async
   * iterator and AsyncResource per answer, which were a large part of routing's CPU per request.
   */
  private async postForText(body: unknown, signal: AttemptSignal, path: string): Promise<string> {
    let answer: { statusCode: number; text: string };
    try {
      answer = await bufferedRequest(this.pool, { method: 'POST', path: `${this.pathPrefix}${path}`, headers: this.headers, body: JSON.stringify(body) }, signal, MAX_RESPONSE_BYTES);
    } catch (error) {
      throw toProviderError(error, signal);
    }
    if (answer.statusCode >= 300) throw openAIHttpError(answer.statusCode, answer.text);
    return answer.text;
  }

  /** A streamed answer: the response body is read as it arrives. */
  private async postForStream(body: unknown, signal: AttemptSignal) {
    try {
      const response = await this.pool.request({
        method: 'POST',
        path: `${this.pathPrefix}/chat/completions`,
        headers: this.streamHeaders,
        body: JSON.stringify(body),
        // undici only calls add/removeEventListener and reads `reason`, which every AttemptSignal has.
        signal: signal as AbortSignal,
      });
      if (response.statusCode >= 300) {
        const text = await readBounded(response.body, MAX_ERROR_BODY_BYTES);
        throw openAIHttpError(response.statusCode, text);
      }
      return response;
    } catch (error) {
      throw toProviderError(error, signal);
    }
  }

  async chat(request: AdapterChatRequest, signal: AttemptSignal): Promise<AdapterChatResult> {
    const text = await this.postForText(convertToOpenAIRequest(request.chat, request.upstreamModel, false), signal, '/chat/completions');
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new ProviderError('connection', 'answer is not JSON');
    }
    const parsed = parseOpenAIChatResponse(json);
    if (!parsed.success) throw new ProviderError('connection', `malformed answer: ${parsed.error.message.slice(0, 300)}`);
    const choices: ChatChoice[] = parsed.data.choices.map((choice) => ({
      index: choice.index,
      finishReason: mapOpenAIFinishReason(choice.finish_reason),
      message: {
        content: choice.message.content ?? '',
        toolCalls: (choice.message.tool_calls ?? []).map((call) => ({
          id: call.id,
          name: call.function.name,
          arguments: call.function.arguments ?? '',
        })),
        reasoning:
          choice.message.reasoning_content || choice.message.reasoning
            ? [{ text: choice.message.reasoning_content ?? choice.message.reasoning ?? '', signature: '', encryptedData: '', providerId: this.providerId }]
            : [],
        images: [],
        ...(choice.message.refusal ? { refusal: choice.message.refusal } : {}),
      },
    }));
    return { choices, usage: convertOpenAIUsage(parsed.data.usage) };
  }

  async *chatStream(request: AdapterChatRequest, signal: AttemptSignal): AsyncIterable<AdapterStreamPart> {
    const response = await this.postForStream(convertToOpenAIRequest(request.chat, request.upstreamModel, true), signal);
    let sawDone = false;
    let sawFinish = false;
    let usageSent = false;
    try {
      for await (const data of readServerSentEvents(response.body)) {
        // Read on to the end of the body after [DONE] so the keep-alive connection goes back to the pool.
        if (data === '[DONE]' || sawDone) { sawDone = true; continue; }
        let json: unknown;
        try {
          json = JSON.parse(data);
        } catch {
          throw new ProviderError('connection', 'stream chunk is not JSON');
        }
        const parsed = openaiChunkSchema.safeParse(json);
        if (!parsed.success) throw new ProviderError('connection', `malformed stream chunk: ${parsed.error.message.slice(0, 300)}`);
        const chunk = parsed.data;
        if (chunk.error) throw openAIStreamError(chunk.error);
        for (const choice of chunk.choices ?? []) {
          const delta = convertDelta(choice);
          if (choice.finish_reason) sawFinish = true;
          if (delta) yield { type: 'delta', delta };
        }
        const usage = convertOpenAIUsage(chunk.usage);
        if (usage && !usageSent) { usageSent = true; yield { type: 'usage', usage }; }
      }
    } catch (error) {
      throw toProviderError(error, signal);
    } finally {
      if (!sawDone) response.body.destroy();
    }
    // A stream that ends without its finish (or [DONE]) was cut: the caller must not see it as complete.
    if (!sawDone && !sawFinish) throw new ProviderError('connection', 'stream ended before it finished');
  }

  async embed(request: AdapterEmbedRequest, signal: AttemptSignal): Promise<AdapterEmbedResult> {
    const body = {
      model: request.upstreamModel,
      input: request.texts.length > 0 ? request.texts : request.tokenInputs,
      encoding_format: 'float',
      ...(request.dimensions !== undefined ? { dimensions: request.dimensions } : {}),
    };
    const text = await this.postForText(body, signal, '/embeddings');
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

  async close(): Promise<void> {
    await this.pool.close().catch(() => undefined);
  }
}

function convertDelta(choice: {
  index: number;
  delta?: { content?: string | null; reasoning_content?: string | null; reasoning?: string | null; tool_calls?: { index: number; id?: string | null; function?: { name?: string | null; arguments?: string | null } | null }[] | null } | null;
  finish_reason?: string | null;
}): ChatStreamDelta | undefined {
  const content = choice.delta?.content ?? '';
  const reasoning = choice.delta?.reasoning_content ?? choice.delta?.reasoning ?? '';
  const toolCalls: ToolCallDelta[] = (choice.delta?.tool_calls ?? []).map((call) => ({
    index: call.index,
    id: call.id ?? '',
    name: call.function?.name ?? '',
    arguments: call.function?.arguments ?? '',
  }));
  const finishReason = choice.finish_reason ? mapOpenAIFinishReason(choice.finish_reason) : '';
  // Role-only and empty keep-alive chunks carry nothing a caller can see.
  if (!content && !reasoning && toolCalls.length === 0 && !finishReason) return undefined;
  return { choiceIndex: choice.index, content, toolCalls, reasoning, reasoningSignature: '', finishReason, images: [] };
}

/**
 * One request whose answer is read whole into a string, at most `maxBytes` of it (`MAX_ERROR_BODY_BYTES`
 * for an error status). Settles once: with the answer, or with the transport error, the signal's
 * reason when it aborts, or a ProviderError when the answer is too large (the connection is dropped then).
 */
function bufferedRequest(
  pool: Pool,
  options: Dispatcher.DispatchOptions,
  signal: AttemptSignal,
  maxBytes: number,
): Promise<{ statusCode: number; text: string }> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    pool.dispatch(options, new BufferingHandler(signal, maxBytes, resolve, reject));
  });
}

/** undici handler of `bufferedRequest`: one object per request (methods, not closures). */
class BufferingHandler implements Dispatcher.DispatchHandler {
  private settled = false;
  private failure: unknown;
  private abortRequest: ((reason: Error) => void) | undefined;
  private statusCode = 0;
  private size = 0;
  private readonly chunks: Buffer[] = [];
  private readonly onAbort = () => this.fail(this.signal.reason);

  constructor(
    private readonly signal: AttemptSignal,
    private limit: number,
    private readonly resolve: (answer: { statusCode: number; text: string }) => void,
    private readonly reject: (error: unknown) => void,
  ) {
    signal.addEventListener('abort', this.onAbort);
  }

  onConnect(abort: (reason: Error) => void) {
    if (this.settled) abort(this.failure instanceof Error ? this.failure : new Error('request aborted'));
    else this.abortRequest = abort;
  }

  onHeaders(statusCode: number) {
    this.statusCode = statusCode;
    if (statusCode >= 300) this.limit = MAX_ERROR_BODY_BYTES;
    return true;
  }

  onData(chunk: Buffer) {
    this.size += chunk.length;
    if (this.size > this.limit) {
      this.fail(new ProviderError('connection', `answer larger than ${this.limit} bytes`));
      return false;
    }
    this.chunks.push(chunk);
    return true;
  }

  onComplete() {
    if (this.settled) return;
    this.settle();
    const body = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size);
    this.resolve({ statusCode: this.statusCode, text: body.toString('utf8') });
  }

  onError(error: Error) {
    this.fail(error);
  }

  private settle() {
    this.settled = true;
    this.signal.removeEventListener('abort', this.onAbort);
  }

  private fail(error: unknown) {
    if (this.settled) return;
    this.settle();
    this.failure = error;
    this.reject(error);
    // undici reports the abort back through onError, which is ignored once settled.
    this.abortRequest?.(error instanceof Error ? error : new Error(String(error)));
  }
}

async function readBounded(body: AsyncIterable<Buffer>, maxBytes: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > maxBytes) throw new ProviderError('connection', `answer larger than ${maxBytes} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Yields the `data:` payload of each SSE event (multi-line data joined by newlines); comments are skipped. */
export async function* readServerSentEvents(body: AsyncIterable<Buffer | string>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of body) {
    buffer += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
    for (;;) {
      const match = /\r?\n\r?\n/.exec(buffer);
      if (!match) break;
      const event = buffer.slice(0, match.index);
      buffer = buffer.slice(match.index + match[0].length);
      const data = eventData(event);
      if (data !== undefined) yield data;
    }
    if (buffer.length > MAX_SSE_EVENT_BYTES) throw new ProviderError('connection', 'stream event too large');
  }
  const rest = eventData(buffer);
  if (rest !== undefined) yield rest;
}

function eventData(event: string): string | undefined {
  const lines = event.split(/\r?\n/).filter((line) => line.startsWith('data:'));
  if (lines.length === 0) return undefined;
  return lines.map((line) => line.slice(5).replace(/^ /, '')).join('\n');
}
