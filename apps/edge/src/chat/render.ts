import type { ChatResponse, ChatStreamDelta, ChatStreamStart, Usage } from '@gateway/proto';
import { boundedMessage, boundedParam, type ApiError } from '../errors.js';

/** Spec §2.5: chat ids carry `chatcmpl-` whatever prefix the router used. */
export function chatCompletionId(routerId: string): string {
  if (routerId.startsWith('chatcmpl-')) return routerId;
  return `chatcmpl-${routerId.replace(/^(msg_|resp_|chatcmpl_)/, '')}`;
}

export function renderUsage(usage: Usage | undefined) {
  const input = usage?.inputTokens ?? 0;
  const output = usage?.outputTokens ?? 0;
  return {
    prompt_tokens: input,
    completion_tokens: output,
    total_tokens: input + output,
    prompt_tokens_details: { cached_tokens: usage?.cachedInputTokens ?? 0 },
    completion_tokens_details: { reasoning_tokens: usage?.reasoningTokens ?? 0 },
  };
}

/** Spec §2.5 chat completion. `model` is the catalog id the edge resolved. */
export function renderChatCompletion(response: ChatResponse, modelId: string) {
  return {
    id: chatCompletionId(response.id),
    object: 'chat.completion',
    created: Number(response.created) || Math.floor(Date.now() / 1000),
    model: modelId,
    choices: response.choices.map((choice) => {
      const source = choice.message;
      const toolCalls = source?.toolCalls ?? [];
      const message: Record<string, unknown> = {
        role: 'assistant',
        content: toolCalls.length > 0 && !source?.content ? null : (source?.content ?? ''),
        refusal: source?.refusal ?? null,
      };
      if (toolCalls.length > 0) {
        message.tool_calls = toolCalls.map((call) => ({
          id: call.id,
          type: 'function',
          function: { name: call.name, arguments: call.arguments },
        }));
      }
      const reasoning = (source?.reasoning ?? []).map((part) => part.text).join('');
      if (reasoning) message.reasoning = reasoning;
      if (source && source.images.length > 0) {
        message.images = source.images.map((image) => ({ type: 'image_url', image_url: { url: image.url } }));
      }
      return { index: choice.index, message, logprobs: null, finish_reason: choice.finishReason || 'stop' };
    }),
    usage: renderUsage(response.usage),
  };
}

/** Frames of one chat.completion.chunk stream (spec §6), built as SSE text. */
export class ChatChunkWriter {
  private readonly prefix: string;
  private readonly rolesSent = new Set<number>();

  constructor(start: ChatStreamStart, modelId: string) {
    const created = Number(start.created) || Math.floor(Date.now() / 1000);
    // Everything before the `choices` key is the same for every chunk of the stream.
    this.prefix = `{"id":${JSON.stringify(chatCompletionId(start.id))},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(modelId)}`;
  }

  delta(delta: ChatStreamDelta): string {
    const body: Record<string, unknown> = {};
    if (!this.rolesSent.has(delta.choiceIndex)) {
      this.rolesSent.add(delta.choiceIndex);
      body.role = 'assistant';
    }
    if (delta.content || body.role) body.content = delta.content;
    if (delta.reasoning) body.reasoning = delta.reasoning;
    if (delta.toolCalls.length > 0) {
      body.tool_calls = delta.toolCalls.map((call) => {
        const rendered: Record<string, unknown> = { index: call.index };
        if (call.id) {
          rendered.id = call.id;
          rendered.type = 'function';
        }
        const fn: Record<string, string> = { arguments: call.arguments };
        if (call.name) fn.name = call.name;
        rendered.function = fn;
        return rendered;
      });
    }
    if (delta.images.length > 0) body.images = delta.images.map((image) => ({ type: 'image_url', image_url: { url: image.url } }));
    const choice = { index: delta.choiceIndex, delta: body, logprobs: null, finish_reason: delta.finishReason || null };
    return `data: ${this.prefix},"choices":[${JSON.stringify(choice)}]}\n\n`;
  }

  usage(usage: Usage | undefined): string {
    return `data: ${this.prefix},"choices":[],"usage":${JSON.stringify(renderUsage(usage))}}\n\n`;
  }

  /** The OpenRouter mid-stream error chunk (wire-formats.md): status stays 200, the error is in the stream. */
  error(apiError: ApiError): string {
    const error: Record<string, unknown> = { type: apiError.type, code: apiError.code ?? apiError.status, message: boundedMessage(apiError) };
    const param = boundedParam(apiError);
    if (param) error.param = param;
    return `data: ${this.prefix},"error":${JSON.stringify(error)},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}\n\n`;
  }

  static readonly done = 'data: [DONE]\n\n';
}
