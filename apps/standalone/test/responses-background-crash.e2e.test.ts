import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import pg from 'pg';
import { createClient, parseCredits, type PromiseClient } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import {
  createTestBus, createTestDatabase, eventually, startFakeUpstream, TEST_ADMIN_TOKEN, TEST_INTERNAL_TOKEN, type FakeUpstream, type TestBus, type TestDatabase,
} from '@gateway/testing';
import { createAccountKey, startProcessStack, type ProcessStack } from './process-stack.js';

// The jobs service as its own OS process, SIGKILLed while background responses run, and started again:
// the runs it held are taken up once their leases lapse, every response ends completed with its
// output, and the ledger charged each exactly once — the balance moved by exactly the sum of the
// answers' costs, however many times a run reached the provider (an earlier attempt's charge is voided).

const MODEL = 'testco/bg-crash';
const PROMPT_TOKENS = 10;
const COMPLETION_TOKENS = 5;
const COST = BigInt(PROMPT_TOKENS) * parseCredits('0.000002') + BigInt(COMPLETION_TOKENS) * parseCredits('0.000004');
const RESPONSES = 4;

function catalog(upstream: FakeUpstream): string {
  return `
startups:
  - { id: testco, display_name: Test Co }
providers:
  - { id: upstream-one, kind: openai, base_url: ${upstream.url}, api_key_env: BG_CRASH_KEY }
limit_groups:
  - id: default
    tiers: { tier-1: { minute: 600 } }
models:
  - id: ${MODEL}
    owned_by: testco
    created: 1767225600
    context_window: 8000
    max_output_tokens: 100
    input_modalities: [text]
    output_modalities: [text]
    supported_parameters: [temperature, max_completion_tokens]
    pricing: { per_input_token: "0.000002", per_output_token: "0.000004" }
    limit_group: default
    offers:
      - { provider: upstream-one, upstream_model: bg-crash-upstream, endpoints: [chat.completions, responses] }
`;
}

describe('a jobs process killed while background responses run', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let upstream: FakeUpstream;
  let directory: string;
  let stack: ProcessStack;
  let ledger: PromiseClient<LedgerServiceClient>;

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    upstream = await startFakeUpstream();
    // Slow enough that the kill finds the runs in the provider's hands.
    upstream.setFallback({ latencyMs: 1_500, text: 'Finished after all.', usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    directory = await mkdtemp(join(tmpdir(), 'background-crash-'));
    const configPath = join(directory, 'gateway.yaml');
    await writeFile(configPath, catalog(upstream));
    stack = await startProcessStack(database, testBus, {
      catalog: { GATEWAY_CONFIG: configPath },
      routing: { BG_CRASH_KEY: 'sk-bg-crash' },
      jobs: { JOBS_BATCH_LEASE_MS: '2000', JOBS_BATCH_POLL_MS: '100', JOBS_BATCH_CONCURRENCY: '8' },
    });
    ledger = createClient(LedgerServiceClient, LedgerServiceService, stack.addresses.ledger, { credential: TEST_INTERNAL_TOKEN });
  }, 120_000);

  afterAll(async () => {
    ledger?.close();
    await stack?.stop();
    await upstream?.close();
    await testBus?.destroy();
    await database?.drop();
    await rm(directory, { recursive: true, force: true });
  }, 30_000);

  it('finishes every response after a restart, each charged once, the ledger equal to the answers\' costs', async () => {
    const { accountId, apiKey } = await createAccountKey(stack, 'background-crash', '10');
    const client = new OpenAI({ baseURL: `${stack.edgeUrl}/v1`, apiKey, maxRetries: 2, timeout: 60_000 });
    const balance = async () => parseCredits((await ledger.getBalance({ accountId })).balance);
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
    const jobs = stack.running.get('jobs')!;
    const exited = new Promise((resolve) => jobs.once('exit', resolve));
    jobs.kill('SIGKILL');
    await exited;
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
});
