import { describe, expect, it } from 'vitest';
import type { Model } from '@gateway/proto';
import { batchPricedModel } from './batch-pricing.js';

describe('batch prices in routing', () => {
  const model = {
    id: 'm',
    pricing: { perInputToken: '0.000002', perOutputToken: '0.000004', perCachedInputToken: '0.000001' },
    batchPricing: { perInputToken: '0.000001', perOutputToken: '0.000002' },
  } as unknown as Model;

  it('a batch line sees batch_pricing over pricing; the catalog model is left as it is', () => {
    const priced = batchPricedModel(model);
    expect(priced.pricing).toEqual({ perInputToken: '0.000001', perOutputToken: '0.000002', perCachedInputToken: '0.000001' });
    expect(model.pricing!.perInputToken).toBe('0.000002');
    // One copy per catalog model object, not one per request.
    expect(batchPricedModel(model)).toBe(priced);
  });

  it('a model without batch prices is its own batch model', () => {
    const plain = { id: 'p', pricing: { perInputToken: '1' } } as unknown as Model;
    expect(batchPricedModel(plain)).toBe(plain);
  });
});
