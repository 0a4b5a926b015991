import type { ChatStreamDelta, Usage } from '@gateway/proto';
import { ProviderError } from '../provider-adapter.js';
import { streamDelta } from '../stream-delta.js';
import type {
  AnthropicInputJsonDelta,
  AnthropicRedactedThinkingContent,
  AnthropicSignatureDelta,
  AnthropicStreamEvent,
  AnthropicTextContent,
  AnthropicTextDelta,
  AnthropicThinkingContent,
  AnthropicThinkingDelta,
  AnthropicToolUseContent,
  AnthropicUsage,
} from './anthropic-api-types.js';
import { convertAnthropicUsage, latestAnthropicUsage } from './convert-anthropic-usage.js';
import { anthropicStreamError } from './anthropic-error.js';
import type { ToolIdentifiers } from './anthropic-tool-identifiers.js';
import { mapAnthropicFinishReason } from './map-anthropic-finish-reason.js';

type BlockKind = 'text' | 'thinking' | 'tool' | 'other';

/** What one content block of the stream is; one shape for every block. */
interface BlockState {
  kind: BlockKind;
  /** For a tool block: its position among the answer's tool calls (0, 1, ...), not its block index. */
  toolIndex: number;
  argumentsSent: boolean;
}

const textDelta = (text: string) => streamDelta(text, '', '', '', [], '', '');
const reasoningDelta = (text: string, signature: string) => streamDelta('', text, signature, '', [], '', '');

/**
 * Turns Messages stream events into canonical deltas as they arrive (one event: at most one delta).
 * Text, thinking, signatures and tool input pieces go out the moment they come; a redacted thinking
 * block goes whole in one delta; each tool_use gets the next tool index. The finish delta (and the
 * usage) are held for `message_stop`, so a stream cut after `message_delta` still fails instead of
 * ending cleanly.
 */
export class AnthropicStreamConverter {
  private started = false;
  private stopped = false;
  private readonly blocks: BlockState[] = [];
  private toolCount = 0;
  private startUsage: AnthropicUsage | null | undefined;
  private endUsage: AnthropicUsage | null | undefined;
  private finishReason = '';
  private stopSequence = '';

  constructor(private readonly tools: ToolIdentifiers) {}

  /** True once `message_stop` arrived: the answer is complete. */
  get complete(): boolean {
    return this.stopped;
  }

  /** The usage the stream reported (each count from the latest event that had it). */
  get usage(): Usage | undefined {
    return convertAnthropicUsage(latestAnthropicUsage(this.startUsage, this.endUsage));
  }

  accept(event: AnthropicStreamEvent): ChatStreamDelta | undefined {
    if (event.type === 'ping') return undefined;
    if (event.type === 'error') throw anthropicStreamError(event.error);
    if (this.stopped) return undefined;
    if (event.type === 'message_start') {
      this.started = true;
      this.startUsage = event.message.usage;
      return undefined;
    }
    if (!this.started) throw new ProviderError('connection', `stream event ${event.type} before message_start`);
    switch (event.type) {
      case 'content_block_start':
        return this.startBlock(event.index, event.content_block);
      case 'content_block_delta':
        return this.blockDelta(event.index, event.delta);
      case 'content_block_stop': {
        const block = this.blocks[event.index];
        // A tool called without arguments streams no input: its arguments are still a JSON object.
        if (block?.kind === 'tool' && !block.argumentsSent) {
          block.argumentsSent = true;
          return streamDelta('', '', '', '', [{ index: block.toolIndex, id: '', name: '', arguments: '{}' }], '', '');
        }
        return undefined;
      }
      case 'message_delta':
        this.finishReason = mapAnthropicFinishReason(event.delta.stop_reason);
        this.stopSequence = event.delta.stop_sequence ?? '';
        this.endUsage = event.usage;
        return undefined;
      case 'message_stop':
        this.stopped = true;
        return streamDelta('', '', '', '', [], this.finishReason || 'stop', this.stopSequence);
    }
  }

  private startBlock(index: number, block: { type: string }): ChatStreamDelta | undefined {
    switch (block.type) {
      case 'text': {
        this.blocks[index] = { kind: 'text', toolIndex: -1, argumentsSent: false };
        const text = (block as AnthropicTextContent).text;
        return text ? textDelta(text) : undefined;
      }
      case 'thinking': {
        this.blocks[index] = { kind: 'thinking', toolIndex: -1, argumentsSent: false };
        const thinking = block as AnthropicThinkingContent;
        return thinking.thinking || thinking.signature ? reasoningDelta(thinking.thinking, thinking.signature ?? '') : undefined;
      }
      case 'redacted_thinking':
        this.blocks[index] = { kind: 'other', toolIndex: -1, argumentsSent: false };
        return streamDelta('', '', '', (block as AnthropicRedactedThinkingContent).data, [], '', '');
      case 'tool_use': {
        const call = block as AnthropicToolUseContent;
        const toolIndex = this.toolCount++;
        // The API starts tool_use with `input: {}` and streams the input; a block that comes with its
        // input already (no deltas will follow) sends it at once.
        const input = call.input;
        const given = typeof input === 'object' && input !== null && Object.keys(input).length > 0 ? JSON.stringify(input) : '';
        this.blocks[index] = { kind: 'tool', toolIndex, argumentsSent: given !== '' };
        return streamDelta('', '', '', '', [{ index: toolIndex, id: this.tools.callerId(call.id), name: this.tools.callerName(call.name), arguments: given }], '', '');
      }
      default:
        this.blocks[index] = { kind: 'other', toolIndex: -1, argumentsSent: false };
        return undefined;
    }
  }

  private blockDelta(index: number, change: { type: string }): ChatStreamDelta | undefined {
    const block = this.blocks[index];
    if (!block) throw new ProviderError('connection', `stream delta for content block ${index}, which never started`);
    switch (change.type) {
      case 'text_delta': {
        const text = (change as AnthropicTextDelta).text;
        return text && block.kind === 'text' ? textDelta(text) : undefined;
      }
      case 'thinking_delta': {
        const thinking = (change as AnthropicThinkingDelta).thinking;
        return thinking && block.kind === 'thinking' ? reasoningDelta(thinking, '') : undefined;
      }
      case 'signature_delta': {
        const signature = (change as AnthropicSignatureDelta).signature;
        return signature && block.kind === 'thinking' ? reasoningDelta('', signature) : undefined;
      }
      case 'input_json_delta': {
        const piece = (change as AnthropicInputJsonDelta).partial_json;
        if (!piece || block.kind !== 'tool') return undefined;
        block.argumentsSent = true;
        return streamDelta('', '', '', '', [{ index: block.toolIndex, id: '', name: '', arguments: piece }], '', '');
      }
      default:
        return undefined;
    }
  }
}
