import { describe, expect, it } from 'vitest';
import { sameHiddenClass } from '@gateway/testing';
import { ProviderError } from '../provider-adapter.js';
import { ToolIdentifiers } from '../anthropic/anthropic-tool-identifiers.js';
import type { BedrockStreamEvent } from './bedrock-api-types.js';
import { BedrockStreamConverter } from './convert-bedrock-stream.js';

const events: BedrockStreamEvent[] = [
  { type: 'messageStart', payload: { role: 'assistant' } },
  { type: 'contentBlockDelta', payload: { contentBlockIndex: 0, delta: { reasoningContent: { text: 'thinking' } } } },
  { type: 'contentBlockDelta', payload: { contentBlockIndex: 0, delta: { reasoningContent: { signature: 'sig' } } } },
  { type: 'contentBlockStop', payload: { contentBlockIndex: 0 } },
  { type: 'contentBlockDelta', payload: { contentBlockIndex: 1, delta: { text: 'Hi' } } },
  { type: 'contentBlockStop', payload: { contentBlockIndex: 1 } },
  { type: 'contentBlockStart', payload: { contentBlockIndex: 2, start: { toolUse: { toolUseId: 't1', name: 'f' } } } },
  { type: 'contentBlockDelta', payload: { contentBlockIndex: 2, delta: { toolUse: { input: '{"a":' } } } },
  { type: 'contentBlockDelta', payload: { contentBlockIndex: 2, delta: { toolUse: { input: '1}' } } } },
  { type: 'contentBlockStop', payload: { contentBlockIndex: 2 } },
  { type: 'contentBlockStart', payload: { contentBlockIndex: 3, start: { toolUse: { toolUseId: 't2', name: 'g' } } } },
  { type: 'contentBlockStop', payload: { contentBlockIndex: 3 } },
  { type: 'messageStop', payload: { stopReason: 'tool_use' } },
  { type: 'metadata', payload: { usage: { inputTokens: 5, outputTokens: 9, cacheReadInputTokens: 2 } } },
];

describe('BedrockStreamConverter', () => {
  it('turns events into deltas as they come, tool calls by tool index, the finish held for metadata', () => {
    const converter = new BedrockStreamConverter(new ToolIdentifiers());
    const deltas = events.map((event) => converter.accept(event)).filter((delta) => delta !== undefined);
    expect(deltas.map((delta) => [delta.content, delta.reasoning, delta.reasoningSignature, delta.toolCalls, delta.finishReason])).toEqual([
      ['', 'thinking', '', [], ''],
      ['', '', 'sig', [], ''],
      ['Hi', '', '', [], ''],
      ['', '', '', [{ index: 0, id: 't1', name: 'f', arguments: '' }], ''],
      ['', '', '', [{ index: 0, id: '', name: '', arguments: '{"a":' }], ''],
      ['', '', '', [{ index: 0, id: '', name: '', arguments: '1}' }], ''],
      ['', '', '', [{ index: 1, id: 't2', name: 'g', arguments: '' }], ''],
      ['', '', '', [{ index: 1, id: '', name: '', arguments: '{}' }], ''],
      ['', '', '', [], 'tool_calls'],
    ]);
    expect(converter.done).toBe(true);
    expect(converter.usage).toMatchObject({ inputTokens: 7, cachedInputTokens: 2, outputTokens: 9 });
    for (const delta of deltas) expect(sameHiddenClass(delta, deltas[0]!)).toBe(true);
  });

  it('is complete at messageStop without metadata, and refuses events before messageStart or tool input for an unknown block', () => {
    const converter = new BedrockStreamConverter(new ToolIdentifiers());
    for (const event of events.slice(0, 13)) converter.accept(event);
    expect([converter.complete, converter.done]).toEqual([true, false]);
    expect(converter.finish().finishReason).toBe('tool_calls');
    expect(() => new BedrockStreamConverter(new ToolIdentifiers()).accept(events[4]!)).toThrow(ProviderError);
    const fresh = new BedrockStreamConverter(new ToolIdentifiers());
    fresh.accept(events[0]!);
    expect(() => fresh.accept({ type: 'contentBlockDelta', payload: { contentBlockIndex: 5, delta: { toolUse: { input: '{}' } } } })).toThrow(/not a started toolUse/);
  });

  it('turns a guardrail stop into a content_filter error when nothing was said, else into the finish reason', () => {
    const blocked = new BedrockStreamConverter(new ToolIdentifiers());
    blocked.accept(events[0]!);
    let error: unknown;
    try {
      blocked.accept({ type: 'messageStop', payload: { stopReason: 'guardrail_intervened' } });
    } catch (caught) {
      error = caught;
    }
    expect(error).toMatchObject({ kind: 'content_filter' });
    const partial = new BedrockStreamConverter(new ToolIdentifiers());
    partial.accept(events[0]!);
    partial.accept(events[4]!);
    partial.accept({ type: 'messageStop', payload: { stopReason: 'content_filtered' } });
    expect(partial.accept({ type: 'metadata', payload: {} })!.finishReason).toBe('content_filter');
  });
});
