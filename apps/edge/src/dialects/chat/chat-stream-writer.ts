import type { ChatStreamDelta, ChatStreamStart, Pricing, Usage } from '@gateway/proto';
import { chatAnswerCost } from '../../inference/answer-cost.js';
import { boundedMessage, boundedParam, type ApiError } from '../../errors.js';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import type { StreamWriter } from '../../inference/dialect.js';
import { callSignatureContent, chatCompletionId, renderUsage } from './render-chat.js';

/** Frames of one chat.completion.chunk stream (spec §6), built as SSE text. No keep-alive: never committed before content. */
export class ChatChunkWriter implements StreamWriter {
  private prefix = '';
  private providerId = '';
  private readonly rolesSent = new Set<number>();
  /** The serving model's prices from the Router's start (the usage event's), for usage.cost. */
  private prices: Pricing | undefined;
  /** The stream's last finish reason ('' none yet): zero-completion insurance decides on it. */
  private finishReason = '';

  constructor(
    private readonly modelId: string,
    private readonly includeUsage: boolean,
    private readonly tags: ReasoningTags,
    /** The catalog's prices of the model, when the Router's start carries none. */
    private readonly pricing?: Pricing,
  ) {}

  start(start: ChatStreamStart): void {
    this.providerId = start.providerId;
    this.prices = start.prices;
    const created = Number(start.created) || Math.floor(Date.now() / 1000);
    // Everything before the `choices` key is the same for every chunk of the stream.
    this.prefix = `{"id":${JSON.stringify(chatCompletionId(start.id))},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(this.modelId)}`;
  }

  open(): string {
    return '';
  }
  delta(delta: ChatStreamDelta): string {
    if (delta.finishReason !== '') this.finishReason = delta.finishReason;
    // The usual delta (text of a choice whose role went out already, nothing else) is written without
    // building its objects: the same text JSON.stringify makes of them below.
    if (delta.content !== '' && delta.reasoning === '' && delta.reasoningSignature === '' && delta.reasoningEncrypted === '' && delta.toolCalls.length === 0
      && delta.images.length === 0 && !delta.logprobs && this.rolesSent.has(delta.choiceIndex)) {
      const finish = delta.finishReason === '' ? 'null' : JSON.stringify(delta.finishReason);
      return `data: ${this.prefix},"choices":[{"index":${delta.choiceIndex},"delta":{"content":${JSON.stringify(delta.content)}},"logprobs":null,"finish_reason":${finish}}]}\n\n`;
    }
    const body: Record<string, unknown> = {};
    if (!this.rolesSent.has(delta.choiceIndex)) {
      this.rolesSent.add(delta.choiceIndex);
      body.role = 'assistant';
    }
    if (delta.content || body.role) body.content = delta.content;
    if (delta.reasoning) body.reasoning = delta.reasoning;
    // Signed and encrypted reasoning travel as reasoning_details entries (OpenRouter), tagged with their issuer.
    if (delta.reasoning || delta.reasoningSignature || delta.reasoningEncrypted) body.reasoning_details = this.reasoningDetails(delta);
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
        if (call.signature) rendered.extra_content = callSignatureContent(this.tags.tagCall(this.providerId, call.signature));
        return rendered;
      });
    }
    if (delta.images.length > 0) body.images = delta.images.map((image) => ({ type: 'image_url', image_url: { url: image.url } }));
    // The upstream's logprobs (JSON text routing relayed as it came) go in as they are.
    if (delta.logprobs) {
      const finish = JSON.stringify(delta.finishReason || null);
      return `data: ${this.prefix},"choices":[{"index":${delta.choiceIndex},"delta":${JSON.stringify(body)},"logprobs":${delta.logprobs},"finish_reason":${finish}}]}\n\n`;
    }
    const choice = { index: delta.choiceIndex, delta: body, logprobs: null, finish_reason: delta.finishReason || null };
    return `data: ${this.prefix},"choices":[${JSON.stringify(choice)}]}\n\n`;
  }

  private reasoningDetails(delta: ChatStreamDelta): Record<string, unknown>[] {
    const details: Record<string, unknown>[] = [];
    if (delta.reasoning || delta.reasoningSignature) {
      const detail: Record<string, unknown> = { type: 'reasoning.text', text: delta.reasoning, index: 0 };
      if (delta.reasoningSignature) detail.signature = this.tags.tag(this.providerId, delta.reasoningSignature);
      details.push(detail);
    }
    if (delta.reasoningEncrypted) details.push({ type: 'reasoning.encrypted', data: this.tags.tag(this.providerId, delta.reasoningEncrypted), index: 0 });
    return details;
  }

  /** The usage chunk (with the charge) when the client asked for it (stream_options.include_usage), then [DONE]. */
  end(usage: Usage | undefined): string {
    if (!this.includeUsage) return ChatChunkWriter.done;
    const cost = chatAnswerCost(usage, this.prices, this.pricing, this.finishReason);
    const usageChunk = `data: ${this.prefix},"choices":[],"usage":${JSON.stringify(renderUsage(usage, cost))}}\n\n`;
    return usageChunk + ChatChunkWriter.done;
  }

  /** The OpenRouter mid-stream error chunk (wire-formats.md): status stays 200, the error is in the stream. */
  fail(apiError: ApiError): string {
    const error: Record<string, unknown> = { type: apiError.type, code: apiError.code ?? apiError.status, message: boundedMessage(apiError) };
    const param = boundedParam(apiError);
    if (param) error.param = param;
    return `data: ${this.prefix},"error":${JSON.stringify(error)},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}\n\n${ChatChunkWriter.done}`;
  }

  static readonly done = 'data: [DONE]\n\n';
}
