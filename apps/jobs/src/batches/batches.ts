import { randomBytes } from 'node:crypto';
import { errors, formatCredits } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import type { Batch } from '@gateway/proto';
import type { BatchesTable, JobsDatabase } from '../jobs-schema.js';
import type { Files } from '../files/files.js';
import { BATCH_ENDPOINTS } from './batch-lines.js';

/** Bounds of the Batch API (docs/jobs.md "Limits"). */
export interface BatchLimits {
  /** Most lines of one batch (OpenAI: 50,000). */
  maxLines: number;
  /** Most batches of one account not finished at once (validating, in progress, finalizing, cancelling). */
  maxUnfinishedPerAccount: number;
}

export const DEFAULT_BATCH_LIMITS: BatchLimits = { maxLines: 50_000, maxUnfinishedPerAccount: 20 };

/** The only completion window OpenAI offers. */
export const COMPLETION_WINDOW = '24h';
export const COMPLETION_WINDOW_SECONDS = 24 * 3600;
const BATCH_ID_PATTERN = /^batch_[0-9a-f]{24}$/;
const METADATA_MAX_PAIRS = 16;
const METADATA_KEY_MAX = 64;
const METADATA_VALUE_MAX = 512;
const LIST_LIMIT_MAX = 100;
const LIST_LIMIT_DEFAULT = 20;
export const UNFINISHED_STATUSES = ['validating', 'in_progress', 'finalizing', 'cancelling'] as const;

const seconds = (date: Date | null) => (date ? BigInt(Math.floor(date.getTime() / 1000)) : 0n);
const notFound = () => errors.notFound('No such batch.');

export function renderBatch(row: BatchesTable): Batch {
  return {
    id: row.id,
    endpoint: row.endpoint,
    inputFileId: row.input_file_id,
    completionWindow: row.completion_window,
    status: row.status,
    outputFileId: row.output_file_id ?? '',
    errorFileId: row.error_file_id ?? '',
    createdAt: seconds(row.created_at),
    inProgressAt: seconds(row.in_progress_at),
    expiresAt: seconds(row.expires_at),
    finalizingAt: seconds(row.finalizing_at),
    completedAt: seconds(row.completed_at),
    failedAt: seconds(row.failed_at),
    expiredAt: seconds(row.expired_at),
    cancellingAt: seconds(row.cancelling_at),
    cancelledAt: seconds(row.cancelled_at),
    requestCounts: { total: row.total, completed: row.completed, failed: row.failed },
    metadata: row.metadata,
    errors: row.errors.map((error) => ({ code: error.code, message: error.message, param: error.param, line: error.line })),
    cost: formatCredits(BigInt(row.cost_pico)),
    model: row.model,
  };
}

/**
 * Batches as the account sees them: create (checked here, validated line by line by the runner), get,
 * list, cancel. Every lookup carries the account; another account's batch id is NOT_FOUND.
 */
export class Batches {
  constructor(
    private readonly db: Kysely<JobsDatabase>,
    private readonly files: Files,
    readonly limits: BatchLimits,
  ) {}

