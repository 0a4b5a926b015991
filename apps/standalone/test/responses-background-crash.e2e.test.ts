import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import pg from 'pg';
import { parseCredits, type PromiseClient } from '@gateway/platform';
import type { LedgerServiceClient } from '@gateway/proto';
import { eventually, startFakeUpstream, TEST_ADMIN_TOKEN, type FakeUpstream, type TestDatabase } from '@gateway/testing';
import { killAbruptly, type ProcessStack } from './process-stack.js';
import { startProcessStackOnCatalog, type ProcessStackOnCatalog } from './process-stack-on-catalog.js';
import { oneTextModelCatalog } from './background-harness.js';

// The jobs service as its own OS process, SIGKILLed while background responses run, and started again:
// the runs it held are taken up once their leases lapse, every response ends completed with its
// output, and the ledger charged each exactly once — the balance moved by exactly the sum of the
// answers' costs, however many times a run reached the provider (an earlier attempt's charge is voided).

const MODEL = 'testco/bg-crash';
const PROMPT_TOKENS = 10;
const COMPLETION_TOKENS = 5;
const COST = BigInt(PROMPT_TOKENS) * parseCredits('0.000002') + BigInt(COMPLETION_TOKENS) * parseCredits('0.000004');
const RESPONSES = 4;

const catalog = (upstream: FakeUpstream) => oneTextModelCatalog({ model: MODEL, upstreamModel: 'bg-crash-upstream', upstreamUrl: upstream.url, keyEnv: 'BG_CRASH_KEY', priceIn: '0.000002', priceOut: '0.000004' });

