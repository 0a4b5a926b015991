import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, createLogger, InProcessEventBus, subjects, type PromiseClient, type Subscription } from '@gateway/platform';
import { createDatabase, sql, type Kysely } from '@gateway/platform/db';
import { AccountEvent, JobsServiceClient, JobsServiceService, type FileObject } from '@gateway/proto';
import { createTestDatabase, eventually, type TestDatabase } from '@gateway/testing';
import { startJobsService, type RunningJobsService } from '../src/index.js';
import { BatchRunner, DEFAULT_BATCH_RUNNER_OPTIONS, type BatchClients } from '../src/batches/batch-runner.js';
import { PostgresFileContentStore } from '../src/files/file-content-store.js';
import { DEFAULT_FILE_LIMITS, Files } from '../src/files/files.js';
import { JOBS_SCHEMA, type JobsDatabase } from '../src/jobs-schema.js';

// A batch's finalization writes its output and error files once (docs/jobs.md "How a batch runs", 4):
// a replica dies after writing the files but before ending the batch, or halfway through the output
// file; a second replica takes the batch up when the first's lease lapses and ends it naming one set of
// files, whose bytes are every line in input order. Real Postgres, two runners on it (the replicas),
// the files read back over the jobs service's gRPC.

const logger = createLogger('jobs-test', 'silent');
const LINES = 1_200; // three pages of results (500 lines a page): a writer can die between pages
const LEASE_MS = 1_000;

let database: TestDatabase;
let service: RunningJobsService;
let jobs: PromiseClient<JobsServiceClient>;
let db: Kysely<JobsDatabase>;
/** The batch.completed events the jobs service's relay published (its outbox is written by the batches trigger). */
const events: AccountEvent[] = [];
let reader: Subscription;

// Finalization calls no other service (no line is left to run); the runners get no clients.
const noClients = {} as BatchClients;

class ReplicaDied extends Error {}

/** Files whose writer dies at the chosen point, as a replica killed there would leave them. */
class DyingFiles extends Files {
  constructor(private readonly dieAt: 'afterBothFiles' | 'midOutput') {
    super(db, new PostgresFileContentStore(db), { ...DEFAULT_FILE_LIMITS, sweepIntervalMs: 3_600_000 }, logger);
  }

  override async storeGenerated(accountId: string, filename: string, purpose: string, chunks: AsyncIterable<Buffer>, fileId?: string): Promise<FileObject> {
    if (this.dieAt === 'midOutput' && filename.endsWith('_output.jsonl')) {
      const dieAfterFirstPage = async function* () {
        let pages = 0;
        for await (const chunk of chunks) {
          if (pages++ === 1) throw new ReplicaDied('the replica died halfway through the output file');
          yield chunk;
        }
      };
      return super.storeGenerated(accountId, filename, purpose, dieAfterFirstPage(), fileId);
    }
    const file = await super.storeGenerated(accountId, filename, purpose, chunks, fileId);
    if (this.dieAt === 'afterBothFiles' && filename.endsWith('_error.jsonl')) throw new ReplicaDied('the replica died before ending the batch');
    return file;
  }
}

const runner = (replicaId: string, files: Files) =>
  new BatchRunner(db, files, noClients, { ...DEFAULT_BATCH_RUNNER_OPTIONS, replicaId, leaseMs: LEASE_MS }, logger);

/** A batch whose lines have all run (every fifth one failed): ready to be finalized. */
async function readyBatch(accountId: string, batchId: string): Promise<{ output: string[]; errors: string[] }> {
  await sql`
    insert into batches (id, account_id, key_id, tier, endpoint, input_file_id, completion_window, status, total, completed, failed, cost_pico, in_progress_at, expires_at)
    values (${batchId}, ${accountId}, 'key-1', 'tier-1', '/v1/chat/completions', 'file-000000000000000000000000', '24h', 'in_progress',
      ${LINES}, ${LINES - LINES / 5}, ${LINES / 5}, 0, now(), now() + interval '1 day')`.execute(db);
  const output: string[] = [];
  const errors: string[] = [];
  const rows = Array.from({ length: LINES }, (_, index) => {
    const isError = index % 5 === 4;
    const result = isError
      ? { id: `batch_req_${batchId}-${index}`, custom_id: `c${index}`, response: { status_code: 402, request_id: `${batchId}-${index}`, body: { error: { code: 'insufficient_quota' } } }, error: null }
      : { id: `batch_req_${batchId}-${index}`, custom_id: `c${index}`, response: { status_code: 200, request_id: `${batchId}-${index}`, body: { object: 'chat.completion', text: 'x'.repeat(200) } }, error: null };
    (isError ? errors : output).push(JSON.stringify(result));
    return { batch_id: batchId, line_index: index, custom_id: `c${index}`, body: JSON.stringify({}), status: 'done', attempts: 1, result: JSON.stringify(result), is_error: isError, cost_pico: 0n };
  });
  for (let start = 0; start < rows.length; start += 400) await db.insertInto('batch_lines').values(rows.slice(start, start + 400) as never).execute();
  return { output, errors };
}

async function readAll(accountId: string, fileId: string): Promise<string> {
  const parts: Buffer[] = [];
  let offset = 0;
  for (;;) {
    const page = await jobs.readFileContent({ accountId, fileId, offset: BigInt(offset), maxBytes: 0 });
    if (page.data.length === 0) break;
    parts.push(Buffer.from(page.data));
    offset += page.data.length;
    if (BigInt(offset) >= page.totalBytes) break;
  }
  return Buffer.concat(parts).toString();
}

