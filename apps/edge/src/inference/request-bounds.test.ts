import { describe, expect, it } from 'vitest';
import { encode } from 'gpt-tokenizer';
import { parseCredits } from '@gateway/platform';
import { ChatRequest, type Model } from '@gateway/proto';
import type { CatalogModel } from '../catalog-cache.js';
import { EdgeError } from '../errors.js';
import { checkContextWindow, costBound, measurePrompt, MINIMUM_HOLD_PICO } from './request-bounds.js';

function model(overrides: Partial<Model>, paid = true): CatalogModel {
  const full: Model = {
    id: 'testco/model', displayName: 'Model', description: '', created: 0n, contextWindow: 0, aliases: [], inputModalities: ['text'],
    outputModalities: ['text'], supportedParameters: [], limitGroup: 'default', offers: [], voices: [], extraParameters: [],
    reasoningEfforts: [], audioFormats: [], pricing: { perInputToken: '0.000001', perOutputToken: '0.000002' }, ...overrides,
  };
  return {
    model: full, id: full.id, paid, endpoints: new Set(['chat.completions']), supportedParameters: new Set(), inputModalities: new Set(['text']),
    extraParameters: new Set(), allowedTiers: null, availableTiers: [],
  };
}

function chat(text: string, extra: Partial<ChatRequest> = {}): ChatRequest {
  return ChatRequest.fromPartial({
    messages: [{ role: 'user', content: [{ part: { $case: 'text', value: text } }] }],
    ...extra,
  });
}

describe('measurePrompt', () => {
  it("bounds the prompt's tokens by its UTF-8 bytes plus per-part allowances, never below the tokenizer's count", () => {
    for (const text of ['Hello there', 'naïve café ☕ 你好世界 🎉🎉', 'x'.repeat(10_000), 'a b c d e f g '.repeat(500)]) {
      const measure = measurePrompt(chat(text));
      expect(measure.tokensUpperBound).toBeGreaterThanOrEqual(encode(text).length);
      expect(measure.tokensUpperBound).toBeGreaterThanOrEqual(Buffer.byteLength(text));
    }
    const withImage = measurePrompt(ChatRequest.fromPartial({
      messages: [{ role: 'user', content: [{ part: { $case: 'text', value: 'hi' } }, { part: { $case: 'image', value: { url: 'https://x/y.png', detail: 'high' } } }] }],
    }));
    expect(withImage.tokensUpperBound).toBeGreaterThanOrEqual(2_000);
  });

  it('counts tool definitions, tool calls and the json schema, and notes files still to fetch', () => {
    const plain = measurePrompt(chat('hi'));
    const rich = measurePrompt(chat('hi', {
      tools: [{ name: 'lookup', description: 'Looks things up', parameters: '{"type":"object","properties":{"q":{"type":"string"}}}' }],
      responseFormat: { type: 'json_schema', schemaName: 's', schema: '{"type":"object"}' },
    }));
    expect(rich.tokensUpperBound - plain.tokensUpperBound).toBeGreaterThan(60);
    const withUrl = measurePrompt(ChatRequest.fromPartial({
      messages: [{ role: 'user', content: [{ part: { $case: 'file', value: { url: 'https://x/a.pdf', filename: 'a.pdf' } } }] }],
    }));
    expect(withUrl.unresolvedFiles).toBe(true);
    expect(plain.unresolvedFiles).toBe(false);
  });
});

describe('checkContextWindow', () => {
  const refusal = async (promise: Promise<void>) => {
    try {
      await promise;
      return undefined;
    } catch (error) {
      expect(error).toBeInstanceOf(EdgeError);
      return (error as EdgeError).apiError;
    }
  };

  it('passes a prompt whose bytes fit without tokenizing, and a model without a window always', async () => {
    const request = chat('Hello');
    expect(await refusal(checkContextWindow(model({ contextWindow: 100 }), request, measurePrompt(request)))).toBeUndefined();
    const huge = chat('word '.repeat(100_000));
    expect(await refusal(checkContextWindow(model({ contextWindow: 0 }), huge, measurePrompt(huge)))).toBeUndefined();
  });

  it('counts with the tokenizer when the byte bound does not settle it: a prompt over the window is a 400 naming it', async () => {
    // ~1 token per 5 bytes: 6,000 bytes is over a 1,000-token window by bytes, ~1,200 tokens by count.
    const over = chat('hello '.repeat(1_000));
    const error = await refusal(checkContextWindow(model({ contextWindow: 1_000 }), over, measurePrompt(over)));
    expect(error).toMatchObject({ status: 400, code: 'context_length_exceeded', param: 'body.messages' });
    expect(error?.message).toContain('1000 tokens');
    // Over the window by bytes but not by tokens: served.
    const fits = chat('hello '.repeat(700));
    expect(await refusal(checkContextWindow(model({ contextWindow: 1_000 }), fits, measurePrompt(fits)))).toBeUndefined();
  });

  it('refuses room asked for output that the window does not have, naming max_completion_tokens', async () => {
    const request = chat('hello '.repeat(700), { maxOutputTokens: 500 });
    const error = await refusal(checkContextWindow(model({ contextWindow: 1_000 }), request, measurePrompt(request)));
    expect(error).toMatchObject({ status: 400, code: 'context_length_exceeded', param: 'body.max_completion_tokens' });
    // Another dialect's name for the bound (messages: max_tokens) is the one named.
    const messagesError = await refusal(checkContextWindow(model({ contextWindow: 1_000 }), request, measurePrompt(request), 'max_tokens'));
    expect(messagesError).toMatchObject({ param: 'body.max_tokens', message: expect.stringContaining('Lower max_tokens to at most') });
  });
});

