import type { Logger } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import type { JobsDatabase } from '../jobs-schema.js';

/**
 * Deletes the rows of finished batches (completed, failed, expired, cancelled) once they are older than
 * the retention: the batch and its lines (each line's request body and result). Their output and error
 * files expire on their own (docs/jobs.md "What is stored, for how long"). Bounded work per round: lines
 * go in chunks, at most `linesPerRound` a round, and a batch's row goes after its last line, so a round
 * cut short (a replica stopped, a deadline) resumes where it was at the next. Replicas may sweep at the
 * same time: every delete is idempotent.
 */
export interface BatchRetentionOptions {
  /** A finished batch is deleted this long after it finished, seconds; 0 keeps them forever. */
  retentionSeconds: number;
  /** How often the sweep runs, milliseconds. */
  sweepIntervalMs: number;
  /** Lines deleted per statement. */
  chunkLines: number;
  /** Most lines deleted per round (the rest wait for the next round). */
  linesPerRound: number;
}

export const DEFAULT_BATCH_RETENTION: BatchRetentionOptions = {
  retentionSeconds: 30 * 24 * 3600,
  sweepIntervalMs: 10 * 60_000,
  chunkLines: 5_000,
  linesPerRound: 100_000,
};

/** Batches looked at per round. */
const BATCHES_PER_ROUND = 100;

/** The moment a finished batch ended (the index of migration jobs-0004 is on this expression). */
const FINISHED_AT = sql`coalesce(completed_at, failed_at, expired_at, cancelled_at)`;
const FINISHED = sql`status in ('completed', 'failed', 'expired', 'cancelled')`;

export class BatchRetention {
  private timer: NodeJS.Timeout | undefined;
  private sweeping = false;

  constructor(
    private readonly db: Kysely<JobsDatabase>,
    readonly options: BatchRetentionOptions,
    private readonly logger: Logger,
  ) {}

  start(): void {
    if (this.options.retentionSeconds <= 0) return;
    this.timer = setInterval(() => void this.sweep(), this.options.sweepIntervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** One round; answers the batches deleted whole. */
  async sweep(): Promise<{ batches: number; lines: number }> {
    const done = { batches: 0, lines: 0 };
    if (this.sweeping || this.options.retentionSeconds <= 0) return done;
    this.sweeping = true;
    try {
      const due = await sql<{ id: string }>`
        select id from batches
        where ${FINISHED} and ${FINISHED_AT} < now() - make_interval(secs => ${this.options.retentionSeconds})
        order by ${FINISHED_AT} limit ${BATCHES_PER_ROUND}`.execute(this.db);
      for (const { id } of due.rows) {
        for (;;) {
          if (done.lines >= this.options.linesPerRound) return done;
          const chunk = Math.min(this.options.chunkLines, this.options.linesPerRound - done.lines);
          const deleted = await sql`
            delete from batch_lines where batch_id = ${id} and line_index in (
              select line_index from batch_lines where batch_id = ${id} order by line_index limit ${chunk})`.execute(this.db);
          const count = Number(deleted.numAffectedRows ?? 0n);
          done.lines += count;
          if (count < chunk) break;
        }
        // Its lines are gone (checked again: a batch only reaches here finished, nothing adds lines to it).
        const removed = await sql`
          delete from batches where id = ${id} and ${FINISHED} and not exists (select 1 from batch_lines where batch_id = ${id})`.execute(this.db);
        done.batches += Number(removed.numAffectedRows ?? 0n);
      }
      if (done.batches > 0) this.logger.info({ batches: done.batches, lines: done.lines }, 'finished batches past their retention deleted');
      return done;
    } catch (error) {
      this.logger.warn({ err: error }, 'batch retention sweep failed; retried next round');
      return done;
    } finally {
      this.sweeping = false;
    }
  }
}