beforeAll(async () => {
  database = await createTestDatabase();
  // The service applies the migrations and serves the files back; its own runner is off (no routing services).
  const bus = new InProcessEventBus(logger);
  reader = await bus.consumeDurable({ subject: subjects.accountEvents, durable: 'test', maxBatch: 10, lingerMs: 0 }, async (batch) => {
    for (const message of batch) events.push(AccountEvent.decode(message.data));
  });
  service = await startJobsService({ listenAddress: '127.0.0.1:0', databaseUrl: database.url, logger, bus, eventRelayIntervalMs: 50 });
  jobs = createClient(JobsServiceClient, JobsServiceService, service.address);
  db = createDatabase<JobsDatabase>({ url: database.url, schema: JOBS_SCHEMA, maxConnections: 4 }, logger);
}, 60_000);

afterAll(async () => {
  await reader?.stop();
  jobs?.close();
  await db?.destroy();
  await service?.stop();
  await database?.drop();
});

describe('a batch finalization taken up by a second replica writes one set of files', () => {
  for (const dieAt of ['afterBothFiles', 'midOutput'] as const) {
    it(`when the first replica died ${dieAt === 'afterBothFiles' ? 'after writing both files, before ending the batch' : 'halfway through the output file'}`, async () => {
      const accountId = `acct-${dieAt}`;
      const batchId = `batch_${dieAt === 'afterBothFiles' ? 'a' : 'b'}${'0'.repeat(23)}`;
      const expected = await readyBatch(accountId, batchId);

      const firstFiles = new DyingFiles(dieAt);
      const first = runner('replica-1', firstFiles);
      await first.tick();
      firstFiles.stop();
      // It died holding the batch: finalizing, its lease not yet lapsed, no files named.
      const held = await db.selectFrom('batches').selectAll().where('id', '=', batchId).executeTakeFirstOrThrow();
      expect(held.status).toBe('finalizing');
      expect(held.lease_owner).toBe('replica-1');
      expect(held.output_file_id).toBeNull();
      const leftBehind = await db.selectFrom('files').select(['id', 'status']).where('account_id', '=', accountId).execute();
      expect(leftBehind.map((file) => file.status).sort()).toEqual(dieAt === 'afterBothFiles' ? ['processed', 'processed'] : ['uploading']);

      const secondFiles = new Files(db, new PostgresFileContentStore(db), { ...DEFAULT_FILE_LIMITS, sweepIntervalMs: 3_600_000 }, logger);
      const second = runner('replica-2', secondFiles);
      // Not before the lease lapses; then the second replica ends it.
      await second.tick();
      expect((await db.selectFrom('batches').select('status').where('id', '=', batchId).executeTakeFirstOrThrow()).status).toBe('finalizing');
      const ended = await eventually(async () => {
        await second.tick();
        const row = await db.selectFrom('batches').selectAll().where('id', '=', batchId).executeTakeFirstOrThrow();
        expect(row.status).toBe('completed');
        return row;
      }, 10_000, 200);
      secondFiles.stop();

      // One set: the account holds exactly the two files the batch names, every row complete.
      const rows = await db.selectFrom('files').select(['id', 'status', 'purpose']).where('account_id', '=', accountId).execute();
      expect(rows.map((file) => file.id).sort()).toEqual([ended.output_file_id, ended.error_file_id].sort());
      expect(rows.every((file) => file.status === 'processed' && file.purpose === 'batch_output')).toBe(true);
      if (dieAt === 'afterBothFiles') expect(rows.map((file) => file.id).sort()).toEqual(leftBehind.map((file) => file.id).sort());
      const listed = await jobs.listFiles({ accountId, purpose: 'batch_output', limit: 0, after: '', order: '' });
      expect(listed.files).toHaveLength(2);
      // Their bytes: every line once, in input order (a half-written file was written again from the start).
      const output = await readAll(accountId, ended.output_file_id!);
      const errorFile = await readAll(accountId, ended.error_file_id!);
      const parsed = (text: string) => { expect(text.endsWith('\n')).toBe(true); return text.slice(0, -1).split('\n').map((line) => JSON.parse(line) as unknown); };
      expect(parsed(output)).toEqual(expected.output.map((line) => JSON.parse(line) as unknown));
      expect(parsed(errorFile)).toEqual(expected.errors.map((line) => JSON.parse(line) as unknown));
      // No stray bytes of the dead writer's attempt: the stored pieces are exactly what reads back.
      const stored = await sql<{ n: number }>`select coalesce(sum(length(data)), 0)::int as n from file_chunks where file_id = any(${[ended.output_file_id, ended.error_file_id]})`.execute(db);
      expect(stored.rows[0]!.n).toBe(Buffer.byteLength(output) + Buffer.byteLength(errorFile));
      // Finalization counted nothing again.
      expect([ended.completed, ended.failed]).toEqual([LINES - LINES / 5, LINES / 5]);
      // Ended once, announced once (the webhook's batch.completed), with the batch's counts.
      await eventually(async () => expect(events.filter((event) => JSON.parse(event.dataJson).batch_id === batchId)).toHaveLength(1), 5_000, 50);
      await new Promise((resolve) => setTimeout(resolve, 200));
      const announced = events.filter((event) => JSON.parse(event.dataJson).batch_id === batchId);
      expect(announced).toHaveLength(1);
      expect(announced[0]!).toMatchObject({ accountId, type: 'batch.completed' });
      expect(JSON.parse(announced[0]!.dataJson)).toMatchObject({
        batch_id: batchId, kind: 'openai', status: 'completed', request_counts: { total: LINES, completed: LINES - LINES / 5, failed: LINES / 5 }, cost: '0',
      });
    }, 30_000);
  }
});