describe('costBound', () => {
  it('holds the flat 0.05 when the worst case is below it', () => {
    const request = chat('Hello', { maxOutputTokens: 100 });
    expect(costBound(model({ contextWindow: 8_000 }), request, measurePrompt(request)).holdPico).toBe(MINIMUM_HOLD_PICO);
  });

  it('holds prompt bound × input prices + output bound × output prices when that is more, in exact pico-credits', () => {
    const request = chat('Hello');
    const measure = measurePrompt(request);
    // No max_completion_tokens, no model cap: the output bound is the window.
    const bound = costBound(model({ contextWindow: 128_000 }), request, measure);
    expect(bound.outputTokens).toBe(128_000);
    expect(bound.holdPico).toBe(BigInt(measure.tokensUpperBound) * parseCredits('0.000001') + 128_000n * parseCredits('0.000002'));
    // The model's cap, then the request's own (smaller) max.
    expect(costBound(model({ contextWindow: 128_000, maxOutputTokens: 30_000 }), request, measure).outputTokens).toBe(30_000);
    const capped = chat('Hello', { maxOutputTokens: 100_000 });
    expect(costBound(model({ contextWindow: 128_000, maxOutputTokens: 30_000 }), capped, measurePrompt(capped)).outputTokens).toBe(30_000);
  });

  it('holds the output bound once per choice for n choices (each is bounded by it, each is charged)', () => {
    const one = chat('Hello', { maxOutputTokens: 100_000 });
    const three = chat('Hello', { maxOutputTokens: 100_000, n: 3 });
    const measure = measurePrompt(one);
    const single = costBound(model({ contextWindow: 400_000 }), one, measure);
    const bound = costBound(model({ contextWindow: 400_000 }), three, measurePrompt(three));
    expect(bound.outputTokens).toBe(300_000);
    expect(bound.holdPico).toBe(BigInt(measure.tokensUpperBound) * parseCredits('0.000001') + 300_000n * parseCredits('0.000002'));
    expect(bound.holdPico - single.holdPico).toBe(200_000n * parseCredits('0.000002'));
  });

  it('bounds a prompt with files still to fetch by the whole window', () => {
    const request = ChatRequest.fromPartial({
      messages: [{ role: 'user', content: [{ part: { $case: 'file', value: { url: 'https://x/a.pdf', filename: 'a.pdf' } } }] }],
      maxOutputTokens: 10,
    });
    const bound = costBound(model({ contextWindow: 100_000 }), request, measurePrompt(request));
    expect(bound.promptPico).toBe(100_000n * parseCredits('0.000001'));
  });

  it('sums every input-side and output-side price (an upper bound of what the ledger can charge)', () => {
    const request = chat('Hello', { maxOutputTokens: 1_000 });
    const measure = measurePrompt(request);
    const bound = costBound(model({ pricing: { perInputToken: '0.00001', perCachedInputToken: '0.000001', perOutputToken: '0.0001', perToken: '0.00002' } }), request, measure);
    expect(bound.holdPico).toBe(BigInt(measure.tokensUpperBound) * parseCredits('0.000031') + 1_000n * parseCredits('0.00012'));
  });

  it('a free model holds nothing; a model with no output bound holds the flat 0.05', () => {
    const request = chat('Hello');
    expect(costBound(model({ pricing: {} }, false), request, measurePrompt(request)).holdPico).toBe(0n);
    expect(costBound(model({ contextWindow: 0 }), request, measurePrompt(request)).holdPico).toBe(MINIMUM_HOLD_PICO);
  });
});
