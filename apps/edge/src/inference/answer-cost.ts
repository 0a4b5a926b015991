import { chatInsurance, costJson, PricingCache, PricingError, servedCost, type CostDetailsJson } from '@gateway/platform';
import type { ChatResponse, Pricing, Usage } from '@gateway/proto';

/**
 * `usage.cost` and `usage.cost_details` of an answer: the ledger's charge for the request, computed by the
 * same code (@gateway/platform cost.ts) from the same inputs the usage event carries — the metered usage,
 * the serving model's prices at routing time (the Router returns them with the answer) and the
 * zero-completion insurance decision. Computed once per answer; each distinct price snapshot is parsed
 * once (PricingCache), so an answer pays one string key and a few bigint products.
 */
export interface AnswerCost {
  cost: string;
  cost_details: CostDetailsJson;
}

const pricingCache = new PricingCache();

/**
 * The charge of a served answer. `prices`: the Router's (the usage event's); `fallback`: the catalog's
 * for the same model, for a Router that sends none. `insuredReason`: the claim routing makes for it.
 * Undefined when no prices are known or they cannot be read (the ledger refuses such an event too).
 */
export function answerCost(usage: Usage | undefined, prices: Pricing | undefined, fallback: Pricing | undefined, insuredReason = ''): AnswerCost | undefined {
  const pricing = prices ?? fallback;
  if (!usage || !pricing) return undefined;
  try {
    return costJson(servedCost(usage, pricingCache.get(pricing), insuredReason));
  } catch (error) {
    if (error instanceof PricingError) return undefined;
    throw error;
  }
}

/** The charge of a chat answer (any dialect): insured as routing decides it (no output, no or an error finish reason). */
export function chatAnswerCost(usage: Usage | undefined, prices: Pricing | undefined, fallback: Pricing | undefined, finishReason: string): AnswerCost | undefined {
  if (!usage) return undefined;
  return answerCost(usage, prices, fallback, chatInsurance(usage, finishReason));
}

/** A whole chat answer's charge: its finish reason is the first choice's that has one (routing's rule). */
export function chatResponseCost(answer: ChatResponse, fallback: Pricing | undefined): AnswerCost | undefined {
  let finishReason = '';
  for (const choice of answer.choices) {
    if (choice.finishReason !== '') { finishReason = choice.finishReason; break; }
  }
  return chatAnswerCost(answer.usage, answer.prices, fallback, finishReason);
}
