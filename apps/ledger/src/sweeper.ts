import type { Logger } from '@gateway/platform';
import type { Ledger } from './ledger.js';

export const DEFAULT_SWEEP_INTERVAL_MS = 30_000;

/**
 * Closes reservations whose usage event never came (litellm#27639: leaked reservations turned into
 * phantom refusals). Runs one pass at a time; a failed pass is logged and the next tick tries again.
 */
export function startSweeper(ledger: Ledger, logger: Logger, intervalMs: number, reservationRetentionMs: number): { stop(): Promise<void> } {
  let running: Promise<void> | null = null;
  let stopped = false;
  const pass = async () => {
    try {
      const closed = await ledger.sweepExpired();
      if (closed > 0) logger.info({ closed }, 'expired reservations released');
      await ledger.pruneRateWindows();
      // Closed reservations only remember answers for repeated request ids; without this the table grows forever.
      const pruned = await ledger.pruneClosedReservations(reservationRetentionMs);
      if (pruned > 0) logger.info({ pruned }, 'closed reservations past retention deleted');
      // Generation records are kept 30 days (GET /v1/generation); a bounded batch per pass.
      const generations = await ledger.pruneGenerations();
      if (generations > 0) logger.info({ generations }, 'generation records past retention deleted');
    } catch (error) {
      logger.error({ err: error }, 'reservation sweep failed');
    }
  };
  const timer = setInterval(() => {
    if (stopped || running) return;
    running = pass().finally(() => { running = null; });
  }, intervalMs);
  timer.unref();
  return {
    stop: async () => {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
