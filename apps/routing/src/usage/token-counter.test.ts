import { describe, expect, it } from 'vitest';
import { encode } from 'gpt-tokenizer';
import type { ChatMessage } from '@gateway/proto';
import { countInputTokens, emptyUsage, meterUsage } from './token-counter.js';

const messages: ChatMessage[] = [
  { role: 'user', content: [{ part: { $case: 'text', value: 'Count <|endoftext|> these words please' } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false },
];

describe('meterUsage', () => {
  it('counts input and output itself when the provider reported nothing', () => {
    const usage = meterUsage(undefined, messages, [], { content: 'Some delivered answer', toolCalls: [], reasoning: '' });
    expect(usage.estimated).toBe(true);
    expect(usage.outputTokens).toBe(encode('Some delivered answer').length);
    expect(usage.inputTokens).toBe(countInputTokens(messages));
    expect(usage.inputTokens).toBeGreaterThan(6);
  });

  it('keeps the provider report, but never bills zero output for delivered content', () => {
    const reported = { ...emptyUsage(), inputTokens: 40, outputTokens: 12 };
    expect(meterUsage(reported, messages, [], { content: 'x', toolCalls: [], reasoning: '' })).toEqual(reported);
    const zero = meterUsage({ ...emptyUsage(), inputTokens: 40 }, messages, [], { content: 'delivered text', toolCalls: [], reasoning: '' });
    expect(zero.outputTokens).toBe(encode('delivered text').length);
    expect(zero.estimated).toBe(true);
  });

  it('counts tool-call arguments as output', () => {
    const usage = meterUsage(undefined, messages, [], { content: '', toolCalls: [{ name: 'lookup', arguments: '{"city":"Paris"}' }], reasoning: '' });
    expect(usage.outputTokens).toBe(encode('lookup').length + encode('{"city":"Paris"}').length);
  });
});
