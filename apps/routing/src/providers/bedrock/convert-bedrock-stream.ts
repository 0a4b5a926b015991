import type { ChatStreamDelta, Usage } from '@gateway/proto';
import { ProviderError } from '../provider-adapter.js';
import { streamDelta } from '../stream-delta.js';
import type { ToolIdentifiers } from '../anthropic/anthropic-tool-identifiers.js';
import { reportedStopSequence, type BedrockStreamEvent } from './bedrock-api-types.js';
import { safetyStopError } from './convert-bedrock-answer.js';
import { convertBedrockUsage } from './convert-bedrock-usage.js';
import { isBedrockSafetyStop, mapBedrockFinishReason } from './map-bedrock-finish-reason.js';

/** What one content block of the stream is (one shape for every block). */
interface BlockState {
  tool: boolean;
  /** For a tool block: its position among the answer's tool calls (0, 1, ...). */
  toolIndex: number;
  argumentsSent: boolean;
}

const TEXT_BLOCK: BlockState = { tool: false, toolIndex: -1, argumentsSent: false };

/**
 * Turns ConverseStream events into canonical deltas as they arrive (one event: at most one delta).
 * Text and reasoning blocks have no contentBlockStart (their first delta opens them); a toolUse block
 * starts with its id and name, and its input comes as JSON pieces. messageStop is followed by metadata
 * (usage): the finish delta is held until then, or until the body ends cleanly after messageStop, so a
 * stream cut before messageStop fails instead of ending as if complete.
 */
export class BedrockStreamConverter {
  private started = false;
  private stopped = false;
  private finished = false;
  private said = false;
  private readonly blocks: BlockState[] = [];
  private toolCount = 0;
  private finishReason = '';
  private stopSequence = '';
  private reportedUsage: Usage | undefined;

  constructor(private readonly tools: ToolIdentifiers) {}

  /** True once messageStop arrived: the answer is complete (metadata may still follow). */
  get complete(): boolean {
    return this.stopped;
  }

  /** True once metadata arrived after messageStop: nothing more is expected. */
  get done(): boolean {
    return this.finished;
  }

  get usage(): Usage | undefined {
    return this.reportedUsage;
  }

  /** The held finish delta, once (after metadata, or at the end of the body). */
  finish(): ChatStreamDelta {
    this.finished = true;
    return streamDelta('', '', '', '', [], this.finishReason || 'stop', this.stopSequence);
  }

  accept(event: BedrockStreamEvent): ChatStreamDelta | undefined {
    if (this.finished) return undefined;
    if (event.type === 'messageStart') {
      this.started = true;
      return undefined;
    }
    if (!this.started) throw new ProviderError('connection', `stream event ${event.type} before messageStart`);
    switch (event.type) {
      case 'contentBlockStart': {
        const toolUse = event.payload.start?.toolUse;
        if (!toolUse) {
          this.blocks[event.payload.contentBlockIndex] = TEXT_BLOCK;
          return undefined;
        }
        const toolIndex = this.toolCount++;
        this.blocks[event.payload.contentBlockIndex] = { tool: true, toolIndex, argumentsSent: false };
        this.said = true;
        return streamDelta('', '', '', '', [{ index: toolIndex, id: this.tools.callerId(toolUse.toolUseId), name: this.tools.callerName(toolUse.name), arguments: '' }], '', '');
      }
      case 'contentBlockDelta':
        return this.blockDelta(event.payload.contentBlockIndex, event.payload.delta);
      case 'contentBlockStop': {
        const block = this.blocks[event.payload.contentBlockIndex];
        // A tool called without arguments streams no input: its arguments are still a JSON object.
        if (block?.tool && !block.argumentsSent) {
          block.argumentsSent = true;
          return streamDelta('', '', '', '', [{ index: block.toolIndex, id: '', name: '', arguments: '{}' }], '', '');
        }
        return undefined;
      }
      case 'messageStop': {
        const reason = event.payload.stopReason;
        // Blocked before anything was said: the caller gets a content_filter error, not the guardrail's canned text.
        if (isBedrockSafetyStop(reason) && !this.said) throw safetyStopError(reason!);
        this.stopped = true;
        this.finishReason = mapBedrockFinishReason(reason);
        this.stopSequence = this.finishReason === 'stop' ? reportedStopSequence(event.payload.additionalModelResponseFields) : '';
        return undefined;
      }
      case 'metadata':
        this.reportedUsage = convertBedrockUsage(event.payload.usage);
        return this.stopped ? this.finish() : undefined;
    }
  }

  private blockDelta(index: number, change: Extract<BedrockStreamEvent, { type: 'contentBlockDelta' }>['payload']['delta']): ChatStreamDelta | undefined {
    if (this.stopped) return undefined;
    if (typeof change.text === 'string') {
      this.blocks[index] ??= TEXT_BLOCK;
      if (!change.text) return undefined;
      this.said = true;
      return streamDelta(change.text, '', '', '', [], '', '');
    }
    if (change.toolUse) {
      const block = this.blocks[index];
      if (!block?.tool) throw new ProviderError('connection', `tool input for content block ${index}, which is not a started toolUse`);
      const piece = change.toolUse.input ?? '';
      if (!piece) return undefined;
      block.argumentsSent = true;
      return streamDelta('', '', '', '', [{ index: block.toolIndex, id: '', name: '', arguments: piece }], '', '');
    }
    const reasoning = change.reasoningContent;
    if (reasoning) {
      this.blocks[index] ??= TEXT_BLOCK;
      if (reasoning.redactedContent) return streamDelta('', '', '', reasoning.redactedContent, [], '', '');
      if (reasoning.text || reasoning.signature) return streamDelta('', reasoning.text ?? '', reasoning.signature ?? '', '', [], '', '');
    }
    // citations and whatever later versions add: skipped.
    return undefined;
  }
}
