import { createHash, randomBytes } from 'node:crypto';
import { ErrorReason, GatewayError, GrpcStatus, errors, type Logger } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import type { FileObject } from '@gateway/proto';
import type { JobsDatabase } from '../jobs-schema.js';
import type { FileContentStore } from './file-content-store.js';

/** Bounds of the Files API (docs/jobs.md "Limits"). */
export interface FileLimits {
  /** Largest file, bytes (OpenAI: 512 MB; a batch input file 200 MB). */
  maxFileBytes: number;
  /** Most files an account keeps at once (uploads in progress included). */
  maxFilesPerAccount: number;
  /** Most bytes an account keeps at once. */
  maxAccountBytes: number;
  /** Most uploads of one account in progress at once. */
  maxUploadsPerAccount: number;
  /** Retention of a file uploaded without expires_after, seconds; 0: kept until deleted. */
  defaultRetentionSeconds: number;
  /** An upload not completed this long after it began is discarded, seconds. */
  uploadTimeoutSeconds: number;
  /** How often expired files and abandoned uploads are deleted, milliseconds. */
  sweepIntervalMs: number;
}

export const DEFAULT_FILE_LIMITS: FileLimits = {
  maxFileBytes: 200 * 1024 * 1024,
  maxFilesPerAccount: 1_000,
  maxAccountBytes: 10 * 1024 * 1024 * 1024,
  maxUploadsPerAccount: 8,
  defaultRetentionSeconds: 30 * 24 * 3600,
  uploadTimeoutSeconds: 3_600,
  sweepIntervalMs: 60_000,
};

/** Largest chunk of one AppendUpload, and largest page of one ReadFileContent. */
export const FILE_CHUNK_BYTES = 1024 * 1024;
/** OpenAI's expires_after.seconds range (one hour to thirty days). */
export const EXPIRES_AFTER_MIN_SECONDS = 3_600;
export const EXPIRES_AFTER_MAX_SECONDS = 30 * 24 * 3600;
export const FILE_PURPOSES = ['batch', 'user_data'] as const;
const FILENAME_MAX_LENGTH = 512;
const LIST_LIMIT_MAX = 10_000;
const SWEEP_BATCH = 200;
/** file- and 24 hex characters (96 random bits): unguessable, and checked before any SQL. */
const FILE_ID_PATTERN = /^file-[0-9a-f]{24}$/;

export function newFileId(): string {
  return `file-${randomBytes(12).toString('hex')}`;
}

/**
 * The id of a file the service writes for `owner` (a batch's `output` or `error` file): the same on
 * every attempt, so a finalization run again after its replica died writes the same file, never a
 * second one. A hash of the owner's id (itself unguessable); lookups check the account as for any file.
 */
export function generatedFileId(owner: string, kind: string): string {
  return `file-${createHash('sha256').update(`${owner}:${kind}`).digest('hex').slice(0, 24)}`;
}

const notFound = () => errors.notFound('No such file.');
const unixSeconds = (date: Date | null) => (date ? BigInt(Math.floor(date.getTime() / 1000)) : 0n);

/**
 * The Files API's domain: metadata and limits in Postgres, bytes in a FileContentStore. Every lookup
 * carries the account: another account's file id is NOT_FOUND exactly like an unknown one. Account-wide
 * bounds (count, bytes, uploads in progress) are checked under a per-account transaction lock, so
 * concurrent uploads cannot pass them together.
 */
export class Files {
  private readonly timer: NodeJS.Timeout;
  private sweeping = false;

