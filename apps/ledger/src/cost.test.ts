import { describe, expect, it } from 'vitest';
import { Pricing, Usage } from '@gateway/proto';
import { computeCostBreakdownParsed, computeCostPico, parsePricing, PricingError } from './cost.js';

// Expected values are worked out by hand in pico-credits (1 credit = 10^12 pico); the price strings
// are what a catalog would publish.
const usage = (fields: Partial<Usage>) => Usage.create(fields);
const prices = (fields: Partial<Pricing>) => Pricing.create(fields);

describe('computeCostPico, one pricing key at a time', () => {
  it('input tokens: 1000 × 0.0000005 = 500,000,000 pico', () => {
    expect(computeCostPico(usage({ inputTokens: 1000 }), prices({ perInputToken: '0.0000005' }))).toBe(500_000_000n);
  });

  it('cached input tokens at their own price: 600 × 500,000 + 400 × 100,000', () => {
    const cost = computeCostPico(
      usage({ inputTokens: 1000, cachedInputTokens: 400 }),
      prices({ perInputToken: '0.0000005', perCachedInputToken: '0.0000001' }),
    );
    expect(cost).toBe(340_000_000n);
  });

  it('cached input tokens without a cached price are charged at the input price', () => {
    const cost = computeCostPico(usage({ inputTokens: 1000, cachedInputTokens: 400 }), prices({ perInputToken: '0.0000005' }));
    expect(cost).toBe(500_000_000n);
  });

  it('a cached count above the input count is capped at the input count', () => {
    const cost = computeCostPico(
      usage({ inputTokens: 10, cachedInputTokens: 50 }),
      prices({ perInputToken: '0.0000005', perCachedInputToken: '0.0000001' }),
    );
    expect(cost).toBe(1_000_000n); // 10 × 100,000
  });

  it('output tokens: 200 × 0.0000015 = 300,000,000 pico', () => {
    expect(computeCostPico(usage({ outputTokens: 200 }), prices({ perOutputToken: '0.0000015' }))).toBe(300_000_000n);
  });

  it('audio tokens in and out', () => {
    expect(computeCostPico(usage({ inputAudioTokens: 10 }), prices({ perInputAudioToken: '0.00004' }))).toBe(400_000_000n);
    expect(computeCostPico(usage({ outputAudioTokens: 5 }), prices({ perOutputAudioToken: '0.00008' }))).toBe(400_000_000n);
  });

  it('audio hours: 5000 ms at 0.72 per hour = exactly 1,000,000,000 pico', () => {
    expect(computeCostPico(usage({ outputAudioMs: 5000 }), prices({ perOutputAudioHour: '0.72' }))).toBe(1_000_000_000n);
    expect(computeCostPico(usage({ inputAudioMs: 5000 }), prices({ perInputAudioHour: '0.72' }))).toBe(1_000_000_000n);
  });

  it('audio hours round half up to the pico', () => {
    // 1 ms at 1 credit/hour = 10^12 / 3.6e6 = 277,777.78 -> 277,778
    expect(computeCostPico(usage({ inputAudioMs: 1 }), prices({ perInputAudioHour: '1' }))).toBe(277_778n);
    // 2 ms = 555,555.56 -> 555,556; 1 ms at 1,800,000 pico/hour = 0.5 -> 1; 3 ms = 1.5 -> 2; 1 ms at 1,799,999 = 0.49.. -> 0
    expect(computeCostPico(usage({ inputAudioMs: 2 }), prices({ perInputAudioHour: '1' }))).toBe(555_556n);
    expect(computeCostPico(usage({ inputAudioMs: 1 }), prices({ perInputAudioHour: '0.0000018' }))).toBe(1n);
    expect(computeCostPico(usage({ inputAudioMs: 3 }), prices({ perInputAudioHour: '0.0000018' }))).toBe(2n);
    expect(computeCostPico(usage({ inputAudioMs: 1 }), prices({ perInputAudioHour: '0.000001799999' }))).toBe(0n);
  });

  it('output text tokens, text characters, image tokens, prompt text tokens', () => {
    expect(computeCostPico(usage({ outputTextTokens: 50 }), prices({ perOutputTextToken: '0.000002' }))).toBe(100_000_000n);
    expect(computeCostPico(usage({ inputTextCharacters: 12345 }), prices({ perInputTextCharacter: '0.000000001' }))).toBe(12_345_000n);
    expect(computeCostPico(usage({ outputTextCharacters: 100 }), prices({ perOutputTextCharacter: '0.00000002' }))).toBe(2_000_000n);
    expect(computeCostPico(usage({ outputImageTokens: 1056 }), prices({ perOutputImageToken: '0.00004' }))).toBe(42_240_000_000n);
    expect(computeCostPico(usage({ inputImageTokens: 85 }), prices({ perInputImageToken: '0.00001' }))).toBe(850_000_000n);
    expect(computeCostPico(usage({ inputTextTokens: 30 }), prices({ perInputTextToken: '0.000005' }))).toBe(150_000_000n);
  });

  it('input is three kinds: cache reads, cache writes and the rest, each at its own price (issue 26)', () => {
    const all = prices({ perInputToken: '0.000003', perCachedInputToken: '0.0000003', perCacheWriteInputToken: '0.00000375', perOutputToken: '0.000015' });
    // 1000 input = 200 read + 300 written + 500 plain; 10 output.
    // 500 * 3,000,000 + 200 * 300,000 + 300 * 3,750,000 + 10 * 15,000,000 pico.
    expect(computeCostPico(usage({ inputTokens: 1000, cachedInputTokens: 200, cacheWriteTokens: 300, outputTokens: 10 }), all))
      .toBe(1_500_000_000n + 60_000_000n + 1_125_000_000n + 150_000_000n);
    // No write price: writes are plain input (reads keep theirs).
    expect(computeCostPico(usage({ inputTokens: 1000, cachedInputTokens: 200, cacheWriteTokens: 300 }), prices({ perInputToken: '0.000003', perCachedInputToken: '0.0000003' })))
      .toBe(800n * 3_000_000n + 200n * 300_000n);
    // No read price: reads are plain input (writes keep theirs).
    expect(computeCostPico(usage({ inputTokens: 1000, cachedInputTokens: 200, cacheWriteTokens: 300 }), prices({ perInputToken: '0.000003', perCacheWriteInputToken: '0.00000375' })))
      .toBe(700n * 3_000_000n + 300n * 3_750_000n);
    // Inconsistent counts are capped: writes at what the reads leave of the input.
    expect(computeCostPico(usage({ inputTokens: 100, cachedInputTokens: 80, cacheWriteTokens: 50 }), all))
      .toBe(80n * 300_000n + 20n * 3_750_000n);
  });

  it('per_token applies to input + output tokens', () => {
    expect(computeCostPico(usage({ inputTokens: 1000, outputTokens: 200 }), prices({ perToken: '0.000000002' }))).toBe(2_400_000n);
  });

  it('the smallest price (1 pico) and counts at the uint32 limit stay exact', () => {
    expect(computeCostPico(usage({ outputTokens: 4_294_967_295 }), prices({ perOutputToken: '0.000000000001' }))).toBe(4_294_967_295n);
    expect(computeCostPico(usage({ outputTokens: 4_294_967_295 }), prices({ perOutputToken: '1000' }))).toBe(4_294_967_295_000_000_000_000_000n);
  });

  it('unpriced usage costs nothing; empty prices cost nothing', () => {
    expect(computeCostPico(usage({ inputTokens: 1000, outputTokens: 5, inputAudioMs: 999 }), prices({}))).toBe(0n);
    expect(computeCostPico(usage({ inputTokens: 1000 }), prices({ perOutputToken: '0.1' }))).toBe(0n);
  });

  it('refuses malformed and negative prices', () => {
    expect(() => computeCostPico(usage({ inputTokens: 1 }), prices({ perInputToken: '1e-6' }))).toThrow(PricingError);
    expect(() => computeCostPico(usage({ inputTokens: 1 }), prices({ perInputToken: '0.0000000000001' }))).toThrow(PricingError);
    expect(() => computeCostPico(usage({ inputTokens: 1 }), prices({ perInputToken: '-0.1' }))).toThrow(PricingError);
  });
});

