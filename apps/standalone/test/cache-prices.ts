// The prompt-cache price table of the e2e tests that bill cache reads and writes (answer-cost,
// prompt-caching): Claude Sonnet-like prices, 3 / 0.3 / 3.75 / 15 credits per million tokens.

/** The prices as the catalog writes them (credits per token). */
export const CACHE_PRICES = { input: '0.000003', cached: '0.0000003', write: '0.00000375', output: '0.000015' } as const;

/** The same in pico-credits per token, written out by hand (not computed by the code under test). */
export const CACHE_PICO = { input: 3_000_000n, cached: 300_000n, write: 3_750_000n, output: 15_000_000n } as const;

/** A catalog model's `pricing:` with all four prices. */
export const CACHE_PRICING_YAML =
  `{ per_input_token: "${CACHE_PRICES.input}", per_cached_input_token: "${CACHE_PRICES.cached}", per_cache_write_input_token: "${CACHE_PRICES.write}", per_output_token: "${CACHE_PRICES.output}" }`;

/** Anthropic's usage counts: `input_tokens` excludes the cache writes and reads. */
export interface AnthropicCacheUsage {
  input_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  output_tokens: number;
}

/** The charge of one answer by hand, in pico-credits: each of the four kinds at its own price. */
export function cacheChargeParts(usage: AnthropicCacheUsage): { input: bigint; cache_write: bigint; cache_read: bigint; output: bigint } {
  return {
    input: BigInt(usage.input_tokens) * CACHE_PICO.input,
    cache_write: BigInt(usage.cache_creation_input_tokens) * CACHE_PICO.write,
    cache_read: BigInt(usage.cache_read_input_tokens) * CACHE_PICO.cached,
    output: BigInt(usage.output_tokens) * CACHE_PICO.output,
  };
}

/** The total of cacheChargeParts. */
export function cacheChargeOf(usage: AnthropicCacheUsage): bigint {
  const parts = cacheChargeParts(usage);
  return parts.input + parts.cache_write + parts.cache_read + parts.output;
}
