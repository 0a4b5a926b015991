import { randomBytes } from 'node:crypto';
import { errors, formatCredits } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import { ChatRequest, ChatResponse, type Batch, type MessageBatchCounts, type MessageBatchRequestItem, type MessageBatchResult } from '@gateway/proto';
import type { BatchesTable, JobsDatabase } from '../jobs-schema.js';
import type { Files } from '../files/files.js';
import { BATCH_ENDPOINTS } from './batch-lines.js';

/** Bounds of the Batch API (docs/jobs.md "Limits"). */
export interface BatchLimits {
  /** Most lines of one batch (OpenAI: 50,000). */
  maxLines: number;
  /** Most batches of one account not finished at once (validating, in progress, finalizing, cancelling). */
  maxUnfinishedPerAccount: number;
  /** Most requests of one message batch (Anthropic: 100,000; the edge also bounds the body's bytes). */
  maxMessageRequests: number;
}

export const DEFAULT_BATCH_LIMITS: BatchLimits = { maxLines: 50_000, maxUnfinishedPerAccount: 20, maxMessageRequests: 10_000 };

/** Anthropic's custom_id: 1..64 of letters, digits, `_` and `-`. */
export const MESSAGE_CUSTOM_ID = /^[A-Za-z0-9_-]{1,64}$/;
const RESULTS_PAGE_DEFAULT = 500;
const RESULTS_PAGE_MAX = 1_000;
/** Answers' JSON characters in one results page: bounds the message and what the edge holds while it writes it. */
const RESULTS_PAGE_BYTES = 2 * 1024 * 1024;
const ENDED_STATUSES = ['completed', 'failed', 'expired', 'cancelled'] as const;

/** The only completion window OpenAI offers. */
export const COMPLETION_WINDOW = '24h';
export const COMPLETION_WINDOW_SECONDS = 24 * 3600;
const BATCH_ID_PATTERN = /^(?:msg)?batch_[0-9a-f]{24}$/;
const METADATA_MAX_PAIRS = 16;
const METADATA_KEY_MAX = 64;
const METADATA_VALUE_MAX = 512;
const LIST_LIMIT_MAX = 100;
const LIST_LIMIT_DEFAULT = 20;
export const UNFINISHED_STATUSES = ['validating', 'in_progress', 'finalizing', 'cancelling'] as const;

const seconds = (date: Date | null) => (date ? BigInt(Math.floor(date.getTime() / 1000)) : 0n);
const notFound = () => errors.notFound('No such batch.');

/** A messages batch's lines by result (Anthropic's request_counts). */
async function messageCounts(db: Kysely<JobsDatabase>, row: BatchesTable): Promise<MessageBatchCounts> {
  const counts = await sql<{ pending: number; succeeded: number; expired: number; errored: number }>`
    select count(*) filter (where status = 'pending')::int as pending,
      count(*) filter (where status = 'done' and not is_error)::int as succeeded,
      count(*) filter (where status = 'done' and is_error and result->'error'->>'code' = 'batch_expired')::int as expired,
      count(*) filter (where status = 'done' and is_error and coalesce(result->'error'->>'code', '') <> 'batch_expired')::int as errored
    from batch_lines where batch_id = ${row.id}`.execute(db);
  const found = counts.rows[0]!;
  const ended = (ENDED_STATUSES as readonly string[]).includes(row.status);
  return { processing: ended ? 0 : found.pending, succeeded: found.succeeded, errored: found.errored, canceled: ended ? found.pending : 0, expired: found.expired };
}

const endedAt = (row: BatchesTable) => row.completed_at ?? row.cancelled_at ?? row.expired_at ?? row.failed_at;

