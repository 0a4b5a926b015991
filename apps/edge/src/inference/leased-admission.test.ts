import { describe, expect, it } from 'vitest';
import { parseCredits } from '@gateway/platform';
import { Pricing, Usage } from '@gateway/proto';
import { estimateCostPico } from './leased-admission.js';

describe('estimateCostPico (local budget of leased admission)', () => {
  it('is never below the exact charge of a chat request', () => {
    const pricing = Pricing.create({ perInputToken: '0.0000005', perOutputToken: '0.0000015', perCachedInputToken: '0.0000001' });
    const usage = Usage.create({ inputTokens: 1000, cachedInputTokens: 400, outputTokens: 200 });
    // What the ledger charges: 600 uncached × input + 400 cached × cached + 200 × output.
    const exact = 600n * parseCredits('0.0000005') + 400n * parseCredits('0.0000001') + 200n * parseCredits('0.0000015');
    const estimate = estimateCostPico(usage, pricing);
    expect(estimate).toBeGreaterThanOrEqual(exact);
    // Every count times the sum of the prices: 1,600 × 0.0000021.
    expect(estimate).toBe(1_600n * parseCredits('0.0000021'));
  });

  it('rounds audio durations up to the pico and treats an unreadable price as the whole hold', () => {
    const audio = Pricing.create({ perInputAudioHour: '0.000000000001' });
    expect(estimateCostPico(Usage.create({ inputAudioMs: 1 }), audio)).toBe(1n);
    expect(estimateCostPico(Usage.create({ inputAudioMs: 0 }), audio)).toBe(0n);
    expect(estimateCostPico(Usage.create({ inputTokens: 1 }), Pricing.create({ perInputToken: 'abc' }))).toBe(parseCredits('0.05'));
    expect(estimateCostPico(Usage.create({ inputTokens: 10 }), undefined)).toBe(0n);
  });
});
