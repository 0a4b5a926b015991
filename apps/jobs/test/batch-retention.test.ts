import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, InProcessEventBus } from '@gateway/platform';
import { createDatabase, sql, type Kysely } from '@gateway/platform/db';
import { createTestDatabase, eventually, type TestDatabase } from '@gateway/testing';
import { startJobsService, type RunningJobsService } from '../src/index.js';
import { BatchRetention } from '../src/batches/batch-retention.js';
import { JOBS_SCHEMA, type JobsDatabase } from '../src/jobs-schema.js';

// The retention of finished batches' rows (docs/jobs.md "What is stored, for how long"): the jobs
// service's timer deletes a batch finished longer ago than the retention, with all its lines; a batch
// finished more recently, or not finished however old, stays. A round deletes at most its bound of lines
// and the next one resumes. Real Postgres.

const logger = createLogger('jobs-test', 'silent');
const RETENTION_SECONDS = 3_600;

let database: TestDatabase;
let service: RunningJobsService | undefined;
let db: Kysely<JobsDatabase>;
let counter = 0;

/** A batch in `status`, created `ageSeconds` ago and (when finished) ended then, with `lines` lines. */
async function batch(accountId: string, status: string, ageSeconds: number, lines: number): Promise<string> {
  const id = `batch_${(++counter).toString(16).padStart(24, '0')}`;
  const at = sql`now() - make_interval(secs => ${ageSeconds})`;
  const endedColumn = { completed: 'completed_at', failed: 'failed_at', expired: 'expired_at', cancelled: 'cancelled_at' }[status];
  await sql`
    insert into batches (id, account_id, key_id, tier, endpoint, input_file_id, completion_window, status, total, created_at, expires_at)
    values (${id}, ${accountId}, 'key-1', 'tier-1', '/v1/chat/completions', 'file-000000000000000000000000', '24h', ${status}, ${lines}, ${at}, ${at} + interval '1 day')`.execute(db);
  if (endedColumn) await sql`update batches set ${sql.ref(endedColumn)} = ${at} where id = ${id}`.execute(db);
  const rows = Array.from({ length: lines }, (_, index) => ({
    batch_id: id, line_index: index, custom_id: `c${index}`, body: JSON.stringify({ model: 'm' }), status: status === 'in_progress' ? 'pending' : 'done',
    attempts: 1, result: JSON.stringify({ custom_id: `c${index}` }), is_error: false, cost_pico: 0n,
  }));
  for (let start = 0; start < rows.length; start += 500) await db.insertInto('batch_lines').values(rows.slice(start, start + 500) as never).execute();
  return id;
}

const linesOf = async (id: string) => (await sql<{ n: number }>`select count(*)::int as n from batch_lines where batch_id = ${id}`.execute(db)).rows[0]!.n;
const exists = async (id: string) => (await db.selectFrom('batches').select('id').where('id', '=', id).executeTakeFirst()) !== undefined;

beforeAll(async () => {
  database = await createTestDatabase();
  db = createDatabase<JobsDatabase>({ url: database.url, schema: JOBS_SCHEMA, maxConnections: 4 }, logger);
}, 60_000);

afterAll(async () => {
  await service?.stop();
  await db?.destroy();
  await database?.drop();
});

describe('retention of finished batches', () => {
  it('the jobs service deletes finished batches past the retention with their lines, on its timer, and keeps the rest', async () => {
    // The service starts with its sweep not yet due (a long interval): the rows are made first, then a
    // second service with a short interval sweeps them.
    const setup = await startJobsService({ listenAddress: '127.0.0.1:0', databaseUrl: database.url, logger, bus: new InProcessEventBus(logger), batchRetention: { retentionSeconds: RETENTION_SECONDS, sweepIntervalMs: 3_600_000 } });
    await setup.stop();
    const old = RETENTION_SECONDS + 60;
    const gone = [
      await batch('acct-a', 'completed', old, 1_234),
      await batch('acct-a', 'failed', old, 0),
      await batch('acct-b', 'expired', old * 3, 40),
      await batch('acct-b', 'cancelled', old, 7),
    ];
    const kept = [
      await batch('acct-a', 'completed', RETENTION_SECONDS - 120, 30), // finished, not yet past the retention
      await batch('acct-a', 'in_progress', old * 2, 25), // unfinished, however old
      await batch('acct-b', 'cancelling', old, 5),
      await batch('acct-b', 'finalizing', old, 5),
    ];
    const keptLines = await Promise.all(kept.map(linesOf));

    service = await startJobsService({
      listenAddress: '127.0.0.1:0', databaseUrl: database.url, logger, bus: new InProcessEventBus(logger),
      batchRetention: { retentionSeconds: RETENTION_SECONDS, sweepIntervalMs: 200, chunkLines: 100, linesPerRound: 500 },
    });
    // 1,281 lines at 500 a round: several rounds of the timer.
    await eventually(async () => {
      for (const id of gone) expect(await exists(id)).toBe(false);
    }, 20_000, 100);
    for (const id of gone) expect(await linesOf(id)).toBe(0);
    for (const [index, id] of kept.entries()) {
      expect(await exists(id)).toBe(true);
      expect(await linesOf(id)).toBe(keptLines[index]);
    }
    // Its timer stops here: the next test drives the sweep by hand.
    await service.stop();
    service = undefined;
  }, 40_000);

  it('a round deletes at most its bound of lines, the batch row last, and the next round resumes', async () => {
    const id = await batch('acct-c', 'completed', 7_200, 25);
    const retention = new BatchRetention(db, { retentionSeconds: 3_600, sweepIntervalMs: 3_600_000, chunkLines: 4, linesPerRound: 10 }, logger);
    expect(await retention.sweep()).toEqual({ batches: 0, lines: 10 });
    expect(await linesOf(id)).toBe(15);
    expect(await exists(id)).toBe(true);
    expect(await retention.sweep()).toEqual({ batches: 0, lines: 10 });
    expect(await retention.sweep()).toEqual({ batches: 1, lines: 5 });
    expect(await exists(id)).toBe(false);
    expect(await retention.sweep()).toEqual({ batches: 0, lines: 0 });
    // Retention 0 keeps everything.
    const keptForever = await batch('acct-c', 'completed', 10 * 365 * 24 * 3600, 3);
    const never = new BatchRetention(db, { retentionSeconds: 0, sweepIntervalMs: 3_600_000, chunkLines: 4, linesPerRound: 10 }, logger);
    expect(await never.sweep()).toEqual({ batches: 0, lines: 0 });
    expect(await exists(keptForever)).toBe(true);
  });
});
