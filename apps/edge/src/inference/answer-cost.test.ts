import { describe, expect, it } from 'vitest';
import { ChatResponse, Pricing, Usage } from '@gateway/proto';
import { answerCost, chatResponseCost } from './answer-cost.js';

const routed = Pricing.create({ perInputToken: '0.000002', perOutputToken: '0.00001' });
const catalog = Pricing.create({ perInputToken: '0.000001', perOutputToken: '0.000005' });

function answer(fields: { usage: Partial<Usage>; finishReason: string; prices?: Pricing }): ChatResponse {
  return ChatResponse.create({
    choices: [{ index: 0, finishReason: fields.finishReason, message: { content: 'x', toolCalls: [], reasoning: [], images: [] } }],
    usage: Usage.create(fields.usage),
    ...(fields.prices ? { prices: fields.prices } : {}),
  });
}

describe('answer cost', () => {
  it("uses the Router's prices (the usage event's), not the catalog's, when the answer carries them", () => {
    const cost = chatResponseCost(answer({ usage: { inputTokens: 100, outputTokens: 10 }, finishReason: 'stop', prices: routed }), catalog);
    // 100 × 2,000,000 + 10 × 10,000,000 pico.
    expect(cost).toEqual({ cost: '0.0003', cost_details: { input: '0.0002', output: '0.0001', cache_read: '0', cache_write: '0', reasoning: '0' } });
    expect(chatResponseCost(answer({ usage: { inputTokens: 100, outputTokens: 10 }, finishReason: 'stop' }), catalog)?.cost).toBe('0.00015');
  });

  it('an answer with no output and no finish reason is insured: cost 0, as the ledger charges it', () => {
    expect(chatResponseCost(answer({ usage: { inputTokens: 100 }, finishReason: '', prices: routed }), catalog)?.cost).toBe('0');
    expect(chatResponseCost(answer({ usage: { inputTokens: 100 }, finishReason: 'stop', prices: routed }), catalog)?.cost).toBe('0.0002');
  });

  it('no usage, no prices or unreadable prices: no cost shown', () => {
    expect(answerCost(undefined, routed, catalog)).toBeUndefined();
    expect(answerCost(Usage.create({ inputTokens: 1 }), undefined, undefined)).toBeUndefined();
    expect(answerCost(Usage.create({ inputTokens: 1 }), Pricing.create({ perInputToken: '1e-6' }), catalog)).toBeUndefined();
  });
});
