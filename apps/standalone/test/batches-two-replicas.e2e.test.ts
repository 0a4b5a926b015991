import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toFile } from 'openai';
import { formatCredits, parseCredits, type PromiseClient } from '@gateway/platform';
import type { LedgerServiceClient } from '@gateway/proto';
import { eventually, startFakeUpstream, TEST_ADMIN_TOKEN, type FakeUpstream } from '@gateway/testing';
import { killAbruptly, type ProcessStack } from './process-stack.js';
import { startProcessStackOnCatalog, type ProcessStackOnCatalog } from './process-stack-on-catalog.js';
import { batchCatalogOf, batchModel, chatLine, COMPLETION_TOKENS, LINE_COST, MODEL, PROMPT_TOKENS } from './batches-harness.js';

// Issue 41's scale case: a batch of 2,000 lines across two providers, run by two jobs replicas as their own
// OS processes, one of them SIGKILLed in the middle. The other takes the dead one's lines up once their
// leases lapse; the batch completes with every line in exactly one of its two files (the answered lines in
// the output file, the lines refused before admission in the error file), each answered line charged once at the
// batch price, and the ledger moved by exactly the output file's costs.

const LINES = 2_000;
/** Lines on a model whose worst case is over the 1,000-credit ceiling of one line: each ends in the error file, charged nothing. */
const TOO_DEAR = 20;
const DEAR = 'testco/dear';

function twoProviderCatalog(one: FakeUpstream, two: FakeUpstream): string {
  return batchCatalogOf([one, two], [
    batchModel({ id: MODEL, offers: [{ upstream: 0, model: 'batchy-one' }, { upstream: 1, model: 'batchy-two' }] }),
    batchModel({ id: DEAR, perOutput: '40', batchOut: '20', offers: [{ upstream: 0, model: 'dear-one' }] }),
  ].join(''));
}

const parseLines = (text: string) => text.split('\n').filter((line) => line !== '').map((line) => JSON.parse(line));

describe('a 2,000-line batch on two jobs replicas, one SIGKILLed mid-batch', () => {
  let running: ProcessStackOnCatalog;
  let one: FakeUpstream;
  let two: FakeUpstream;
  let stack: ProcessStack;
  let ledger: PromiseClient<LedgerServiceClient>;
  const jobsEnv = { JOBS_BATCH_LEASE_MS: '2000', JOBS_BATCH_POLL_MS: '100', JOBS_BATCH_CONCURRENCY: '24', JOBS_BATCH_ACCOUNT_CONCURRENCY: '24' };

  beforeAll(async () => {
    [one, two] = await Promise.all([startFakeUpstream(), startFakeUpstream()]);
    for (const upstream of [one, two]) upstream.setFallback({ latencyMs: 15, usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    // A second jobs replica: both take lines of the same batch; the edge spreads its calls over both.
    running = await startProcessStackOnCatalog('batches-two-replicas', twoProviderCatalog(one, two), { routing: { BATCH_KEY: 'sk-batch-two' }, jobs: jobsEnv }, { extraJobs: 1 });
    ({ stack, ledger } = running);
  }, 120_000);

  afterAll(async () => {
    await running?.stop();
    await Promise.all([one?.close(), two?.close()]);
  }, 30_000);

  it('completes with output and error files exact, every answered line charged once at the batch price, the ledger equal to the output costs', async () => {
    const [first, second] = stack.jobsReplicas.map((replica) => replica.process);
    const { accountId, client, balance } = await running.account('batch-two-replicas', '10');
    const before = await balance();
    // Every 100th line asks the dear model: 100 output tokens at 20 credits each may cost 2,000 credits.
    const tooDear = new Set(Array.from({ length: TOO_DEAR }, (_, index) => index * 100 + 7));
    const lines = Array.from({ length: LINES }, (_, index) => chatLine(`line-${index}`, `prompt ${index}`, tooDear.has(index) ? { model: DEAR } : {}));
    const input = await client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'two-replicas.jsonl'), purpose: 'batch' });
    const created = await client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });

    // A few hundred lines done: the first replica dies without a chance to clean up.
    await eventually(async () => expect((await client.batches.retrieve(created.id)).request_counts?.completed).toBeGreaterThanOrEqual(300), 120_000, 100);
    await killAbruptly(first!);
    expect(second!.exitCode).toBeNull();

    let batch = await client.batches.retrieve(created.id);
    await eventually(async () => {
      batch = await client.batches.retrieve(created.id);
      expect(batch.status).toBe('completed');
    }, 240_000, 250);
    expect(batch.request_counts).toEqual({ total: LINES, completed: LINES - TOO_DEAR, failed: TOO_DEAR });

    // The output file: each answered line exactly once, each at the batch price.
    const output = parseLines(await (await client.files.content(batch.output_file_id!)).text());
    const expectedAnswered = Array.from({ length: LINES }, (_, index) => index).filter((index) => !tooDear.has(index)).map((index) => `line-${index}`);
    expect(output.map((line) => line.custom_id).sort()).toEqual([...expectedAnswered].sort());
    let sum = 0n;
    for (const line of output) {
      expect(line.response.status_code).toBe(200);
      expect(parseCredits(line.response.body.usage.cost)).toBe(LINE_COST);
      sum += parseCredits(line.response.body.usage.cost);
    }
    expect(sum).toBe(LINE_COST * BigInt(LINES - TOO_DEAR));
    // The error file: exactly the dear model's lines, each a 400 before any admission or upstream call.
    const errors = parseLines(await (await client.files.content(batch.error_file_id!)).text());
    expect(errors.map((line) => line.custom_id).sort()).toEqual([...tooDear].map((index) => `line-${index}`).sort());
    for (const line of errors) {
      expect(line.response.status_code).toBe(400);
      expect(line.response.body.error.message).toMatch(/more than 1000 credits/);
    }

    // Both providers served lines; the ledger moved by exactly the output's costs, no charge applied twice.
    expect(one.requests.length).toBeGreaterThan(0);
    expect(two.requests.length).toBeGreaterThan(0);
    expect(one.requests.length + two.requests.length).toBeGreaterThanOrEqual(LINES - TOO_DEAR);
    expect(one.requests.some((request) => request.body.model === 'dear-one')).toBe(false);
    await eventually(async () => expect(before - (await balance())).toBe(sum), 30_000);
    expect(batch.usage).toMatchObject({ cost: formatCredits(sum) });
    expect((await ledger.verifyJournal({ accountId }, { credential: TEST_ADMIN_TOKEN })).mismatches).toEqual([]);
  }, 400_000);
});
