import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { createClient, createLogger, InProcessEventBus, GatewayError, GrpcStatus, ErrorReason, type PromiseClient } from '@gateway/platform';
import { JobsServiceClient, JobsServiceService } from '@gateway/proto';
import { createTestDatabase, eventually, type TestDatabase } from '@gateway/testing';
import { FILE_CHUNK_BYTES, startJobsService, type RunningJobsService } from '../src/index.js';

// The Files RPCs of the jobs service over real gRPC on a real Postgres: chunked uploads read back byte for
// byte, retries of a chunk, every bound (file size, files and uploads per account), isolation between
// accounts, expiry and the sweeper.

const logger = createLogger('jobs-test', 'silent');
const MAX_FILE_BYTES = 3 * FILE_CHUNK_BYTES + 10;

let database: TestDatabase;
let service: RunningJobsService;
let jobs: PromiseClient<JobsServiceClient>;

beforeAll(async () => {
  database = await createTestDatabase();
  service = await startJobsService({
    listenAddress: '127.0.0.1:0',
    databaseUrl: database.url,
    logger,
    bus: new InProcessEventBus(logger),
    fileLimits: { maxFileBytes: MAX_FILE_BYTES, maxFilesPerAccount: 5, maxUploadsPerAccount: 2, maxAccountBytes: 8 * FILE_CHUNK_BYTES, sweepIntervalMs: 300 },
  });
  jobs = createClient(JobsServiceClient, JobsServiceService, service.address);
}, 60_000);

afterAll(async () => {
  jobs?.close();
  await service?.stop();
  await database?.drop();
});

async function failure(call: Promise<unknown>): Promise<GatewayError> {
  const error = await call.then(() => undefined, (caught: unknown) => caught);
  expect(error).toBeInstanceOf(GatewayError);
  return error as GatewayError;
}

/** Uploads `data` in 1 MiB chunks and completes it. */
async function upload(accountId: string, data: Buffer, purpose = 'batch', filename = 'input.jsonl') {
  const begun = await jobs.beginUpload({ accountId, filename });
  for (let offset = 0; offset < data.length; offset += FILE_CHUNK_BYTES) {
    await jobs.appendUpload({ accountId, fileId: begun.fileId, offset: BigInt(offset), data: data.subarray(offset, offset + FILE_CHUNK_BYTES) });
  }
  return (await jobs.completeUpload({ accountId, fileId: begun.fileId, bytes: BigInt(data.length), purpose, expiresAfterSeconds: 0 })).file!;
}

async function readAll(accountId: string, fileId: string, pageBytes: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let offset = 0;
  for (;;) {
    const page = await jobs.readFileContent({ accountId, fileId, offset: BigInt(offset), maxBytes: pageBytes });
    if (page.data.length === 0) break;
    parts.push(Buffer.from(page.data));
    offset += page.data.length;
    if (BigInt(offset) >= page.totalBytes) break;
  }
  return Buffer.concat(parts);
}

