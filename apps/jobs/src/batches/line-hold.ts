import { parseCredits } from '@gateway/platform';
import type { Model, Pricing } from '@gateway/proto';
import { promptBytes, type ChatBody, type EmbeddingsBody, type ModerationsBody } from './batch-lines.js';

/**
 * What a batch line holds while it runs (docs/jobs.md "How a batch runs"): its worst-case cost at the
 * model's batch prices, admitted by Ledger.Admit before the line's Router call.
 */

/** The least a paid line holds (the edge's flat hold), and the most Ledger.Admit takes. */
export const MINIMUM_HOLD_PICO = parseCredits('0.05');
export const MAXIMUM_HOLD_PICO = parseCredits('1000');

/** A message batch's line (Anthropic Message Batches): the edge's converted ChatRequest, as JSON. */
export interface MessageLineBody {
  model: string;
  chat_request: unknown;
}

export type LineBody = ChatBody | EmbeddingsBody | ModerationsBody | MessageLineBody;

const priceKeysIn: readonly (keyof Pricing)[] = ['perInputToken', 'perToken', 'perCacheWriteInputToken', 'perInputTextToken'];
const priceKeysOut: readonly (keyof Pricing)[] = ['perOutputToken', 'perToken', 'perOutputTextToken'];

/** The model's prices for a batch line: batch_pricing over pricing (as routing applies them). */
export function batchPrices(model: Model): Pricing {
  const pricing: Pricing = { ...model.pricing };
  for (const [key, value] of Object.entries(model.batchPricing ?? {}) as [keyof Pricing, string | undefined][]) {
    if (value !== undefined && value !== '') pricing[key] = value;
  }
  return pricing;
}

function highest(pricing: Pricing, keys: readonly (keyof Pricing)[]): bigint {
  let best = 0n;
  for (const key of keys) {
    const text = pricing[key];
    if (text !== undefined && text !== '') {
      const pico = parseCredits(text);
      if (pico > best) best = pico;
    }
  }
  return best;
}

function isPaid(pricing: Pricing): boolean {
  return Object.values(pricing).some((text) => typeof text === 'string' && text !== '' && parseCredits(text) > 0n);
}

/**
 * What a line holds: its worst case at the batch prices (prompt bytes bound its tokens; the most output
 * it may produce: its max tokens, else the model's, else its context window), at least 0.05.
 */
export function lineHold(model: Model, body: LineBody): bigint {
  const pricing = batchPrices(model);
  if (!isPaid(pricing)) return 0n;
  const window = model.contextWindow;
  // A message line's prompt: its ChatRequest's JSON bounds its text (and its framing) from above.
  let promptTokens = 'chat_request' in body ? Buffer.byteLength(JSON.stringify(body.chat_request)) : promptBytes(body);
  if (window > 0 && promptTokens > window) promptTokens = window;
  let outputTokens = 0;
  if (!('input' in body)) {
    const asked = 'chat_request' in body
      ? (body.chat_request as { maxOutputTokens?: number }).maxOutputTokens
      : body.max_completion_tokens ?? body.max_tokens;
    outputTokens = asked ?? model.maxOutputTokens ?? window;
    if (model.maxOutputTokens !== undefined && outputTokens > model.maxOutputTokens) outputTokens = model.maxOutputTokens;
  }
  const worst = BigInt(promptTokens) * highest(pricing, priceKeysIn) + BigInt(outputTokens) * highest(pricing, priceKeysOut);
  return worst > MINIMUM_HOLD_PICO ? worst : MINIMUM_HOLD_PICO;
}
