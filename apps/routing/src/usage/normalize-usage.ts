import type { Usage } from '@gateway/proto';
import { emptyUsage } from './token-counter.js';

/**
 * Usage, normalized once (issue 35 item 6; docs/billing.md "Usage, normalized once"). Every provider
 * kind's converter (providers/<kind>/convert-<kind>-usage.ts, for the answer and the stream alike) reads
 * its own counts into a ReportedUsage, saying how its counts relate, and this one function makes the
 * canonical Usage the ledger prices (libs/platform/src/cost.ts). The contract:
 *
 * - input = uncached + cache read + cache write. A kind whose prompt count already holds its cache parts
 *   (OpenAI, Azure: `prompt_tokens` ⊇ `cached_tokens`; Gemini: `promptTokenCount` ⊇
 *   `cachedContentTokenCount`) keeps it, but never below the parts it names; a kind whose prompt count
 *   excludes them (Anthropic `input_tokens`, Bedrock `inputTokens`) has them added.
 * - output includes reasoning, so output ≥ reasoning always. A kind whose output count includes reasoning
 *   (OpenAI `completion_tokens` ⊇ `reasoning_tokens`; Anthropic `output_tokens` and Bedrock
 *   `outputTokens` hold the thinking tokens without counting them apart) keeps it, raised to the
 *   reasoning count when it reports less (an OpenAI-compatible server answering `completion_tokens: 0`
 *   beside `reasoning_tokens: 40` did 40 tokens of work: 40 output tokens, charged); a kind whose output
 *   count excludes reasoning (Gemini `candidatesTokenCount` beside `thoughtsTokenCount`) has it added.
 * - reasoning = the provider's reasoning count (0 when it gives none); it is a part of output, priced
 *   as output (cost.ts), never added again.
 * - providerTotalTokens = the provider's own total as reported (absent when it gives none or 0), kept for
 *   reconciliation with the provider's bill, never priced.
 *
 * An answer whose output is only reasoning has output > 0, so it is not a zero completion (no insurance:
 * cost.ts chatInsurance / insuranceHonoured).
 */
export interface ReportedUsage {
  /** Prompt tokens as the provider counts them. */
  input: number;
  /** True when `input` already includes the cache reads and writes. */
  inputIncludesCache: boolean;
  cacheRead: number;
  cacheWrite: number;
  /** Generated tokens as the provider counts them. */
  output: number;
  /** The reasoning (thinking) tokens the provider reports apart; 0 when it reports none. */
  reasoning: number;
  /** True when `output` already includes the reasoning tokens. */
  outputIncludesReasoning: boolean;
  /** The provider's own total; 0 when it reports none. */
  total: number;
}

/** A count a provider reported: a non-negative integer within uint32, else 0 (a hostile or broken report bills nothing extra). */
function count(value: number): number {
  return Number.isInteger(value) && value >= 0 && value <= 0xffff_ffff ? value : 0;
}

/** uint32 fields saturate rather than wrap: a sum past 2^32 − 1 stays at the maximum. */
function sum(a: number, b: number): number {
  return Math.min(a + b, 0xffff_ffff);
}

/** The canonical Usage of one provider report, under the contract above. */
export function normalizeUsage(reported: ReportedUsage): Usage {
  const cacheRead = count(reported.cacheRead);
  const cacheWrite = count(reported.cacheWrite);
  const input = count(reported.input);
  const cacheParts = sum(cacheRead, cacheWrite);
  const reasoning = count(reported.reasoning);
  const output = count(reported.output);
  const usage = emptyUsage();
  usage.inputTokens = reported.inputIncludesCache ? Math.max(input, cacheParts) : sum(input, cacheParts);
  usage.cachedInputTokens = cacheRead;
  usage.cacheWriteTokens = cacheWrite;
  usage.outputTokens = reported.outputIncludesReasoning ? Math.max(output, reasoning) : sum(output, reasoning);
  usage.reasoningTokens = reasoning;
  const total = count(reported.total);
  if (total > 0) usage.providerTotalTokens = total;
  return usage;
}
