import type { Pricing, Usage } from '@gateway/proto';
import { parseCredits } from '@gateway/platform';

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
  const count = (value: number) => BigInt(value >>> 0);
  let exact = 0n; // pico-credits
  const add = (units: bigint, key: keyof ParsedPricing) => {
    const unitPrice = pricing[key];
    if (unitPrice !== undefined && units !== 0n) exact += units * unitPrice;
  };

  const inputTokens = count(usage.inputTokens);
  const cachedTokens = count(usage.cachedInputTokens) > inputTokens ? inputTokens : count(usage.cachedInputTokens);
  const writable = inputTokens - cachedTokens;
  const writeTokens = count(usage.cacheWriteTokens) > writable ? writable : count(usage.cacheWriteTokens);
  let plainInput = inputTokens;
  if (pricing.perCachedInputToken !== undefined) {
    plainInput -= cachedTokens;
    add(cachedTokens, 'perCachedInputToken');
  }
  if (pricing.perCacheWriteInputToken !== undefined) {
    plainInput -= writeTokens;
    add(writeTokens, 'perCacheWriteInputToken');
  }
  add(plainInput, 'perInputToken');
  add(count(usage.outputTokens), 'perOutputToken');
  add(count(usage.inputAudioTokens), 'perInputAudioToken');
  add(count(usage.outputAudioTokens), 'perOutputAudioToken');
  add(count(usage.outputTextTokens), 'perOutputTextToken');
  add(count(usage.inputTextCharacters), 'perInputTextCharacter');
  add(count(usage.outputTextCharacters), 'perOutputTextCharacter');
  add(count(usage.outputImageTokens), 'perOutputImageToken');
  add(count(usage.inputTextTokens), 'perInputTextToken');
  add(count(usage.inputImageTokens), 'perInputImageToken');
  add(inputTokens + count(usage.outputTokens), 'perToken');

  // Audio hours: numerator in pico-credit-milliseconds, divided once with half-up rounding.
  let audioNumerator = 0n;
  const perInputHour = pricing.perInputAudioHour;
  const perOutputHour = pricing.perOutputAudioHour;
  if (perInputHour !== undefined) audioNumerator += count(usage.inputAudioMs) * perInputHour;
  if (perOutputHour !== undefined) audioNumerator += count(usage.outputAudioMs) * perOutputHour;
  const total = exact * MS_PER_HOUR + audioNumerator;
  return (total + MS_PER_HOUR / 2n) / MS_PER_HOUR;
}
