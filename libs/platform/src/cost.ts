import type { Pricing, Usage } from '@gateway/proto';
import { formatCredits, parseCredits } from './money.js';

/**
 * THE charge of one request, shared by the ledger (which settles it) and the edge (which shows it in the
 * answer as `usage.cost` / `usage.cost_details`): one computation, so the two agree to the pico.
 */

/** Audio is priced per hour and metered in milliseconds. */
const MS_PER_HOUR = 3_600_000n;

export class PricingError extends Error {
  override name = 'PricingError';
}

const PRICE_KEYS = [
  'perInputToken', 'perCachedInputToken', 'perOutputToken', 'perInputAudioToken', 'perOutputAudioToken',
  'perInputAudioHour', 'perOutputAudioHour', 'perOutputTextToken', 'perInputTextCharacter', 'perOutputTextCharacter',
  'perOutputImageToken', 'perInputTextToken', 'perInputImageToken', 'perToken', 'perCacheWriteInputToken',
] as const satisfies ReadonlyArray<keyof Pricing>;

// Every Pricing field must be listed above, or its price would silently never be charged.
const everyPriceKeyListed: [Exclude<keyof Pricing, (typeof PRICE_KEYS)[number]>] extends [never] ? true : never = true;
void everyPriceKeyListed;

/** A price snapshot read once: pico-credits per unit, undefined where the model has no such price. */
export type ParsedPricing = { readonly [key in (typeof PRICE_KEYS)[number]]: bigint | undefined };

function price(pricing: Pricing, key: keyof Pricing): bigint | undefined {
  const text = pricing[key];
  if (text === undefined || text === '') return undefined;
  let pico: bigint;
  try {
    pico = parseCredits(text);
  } catch (error) {
    throw new PricingError(`price ${key} is not a decimal with at most 12 decimals: ${JSON.stringify(text)}`);
  }
  if (pico < 0n) throw new PricingError(`price ${key} is negative: ${text}`);
  return pico;
}

export function parsePricing(pricing: Pricing): ParsedPricing {
  const parsed = {} as Record<(typeof PRICE_KEYS)[number], bigint | undefined>;
  for (const key of PRICE_KEYS) parsed[key] = price(pricing, key);
  return parsed;
}

/** Most distinct price snapshots kept parsed; past it the cache starts over (a catalog has far fewer). */
const PRICING_CACHE_LIMIT = 4_096;

/**
 * Parses each distinct price snapshot once. A settlement batch holds thousands of events over a
 * handful of models; parsing 14 decimal strings per event was a third of the settler's CPU.
 */
export class PricingCache {
  private readonly parsed = new Map<string, ParsedPricing | PricingError>();

  get(pricing: Pricing): ParsedPricing {
    let key = '';
    for (const name of PRICE_KEYS) key += `${pricing[name] ?? ''}|`;
    let entry = this.parsed.get(key);
    if (entry === undefined) {
      try {
        entry = parsePricing(pricing);
      } catch (error) {
        if (!(error instanceof PricingError)) throw error;
        entry = error;
      }
      if (this.parsed.size >= PRICING_CACHE_LIMIT) this.parsed.clear();
      this.parsed.set(key, entry);
    }
    if (entry instanceof PricingError) throw entry;
    return entry;
  }
}

/**
 * The charge for one request in pico-credits: every metered count times its price from the event's
 * price snapshot (an absent price is not charged).
 *
 * Per-unit prices are integers in pico-credits, so token and character terms are exact. Audio
 * durations are priced per hour: those terms are kept as an exact fraction over 3,600,000 ms and the
 * whole sum is rounded once, half up, to the pico — a request never loses or gains more than half a
 * pico to rounding, whatever mix of units it used.
 *
 * Cache reads and cache writes are parts of input_tokens, so input is three kinds: cache reads at
 * per_cached_input_token, cache writes at per_cache_write_input_token, the rest at per_input_token; a
 * kind without its own price is charged at per_input_token. Counts the provider reported inconsistently
 * are capped: reads at the input count, writes at what the reads leave.
 * per_token applies to input_tokens + output_tokens (models priced the same in both directions).
 */