describe('a jobs process killed while background responses run', () => {
  let running: ProcessStackOnCatalog;
  let database: TestDatabase;
  let upstream: FakeUpstream;
  let stack: ProcessStack;
  let ledger: PromiseClient<LedgerServiceClient>;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    // Slow enough that the kill finds the runs in the provider's hands.
    upstream.setFallback({ latencyMs: 1_500, text: 'Finished after all.', usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    running = await startProcessStackOnCatalog('background-crash', catalog(upstream), {
      routing: { BG_CRASH_KEY: 'sk-bg-crash' },
      jobs: { JOBS_BATCH_LEASE_MS: '2000', JOBS_BATCH_POLL_MS: '100', JOBS_BATCH_CONCURRENCY: '8' },
    });
    ({ stack, database, ledger } = running);
  }, 120_000);

  afterAll(async () => {
    await running?.stop();
    await upstream?.close();
  }, 30_000);

  it('finishes every response after a restart, each charged once, the ledger equal to the answers\' costs', async () => {
    const { accountId, client, balance } = await running.account('background-crash', '10');
    const before = await balance();
    const created = [];
    for (let index = 0; index < RESPONSES; index++) {
      created.push(await client.responses.create({ model: MODEL, input: `task ${index}`, background: true }));
    }
    expect(created.every((response) => response.status === 'queued')).toBe(true);
    const db = new pg.Client({ connectionString: database.url });
    db.on('error', () => undefined);
    await db.connect();
    const held = async () => (await db.query(
      `select response_id from jobs.background_responses where account_id = $1 and status = 'in_progress' and lease_owner is not null order by response_id`, [accountId],
    )).rows.map((row: { response_id: string }) => row.response_id);
    // Every run in the provider's hands: kill the jobs process without a chance to clean up.
    await eventually(async () => expect(upstream.requests.length).toBe(RESPONSES), 15_000, 20);
    await killAbruptly(stack.running.get('jobs')!);
    const heldAtKill = await held();
    expect(heldAtKill.length).toBe(RESPONSES);

    stack.launch('jobs', { GRPC_LISTEN: stack.addresses.jobs });
    await stack.untilServing('jobs');
    for (const response of created) {
      await eventually(async () => {
        const seen = await client.responses.retrieve(response.id);
        expect(seen.status).toBe('completed');
        expect(seen.output_text).toBe('Finished after all.');
        expect(parseCredits((seen.usage as unknown as { cost: string }).cost)).toBe(COST);
      }, 60_000, 200);
    }
    // Each run reached the provider twice (the first answers died with the process) and is charged once.
    expect(upstream.requests.length).toBeGreaterThanOrEqual(2 * RESPONSES);
    await eventually(async () => expect(before - (await balance())).toBe(COST * BigInt(RESPONSES)), 20_000);
    expect((await ledger.verifyJournal({ accountId }, { credential: TEST_ADMIN_TOKEN })).mismatches).toEqual([]);
    const attempts = await db.query(`select attempts, attempt_request_id, response_id from jobs.background_responses where account_id = $1`, [accountId]);
    await db.end();
    for (const row of attempts.rows as { attempts: number; attempt_request_id: string; response_id: string }[]) {
      expect(row.attempts).toBeGreaterThanOrEqual(2);
      // The charge stands under the attempt that answered, never under the first one's id.
      expect(row.attempt_request_id).toBe(`${row.response_id}.${row.attempts}`);
    }
    // Still exactly the answers' costs a while later (no late charge of a dead attempt lands).
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(before - (await balance())).toBe(COST * BigInt(RESPONSES));
  }, 150_000);

  it('a streamed background response: its reader stays on through a jobs kill and reaches response.completed; the re-run restarts the output after a second in_progress; charged once', async () => {
    const text = 'alpha beta gamma delta epsilon zeta eta theta';
    upstream.reset();
    upstream.setFallback({ text, chunkCount: 8, chunkDelayMs: 300, usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    const { accountId, client, balance } = await running.account('background-stream-crash', '10', { maxRetries: 0, timeout: 90_000 });
    const before = await balance();
    const stream = await client.responses.create({ model: MODEL, input: 'stream through a crash', background: true, stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    let killed = false;
    for await (const event of stream) {
      events.push(event);
      if (!killed && events.filter((seen) => seen.type === 'response.output_text.delta').length === 2) {
        killed = true;
        // The jobs process dies mid-run; the reader's connection (to the edge) stays open.
        await killAbruptly(stack.running.get('jobs')!);
        stack.launch('jobs', { GRPC_LISTEN: stack.addresses.jobs });
      }
    }
    expect(killed).toBe(true);
    // Every event once, numbered without a gap; the run began twice (the second attempt's output starts anew).
    expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, index) => index));
    const starts = events.flatMap((event, index) => (event.type === 'response.in_progress' ? [index] : []));
    expect(starts).toHaveLength(2);
    const deltas = (from: number, to: number) => events.slice(from, to).filter((event) => event.type === 'response.output_text.delta').map((event) => event.delta).join('');
    expect(text.startsWith(deltas(starts[0]!, starts[1]!))).toBe(true);
    expect(deltas(starts[1]!, events.length)).toBe(text);
    const completed = events.at(-1)!;
    expect(completed.type).toBe('response.completed');
    const response = (completed as OpenAI.Responses.ResponseCompletedEvent).response;
    expect(response.output_text ?? (response.output[0] as { content: { text: string }[] }).content[0]!.text).toBe(text);
    expect(parseCredits((response.usage as unknown as { cost: string }).cost)).toBe(COST);
    // Another reader resuming from before the kill gets exactly the same later events.
    const resumed: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of await client.responses.retrieve(response.id, { stream: true, starting_after: 3 })) resumed.push(event);
    expect(resumed).toEqual(events.slice(4));
    // Charged once: the voided attempt's charge is gone, the journal is consistent.
    await eventually(async () => expect(before - (await balance())).toBe(COST), 20_000);
    expect((await ledger.verifyJournal({ accountId }, { credential: TEST_ADMIN_TOKEN })).mismatches).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(before - (await balance())).toBe(COST);
  }, 150_000);
});
