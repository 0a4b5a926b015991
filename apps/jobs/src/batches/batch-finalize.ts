import type { Logger } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import type { BatchesTable, JobsDatabase } from '../jobs-schema.js';
import { leaseUntil } from '../leased-work-loop.js';
import { generatedFileId, type Files } from '../files/files.js';

const RESULT_PAGE = 500;

/**
 * Runs `work` on a batch this replica has just leased, its id in `held` meanwhile: the runner's heartbeat
 * renews the leases of the batches held with its lines'. Validation and finalization both hold one this way.
 */
export async function whileHeld(held: Set<string>, batchId: string, work: () => Promise<void>): Promise<void> {
  held.add(batchId);
  try {
    await work();
  } finally {
    held.delete(batchId);
  }
}

/**
 * The end of a batch (docs/jobs.md "How a batch runs"): a batch with no line left to run, or cancelled,
 * or past its window, is taken with a lease, its output and error files written (a page of lines at a
 * time) and it ends. Run by the batch runner's rounds; its batches' leases are renewed with the lines'.
 */
export class BatchFinalizer {
  constructor(
    private readonly db: Kysely<JobsDatabase>,
    private readonly files: Files,
    private readonly options: { replicaId: string; leaseMs: number },
    private readonly logger: Logger,
    /** The batches this replica holds (the runner renews their leases). */
    private readonly heldBatches: Set<string>,
  ) {}

  /**
   * Batches with no line left to run (in_progress), or none running any more (cancelling), or past their
   * window (expired): their output and error files are written and the batch ends.
   */
  async finalizeReady(): Promise<void> {
    const candidates = await sql<BatchesTable>`
      select b.* from batches b
      where (b.lease_expires_at is null or b.lease_expires_at < now()) and (
        (b.status = 'in_progress' and (b.expires_at <= now() or not exists (select 1 from batch_lines l where l.batch_id = b.id and l.status = 'pending')))
        or (b.status = 'cancelling' and not exists (
          select 1 from batch_lines l where l.batch_id = b.id and l.status = 'pending' and l.lease_owner is not null and l.lease_expires_at > now()))
        or b.status = 'finalizing')
      order by b.created_at limit 10`.execute(this.db);
    for (const candidate of candidates.rows) {
      const claimed = await sql<BatchesTable>`
        update batches set lease_owner = ${this.options.replicaId}, lease_expires_at = ${leaseUntil(this.options.leaseMs)},
          finalizing_at = case when status = 'in_progress' and expires_at > now() then now() else finalizing_at end,
          status = case when status = 'in_progress' and expires_at > now() then 'finalizing' else status end
        where id = ${candidate.id} and (lease_expires_at is null or lease_expires_at < now()) and status = ${candidate.status}
        returning *`.execute(this.db);
      const batch = claimed.rows[0];
      if (!batch) continue;
      await whileHeld(this.heldBatches, batch.id, () => this.finalize(batch));
    }
  }

  private async finalize(batch: BatchesTable): Promise<void> {
    const ending = batch.status === 'cancelling' ? 'cancelled' : batch.status === 'in_progress' ? 'expired' : 'completed';
    if (ending === 'expired') {
      // OpenAI: the lines a batch did not reach in its window end in the error file as batch_expired.
      // One transaction: a finalization that dies here and runs again counts each line once.
      await this.db.transaction().execute(async (trx) => {
        const left = await sql<{ line_index: number; custom_id: string }>`
          update batch_lines set status = 'done', is_error = true, lease_owner = null, lease_expires_at = null,
            result = jsonb_build_object('id', 'batch_req_' || batch_id || '-' || line_index, 'custom_id', custom_id, 'response', null,
              'error', jsonb_build_object('code', 'batch_expired', 'message', 'This request could not be executed before the completion window expired.'))
          where batch_id = ${batch.id} and status = 'pending' returning line_index, custom_id`.execute(trx);
        await sql`update batches set failed = failed + ${left.rows.length} where id = ${batch.id}`.execute(trx);
      });
    }
    // The files' ids derive from the batch's: a finalization run again (its replica died between writing
    // them and ending the batch) finds them written and names them, never writing a second set.
    const write = async (errorsOnly: boolean) => {
      // A message batch's results are read from its lines (ListMessageBatchResults): no files.
      if (batch.kind === 'messages') return null;
      const count = await sql<{ n: number }>`select count(*)::int as n from batch_lines where batch_id = ${batch.id} and status = 'done' and is_error = ${errorsOnly}`.execute(this.db);
      if (count.rows[0]!.n === 0) return null;
      const kind = errorsOnly ? 'error' : 'output';
      const file = await this.files.storeGenerated(batch.account_id, `${batch.id}_${kind}.jsonl`, 'batch_output', this.results(batch.id, errorsOnly), generatedFileId(batch.id, kind));
      return file.id;
    };
    const outputFileId = await write(false);
    const errorFileId = await write(true);
    await sql`
      update batches set status = ${ending}, output_file_id = ${outputFileId}, error_file_id = ${errorFileId}, lease_owner = null, lease_expires_at = null,
        completed_at = ${ending === 'completed' ? sql`now()` : sql`completed_at`},
        cancelled_at = ${ending === 'cancelled' ? sql`now()` : sql`cancelled_at`},
        expired_at = ${ending === 'expired' ? sql`now()` : sql`expired_at`}
      where id = ${batch.id} and lease_owner = ${this.options.replicaId}`.execute(this.db);
    this.logger.info({ batch: batch.id, status: ending }, 'batch finished');
  }

  /** The done lines' results in input order, as JSONL, a page of rows at a time. */
  private async *results(batchId: string, errorsOnly: boolean): AsyncGenerator<Buffer> {
    let after = -1;
    for (;;) {
      const rows = await sql<{ line_index: number; result: unknown }>`
        select line_index, result from batch_lines where batch_id = ${batchId} and status = 'done' and is_error = ${errorsOnly} and line_index > ${after}
        order by line_index limit ${RESULT_PAGE}`.execute(this.db);
      if (rows.rows.length === 0) return;
      yield Buffer.from(rows.rows.map((row) => `${JSON.stringify(row.result)}\n`).join(''));
      after = rows.rows.at(-1)!.line_index;
    }
  }
}