export function computeCostPico(usage: Usage, pricing: Pricing): bigint {
  return computeCostPicoParsed(usage, parsePricing(pricing));
}

export function computeCostPicoParsed(usage: Usage, pricing: ParsedPricing): bigint {
  return computeCostBreakdownParsed(usage, pricing).total;
}

/**
 * The charge split by kind (the generation record's cost details), in pico-credits. The parts are
 * disjoint and add up to `total` exactly, which is THE charge (computeCostPicoParsed returns it):
 *
 * - cacheRead / cacheWrite: cache reads and writes at their own prices (a kind without its own price is
 *   plain input, so it is in `input`);
 * - input: the rest of the prompt at per_input_token, the other input units (audio tokens and hours,
 *   characters, text and image tokens of image models) and per_token on input tokens;
 * - reasoning: the reasoning tokens among the output tokens (at most all of them), at per_output_token
 *   (and per_token);
 * - output: the other output tokens and every other output unit.
 *
 * The two audio-hour terms are rounded together, as the total is: input gets its own term rounded half
 * up and output the rest, so the parts never drift from the charge.
 */
export interface CostBreakdown {
  total: bigint;
  input: bigint;
  output: bigint;
  cacheRead: bigint;
  cacheWrite: bigint;
  reasoning: bigint;
}

export function computeCostBreakdownParsed(usage: Usage, pricing: ParsedPricing): CostBreakdown {
  const count = (value: number) => BigInt(value >>> 0);
  const term = (units: bigint, key: keyof ParsedPricing): bigint => {
    const unitPrice = pricing[key];
    return unitPrice !== undefined && units !== 0n ? units * unitPrice : 0n;
  };

  const inputTokens = count(usage.inputTokens);
  const cachedTokens = count(usage.cachedInputTokens) > inputTokens ? inputTokens : count(usage.cachedInputTokens);
  const writable = inputTokens - cachedTokens;
  const writeTokens = count(usage.cacheWriteTokens) > writable ? writable : count(usage.cacheWriteTokens);
  let plainInput = inputTokens;
  let cacheRead = 0n;
  let cacheWrite = 0n;
  if (pricing.perCachedInputToken !== undefined) {
    plainInput -= cachedTokens;
    cacheRead = term(cachedTokens, 'perCachedInputToken');
  }
  if (pricing.perCacheWriteInputToken !== undefined) {
    plainInput -= writeTokens;
    cacheWrite = term(writeTokens, 'perCacheWriteInputToken');
  }
  const outputTokens = count(usage.outputTokens);
  const reasoningTokens = count(usage.reasoningTokens) > outputTokens ? outputTokens : count(usage.reasoningTokens);
  const otherOutput = outputTokens - reasoningTokens;

  // Audio hours: numerators in pico-credit-milliseconds, divided with half-up rounding.
  const perInputHour = pricing.perInputAudioHour;
  const perOutputHour = pricing.perOutputAudioHour;
  const inputAudioNumerator = perInputHour !== undefined ? count(usage.inputAudioMs) * perInputHour : 0n;
  const outputAudioNumerator = perOutputHour !== undefined ? count(usage.outputAudioMs) * perOutputHour : 0n;
  const rounded = (numerator: bigint) => (numerator + MS_PER_HOUR / 2n) / MS_PER_HOUR;
  const inputAudio = rounded(inputAudioNumerator);
  const outputAudio = rounded(inputAudioNumerator + outputAudioNumerator) - inputAudio;

  const input = term(plainInput, 'perInputToken') + term(count(usage.inputAudioTokens), 'perInputAudioToken')
    + term(count(usage.inputTextCharacters), 'perInputTextCharacter') + term(count(usage.inputTextTokens), 'perInputTextToken')
    + term(count(usage.inputImageTokens), 'perInputImageToken') + term(inputTokens, 'perToken') + inputAudio;
  const reasoning = term(reasoningTokens, 'perOutputToken') + term(reasoningTokens, 'perToken');
  const output = term(otherOutput, 'perOutputToken') + term(count(usage.outputAudioTokens), 'perOutputAudioToken')
    + term(count(usage.outputTextTokens), 'perOutputTextToken') + term(count(usage.outputTextCharacters), 'perOutputTextCharacter')
    + term(count(usage.outputImageTokens), 'perOutputImageToken') + term(otherOutput, 'perToken') + outputAudio;
  return { total: input + output + cacheRead + cacheWrite + reasoning, input, output, cacheRead, cacheWrite, reasoning };
}