describe('computeCostPico, every key together', () => {
  it('sums every term and rounds the audio fraction once', () => {
    const cost = computeCostPico(
      usage({
        inputTokens: 1000, cachedInputTokens: 400, outputTokens: 200, reasoningTokens: 50,
        inputAudioTokens: 10, outputAudioTokens: 5, inputAudioMs: 1, outputAudioMs: 5000,
        outputTextTokens: 50, inputTextCharacters: 12345, outputTextCharacters: 100,
        outputImageTokens: 1056, inputImageTokens: 85, inputTextTokens: 30,
      }),
      prices({
        perInputToken: '0.0000005', perCachedInputToken: '0.0000001', perOutputToken: '0.0000015',
        perInputAudioToken: '0.00004', perOutputAudioToken: '0.00008', perInputAudioHour: '1', perOutputAudioHour: '0.72',
        perOutputTextToken: '0.000002', perInputTextCharacter: '0.000000001', perOutputTextCharacter: '0.00000002',
        perOutputImageToken: '0.00004', perInputTextToken: '0.000005', perInputImageToken: '0.00001', perToken: '0.000000002',
      }),
    );
    // 300,000,000 (600 uncached in) + 40,000,000 (400 cached) + 300,000,000 (out) + 400,000,000 (audio in)
    // + 400,000,000 (audio out) + 100,000,000 (out text) + 12,345,000 (in chars) + 2,000,000 (out chars)
    // + 42,240,000,000 (out image) + 150,000,000 (in text tokens) + 850,000,000 (in image) + 2,400,000 (per_token)
    // = 44,796,745,000; audio hours: 277,777.78 + 1,000,000,000 -> total 45,797,022,777.78 -> 45,797,022,778
    expect(cost).toBe(45_797_022_778n);
  });
});