export function renderBatch(row: BatchesTable, counts?: MessageBatchCounts): Batch {
  return {
    kind: row.kind,
    messageCounts: counts,
    endedAt: seconds(endedAt(row)),
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
    const row = await this.withinAccountCap(request.accountId, 'input_file_id', async (trx) => {
      const inserted = await sql<BatchesTable>`
        insert into batches (id, account_id, key_id, tier, endpoint, input_file_id, completion_window, status, metadata, expires_at)
        values (${id}, ${request.accountId}, ${request.keyId}, ${request.tier}, ${request.endpoint}, ${request.inputFileId}, ${request.completionWindow},
          'validating', ${JSON.stringify(request.metadata)}::jsonb, now() + make_interval(secs => ${COMPLETION_WINDOW_SECONDS}))
        returning *`.execute(trx);
      return inserted.rows[0]!;
    });
    return renderBatch(row);
  }

  /**
   * An Anthropic Message Batch: its requests (validated and converted by the edge) stored as its lines in
   * one transaction, in progress at once (no file, no validation round). All or nothing.
   */
  async createMessageBatch(request: { accountId: string; keyId: string; tier: string; requests: MessageBatchRequestItem[] }): Promise<Batch> {
    if (request.accountId === '') throw errors.invalidRequest('account_id: required', 'account_id');
    const count = request.requests.length;
    if (count === 0) throw errors.invalidRequest('requests: at least one request', 'requests');
    if (count > this.limits.maxMessageRequests) throw errors.invalidRequest(`requests: at most ${this.limits.maxMessageRequests} requests`, 'requests');
    const seen = new Set<string>();
    const models = new Set<string>();
    for (const [index, item] of request.requests.entries()) {
      if (!MESSAGE_CUSTOM_ID.test(item.customId)) throw errors.invalidRequest(`requests.${index}.custom_id: 1..64 letters, digits, _ or -`, `requests.${index}.custom_id`);
      if (seen.has(item.customId)) throw errors.invalidRequest(`requests.${index}.custom_id: duplicate custom_id`, `requests.${index}.custom_id`);
      seen.add(item.customId);
      if (!item.request || item.request.modelId === '') throw errors.invalidRequest(`requests.${index}.params: no request`, `requests.${index}.params`);
      models.add(item.request.modelId);
    }
    const id = `msgbatch_${randomBytes(12).toString('hex')}`;
    const row = await this.withinAccountCap(request.accountId, 'requests', async (trx) => {
      const inserted = await sql<BatchesTable>`
        insert into batches (id, kind, account_id, key_id, tier, endpoint, input_file_id, completion_window, status, metadata, expires_at, in_progress_at, total, model)
        values (${id}, 'messages', ${request.accountId}, ${request.keyId}, ${request.tier}, '/v1/messages', '', ${COMPLETION_WINDOW},
          'in_progress', '{}'::jsonb, now() + make_interval(secs => ${COMPLETION_WINDOW_SECONDS}), now(), ${count}, ${models.size === 1 ? [...models][0]! : ''})
        returning *`.execute(trx);
      for (let start = 0; start < count; start += 500) {
        await trx.insertInto('batch_lines').values(request.requests.slice(start, start + 500).map((item, offset) => ({
          batch_id: id,
          line_index: start + offset,
          custom_id: item.customId,
          // The runner reads `model` of every line's body; the ChatRequest as JSON beside it.
          body: JSON.stringify({ model: item.request!.modelId, chat_request: ChatRequest.toJSON(item.request!) }),
          status: 'pending',
        })) as never).execute();
      }
      return inserted.rows[0]!;
    });
    return this.render(row);
  }

  /**
   * Runs `insert` (a new batch) in a transaction holding the account's lock, so that creates of one
   * account count its unfinished batches one at a time: past the cap, refused naming `param`.
   */
  private withinAccountCap<T>(accountId: string, param: string, insert: (trx: Kysely<JobsDatabase>) => Promise<T>): Promise<T> {
    return this.db.transaction().execute(async (trx) => {
      await sql`select pg_advisory_xact_lock(hashtext(${`jobs-batches:${accountId}`}))`.execute(trx);
      const unfinished = await trx
        .selectFrom('batches')
        .select((select) => select.fn.countAll<string>().as('count'))
        .where('account_id', '=', accountId)
        .where('status', 'in', [...UNFINISHED_STATUSES])
        .executeTakeFirstOrThrow();
      if (Number(unfinished.count) >= this.limits.maxUnfinishedPerAccount) {
        throw errors.invalidRequest(`the account already has ${this.limits.maxUnfinishedPerAccount} unfinished batches`, param, 'batches_limit_exceeded');
      }
      return insert(trx);
    });
  }

  async get(accountId: string, batchId: string): Promise<Batch> {
    return this.render(await this.owned(accountId, batchId));
  }

  /** Newest first; `after` pages to older ones, `before` to newer ones (Anthropic's before_id). */
  async list(accountId: string, limit: number, after: string, kind = '', before = ''): Promise<{ batches: Batch[]; hasMore: boolean }> {
    const maxLimit = kind === 'messages' ? 1_000 : LIST_LIMIT_MAX;
    if (limit > maxLimit) throw errors.invalidRequest(`limit: expected 1..${maxLimit}`, 'limit');
    if (after !== '' && before !== '') throw errors.invalidRequest('before and after: give one', 'before');
    if (kind !== '' && kind !== 'batch' && kind !== 'messages') throw errors.invalidRequest('kind: expected batch or messages', 'kind');
    const pageSize = limit === 0 ? LIST_LIMIT_DEFAULT : limit;
    const cursorId = after !== '' ? after : before;
    let cursor: { created_at: Date; id: string } | undefined;
    if (cursorId !== '') {
      const found = BATCH_ID_PATTERN.test(cursorId)
        ? await this.db.selectFrom('batches').select(['created_at', 'id']).where('id', '=', cursorId).where('account_id', '=', accountId).executeTakeFirst()
        : undefined;
      if (!found) throw errors.invalidRequest(`${after !== '' ? 'after' : 'before'}: no such batch`, after !== '' ? 'after' : 'before');
      cursor = found;
    }
    const ofKind = kind === '' ? sql`` : sql`and kind = ${kind}`;
    // The cursor's time is compared in SQL: a JS Date keeps milliseconds, Postgres microseconds.
    const rows = cursor && before !== ''
      // The page just newer than the cursor: taken oldest first from it, then turned newest first.
      ? (await sql<BatchesTable>`
          select * from batches where account_id = ${accountId} ${ofKind}
            and (created_at, id) > (select created_at, id from batches where id = ${cursor.id})
          order by created_at asc, id asc limit ${pageSize + 1}`.execute(this.db)).rows
      : (await sql<BatchesTable>`
          select * from batches where account_id = ${accountId} ${ofKind}
            ${cursor ? sql`and (created_at, id) < (select created_at, id from batches where id = ${cursor.id})` : sql``}
          order by created_at desc, id desc limit ${pageSize + 1}`.execute(this.db)).rows;
    const page = rows.slice(0, pageSize);
    if (before !== '') page.reverse();
    return { batches: await Promise.all(page.map((row) => this.render(row))), hasMore: rows.length > pageSize };
  }

  /** Deletes an ended batch and its lines (the files it wrote stay until they expire). */
  async delete(accountId: string, batchId: string): Promise<{ deleted: boolean }> {
    const row = await this.owned(accountId, batchId);
    if (!(ENDED_STATUSES as readonly string[]).includes(row.status)) {
      throw errors.invalidRequest('This batch has not ended: cancel it first, or wait for it to end.', 'batch_id');
    }
    await sql`delete from batches where id = ${batchId} and account_id = ${accountId} and status in ('completed', 'failed', 'expired', 'cancelled')`.execute(this.db);
    return { deleted: true };
  }

  /** A page of an ended message batch's results, in request order. */
  async messageResults(accountId: string, batchId: string, fromIndex: number, limit: number): Promise<{ results: MessageBatchResult[]; nextIndex: number }> {
    const row = await this.owned(accountId, batchId);
    if (row.kind !== 'messages') throw notFound();
    if (!(ENDED_STATUSES as readonly string[]).includes(row.status)) throw errors.invalidRequest('This batch has not ended: its results are not ready.', 'batch_id');
    if (limit > RESULTS_PAGE_MAX) throw errors.invalidRequest(`limit: expected 1..${RESULTS_PAGE_MAX}`, 'limit');
    const pageSize = limit === 0 ? RESULTS_PAGE_DEFAULT : limit;
    const lines = await sql<{ line_index: number; custom_id: string; status: string; is_error: boolean; result: Record<string, any> | null }>`
      select line_index, custom_id, status, is_error, result from batch_lines
      where batch_id = ${batchId} and line_index >= ${fromIndex} order by line_index limit ${pageSize + 1}`.execute(this.db);
    // A page stops early past RESULTS_PAGE_BYTES of answers (a gRPC message the edge reads whole), keeping at least one.
    const page: typeof lines.rows = [];
    let bytes = 0;
    for (const line of lines.rows.slice(0, pageSize)) {
      const size = line.result ? JSON.stringify(line.result).length : 0;
      if (page.length > 0 && bytes + size > RESULTS_PAGE_BYTES) break;
      page.push(line);
      bytes += size;
    }
    const results = page.map((line): MessageBatchResult => {
      const base = { customId: line.custom_id, response: undefined, cost: '', errorStatus: 0, errorMessage: '', requestId: '' };
      const result = line.result ?? {};
      if (line.status !== 'done') return { ...base, type: 'canceled' };
      if (!line.is_error) {
        return { ...base, type: 'succeeded', response: ChatResponse.fromJSON(result.response), cost: String(result.cost ?? '0'), requestId: String(result.request_id ?? '') };
      }
      if (result.error?.code === 'batch_expired') return { ...base, type: 'expired' };
      return {
        ...base,
        type: 'errored',
        errorStatus: Number(result.response?.status_code ?? 500),
        errorMessage: String(result.response?.body?.error?.message ?? 'The request failed.'),
        requestId: String(result.response?.request_id ?? ''),
      };
    });
    return { results, nextIndex: lines.rows.length > page.length ? page.at(-1)!.line_index + 1 : 0 };
  }

  private async render(row: BatchesTable): Promise<Batch> {
    return renderBatch(row, row.kind === 'messages' ? await messageCounts(this.db, row) : undefined);
  }

  /** validating / in_progress → cancelling (the runner ends it once its running lines finished). */
  async cancel(accountId: string, batchId: string): Promise<Batch> {
    await this.owned(accountId, batchId);
    const moved = await sql<BatchesTable>`
      update batches set status = 'cancelling', cancelling_at = now()
      where id = ${batchId} and account_id = ${accountId} and status in ('validating', 'in_progress')
      returning *`.execute(this.db);
    return this.render(moved.rows[0] ?? (await this.owned(accountId, batchId)));
  }

  private async owned(accountId: string, batchId: string): Promise<BatchesTable> {
    if (!BATCH_ID_PATTERN.test(batchId)) throw notFound();
    const row = await this.db.selectFrom('batches').selectAll().where('id', '=', batchId).where('account_id', '=', accountId).executeTakeFirst();
    if (!row) throw notFound();
    return row;
  }
}
