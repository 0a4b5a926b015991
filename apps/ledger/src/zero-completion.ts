import { CANCELLED_FINISH_REASON, insuranceHonoured, type Logger } from '@gateway/platform';
import type { Usage, UsageEvent } from '@gateway/proto';

/**
 * Zero-completion insurance, the ledger's side. Routing decides that an answer delivered nothing (zero
 * output tokens and no or an error finish reason; no image; no audio) and says why in the event's
 * `insured_reason`; the ledger then charges nothing, still records the generation (cost 0, the reason)
 * and closes the hold. Money first: the ledger honours the reason only when the event's usage shows no
 * output of any kind. A reason on usage that did deliver something is a producer bug; that request is
 * charged as usual (every delivered unit is charged once) and logged. So is a claim on a request whose
 * caller left before any content (`cancelled`, finish reason `cancelled`): the prompt an upstream
 * processed is the caller's cost, whatever the producer claims.
 */
// Which claims exist and what delivered nothing means are shared with the edge (its answer's cost).
export { deliveredNothing, INSURED_REASONS } from '@gateway/platform';

/** The reason to record when the insurance applies to this SERVED event, else ''. */
export function honouredInsurance(event: UsageEvent, usage: Usage, logger: Logger): string {
  const reason = event.insuredReason;
  if (!reason) return '';
  // A caller who left before any content pays for the prompt an upstream processed: nothing to insure.
  if (!insuranceHonoured(reason, usage) || (event.cancelled && event.finishReason === CANCELLED_FINISH_REASON)) {
    logger.warn({ request_id: event.requestId, insured_reason: reason }, 'insurance claimed for an answer that delivered output (or an unknown reason); charged as usual');
    return '';
  }
  return reason;
}
