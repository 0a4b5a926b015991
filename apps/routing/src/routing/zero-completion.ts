import type { Usage } from '@gateway/proto';

/**
 * Zero-completion insurance, routing's side: routing knows what an answer delivered, so it decides and
 * says why on the SERVED event (`insured_reason`); the ledger then charges nothing, records the
 * generation with cost 0 and that reason, and closes the hold (apps/ledger/src/zero-completion.ts, which
 * honours a reason only when the usage shows no output). Only generating endpoints are insured: an
 * embedding or a transcription has no output tokens by nature.
 */
export type InsuredReason = '' | 'no_output_no_finish_reason' | 'no_output_error_finish_reason' | 'no_images' | 'no_audio';

/**
 * A chat answer (unary or streamed, metered): insured when it delivered no output token (reasoning
 * included) and ended without a finish reason or with an error one. A stream that delivered some text
 * and then failed has output tokens, so it is charged for what it delivered.
 */
export function chatInsurance(usage: Usage, finishReason: string): InsuredReason {
  if ((usage.outputTokens >>> 0) !== 0 || (usage.reasoningTokens >>> 0) !== 0) return '';
  if (finishReason === '') return 'no_output_no_finish_reason';
  if (finishReason === 'error') return 'no_output_error_finish_reason';
  return '';
}