  constructor(
    private readonly db: Kysely<JobsDatabase>,
    private readonly content: FileContentStore,
    readonly limits: FileLimits,
    private readonly logger: Logger,
  ) {
    this.timer = setInterval(() => void this.sweep(), limits.sweepIntervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  async beginUpload(accountId: string, filename: string): Promise<{ fileId: string; maxBytes: bigint }> {
    requireAccount(accountId);
    if (filename.length === 0) throw errors.invalidRequest('file: the file part needs a filename', 'file');
    if (filename.length > FILENAME_MAX_LENGTH || /[\u0000-\u001f]/.test(filename)) {
      throw errors.invalidRequest(`file: the filename must be at most ${FILENAME_MAX_LENGTH} printable characters`, 'file');
    }
    const fileId = newFileId();
    await this.db.transaction().execute(async (trx) => {
      await lockAccount(trx, accountId);
      const usage = await sql<{ files: bigint; bytes: bigint | null; uploading: bigint }>`
        select count(*)::int8 as files, sum(bytes)::int8 as bytes, count(*) filter (where status = 'uploading')::int8 as uploading
        from files where account_id = ${accountId} and (expires_at is null or expires_at > now())`.execute(trx);
      const row = usage.rows[0]!;
      if (Number(row.files) >= this.limits.maxFilesPerAccount) {
        throw filesLimit(`the account already keeps ${this.limits.maxFilesPerAccount} files; delete some first`);
      }
      if (Number(row.uploading) >= this.limits.maxUploadsPerAccount) {
        throw filesLimit(`the account already has ${this.limits.maxUploadsPerAccount} uploads in progress`);
      }
      if (Number(row.bytes ?? 0n) >= this.limits.maxAccountBytes) {
        throw filesLimit(`the account's files already take ${this.limits.maxAccountBytes} bytes; delete some first`);
      }
      await trx
        .insertInto('files')
        .values({
          id: fileId,
          account_id: accountId,
          filename,
          purpose: '',
          bytes: 0n,
          status: 'uploading',
          upload_deadline: new Date(Date.now() + this.limits.uploadTimeoutSeconds * 1000),
        } as never)
        .execute();
    });
    return { fileId, maxBytes: BigInt(this.limits.maxFileBytes) };
  }

  async appendUpload(accountId: string, fileId: string, offset: number, data: Uint8Array): Promise<number> {
    if (data.length > FILE_CHUNK_BYTES) throw errors.invalidRequest(`data: a chunk is at most ${FILE_CHUNK_BYTES} bytes`, 'data');
    const upload = await this.uploadOf(accountId, fileId);
    const stored = Number(upload.bytes);
    // A retry of the chunk that was stored last (its answer was lost): nothing to do.
    if (offset < stored && offset + data.length === stored) return stored;
    if (offset !== stored) throw errors.invalidRequest(`offset: expected ${stored}, the bytes stored so far`, 'offset');
    if (stored + data.length > this.limits.maxFileBytes) {
      await this.discard(fileId);
      throw new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE, `file: the file is larger than ${this.limits.maxFileBytes} bytes`, { param: 'file' });
    }
    if (data.length === 0) return stored;
    return this.db.transaction().execute(async (trx) => {
      await lockAccount(trx, accountId);
      const total = await sql<{ bytes: bigint | null }>`
        select sum(bytes)::int8 as bytes from files where account_id = ${accountId} and (expires_at is null or expires_at > now())`.execute(trx);
      if (Number(total.rows[0]?.bytes ?? 0n) + data.length > this.limits.maxAccountBytes) {
        throw filesLimit(`the account's files would take more than ${this.limits.maxAccountBytes} bytes`);
      }
      // Only the upload at the expected length moves on (a concurrent duplicate finds it moved).
      const moved = await trx
        .updateTable('files')
        .set({ bytes: BigInt(stored + data.length) } as never)
        .where('id', '=', fileId)
        .where('account_id', '=', accountId)
        .where('status', '=', 'uploading')
        .where('bytes', '=', BigInt(stored) as never)
        .executeTakeFirst();
      if (Number(moved.numUpdatedRows) !== 1) throw errors.invalidRequest('offset: the upload moved on meanwhile', 'offset');
      await this.content.write(fileId, offset, data);
      return stored + data.length;
    });
  }

  async completeUpload(accountId: string, fileId: string, bytes: number, purpose: string, expiresAfterSeconds: number): Promise<FileObject> {
    const upload = await this.uploadOf(accountId, fileId);
    const fail = async (error: GatewayError) => {
      await this.discard(fileId);
      return error;
    };
    if (!(FILE_PURPOSES as readonly string[]).includes(purpose)) {
      throw await fail(errors.invalidRequest(`purpose: expected one of ${FILE_PURPOSES.join(', ')}`, 'purpose'));
    }
    if (expiresAfterSeconds !== 0 && (expiresAfterSeconds < EXPIRES_AFTER_MIN_SECONDS || expiresAfterSeconds > EXPIRES_AFTER_MAX_SECONDS)) {
      throw await fail(errors.invalidRequest(`expires_after.seconds: expected ${EXPIRES_AFTER_MIN_SECONDS}..${EXPIRES_AFTER_MAX_SECONDS}`, 'expires_after.seconds'));
    }
    if (Number(upload.bytes) === 0) throw await fail(errors.invalidRequest('file: the file is empty', 'file'));
    if (Number(upload.bytes) !== bytes) throw await fail(errors.invalidRequest(`file: ${bytes} bytes sent, ${upload.bytes} stored`, 'file'));
    const retention = expiresAfterSeconds !== 0 ? expiresAfterSeconds : this.limits.defaultRetentionSeconds;
    const completed = await sql<FilesRow>`
      update files set status = 'processed', purpose = ${purpose}, upload_deadline = null, created_at = now(),
        expires_at = ${retention === 0 ? null : sql`now() + make_interval(secs => ${retention})`}
      where id = ${fileId} and account_id = ${accountId} and status = 'uploading'
      returning *`.execute(this.db);
    const row = completed.rows[0];
    if (!row) throw notFound();
    return render(row);
  }

  async abortUpload(accountId: string, fileId: string): Promise<boolean> {
    if (!FILE_ID_PATTERN.test(fileId)) return false;
    const row = await this.db.selectFrom('files').select('id').where('id', '=', fileId).where('account_id', '=', accountId).where('status', '=', 'uploading').executeTakeFirst();
    if (!row) return false;
    await this.discard(fileId);
    return true;
  }

  async getFile(accountId: string, fileId: string): Promise<FileObject> {
    return render(await this.visible(accountId, fileId));
  }

  async listFiles(accountId: string, purpose: string, limit: number, after: string, order: string): Promise<{ files: FileObject[]; hasMore: boolean }> {
    requireAccount(accountId);
    if (purpose !== '' && !['batch', 'user_data', 'batch_output'].includes(purpose)) throw errors.invalidRequest('purpose: expected batch, user_data or batch_output', 'purpose');
    if (limit > LIST_LIMIT_MAX) throw errors.invalidRequest(`limit: expected 1..${LIST_LIMIT_MAX}`, 'limit');
    if (order !== '' && order !== 'asc' && order !== 'desc') throw errors.invalidRequest('order: expected asc or desc', 'order');
    const ascending = order === 'asc';
    const pageSize = limit === 0 ? LIST_LIMIT_MAX : limit;
    let cursor: { created_at: Date; id: string } | undefined;
    if (after !== '') {
      // A cursor of another account (or unknown) is a 400, never a way to learn of another's file.
      const found = FILE_ID_PATTERN.test(after)
        ? await this.db.selectFrom('files').select(['created_at', 'id']).where('id', '=', after).where('account_id', '=', accountId).executeTakeFirst()
        : undefined;
      if (!found) throw errors.invalidRequest('after: no such file', 'after');
      cursor = found;
    }
    const rows = await sql<FilesRow>`
      select * from files
      where account_id = ${accountId} and status = 'processed' and (expires_at is null or expires_at > now())
        ${purpose === '' ? sql`` : sql`and purpose = ${purpose}`}
        ${cursor === undefined ? sql`` : ascending ? sql`and (created_at, id) > (${cursor.created_at}, ${cursor.id})` : sql`and (created_at, id) < (${cursor.created_at}, ${cursor.id})`}
      order by ${ascending ? sql`created_at asc, id asc` : sql`created_at desc, id desc`}
      limit ${pageSize + 1}`.execute(this.db);
    return { files: rows.rows.slice(0, pageSize).map(render), hasMore: rows.rows.length > pageSize };
  }

  async readContent(accountId: string, fileId: string, offset: number, maxBytes: number): Promise<{ data: Buffer; totalBytes: number; filename: string }> {
    const file = await this.visible(accountId, fileId);
    const page = maxBytes === 0 || maxBytes > FILE_CHUNK_BYTES ? FILE_CHUNK_BYTES : maxBytes;
    const total = Number(file.bytes);
    const data = offset >= total ? Buffer.alloc(0) : await this.content.read(fileId, offset, Math.min(page, total - offset));
    return { data, totalBytes: total, filename: file.filename };
  }

  async deleteFile(accountId: string, fileId: string): Promise<{ fileId: string; deleted: boolean }> {
    await this.visible(accountId, fileId);
    await this.discard(fileId);
    return { fileId, deleted: true };
  }

  /**
   * Stores a file the service writes itself (a batch's output or error file), chunk by chunk as
   * `chunks` yields them, outside the account's upload bounds: its size follows from the batch's, which
   * were bounded when it was created. Kept for the default retention.
   *
   * `fileId` (derived by the caller, see generatedFileId) makes the write happen once whatever the
   * number of attempts: a file of that id already complete is returned as it is (the writer that died
   * had finished it), one left half-written is emptied and written again under the same id. Without it,
   * a fresh id.
   */
  async storeGenerated(accountId: string, filename: string, purpose: string, chunks: AsyncIterable<Buffer>, fileId: string = newFileId()): Promise<FileObject> {
    if (!FILE_ID_PATTERN.test(fileId)) throw new Error(`storeGenerated: ${fileId} is not a file id`);
    const inserted = await sql<FilesRow>`
      insert into files (id, account_id, filename, purpose, bytes, status, upload_deadline)
      values (${fileId}, ${accountId}, ${filename}, ${purpose}, 0, 'uploading', ${new Date(Date.now() + this.limits.uploadTimeoutSeconds * 1000)})
      on conflict (id) do nothing returning *`.execute(this.db);
    if (inserted.rows.length === 0) {
      const existing = await this.db.selectFrom('files').selectAll().where('id', '=', fileId).executeTakeFirst();
      // Another account's row under this id cannot happen (the id derives from a batch of this account); refuse rather than touch it.
      if (!existing || existing.account_id !== accountId) throw new Error(`storeGenerated: file ${fileId} is not this account's`);
      if (existing.status === 'processed') return render(existing);
      // Left half-written by a writer that died: its pieces go, the file is written again from the start.
      await this.content.delete(fileId);
      await sql`update files set bytes = 0, upload_deadline = ${new Date(Date.now() + this.limits.uploadTimeoutSeconds * 1000)} where id = ${fileId}`.execute(this.db);
    }
    let offset = 0;
    for await (const chunk of chunks) {
      for (let start = 0; start < chunk.length; start += FILE_CHUNK_BYTES) {
        const piece = chunk.subarray(start, start + FILE_CHUNK_BYTES);
        await this.content.write(fileId, offset, piece);
        offset += piece.length;
      }
    }
    const retention = this.limits.defaultRetentionSeconds;
    const completed = await sql<FilesRow>`
      update files set status = 'processed', bytes = ${offset}, upload_deadline = null,
        expires_at = ${retention === 0 ? null : sql`now() + make_interval(secs => ${retention})`}
      where id = ${fileId} returning *`.execute(this.db);
    const row = completed.rows[0];
    // Swept meanwhile (an upload deadline an hour away): the caller's next attempt writes it again.
    if (!row) throw new Error(`storeGenerated: file ${fileId} vanished while it was written`);
    return render(row);
  }

  /** The file's bytes page by page (1 MiB), for the service's own reading (a batch's input). */
  async *pages(accountId: string, fileId: string): AsyncGenerator<Buffer> {
    let offset = 0;
    for (;;) {
      const page = await this.readContent(accountId, fileId, offset, FILE_CHUNK_BYTES);
      if (page.data.length === 0) return;
      yield page.data;
      offset += page.data.length;
      if (offset >= page.totalBytes) return;
    }
  }

  /** Deletes expired files and abandoned uploads, a bounded batch per round. */
  async sweep(): Promise<number> {
    if (this.sweeping) return 0;
    this.sweeping = true;
    try {
      const due = await sql<{ id: string }>`
        select id from files where expires_at <= now() or upload_deadline <= now() limit ${SWEEP_BATCH}`.execute(this.db);
      for (const row of due.rows) await this.discard(row.id);
      return due.rows.length;
    } catch (error) {
      this.logger.warn({ err: error }, 'file sweep failed; retried next round');
      return 0;
    } finally {
      this.sweeping = false;
    }
  }

  private async uploadOf(accountId: string, fileId: string): Promise<FilesRow> {
    requireAccount(accountId);
    if (!FILE_ID_PATTERN.test(fileId)) throw errors.notFound('No such upload.');
    const row = await this.db.selectFrom('files').selectAll().where('id', '=', fileId).where('account_id', '=', accountId).where('status', '=', 'uploading').executeTakeFirst();
    if (!row) throw errors.notFound('No such upload.');
    return row;
  }

  private async visible(accountId: string, fileId: string): Promise<FilesRow> {
    requireAccount(accountId);
    if (!FILE_ID_PATTERN.test(fileId)) throw notFound();
    const row = await this.db
      .selectFrom('files')
      .selectAll()
      .where('id', '=', fileId)
      .where('account_id', '=', accountId)
      .where('status', '=', 'processed')
      .where((where) => where.or([where('expires_at', 'is', null), where('expires_at', '>', new Date())]))
      .executeTakeFirst();
    if (!row) throw notFound();
    return row;
  }

  private async discard(fileId: string): Promise<void> {
    await this.content.delete(fileId);
    await this.db.deleteFrom('files').where('id', '=', fileId).execute();
  }
}

type FilesRow = JobsDatabase['files'];

function render(row: FilesRow): FileObject {
  return {
    id: row.id,
    bytes: BigInt(row.bytes),
    createdAt: unixSeconds(row.created_at),
    expiresAt: unixSeconds(row.expires_at),
    filename: row.filename,
    purpose: row.purpose,
    status: 'processed',
  };
}

function requireAccount(accountId: string): void {
  if (accountId === '' || accountId.length > 200) throw errors.invalidRequest('account_id: required', 'account_id');
}

function filesLimit(message: string): GatewayError {
  return errors.invalidRequest(message, 'file', 'files_limit_exceeded');
}

async function lockAccount(trx: Kysely<JobsDatabase>, accountId: string): Promise<void> {
  await sql`select pg_advisory_xact_lock(hashtext(${`jobs-files:${accountId}`}))`.execute(trx);
}
