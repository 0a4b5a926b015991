import type { ChatStreamDelta, ChatStreamStart, Pricing, ToolCallDelta, Usage } from '@gateway/proto';
import { chatAnswerCost } from '../../inference/answer-cost.js';
import { boundedMessage, messagesErrorType, type ApiError } from '../../errors.js';
import type { AnswerContext, StreamWriter } from '../../inference/dialect.js';
import { messagesStopReason } from './messages-stop-reason.js';
import { messageId, renderMessagesUsage } from './render-messages.js';

type BlockKind = 'thinking' | 'text' | 'tool_use';

const PING = 'event: ping\ndata: {"type":"ping"}\n\n';
const MESSAGE_STOP = 'event: message_stop\ndata: {"type":"message_stop"}\n\n';

function sse(event: string, data: string): string {
  return `event: ${event}\ndata: ${data}\n\n`;
}

/**
 * One streamed answer as messages SSE (wire-formats.md), every event with its `event:` line, in the
 * order the SDK requires: `message_start` → per block `content_block_start`, its deltas,
 * `content_block_stop` (indices 0, 1, 2, … in order) → `message_delta` (stop reason, cumulative usage)
 * → `message_stop`. The canonical stream's deltas open and close blocks as their kind changes: reasoning
 * is a thinking block, text a text block, each tool call its own tool_use block whose arguments go out
 * as `input_json_delta` the moment they arrive. Signatures are buffered to the end of their thinking
 * block and sent as one `signature_delta`, tagged with the issuing provider (a provider may stream a
 * signature in pieces; the tag covers the whole value). `ping` keeps a slow first token's stream alive;
 * a failure after the commit point is an `error` event and never a `message_stop`.
 */
export class MessagesStreamWriter implements StreamWriter {
  private providerId = '';
  private nextIndex = 0;
  private openKind: BlockKind | undefined = undefined;
  private openIndex = -1;
  /** The open thinking block's signature so far (untagged). */
  private signature = '';
  /** Canonical tool-call index -> its block index. */
  private readonly toolBlocks = new Map<number, number>();
  private finishReason = '';
  private stopSequence = '';
  /** The serving model's prices from the Router's start (the usage event's), for usage.cost. */
  private prices: Pricing | undefined;

  constructor(private readonly answerContext: AnswerContext) {}

  start(start: ChatStreamStart): void {
    this.providerId = start.providerId;
    this.prices = start.prices;
  }

  /**
   * The message with no content yet. It may be written before the router's start (a ping-committed
   * stream), so it holds nothing the start brings: the id comes from the request, the usage (cumulative,
   * whole) from `message_delta`.
   */
  open(): string {
    const message = {
      id: messageId(this.answerContext.requestId),
      type: 'message',
      role: 'assistant',
      model: this.answerContext.model.id,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    };
    return sse('message_start', JSON.stringify({ type: 'message_start', message }));
  }

  delta(delta: ChatStreamDelta): string {
    let out = '';
    if (delta.reasoning) {
      // Reasoning after a finished signature is a new thinking block.
      if (this.openKind !== 'thinking' || this.signature !== '') out += this.openBlock('thinking', '{"type":"thinking","thinking":"","signature":""}');
      out += this.blockDelta(this.openIndex, `{"type":"thinking_delta","thinking":${JSON.stringify(delta.reasoning)}}`);
    }
    if (delta.reasoningSignature) {
      if (this.openKind !== 'thinking') out += this.openBlock('thinking', '{"type":"thinking","thinking":"","signature":""}');
      this.signature += delta.reasoningSignature;
    }
    if (delta.reasoningEncrypted) {
      // Redacted thinking arrives whole: a block of its own, opened and closed at once.
      out += this.closeBlock();
      const index = this.nextIndex++;
      const block = JSON.stringify({ type: 'redacted_thinking', data: this.answerContext.tags.tag(this.providerId, delta.reasoningEncrypted) });
      out += sse('content_block_start', `{"type":"content_block_start","index":${index},"content_block":${block}}`);
      out += sse('content_block_stop', `{"type":"content_block_stop","index":${index}}`);
    }
    if (delta.content) {
      if (this.openKind !== 'text') out += this.openBlock('text', '{"type":"text","text":""}');
      out += this.blockDelta(this.openIndex, `{"type":"text_delta","text":${JSON.stringify(delta.content)}}`);
    }
    for (const call of delta.toolCalls) out += this.toolCall(call);
    if (delta.finishReason) {
      this.finishReason = delta.finishReason;
      this.stopSequence = delta.stopSequence;
    }
    return out;
  }

  /** The first delta of a call (an index not seen yet) opens its block; every arguments piece goes out as it came. */
  private toolCall(call: ToolCallDelta): string {
    let out = '';
    let index = this.toolBlocks.get(call.index);
    if (index === undefined) {
      out += this.closeBlock();
      index = this.nextIndex++;
      this.toolBlocks.set(call.index, index);
      this.openKind = 'tool_use';
      this.openIndex = index;
      const id = call.id || `toolu_${messageId(this.answerContext.requestId).slice(4)}_${call.index}`;
      const block = JSON.stringify({ type: 'tool_use', id, name: call.name, input: {} });
      out += sse('content_block_start', `{"type":"content_block_start","index":${index},"content_block":${block}}`);
    }
    // A provider interleaving calls sends a piece for a block already stopped: it still names its block.
    if (call.arguments) out += this.blockDelta(index, `{"type":"input_json_delta","partial_json":${JSON.stringify(call.arguments)}}`);
    return out;
  }

  private openBlock(kind: BlockKind, contentBlock: string): string {
    const out = this.closeBlock();
    this.openKind = kind;
    this.openIndex = this.nextIndex++;
    return out + sse('content_block_start', `{"type":"content_block_start","index":${this.openIndex},"content_block":${contentBlock}}`);
  }

  private blockDelta(index: number, delta: string): string {
    return sse('content_block_delta', `{"type":"content_block_delta","index":${index},"delta":${delta}}`);
  }

  private closeBlock(): string {
    if (this.openKind === undefined) return '';
    let out = '';
    if (this.openKind === 'thinking' && this.signature !== '') {
      const signature = this.answerContext.tags.tag(this.providerId, this.signature);
      out += this.blockDelta(this.openIndex, `{"type":"signature_delta","signature":${JSON.stringify(signature)}}`);
      this.signature = '';
    }
    out += sse('content_block_stop', `{"type":"content_block_stop","index":${this.openIndex}}`);
    this.openKind = undefined;
    return out;
  }

  end(usage: Usage | undefined): string {
    const stopReason = messagesStopReason(this.finishReason, this.stopSequence, this.toolBlocks.size > 0);
    const messageDelta = {
      type: 'message_delta',
      delta: { stop_reason: stopReason, stop_sequence: this.stopSequence || null },
      usage: renderMessagesUsage(usage, chatAnswerCost(usage, this.prices, this.answerContext.model.model.pricing, this.finishReason)),
    };
    return this.closeBlock() + sse('message_delta', JSON.stringify(messageDelta)) + MESSAGE_STOP;
  }

  /** The SDK throws on an `error` event; nothing after it, so the stream can never pass for a complete answer. */
  fail(error: ApiError): string {
    return sse('error', JSON.stringify({ type: 'error', error: { type: messagesErrorType(error.status), message: boundedMessage(error) } }));
  }

  ping(): string {
    return PING;
  }
}
