import { describe, expect, it } from 'vitest';
import { Pricing, Usage } from '@gateway/proto';
import {
  chatInsurance, computeCostBreakdownParsed, costJson, deliveredNothing, parsePricing, PricingCache, PricingError, servedCost, ZERO_COST,
} from './cost.js';
import { parseCredits } from './money.js';

// The shared charge (the ledger settles it, the edge shows it as usage.cost). Values by hand in pico.
const usage = (fields: Partial<Usage>) => Usage.create(fields);
const prices = (fields: Partial<Pricing>) => Pricing.create(fields);

const cachedModel = prices({
  perInputToken: '0.000003', perCachedInputToken: '0.0000003', perCacheWriteInputToken: '0.00000375', perOutputToken: '0.000015',
});

describe('servedCost and costJson', () => {
  it('splits a cached, reasoning answer by kind, and the parts add up to cost as decimal strings', () => {
    // 1000 input of which 600 read and 100 written; 50 output of which 20 reasoning.
    const cost = servedCost(usage({ inputTokens: 1000, cachedInputTokens: 600, cacheWriteTokens: 100, outputTokens: 50, reasoningTokens: 20 }), parsePricing(cachedModel), '');
    expect(cost).toEqual({
      input: 300n * 3_000_000n, cacheRead: 600n * 300_000n, cacheWrite: 100n * 3_750_000n,
      output: 30n * 15_000_000n, reasoning: 20n * 15_000_000n,
      total: 900_000_000n + 180_000_000n + 375_000_000n + 450_000_000n + 300_000_000n,
    });
    const shown = costJson(cost);
    expect(shown).toEqual({
      cost: '0.002205',
      cost_details: { input: '0.0009', output: '0.00045', cache_read: '0.00018', cache_write: '0.000375', reasoning: '0.0003' },
    });
    const sum = Object.values(shown.cost_details).reduce((total, part) => total + parseCredits(part), 0n);
    expect(sum).toBe(parseCredits(shown.cost));
  });

  it('an honoured insurance claim is no charge; a claim on delivered output is charged as usual', () => {
    const pricing = parsePricing(cachedModel);
    const empty = usage({ inputTokens: 1000 });
    expect(servedCost(empty, pricing, 'no_output_no_finish_reason')).toBe(ZERO_COST);
    expect(costJson(ZERO_COST)).toEqual({ cost: '0', cost_details: { input: '0', output: '0', cache_read: '0', cache_write: '0', reasoning: '0' } });
    // Output delivered (an image token): the ledger refuses the claim, so the charge stands.
    const delivered = usage({ inputTokens: 1000, outputImageTokens: 5 });
    expect(servedCost(delivered, pricing, 'no_output_no_finish_reason').total).toBe(3_000_000_000n);
    // An unknown reason is no claim at all.
    expect(servedCost(empty, pricing, 'because').total).toBe(3_000_000_000n);
  });

  it('chatInsurance: no output and no or an error finish reason', () => {
    expect(chatInsurance(usage({ inputTokens: 5 }), '')).toBe('no_output_no_finish_reason');
    expect(chatInsurance(usage({ inputTokens: 5 }), 'error')).toBe('no_output_error_finish_reason');
    expect(chatInsurance(usage({ inputTokens: 5 }), 'stop')).toBe('');
    expect(chatInsurance(usage({ reasoningTokens: 1 }), '')).toBe('');
    expect(deliveredNothing(usage({ inputTokens: 9 }))).toBe(true);
    expect(deliveredNothing(usage({ outputAudioMs: 1 }))).toBe(false);
  });

  it('audio hours: the input and output parts are rounded so they add up to the once-rounded total', () => {
    // 1 ms in and 1 ms out at 0.0000018 credits (1,800,000 pico) per hour: 0.5 pico each; the total rounds 1.0 to 1, input 0.5 up to 1, output 0.
    const cost = computeCostBreakdownParsed(usage({ inputAudioMs: 1, outputAudioMs: 1 }), parsePricing(prices({ perInputAudioHour: '0.0000018', perOutputAudioHour: '0.0000018' })));
    expect(cost.total).toBe(1n);
    expect([cost.input, cost.output]).toEqual([1n, 0n]);
  });
});

describe('PricingCache', () => {
  it('parses each distinct snapshot once (equal snapshots share the parse) and remembers a bad one', () => {
    const cache = new PricingCache();
    const first = cache.get(prices({ perInputToken: '0.000001' }));
    expect(cache.get(prices({ perInputToken: '0.000001' }))).toBe(first);
    expect(cache.get(prices({ perInputToken: '0.000002' }))).not.toBe(first);
    expect(() => cache.get(prices({ perInputToken: 'x' }))).toThrow(PricingError);
    expect(() => cache.get(prices({ perInputToken: 'x' }))).toThrow(PricingError);
  });
});
