import { describe, expect, it } from 'vitest';
import type { ChatStreamDelta, ChatStreamStart } from '@gateway/proto';
import { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { ChatChunkWriter } from './chat-stream-writer.js';

const tags = new ReasoningTags('chat-stream-writer-test-key');
const start = { id: 'req_1', modelId: 'm', created: 1_700_000_000n, providerId: 'p', routingStrategy: '', droppedParams: [], prices: undefined } as unknown as ChatStreamStart;

function delta(fields: Partial<ChatStreamDelta>): ChatStreamDelta {
  return { choiceIndex: 0, content: '', toolCalls: [], reasoning: '', reasoningSignature: '', finishReason: '', images: [], reasoningEncrypted: '', stopSequence: '', ...fields };
}

/** The chunk as the spec's chat.completion.chunk: what the client's JSON parser reads. */
const parsed = (frame: string) => {
  expect(frame.startsWith('data: ')).toBe(true);
  expect(frame.endsWith('\n\n')).toBe(true);
  return JSON.parse(frame.slice(6, -2)) as Record<string, unknown>;
};

describe('ChatChunkWriter', () => {
  it('writes a text delta after the role as the full chunk object would serialise (the fast path)', () => {
    const writer = new ChatChunkWriter('m', false, tags);
    writer.start(start);
    // The first delta of a choice carries its role (general path), the next ones only text (fast path).
    const texts = ['Hello', ' "quoted" \\ back\nslash', ' é ✓ \u2028 \u0000', ' last'];
    const frames = texts.map((content, index) => writer.delta(delta({ content, finishReason: index === texts.length - 1 ? 'stop' : '' })));
    const chunks = frames.map(parsed);
    expect(chunks[0]!.choices).toEqual([{ index: 0, delta: { role: 'assistant', content: 'Hello' }, logprobs: null, finish_reason: null }]);
    for (const [index, chunk] of chunks.entries()) {
      expect(chunk).toMatchObject({ id: expect.stringMatching(/^chatcmpl-/), object: 'chat.completion.chunk', created: 1_700_000_000, model: 'm' });
      if (index === 0) continue;
      // Byte for byte what JSON.stringify of the same objects gives (key order included).
      const expected = { ...chunk, choices: [{ index: 0, delta: { content: texts[index] }, logprobs: null, finish_reason: index === texts.length - 1 ? 'stop' : null }] };
      expect(frames[index]).toBe(`data: ${JSON.stringify(expected)}\n\n`);
    }
  });

  it('keeps the general path for a delta with more than text, or a choice whose role did not go out', () => {
    const writer = new ChatChunkWriter('m', false, tags);
    writer.start(start);
    writer.delta(delta({ content: 'a' }));
    const reasoning = parsed(writer.delta(delta({ content: 'b', reasoning: 'think' })));
    expect((reasoning.choices as Record<string, unknown>[])[0]!.delta).toMatchObject({ content: 'b', reasoning: 'think' });
    const tool = parsed(writer.delta(delta({ content: 'c', toolCalls: [{ index: 0, id: 'call_1', name: 'f', arguments: '{}' }] })));
    expect((tool.choices as Record<string, unknown>[])[0]!.delta).toMatchObject({ content: 'c', tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }] });
    const logprobs = writer.delta(delta({ content: 'd', logprobs: '{"content":[]}' }));
    expect(parsed(logprobs).choices).toEqual([{ index: 0, delta: { content: 'd' }, logprobs: { content: [] }, finish_reason: null }]);
    // A second choice's first delta names its role.
    expect(parsed(writer.delta(delta({ choiceIndex: 1, content: 'e' }))).choices).toEqual([{ index: 1, delta: { role: 'assistant', content: 'e' }, logprobs: null, finish_reason: null }]);
  });
});
