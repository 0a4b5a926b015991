import { ErrorReason, GatewayError, GrpcStatus, neverSent } from '@gateway/platform';
import type { UsageEvent } from '@gateway/proto';
import type { EdgeContext } from '../context.js';

/**
 * Whether a failed router call may have been served while its answer never reached the edge: the call was
 * sent (not `neverSent`) and then lost without a typed answer — the routing replica died or the connection
 * broke (UNAVAILABLE), or the edge stopped waiting (DEADLINE_EXCEEDED). Routing may have stored the
 * request's usage before that (its outbox is written before it answers), so a charge can reach the ledger
 * for an answer the caller never got. A typed failure is routing's own answer, charged by its own rule.
 */
export function answerMayBeLost(error: unknown): boolean {
  return error instanceof GatewayError
    && error.reason === ErrorReason.ERROR_REASON_INTERNAL
    && (error.status === GrpcStatus.UNAVAILABLE || error.status === GrpcStatus.DEADLINE_EXCEEDED)
    && !neverSent(error);
}

const VOID_RETRY_DELAYS_MS = [1_000, 3_000, 10_000];

/**
 * The caller got an error and no content: no charge stands for the request (LedgerService.VoidCharge,
 * which also turns away a charge still on the bus). Off the request's path, retried while the ledger is
 * unreachable (a ledger replica restarting); given up after the last retry, logged.
 */
export function voidUndelivered(context: EdgeContext, ids: { requestId: string; accountId: string; keyId: string }, attempt = 0): void {
  context.ledger.voidCharge({ context: ids }, { requestId: ids.requestId, deadlineMs: 5_000 }).then(
    (answer) => context.logger.info({ request_id: ids.requestId, outcome: answer.outcome, refunded: answer.refundedCredits }, 'charge of an undelivered answer voided'),
    (error: unknown) => {
      const delay = VOID_RETRY_DELAYS_MS[attempt];
      if (delay === undefined) {
        context.logger.warn({ err: error, request_id: ids.requestId }, 'void of an undelivered answer failed; its charge may stand');
        return;
      }
      setTimeout(() => voidUndelivered(context, ids, attempt + 1), delay).unref();
    },
  );
}

/** Retries of a handed-over settlement while no ledger answers: ~7 minutes in all, then logged as lost. */
const SETTLE_RETRY_DELAYS_MS = [500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000];
/** Handed-over settlements waiting for a ledger at once, per edge; past it one is logged and dropped (memory bound). */
const MAX_PENDING_SETTLEMENTS = 10_000;
let pendingSettlements = 0;

/**
 * A stream's usage event the router handed over (ChatStreamResponse.settlement) and never confirmed
 * stored: LedgerService.SettleUsage charges it unless the bus (or an outbox) already did — the ledger
 * keeps one charge per request id. Off the request's path, retried while no ledger answers.
 */
export function settleHandedOver(context: EdgeContext, event: UsageEvent, attempt = 0): void {
  if (attempt === 0) {
    if (pendingSettlements >= MAX_PENDING_SETTLEMENTS) {
      context.logger.error({ request_id: event.requestId, account_id: event.accountId }, 'too many handed-over usage events wait for a ledger; this one is not settled by the edge');
      return;
    }
    pendingSettlements++;
  }
  context.ledger.settleUsage({ events: [event] }, { requestId: event.requestId, deadlineMs: 5_000 }).then(
    (answer) => {
      pendingSettlements--;
      context.logger.info({ request_id: event.requestId, charged: answer.charged, duplicates: answer.duplicates }, 'handed-over usage event settled');
    },
    (error: unknown) => {
      const delay = SETTLE_RETRY_DELAYS_MS[attempt];
      if (delay === undefined || (error instanceof GatewayError && error.status === GrpcStatus.INVALID_ARGUMENT)) {
        pendingSettlements--;
        context.logger.error({ err: error, request_id: event.requestId, account_id: event.accountId }, 'handed-over usage event could not be settled; its charge may be missing');
        return;
      }
      setTimeout(() => settleHandedOver(context, event, attempt + 1), delay).unref();
    },
  );
}
