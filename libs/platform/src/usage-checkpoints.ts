/**
 * The stream checkpoint timing behind the billing guarantee for streams in flight at a crash
 * (docs/billing.md): routing writes a stream's provisional usage to its outbox's checkpoint log once the
 * stream has run FIRST_CHECKPOINT_AFTER_MS, then every CHECKPOINT_INTERVAL_MS (apps/routing's
 * usage/stream-checkpoints.ts), so a crash loses at most the output of the last
 * FIRST_CHECKPOINT_AFTER_MS + CHECKPOINT_INTERVAL_MS (400 ms) of a stream, plus one group sync. A
 * published bound, so here: routing runs on it and the crash tests check it.
 */

/**
 * No checkpoint before a stream has run this long: most streams (the bench's take ~10 ms) end sooner
 * and never touch the disk, so 500 short streams/s cost a Set insert and delete each, no write.
 */
export const FIRST_CHECKPOINT_AFTER_MS = 200;
/**
 * Checkpoints of all streams are written together every interval (one timer, one group commit per
 * tick): 1,000 long streams make ~5,000 records/s (~1.5 MB/s) in ~5 fdatasyncs/s. Shorter would lose
 * less in a crash for proportionally more writes; 200 ms of output is a few dozen tokens.
 */
export const CHECKPOINT_INTERVAL_MS = 200;
