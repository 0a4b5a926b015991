import type { Pool } from 'undici';
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
import { bufferedRequest, MAX_RESPONSE_BYTES } from '../http/buffered-request.js';
import { createProviderPool } from '../http/provider-pool.js';
import { readServerSentEvents } from '../http/server-sent-events.js';
import { streamingRequest } from '../http/streaming-request.js';

export interface OpenAIAdapterOptions {
  providerId: string;
  /** e.g. https://api.openai.com/v1 */
  baseUrl: string;
  apiKey: string | undefined;
  /** Keep-alive connections per provider origin. */
  connections?: number;
}

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
    this.pool = createProviderPool(url.origin, options.connections);
    this.headers = {
      'content-type': 'application/json',
      accept: 'application/json',
      ...(options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {}),
    };
    this.streamHeaders = { ...this.headers, accept: 'text/event-stream' };
  }

  /** A whole (non-streamed) answer as text; an error status becomes the ProviderError it stands for. */
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
  private postForStream(body: unknown, signal: AttemptSignal) {
    return streamingRequest(
      this.pool,
      { method: 'POST', path: `${this.pathPrefix}/chat/completions`, headers: this.streamHeaders, body: JSON.stringify(body) },
      signal,
      openAIHttpError,
    );
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
      stopSequence: '',
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
      for await (const { data } of readServerSentEvents(response.body)) {
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
  return { choiceIndex: choice.index, content, toolCalls, reasoning, reasoningSignature: '', finishReason, images: [], reasoningEncrypted: '', stopSequence: '' };
}