/** No charge at all: an insured answer's cost details. */
export const ZERO_COST: CostBreakdown = Object.freeze({ total: 0n, input: 0n, output: 0n, cacheRead: 0n, cacheWrite: 0n, reasoning: 0n });

/**
 * True when the usage shows no output of any kind: the ledger honours a zero-completion insurance claim
 * only then (a claim on usage that delivered something is charged as usual).
 */
export function deliveredNothing(usage: Usage): boolean {
  return (usage.outputTokens >>> 0) === 0 && (usage.reasoningTokens >>> 0) === 0 && (usage.outputAudioTokens >>> 0) === 0
    && (usage.outputAudioMs >>> 0) === 0 && (usage.outputTextTokens >>> 0) === 0 && (usage.outputTextCharacters >>> 0) === 0
    && (usage.outputImageTokens >>> 0) === 0;
}

/**
 * The finish reason of a request whose caller left before any content while an upstream had its prompt:
 * charged for that prompt (docs/billing.md), never insured — the insurance covers a provider that
 * answered nothing, not a caller who stopped waiting.
 */
export const CANCELLED_FINISH_REASON = 'cancelled';

export type InsuredReason = '' | 'no_output_no_finish_reason' | 'no_output_error_finish_reason' | 'no_images' | 'no_audio';

/** The insurance claims the ledger knows (any other is charged as usual). */
export const INSURED_REASONS: ReadonlySet<string> = new Set(['no_output_no_finish_reason', 'no_output_error_finish_reason', 'no_images', 'no_audio']);

/**
 * Zero-completion insurance of a chat answer (unary or streamed, metered): insured when it delivered no
 * output token (reasoning included) and ended without a finish reason or with an error one. A stream that
 * delivered some text and then failed has output tokens, so it is charged for what it delivered. Routing
 * claims it on the usage event; the edge shows the same decision in the answer's cost.
 */
export function chatInsurance(usage: Usage, finishReason: string): InsuredReason {
  if ((usage.outputTokens >>> 0) !== 0 || (usage.reasoningTokens >>> 0) !== 0) return '';
  if (finishReason === '') return 'no_output_no_finish_reason';
  if (finishReason === 'error') return 'no_output_error_finish_reason';
  return '';
}

/** True when the ledger honours this insurance claim ('' none): a claim it knows, on usage that delivered nothing. */
export function insuranceHonoured(insuredReason: string, usage: Usage): boolean {
  return INSURED_REASONS.has(insuredReason) && deliveredNothing(usage);
}

/** What the ledger charges a served event with this usage, prices and insurance claim ('' none). */
export function servedCost(usage: Usage, pricing: ParsedPricing, insuredReason: string): CostBreakdown {
  if (insuranceHonoured(insuredReason, usage)) return ZERO_COST;
  return computeCostBreakdownParsed(usage, pricing);
}

/** `usage.cost_details` of an answer: the charge by kind, decimal credit strings adding up to `cost`. */
export interface CostDetailsJson {
  input: string;
  output: string;
  cache_read: string;
  cache_write: string;
  reasoning: string;
}

/** The charge as an answer shows it: `cost` (decimal credit string, exact) and its parts. */
export function costJson(cost: CostBreakdown): { cost: string; cost_details: CostDetailsJson } {
  return {
    cost: formatCredits(cost.total),
    cost_details: {
      input: formatCredits(cost.input),
      output: formatCredits(cost.output),
      cache_read: formatCredits(cost.cacheRead),
      cache_write: formatCredits(cost.cacheWrite),
      reasoning: formatCredits(cost.reasoning),
    },
  };
}