describe('Files over gRPC', () => {
  it('stores a multi-chunk file and reads it back exactly, in pages of any size that cross chunk borders', async () => {
    const data = randomBytes(2 * FILE_CHUNK_BYTES + 12_345);
    const file = await upload('acc_round_trip', data);
    expect(file).toMatchObject({ bytes: BigInt(data.length), filename: 'input.jsonl', purpose: 'batch', status: 'processed' });
    expect(file.id).toMatch(/^file-[0-9a-f]{24}$/);
    // 30 days by default.
    expect(Number(file.expiresAt - file.createdAt)).toBe(30 * 24 * 3600);
    expect((await readAll('acc_round_trip', file.id, 0)).equals(data)).toBe(true);
    expect((await readAll('acc_round_trip', file.id, 777_777)).equals(data)).toBe(true);
    const got = await jobs.getFile({ accountId: 'acc_round_trip', fileId: file.id });
    expect(got.file).toEqual(file);
  });

  it('a retried chunk (its answer lost) changes nothing; a chunk at a wrong offset is refused', async () => {
    const accountId = 'acc_retry';
    const begun = await jobs.beginUpload({ accountId, filename: 'a.jsonl' });
    const first = Buffer.from('{"a":1}\n');
    const second = Buffer.from('{"b":2}\n');
    await jobs.appendUpload({ accountId, fileId: begun.fileId, offset: 0n, data: first });
    expect((await jobs.appendUpload({ accountId, fileId: begun.fileId, offset: 0n, data: first })).storedBytes).toBe(BigInt(first.length));
    const skipped = await failure(jobs.appendUpload({ accountId, fileId: begun.fileId, offset: 100n, data: second }));
    expect(skipped.status).toBe(GrpcStatus.INVALID_ARGUMENT);
    await jobs.appendUpload({ accountId, fileId: begun.fileId, offset: BigInt(first.length), data: second });
    const wrongTotal = await failure(jobs.completeUpload({ accountId, fileId: begun.fileId, bytes: 3n, purpose: 'batch', expiresAfterSeconds: 0 }));
    expect(wrongTotal.status).toBe(GrpcStatus.INVALID_ARGUMENT);
    // The refused completion discarded the upload.
    expect((await failure(jobs.appendUpload({ accountId, fileId: begun.fileId, offset: 16n, data: first }))).status).toBe(GrpcStatus.NOT_FOUND);
  });

  it('another account sees nothing of a file: get, content, delete and a list cursor all answer as for an unknown id', async () => {
    const file = await upload('acc_owner', Buffer.from('{"x":1}\n'), 'user_data');
    for (const call of [
      () => jobs.getFile({ accountId: 'acc_intruder', fileId: file.id }),
      () => jobs.readFileContent({ accountId: 'acc_intruder', fileId: file.id, offset: 0n, maxBytes: 0 }),
      () => jobs.deleteFile({ accountId: 'acc_intruder', fileId: file.id }),
      () => jobs.appendUpload({ accountId: 'acc_intruder', fileId: file.id, offset: 0n, data: Buffer.from('x') }),
    ]) {
      expect((await failure(call())).status).toBe(GrpcStatus.NOT_FOUND);
    }
    expect((await jobs.listFiles({ accountId: 'acc_intruder', purpose: '', limit: 0, after: '', order: '' })).files).toEqual([]);
    expect((await failure(jobs.listFiles({ accountId: 'acc_intruder', purpose: '', limit: 0, after: file.id, order: '' }))).status).toBe(GrpcStatus.INVALID_ARGUMENT);
    // Still the owner's, intact.
    expect((await jobs.getFile({ accountId: 'acc_owner', fileId: file.id })).file?.bytes).toBe(8n);
  });

  it('lists newest first, pages with `after`, filters by purpose, and forgets deleted files', async () => {
    const accountId = 'acc_list';
    const ids: string[] = [];
    for (const purpose of ['batch', 'user_data', 'batch']) ids.push((await upload(accountId, Buffer.from(`{"p":"${purpose}"}\n`), purpose)).id);
    const all = await jobs.listFiles({ accountId, purpose: '', limit: 0, after: '', order: '' });
    expect(all.files.map((file) => file.id)).toEqual([...ids].reverse());
    const first = await jobs.listFiles({ accountId, purpose: '', limit: 2, after: '', order: '' });
    expect(first).toMatchObject({ hasMore: true });
    const second = await jobs.listFiles({ accountId, purpose: '', limit: 2, after: first.files[1]!.id, order: '' });
    expect([...first.files, ...second.files].map((file) => file.id)).toEqual([...ids].reverse());
    expect(second.hasMore).toBe(false);
    expect((await jobs.listFiles({ accountId, purpose: 'user_data', limit: 0, after: '', order: 'asc' })).files.map((file) => file.id)).toEqual([ids[1]]);
    expect(await jobs.deleteFile({ accountId, fileId: ids[0]! })).toEqual({ fileId: ids[0], deleted: true });
    expect((await failure(jobs.getFile({ accountId, fileId: ids[0]! }))).status).toBe(GrpcStatus.NOT_FOUND);
    expect((await failure(jobs.deleteFile({ accountId, fileId: ids[0]! }))).status).toBe(GrpcStatus.NOT_FOUND);
    // Its bytes went with it.
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      expect((await client.query('select count(*)::int as n from jobs.file_chunks where file_id = $1', [ids[0]])).rows[0].n).toBe(0);
    } finally {
      await client.end();
    }
  });

  it('refuses a file past the size bound while it arrives, and discards what was stored', async () => {
    const accountId = 'acc_large';
    const begun = await jobs.beginUpload({ accountId, filename: 'big.jsonl' });
    expect(begun.maxBytes).toBe(BigInt(MAX_FILE_BYTES));
    const chunk = Buffer.alloc(FILE_CHUNK_BYTES, 0x61);
    for (let index = 0; index < 3; index++) await jobs.appendUpload({ accountId, fileId: begun.fileId, offset: BigInt(index * FILE_CHUNK_BYTES), data: chunk });
    const tooLarge = await failure(jobs.appendUpload({ accountId, fileId: begun.fileId, offset: BigInt(3 * FILE_CHUNK_BYTES), data: Buffer.alloc(11) }));
    expect([tooLarge.status, tooLarge.reason]).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE]);
    expect((await failure(jobs.completeUpload({ accountId, fileId: begun.fileId, bytes: BigInt(3 * FILE_CHUNK_BYTES), purpose: 'batch', expiresAfterSeconds: 0 }))).status).toBe(GrpcStatus.NOT_FOUND);
    // A chunk over 1 MiB is refused before anything is stored.
    const other = await jobs.beginUpload({ accountId, filename: 'b.jsonl' });
    expect((await failure(jobs.appendUpload({ accountId, fileId: other.fileId, offset: 0n, data: Buffer.alloc(FILE_CHUNK_BYTES + 1) }))).status).toBe(GrpcStatus.INVALID_ARGUMENT);
  });

  it('bounds uploads in progress and files per account, each account on its own', async () => {
    const accountId = 'acc_counts';
    await jobs.beginUpload({ accountId, filename: 'one' });
    await jobs.beginUpload({ accountId, filename: 'two' });
    const third = await failure(jobs.beginUpload({ accountId, filename: 'three' }));
    expect([third.status, third.code]).toEqual([GrpcStatus.INVALID_ARGUMENT, 'files_limit_exceeded']);
    // Another account is not affected.
    await jobs.beginUpload({ accountId: 'acc_counts_other', filename: 'one' });

    const filesAccount = 'acc_many_files';
    // Concurrent attempts cannot pass the count together (5 files, 2 uploads at a time).
    for (let round = 0; round < 3; round++) {
      await Promise.allSettled([upload(filesAccount, Buffer.from('{}\n')), upload(filesAccount, Buffer.from('{}\n'))]);
    }
    const listed = await jobs.listFiles({ accountId: filesAccount, purpose: '', limit: 0, after: '', order: '' });
    expect(listed.files.length).toBe(5);
    expect((await failure(upload(filesAccount, Buffer.from('{}\n')))).code).toBe('files_limit_exceeded');
  });

  it('refuses a bad purpose or expiry at completion; honours expires_after; the sweeper removes expired files', async () => {
    const accountId = 'acc_expiry';
    const begun = await jobs.beginUpload({ accountId, filename: 'x' });
    await jobs.appendUpload({ accountId, fileId: begun.fileId, offset: 0n, data: Buffer.from('x') });
    expect((await failure(jobs.completeUpload({ accountId, fileId: begun.fileId, bytes: 1n, purpose: 'fine-tune', expiresAfterSeconds: 0 }))).param).toBe('purpose');
    const again = await jobs.beginUpload({ accountId, filename: 'x' });
    await jobs.appendUpload({ accountId, fileId: again.fileId, offset: 0n, data: Buffer.from('x') });
    expect((await failure(jobs.completeUpload({ accountId, fileId: again.fileId, bytes: 1n, purpose: 'batch', expiresAfterSeconds: 60 }))).param).toBe('expires_after.seconds');

    const kept = await jobs.beginUpload({ accountId, filename: 'kept' });
    await jobs.appendUpload({ accountId, fileId: kept.fileId, offset: 0n, data: Buffer.from('x') });
    const file = (await jobs.completeUpload({ accountId, fileId: kept.fileId, bytes: 1n, purpose: 'user_data', expiresAfterSeconds: 3_600 })).file!;
    expect(Number(file.expiresAt - file.createdAt)).toBe(3_600);
    // Its hour passes (moved in the database), and it is gone for every call, then swept.
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      await client.query(`update jobs.files set expires_at = now() - interval '1 second' where id = $1`, [file.id]);
      expect((await failure(jobs.getFile({ accountId, fileId: file.id }))).status).toBe(GrpcStatus.NOT_FOUND);
      expect((await failure(jobs.readFileContent({ accountId, fileId: file.id, offset: 0n, maxBytes: 0 }))).status).toBe(GrpcStatus.NOT_FOUND);
      // The sweeper (every 300 ms here) deletes its row and its bytes.
      await eventually(async () => {
        const left = await client.query('select (select count(*) from jobs.files where id = $1)::int + (select count(*) from jobs.file_chunks where file_id = $1)::int as n', [file.id]);
        expect(left.rows[0].n).toBe(0);
      }, 10_000, 100);
    } finally {
      await client.end();
    }
  });

  it('answers NOT_FOUND for ids that cannot be file ids, before any SQL', async () => {
    for (const fileId of ['', 'file-', "file-' or 1=1 --", 'x'.repeat(5_000)]) {
      expect((await failure(jobs.getFile({ accountId: 'acc_x', fileId }))).status).toBe(GrpcStatus.NOT_FOUND);
    }
  });
});