  async create(request: { accountId: string; keyId: string; tier: string; inputFileId: string; endpoint: string; completionWindow: string; metadata: Record<string, string> }): Promise<Batch> {
    if (request.accountId === '') throw errors.invalidRequest('account_id: required', 'account_id');
    if (!(BATCH_ENDPOINTS as readonly string[]).includes(request.endpoint)) {
      throw errors.invalidRequest(`endpoint: expected one of ${BATCH_ENDPOINTS.join(', ')}`, 'endpoint');
    }
    if (request.completionWindow !== COMPLETION_WINDOW) throw errors.invalidRequest(`completion_window: expected ${COMPLETION_WINDOW}`, 'completion_window');
    const pairs = Object.entries(request.metadata);
    if (pairs.length > METADATA_MAX_PAIRS) throw errors.invalidRequest(`metadata: at most ${METADATA_MAX_PAIRS} pairs`, 'metadata');
    for (const [key, value] of pairs) {
      if (key.length === 0 || key.length > METADATA_KEY_MAX) throw errors.invalidRequest(`metadata: keys are 1..${METADATA_KEY_MAX} characters`, 'metadata');
      if (value.length > METADATA_VALUE_MAX) throw errors.invalidRequest(`metadata.${key}: at most ${METADATA_VALUE_MAX} characters`, `metadata.${key}`);
    }
    // The input file must be the account's own, a batch file, still kept (NOT_FOUND otherwise, as for any id).
    const input = await this.files.getFile(request.accountId, request.inputFileId).catch(() => {
      throw Object.assign(errors.notFound(`No such file: ${request.inputFileId.slice(0, 64)}.`), { param: 'input_file_id' });
    });
    if (input.purpose !== 'batch') throw errors.invalidRequest("input_file_id: the file's purpose must be batch", 'input_file_id');
    const id = `batch_${randomBytes(12).toString('hex')}`;
    const row = await this.db.transaction().execute(async (trx) => {
      await sql`select pg_advisory_xact_lock(hashtext(${`jobs-batches:${request.accountId}`}))`.execute(trx);
      const unfinished = await trx
        .selectFrom('batches')
        .select((select) => select.fn.countAll<string>().as('count'))
        .where('account_id', '=', request.accountId)
        .where('status', 'in', [...UNFINISHED_STATUSES])
        .executeTakeFirstOrThrow();
      if (Number(unfinished.count) >= this.limits.maxUnfinishedPerAccount) {
        throw errors.invalidRequest(`the account already has ${this.limits.maxUnfinishedPerAccount} unfinished batches`, 'input_file_id', 'batches_limit_exceeded');
      }
      const inserted = await sql<BatchesTable>`
        insert into batches (id, account_id, key_id, tier, endpoint, input_file_id, completion_window, status, metadata, expires_at)
        values (${id}, ${request.accountId}, ${request.keyId}, ${request.tier}, ${request.endpoint}, ${request.inputFileId}, ${request.completionWindow},
          'validating', ${JSON.stringify(request.metadata)}::jsonb, now() + make_interval(secs => ${COMPLETION_WINDOW_SECONDS}))
        returning *`.execute(trx);
      return inserted.rows[0]!;
    });
    return renderBatch(row);
  }

  async get(accountId: string, batchId: string): Promise<Batch> {
    return renderBatch(await this.owned(accountId, batchId));
  }

  async list(accountId: string, limit: number, after: string): Promise<{ batches: Batch[]; hasMore: boolean }> {
    if (limit > LIST_LIMIT_MAX) throw errors.invalidRequest(`limit: expected 1..${LIST_LIMIT_MAX}`, 'limit');
    const pageSize = limit === 0 ? LIST_LIMIT_DEFAULT : limit;
    let cursor: { created_at: Date; id: string } | undefined;
    if (after !== '') {
      const found = BATCH_ID_PATTERN.test(after)
        ? await this.db.selectFrom('batches').select(['created_at', 'id']).where('id', '=', after).where('account_id', '=', accountId).executeTakeFirst()
        : undefined;
      if (!found) throw errors.invalidRequest('after: no such batch', 'after');
      cursor = found;
    }
    const rows = await sql<BatchesTable>`
      select * from batches where account_id = ${accountId}
        ${cursor ? sql`and (created_at, id) < (${cursor.created_at}, ${cursor.id})` : sql``}
      order by created_at desc, id desc limit ${pageSize + 1}`.execute(this.db);
    return { batches: rows.rows.slice(0, pageSize).map(renderBatch), hasMore: rows.rows.length > pageSize };
  }

  /** validating / in_progress → cancelling (the runner ends it once its running lines finished). */
  async cancel(accountId: string, batchId: string): Promise<Batch> {
    await this.owned(accountId, batchId);
    const moved = await sql<BatchesTable>`
      update batches set status = 'cancelling', cancelling_at = now()
      where id = ${batchId} and account_id = ${accountId} and status in ('validating', 'in_progress')
      returning *`.execute(this.db);
    return renderBatch(moved.rows[0] ?? (await this.owned(accountId, batchId)));
  }

  private async owned(accountId: string, batchId: string): Promise<BatchesTable> {
    if (!BATCH_ID_PATTERN.test(batchId)) throw notFound();
    const row = await this.db.selectFrom('batches').selectAll().where('id', '=', batchId).where('account_id', '=', accountId).executeTakeFirst();
    if (!row) throw notFound();
    return row;
  }
}
