import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '@gateway/platform';
import { createDatabase, migrate, type Kysely } from '@gateway/platform/db';
import { ChatRequest } from '@gateway/proto';
import { createTestDatabase, type TestDatabase } from '@gateway/testing';
import { Batches, DEFAULT_BATCH_LIMITS } from '../src/batches/batches.js';
import { PostgresFileContentStore } from '../src/files/file-content-store.js';
import { DEFAULT_FILE_LIMITS, Files } from '../src/files/files.js';
import { JOBS_MIGRATIONS, JOBS_SCHEMA, type JobsDatabase } from '../src/jobs-schema.js';

// The bound on an account's unfinished batches (docs/jobs.md): batches and message batches count
// together, creates of one account are counted one at a time (concurrent ones cannot pass the cap
// together), the refusal names the create's own parameter, and another account is not affected.

const logger = createLogger('jobs-test', 'silent');
const CAP = 3;

let database: TestDatabase;
let db: Kysely<JobsDatabase>;
let files: Files;
let batches: Batches;

const messageBatch = (accountId: string) => batches.createMessageBatch({
  accountId,
  keyId: 'key-1',
  tier: 'tier-1',
  requests: [{ customId: 'q-0', request: ChatRequest.fromPartial({ modelId: 'testco/m' }) }],
});

async function fileBatch(accountId: string) {
  const input = await files.storeGenerated(accountId, 'input.jsonl', 'batch', (async function* () { yield Buffer.from('{}\n'); })());
  return batches.create({ accountId, keyId: 'key-1', tier: 'tier-1', inputFileId: input.id, endpoint: '/v1/chat/completions', completionWindow: '24h', metadata: {} });
}

beforeAll(async () => {
  database = await createTestDatabase();
  db = createDatabase<JobsDatabase>({ url: database.url, schema: JOBS_SCHEMA, maxConnections: 8 }, logger);
  await migrate(db, JOBS_SCHEMA, JOBS_MIGRATIONS, logger);
  files = new Files(db, new PostgresFileContentStore(db), { ...DEFAULT_FILE_LIMITS, sweepIntervalMs: 3_600_000 }, logger);
  batches = new Batches(db, files, { ...DEFAULT_BATCH_LIMITS, maxUnfinishedPerAccount: CAP });
}, 60_000);

afterAll(async () => {
  files?.stop();
  await db?.destroy();
  await database?.drop();
});

describe('the per-account cap of unfinished batches', () => {
  it('counts batches and message batches together, concurrent creates one at a time, per account', async () => {
    const created = await Promise.allSettled([messageBatch('acct-a'), fileBatch('acct-a'), messageBatch('acct-a'), fileBatch('acct-a'), messageBatch('acct-a')]);
    expect(created.filter((outcome) => outcome.status === 'fulfilled')).toHaveLength(CAP);
    for (const outcome of created.filter((outcome) => outcome.status === 'rejected')) {
      expect(outcome.reason).toMatchObject({ code: 'batches_limit_exceeded' });
    }
    await expect(messageBatch('acct-a')).rejects.toMatchObject({ code: 'batches_limit_exceeded', param: 'requests' });
    await expect(fileBatch('acct-a')).rejects.toMatchObject({ code: 'batches_limit_exceeded', param: 'input_file_id' });
    // Another account's creates are not affected.
    await expect(messageBatch('acct-b')).resolves.toMatchObject({ id: expect.stringMatching(/^msgbatch_/) });
    await expect(fileBatch('acct-b')).resolves.toMatchObject({ id: expect.stringMatching(/^batch_/) });
  });
});
