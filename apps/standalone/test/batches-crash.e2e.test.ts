import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toFile } from 'openai';
import pg from 'pg';
import { formatCredits, parseCredits, type PromiseClient } from '@gateway/platform';
import type { LedgerServiceClient } from '@gateway/proto';
import { eventually, startFakeUpstream, TEST_ADMIN_TOKEN, type FakeUpstream, type TestDatabase } from '@gateway/testing';
import { killAbruptly, type ProcessStack } from './process-stack.js';
import { startProcessStackOnCatalog, type ProcessStackOnCatalog } from './process-stack-on-catalog.js';
import { batchCatalog, chatLine, COMPLETION_TOKENS, LINE_COST, PROMPT_TOKENS } from './batches-harness.js';

// The jobs service as its own OS process, SIGKILLed in the middle of a batch and started again: the lines
// it held are taken up again once their leases lapse, the batch completes with every line in its output
// exactly once, and the ledger charged every line once — the account's balance moved by exactly the sum
// of the output file's costs, however many times a line reached the upstream.

const LINES = 24;

describe('a jobs process killed mid-batch', () => {
  let running: ProcessStackOnCatalog;
  let database: TestDatabase;
  let upstream: FakeUpstream;
  let stack: ProcessStack;
  let ledger: PromiseClient<LedgerServiceClient>;
  const jobsEnv = { JOBS_BATCH_LEASE_MS: '2000', JOBS_BATCH_POLL_MS: '100', JOBS_BATCH_CONCURRENCY: '4', JOBS_BATCH_ACCOUNT_CONCURRENCY: '4' };

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    // Slow enough that the kill finds lines running (their answers lost, their usage maybe settled).
    upstream.setFallback({ latencyMs: 400, usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    running = await startProcessStackOnCatalog('batches-crash', batchCatalog(upstream), { routing: { BATCH_KEY: 'sk-batch-crash' }, jobs: jobsEnv });
    ({ stack, database, ledger } = running);
  }, 120_000);

  afterAll(async () => {
    await running?.stop();
    await upstream?.close();
  }, 30_000);

  it('resumes the batch after a restart: every line in the output once, each charged once, the ledger equal to the output costs', async () => {
    const { accountId, client, balance } = await running.account('batch-crash', '10');
    const before = await balance();
    const input = await client.files.create({
      file: await toFile(Buffer.from(`${Array.from({ length: LINES }, (_, index) => chatLine(`line-${index}`, `prompt ${index}`)).join('\n')}\n`), 'crash.jsonl'),
      purpose: 'batch',
    });
    const created = await client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    // Some lines done, others running: kill the jobs process without a chance to clean up.
    await eventually(async () => expect((await client.batches.retrieve(created.id)).request_counts?.completed).toBeGreaterThanOrEqual(4), 30_000, 50);
    await killAbruptly(stack.running.get('jobs')!);
    // The lines the dead process held (leased, not done): they are run again after the restart.
    const db = new pg.Client({ connectionString: database.url });
    // Dropped with the test database at the end, whatever happened before.
    db.on('error', () => undefined);
    await db.connect();
    const heldAtKill = async () => (await db.query(
      `select line_index from jobs.batch_lines where batch_id = $1 and status = 'pending' and lease_owner is not null order by line_index`, [created.id],
    )).rows.map((row: { line_index: number }) => row.line_index);
    const held = await heldAtKill();
    expect(held.length).toBeGreaterThan(0);
    // Started again on the same address: the edge's client reconnects, the runner takes the lapsed leases up.
    stack.launch('jobs', { GRPC_LISTEN: stack.addresses.jobs });
    await stack.untilServing('jobs');
    let batch = await client.batches.retrieve(created.id);
    await eventually(async () => {
      batch = await client.batches.retrieve(created.id);
      expect(batch.status).toBe('completed');
    }, 60_000, 200);
    expect(batch.request_counts).toEqual({ total: LINES, completed: LINES, failed: 0 });
    const output = (await (await client.files.content(batch.output_file_id!)).text()).split('\n').filter((line) => line !== '').map((line) => JSON.parse(line));
    expect(output.map((line) => line.custom_id)).toEqual(Array.from({ length: LINES }, (_, index) => `line-${index}`));
    let sum = 0n;
    for (const line of output) {
      expect(line.response.status_code).toBe(200);
      sum += parseCredits(line.response.body.usage.cost);
    }
    expect(sum).toBe(LINE_COST * BigInt(LINES));
    // The ledger: exactly the output's costs, once per line, even for lines that reached the upstream twice.
    await eventually(async () => expect(before - (await balance())).toBe(sum), 15_000);
    expect(batch.usage).toMatchObject({ cost: formatCredits(sum) });
    // Balances agree with the journal (no charge applied twice anywhere).
    expect((await ledger.verifyJournal({ accountId }, { credential: TEST_ADMIN_TOKEN })).mismatches).toEqual([]);
    // Those lines were started again (their first runs died with the process) and were still charged once.
    const attempts = await db.query(`select line_index, attempts from jobs.batch_lines where batch_id = $1 and line_index = any($2)`, [created.id, held]);
    await db.end();
    expect(attempts.rows.every((row: { attempts: number }) => row.attempts >= 2)).toBe(true);
    // Every line reached the upstream at least once (a held line may have died before its call left, or after).
    expect(upstream.requests.length).toBeGreaterThanOrEqual(LINES);
  }, 150_000);
});
