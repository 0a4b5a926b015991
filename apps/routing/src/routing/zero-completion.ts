/**
 * Zero-completion insurance, routing's side: routing knows what an answer delivered, so it decides and
 * says why on the SERVED event (`insured_reason`); the ledger then charges nothing, records the
 * generation with cost 0 and that reason, and closes the hold (apps/ledger/src/zero-completion.ts, which
 * honours a reason only when the usage shows no output). Only generating endpoints are insured: an
 * embedding or a transcription has no output tokens by nature.
 */
// The chat rule is shared with the edge, which shows the same decision in the answer's cost.
export { chatInsurance, type InsuredReason } from '@gateway/platform';