describe('computeCostBreakdownParsed', () => {
  it('splits the charge by kind; the parts add up to computeCostPico exactly, audio-hour rounding included', () => {
    const pricing = Pricing.create({
      perInputToken: '0.000003', perCachedInputToken: '0.0000003', perOutputToken: '0.000015',
      perInputAudioHour: '0.36', perOutputAudioHour: '0.72', perInputTextCharacter: '0.000001', perOutputAudioToken: '0.00002',
    });
    const parsed = parsePricing(pricing);
    let seed = 7;
    const next = (bound: number) => { seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648; return seed % bound; };
    for (let round = 0; round < 500; round++) {
      const usage = Usage.create({
        inputTokens: next(5_000), cachedInputTokens: next(6_000), cacheWriteTokens: next(3_000), outputTokens: next(2_000),
        reasoningTokens: next(2_500), inputAudioMs: next(100_000), outputAudioMs: next(100_000), inputTextCharacters: next(900),
        outputAudioTokens: next(700),
      });
      const parts = computeCostBreakdownParsed(usage, parsed);
      expect(parts.input + parts.output + parts.cacheRead + parts.cacheWrite + parts.reasoning).toBe(parts.total);
      expect(parts.total).toBe(computeCostPico(usage, pricing));
      for (const part of [parts.input, parts.output, parts.cacheRead, parts.cacheWrite, parts.reasoning]) expect(part >= 0n).toBe(true);
    }
  });

  it('names each kind: cache reads and writes at their own prices, reasoning out of output; no own price means input', () => {
    const usage = Usage.create({ inputTokens: 1_000, cachedInputTokens: 300, cacheWriteTokens: 200, outputTokens: 150, reasoningTokens: 40 });
    const own = computeCostBreakdownParsed(usage, parsePricing(Pricing.create({
      perInputToken: '0.000003', perCachedInputToken: '0.0000003', perCacheWriteInputToken: '0.00000375', perOutputToken: '0.000015',
    })));
    expect(own).toEqual({
      total: 4_590_000_000n, input: 1_500_000_000n, cacheRead: 90_000_000n, cacheWrite: 750_000_000n, output: 1_650_000_000n, reasoning: 600_000_000n,
    });
    const plain = computeCostBreakdownParsed(usage, parsePricing(Pricing.create({ perInputToken: '0.000003', perOutputToken: '0.000015' })));
    expect(plain).toEqual({ total: 5_250_000_000n, input: 3_000_000_000n, cacheRead: 0n, cacheWrite: 0n, output: 1_650_000_000n, reasoning: 600_000_000n });
  });
});
