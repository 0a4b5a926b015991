import { parseCredits } from '@gateway/platform';
import type { FakeUpstream } from '@gateway/testing';

// What the batch tests share: a catalog whose one model has batch prices (half its list prices), the
// usage the fake upstream reports for every chat line, and the cost of one line at the batch prices.

export const MODEL = 'testco/batchy';
export const PRICE_IN = '0.000002';
export const PRICE_OUT = '0.000004';
export const BATCH_IN = '0.000001';
export const BATCH_OUT = '0.000002';
export const PROMPT_TOKENS = 10;
export const COMPLETION_TOKENS = 5;
/** One chat line at the batch prices: 10 × 0.000001 + 5 × 0.000002. */
export const LINE_COST = BigInt(PROMPT_TOKENS) * parseCredits(BATCH_IN) + BigInt(COMPLETION_TOKENS) * parseCredits(BATCH_OUT);
export const REGULAR_LINE_COST = BigInt(PROMPT_TOKENS) * parseCredits(PRICE_IN) + BigInt(COMPLETION_TOKENS) * parseCredits(PRICE_OUT);

/** The providers of batchCatalogOf, one per fake upstream in order. */
const PROVIDER_IDS = ['upstream-one', 'upstream-two', 'upstream-three'];

/** `endpoints`: the model's offer's endpoints (the message batch test adds `messages`). */
export function batchCatalog(upstream: FakeUpstream, endpoints = 'chat.completions, embeddings'): string {
  return batchCatalogOf([upstream], batchModel({ id: MODEL, aliases: ['batchy'], offers: [{ upstream: 0, model: 'batchy-upstream', endpoints }] }));
}

/** A catalog of OpenAI-kind providers `upstream-one`, `upstream-two`, … (one per fake, key BATCH_KEY) and the models given. */
export function batchCatalogOf(upstreams: FakeUpstream[], models: string): string {
  return `
startups:
  - { id: testco, display_name: Test Co }
providers:${upstreams.map((upstream, index) => `
  - { id: ${PROVIDER_IDS[index]}, kind: openai, base_url: ${upstream.url}, api_key_env: BATCH_KEY }`).join('')}
limit_groups:
  - id: default
    tiers: { tier-1: { minute: ${upstreams.length > 1 ? 100000 : 600} } }
models:${models}
`;
}

/** One model of batchCatalogOf: list and batch prices (default the harness's), offered by the fakes by index. */
export function batchModel(options: {
  id: string;
  aliases?: string[];
  perOutput?: string;
  batchOut?: string;
  offers: { upstream: number; model: string; endpoints?: string }[];
}): string {
  return `
  - id: ${options.id}
    owned_by: testco
    created: 1767225600
    context_window: 8000
    max_output_tokens: 100${options.aliases ? `
    aliases: [${options.aliases.join(', ')}]` : ''}
    input_modalities: [text]
    output_modalities: [text]
    supported_parameters: [temperature, max_completion_tokens]
    pricing: { per_input_token: "${PRICE_IN}", per_output_token: "${options.perOutput ?? PRICE_OUT}" }
    batch_pricing: { per_input_token: "${BATCH_IN}", per_output_token: "${options.batchOut ?? BATCH_OUT}" }
    limit_group: default
    offers:${options.offers.map((offer) => `
      - { provider: ${PROVIDER_IDS[offer.upstream]}, upstream_model: ${offer.model}, endpoints: [${offer.endpoints ?? 'chat.completions'}] }`).join('')}`;
}

/** One chat completions line of an input file. */
export const chatLine = (customId: string, text: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ custom_id: customId, method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, messages: [{ role: 'user', content: text }], ...extra } });

