import { describe, expect, it } from 'vitest';
import { encode } from 'gpt-tokenizer';
import type { ChatMessage } from '@gateway/proto';
import { countInputTokens, countTextTokens, emptyUsage, meterUsage } from './token-counter.js';

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

  it('a report whose output is only its reasoning while content was delivered: the content is counted on top (issue 35 item 6)', () => {
    // The normalized report of `completion_tokens: 0, reasoning_tokens: 40` is output 40 = reasoning 40;
    // text delivered beside it is output the provider left out.
    const reported = { ...emptyUsage(), inputTokens: 900, outputTokens: 40, reasoningTokens: 40 };
    const usage = meterUsage(reported, messages, [], { content: 'delivered text', toolCalls: [], reasoning: '' });
    expect(usage.outputTokens).toBe(40 + encode('delivered text').length);
    expect(usage.reasoningTokens).toBe(40);
    expect(usage.estimated).toBe(true);
    // Nothing but reasoning delivered: the report stands as it is.
    expect(meterUsage(reported, messages, [], { content: '', toolCalls: [], reasoning: 'thinking…' })).toEqual(reported);
    // An honest report (output beyond its reasoning) stands too.
    const honest = { ...emptyUsage(), inputTokens: 900, outputTokens: 52, reasoningTokens: 40 };
    expect(meterUsage(honest, messages, [], { content: 'delivered text', toolCalls: [], reasoning: '' })).toEqual(honest);
  });

  it('counts tool-call arguments as output', () => {
    const usage = meterUsage(undefined, messages, [], { content: '', toolCalls: [{ name: 'lookup', arguments: '{"city":"Paris"}' }], reasoning: '' });
    expect(usage.outputTokens).toBe(encode('lookup').length + encode('{"city":"Paris"}').length);
  });
});

describe('countTextTokens on words the tokenizer merges slowly (issue 29)', () => {
  // gpt-tokenizer's merge is quadratic in a word's length: 160,000 letters were 30 s of CPU uncut.
  // Cut into runs of at most 256 characters, the count is a little above the uncut one's and linear.
  it('counts a 160,000-letter word in pieces: at least one token per 256 letters, at most one per letter', () => {
    const count = countTextTokens('a'.repeat(160_000));
    expect(count).toBeGreaterThanOrEqual(160_000 / 256);
    expect(count).toBeLessThanOrEqual(160_000);
  });

  it('counts ordinary text exactly as the tokenizer does', () => {
    const text = 'The gateway routes each request to a provider that serves the model. '.repeat(200);
    expect(countTextTokens(text)).toBe(encode(text).length);
  });
});
