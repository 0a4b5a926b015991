import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI, { toFile } from 'openai';
import { formatCredits, parseCredits, type PromiseClient } from '@gateway/platform';
import type { LedgerServiceClient } from '@gateway/proto';
import { eventually, type FakeUpstream } from '@gateway/testing';
import { ctlJson, type StackOnCatalog } from './configured-stack.js';
import { startBatchStack, type BatchStack } from './batches-stack.js';
import {
  BATCH_IN, chatLine, COMPLETION_TOKENS, LINE_COST, MODEL, PROMPT_TOKENS, REGULAR_LINE_COST,
} from './batches-harness.js';

// OpenAI Batch through the whole stack with the real `openai` client: files up, a batch created, its lines
// run by the jobs service through routing's normal path (Ledger.Admit per line, Router.Chat / Router.Embed,
// usage events, the ledger's settlement) at the catalog's batch prices, the output and error files read
// back. Money is checked exactly: each output line's usage.cost is the batch price of its usage, the
// ledger charged exactly the sum, once per line.

interface Account { accountId: string; client: OpenAI }

describe('OpenAI Batch with the openai SDK, at batch prices', () => {
  let batches: BatchStack;
  let upstream: FakeUpstream;
  let base: StackOnCatalog;
  let ledger: PromiseClient<LedgerServiceClient>;
  let owner: Account;
  let stranger: Account;

  async function account(name: string, credits: string): Promise<Account> {
    const { accountId, apiKey } = await batches.account(name, credits);
    return { accountId, client: new OpenAI({ baseURL: `${base.stack.url}/v1`, apiKey, maxRetries: 0, timeout: 60_000 }) };
  }

  const balance = (who: Account) => batches.balance(who.accountId);

  async function upload(who: Account, lines: readonly string[]) {
    return who.client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'batch.jsonl'), purpose: 'batch' });
  }

  async function finished(who: Account, id: string, timeoutMs = 30_000) {
    let batch = await who.client.batches.retrieve(id);
    await eventually(async () => {
      batch = await who.client.batches.retrieve(id);
      expect(['completed', 'failed', 'cancelled', 'expired']).toContain(batch.status);
    }, timeoutMs, 100);
    return batch;
  }

  async function jsonl(who: Account, fileId: string | null | undefined): Promise<any[]> {
    if (!fileId) return [];
    const text = await (await who.client.files.content(fileId)).text();
    return text.split('\n').filter((line) => line !== '').map((line) => JSON.parse(line));
  }

  beforeAll(async () => {
    batches = await startBatchStack('batches', 'batches-e2e-secret-0123456789abcdef');
    ({ upstream, base, ledger } = batches);
    owner = await account('batch-owner', '10');
    stranger = await account('batch-stranger', '10');
  }, 120_000);

  afterAll(() => batches?.stop());

  it('runs every line once, at the batch price, charges exactly the sum of the output costs, and writes OpenAI output lines', async () => {
    const before = await balance(owner);
    const upstreamBefore = upstream.requests.length;
    const lines = Array.from({ length: 7 }, (_, index) => chatLine(`req-${index}`, `question ${index}`, { temperature: 0.2, max_completion_tokens: 50 }));
    const input = await upload(owner, lines);
    const created = await owner.client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { job: 'nightly' } });
    expect(created).toMatchObject({ object: 'batch', status: 'validating', input_file_id: input.id, completion_window: '24h', metadata: { job: 'nightly' } });
    expect(created.expires_at! - created.created_at).toBe(24 * 3600);
    const batch = await finished(owner, created.id);
    expect(batch).toMatchObject({ status: 'completed', request_counts: { total: 7, completed: 7, failed: 0 }, error_file_id: null });
    expect(batch.in_progress_at).not.toBeNull();
    expect(batch.completed_at).not.toBeNull();
    const output = await jsonl(owner, batch.output_file_id);
    expect(output.map((line) => line.custom_id)).toEqual(lines.map((_, index) => `req-${index}`));
    for (const [index, line] of output.entries()) {
      expect(line).toMatchObject({ id: `batch_req_${created.id}-${index}`, error: null, response: { status_code: 200, request_id: `${created.id}-${index}` } });
      expect(line.response.body).toMatchObject({ object: 'chat.completion', model: MODEL, usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
      expect(line.response.body.choices[0].message.content).toBe('Hello from the fake upstream.');
      expect(line.response.body.usage.cost).toBe(formatCredits(LINE_COST));
    }
    // Each line reached the upstream exactly once, with the parameters the model supports.
    const sent = upstream.requests.slice(upstreamBefore);
    expect(sent.length).toBe(7);
    expect(sent.every((request) => request.body.model === 'batchy-upstream' && request.body.temperature === 0.2 && request.body.max_completion_tokens === 50)).toBe(true);
    // The ledger charged the sum of the output costs, once per line, at the batch price (half the list price here).
    expect(LINE_COST * 2n).toBe(REGULAR_LINE_COST);
    await eventually(async () => expect(before - (await balance(owner))).toBe(LINE_COST * 7n), 10_000);
    expect(batch.usage).toMatchObject({ cost: formatCredits(LINE_COST * 7n) });
    const generation = await ledger.getGeneration({ accountId: owner.accountId, requestId: `${created.id}-3` });
    expect(generation.generation).toMatchObject({ cost: formatCredits(LINE_COST), modelId: MODEL });
    // Operators see it with gatewayctl, with the same counts and cost.
    const listed = (await ctlJson(base.stack, 'batches', 'list', owner.accountId, '--json')) as unknown as { batches: Record<string, unknown>[] };
    expect(listed.batches.find((entry) => entry.batch_id === created.id)).toMatchObject({
      status: 'completed', total: 7, completed: 7, failed: 0, cost: formatCredits(LINE_COST * 7n), output_file_id: batch.output_file_id,
    });
    // The output file is the account's own (purpose batch_output), and only its own.
    expect((await owner.client.files.retrieve(batch.output_file_id!)).purpose).toBe('batch_output');
    await expect(stranger.client.files.content(batch.output_file_id!)).rejects.toMatchObject({ status: 404 });
  });

  it('a malformed line fails the whole batch before any line runs, naming each bad line', async () => {
    const before = await balance(owner);
    const upstreamBefore = upstream.requests.length;
    const input = await upload(owner, [
      chatLine('ok-1', 'fine'),
      '{"custom_id": "broken", "method": "POST", "url": ',
      JSON.stringify({ custom_id: 'wrong-url', method: 'POST', url: '/v1/embeddings', body: { model: MODEL, input: 'x' } }),
      chatLine('ok-1', 'duplicate id'),
      chatLine('unknown-model', 'x').replace(MODEL, 'testco/nope'),
      chatLine('streamed', 'x', { stream: true }),
      chatLine('ok-2', 'fine'),
    ]);
    const created = await owner.client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const batch = await finished(owner, created.id);
    expect(batch.status).toBe('failed');
    expect(batch.failed_at).not.toBeNull();
    expect(batch.errors?.data?.map((error) => [error.line, error.code])).toEqual([
      [2, 'invalid_json_line'], [3, 'mismatched_endpoint'], [4, 'duplicate_custom_id'], [5, 'model_not_found'], [6, 'invalid_request'],
    ]);
    expect(batch.errors?.data?.[4]?.param).toBe('body.stream');
    expect(batch.output_file_id).toBeNull();
    expect(upstream.requests.length).toBe(upstreamBefore);
    expect(await balance(owner)).toBe(before);
  });

  it('an account with no credits: every line ends 402 in the error file, nothing is charged, nothing reaches the upstream', async () => {
    const broke = await account('batch-broke', '0');
    const upstreamBefore = upstream.requests.length;
    const input = await upload(broke, [chatLine('a', 'one'), chatLine('b', 'two'), chatLine('c', 'three')]);
    const created = await broke.client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const batch = await finished(broke, created.id);
    expect(batch).toMatchObject({ status: 'completed', request_counts: { total: 3, completed: 0, failed: 3 }, output_file_id: null });
    const errorsFile = await jsonl(broke, batch.error_file_id);
    expect(errorsFile.map((line) => line.custom_id)).toEqual(['a', 'b', 'c']);
    for (const line of errorsFile) {
      expect(line.response.status_code).toBe(402);
      expect(line.response.body.error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_quota' });
    }
    expect(upstream.requests.length).toBe(upstreamBefore);
    expect(await balance(broke)).toBe(0n);
    expect(batch.usage).toMatchObject({ cost: '0' });
  });

  it('a balance that covers some lines: the others end 402, the balance never goes below zero, the charges equal the output costs', async () => {
    // 0.06 credits: one line's hold (0.05, the least a paid line holds) fits, two at once do not.
    const tight = await account('batch-tight', '0.06');
    const lines = Array.from({ length: 8 }, (_, index) => chatLine(`t-${index}`, `tight ${index}`));
    const input = await upload(tight, lines);
    const created = await tight.client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const batch = await finished(tight, created.id);
    expect(batch.status).toBe('completed');
    const { completed, failed } = batch.request_counts!;
    expect(completed + failed).toBe(8);
    expect(completed).toBeGreaterThan(0);
    const output = await jsonl(tight, batch.output_file_id);
    const errorsFile = await jsonl(tight, batch.error_file_id);
    expect(output.length).toBe(completed);
    expect(errorsFile.length).toBe(failed);
    for (const line of errorsFile) expect([line.response.status_code, line.response.body.error.code]).toEqual([402, 'insufficient_quota']);
    const charged = output.reduce((sum, line) => sum + parseCredits(line.response.body.usage.cost), 0n);
    await eventually(async () => expect(await balance(tight)).toBe(parseCredits('0.06') - charged), 10_000);
    expect(await balance(tight)).toBeGreaterThanOrEqual(0n);
  });

  it("an account budget's hard stop: lines past it end 402 budget_exceeded at once (not retried as a failure), uncharged, and the spend stays within it", async () => {
    // Found by the invariant fuzzer: the budget's refusal was retried as transient and ended 500 internal_error.
    const capped = await account('batch-capped', '10');
    await ctlJson(base.stack, 'budgets', 'set', capped.accountId, '--period', 'monthly', '--limit', '0.06', '--thresholds', '', '--hard-stop', '--json');
    const upstreamBefore = upstream.requests.length;
    const lines = Array.from({ length: 6 }, (_, index) => chatLine(`cap-${index}`, `capped ${index}`));
    const input = await upload(capped, lines);
    const created = await capped.client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const batch = await finished(capped, created.id);
    expect(batch.status).toBe('completed');
    const output = await jsonl(capped, batch.output_file_id);
    const errorsFile = await jsonl(capped, batch.error_file_id);
    expect(output.length + errorsFile.length).toBe(6);
    // 0.06 holds one line's 0.05 at a time: some lines are refused by the budget.
    expect(errorsFile.length).toBeGreaterThan(0);
    for (const line of errorsFile) {
      expect(line.response.status_code).toBe(402);
      expect(line.response.body.error).toMatchObject({ type: 'insufficient_quota', code: 'budget_exceeded' });
    }
    // Refused at admission: no upstream request for them.
    expect(upstream.requests.length - upstreamBefore).toBe(output.length);
    const charged = output.reduce((sum, line) => sum + parseCredits(line.response.body.usage.cost), 0n);
    expect(charged).toBeLessThanOrEqual(parseCredits('0.06'));
    await eventually(async () => expect(await balance(capped)).toBe(parseCredits('10') - charged), 10_000);
  });

  it('embeddings lines are charged at the batch input price', async () => {
    const before = await balance(owner);
    const input = await upload(owner, [
      JSON.stringify({ custom_id: 'e1', method: 'POST', url: '/v1/embeddings', body: { model: 'batchy', input: 'hello world' } }),
      JSON.stringify({ custom_id: 'e2', method: 'POST', url: '/v1/embeddings', body: { model: MODEL, input: ['a', 'b'] } }),
    ]);
    const created = await owner.client.batches.create({ input_file_id: input.id, endpoint: '/v1/embeddings', completion_window: '24h' });
    const batch = await finished(owner, created.id);
    expect(batch).toMatchObject({ status: 'completed', request_counts: { total: 2, completed: 2, failed: 0 } });
    const output = await jsonl(owner, batch.output_file_id);
    let total = 0n;
    for (const line of output) {
      expect(line.response.body.object).toBe('list');
      const expected = BigInt(line.response.body.usage.prompt_tokens) * parseCredits(BATCH_IN);
      expect(line.response.body.usage.cost).toBe(formatCredits(expected));
      total += expected;
    }
    expect(total).toBeGreaterThan(0n);
    await eventually(async () => expect(before - (await balance(owner))).toBe(total), 10_000);
  });

  it('cancel mid-batch: no new line starts, the running ones finish, only finished lines are charged', async () => {
    const before = await balance(owner);
    const upstreamBefore = upstream.requests.length;
    upstream.setFallback({ latencyMs: 700, usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    try {
      const input = await upload(owner, Array.from({ length: 12 }, (_, index) => chatLine(`slow-${index}`, `slow ${index}`)));
      const created = await owner.client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      await eventually(async () => expect((await owner.client.batches.retrieve(created.id)).request_counts?.completed).toBeGreaterThan(0), 20_000, 50);
      const cancelling = await owner.client.batches.cancel(created.id);
      expect(['cancelling', 'cancelled']).toContain(cancelling.status);
      const batch = await finished(owner, created.id);
      expect(batch.status).toBe('cancelled');
      expect(batch.cancelled_at).not.toBeNull();
      const done = batch.request_counts!.completed;
      expect(done).toBeLessThan(12);
      const output = await jsonl(owner, batch.output_file_id);
      expect(output.length).toBe(done);
      // Only what ran reached the upstream, and only that is charged.
      expect(upstream.requests.length - upstreamBefore).toBe(done);
      await eventually(async () => expect(before - (await balance(owner))).toBe(LINE_COST * BigInt(done)), 10_000);
      // Cancelling a finished batch answers it as it is.
      expect((await owner.client.batches.cancel(created.id)).status).toBe('cancelled');
    } finally {
      upstream.setFallback({ usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    }
  });

  it("batches are the account's own: another account's id is a 404 on get and cancel, and never listed; its files cannot be a batch's input", async () => {
    const input = await upload(owner, [chatLine('mine', 'x')]);
    const created = await owner.client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    await expect(stranger.client.batches.retrieve(created.id)).rejects.toMatchObject({ status: 404 });
    await expect(stranger.client.batches.cancel(created.id)).rejects.toMatchObject({ status: 404 });
    expect((await stranger.client.batches.list()).data.map((batch) => batch.id)).not.toContain(created.id);
    expect((await owner.client.batches.list()).data.map((batch) => batch.id)).toContain(created.id);
    await expect(stranger.client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' })).rejects.toMatchObject({ status: 404 });
    // Bad requests are 400s in the OpenAI envelope.
    await expect(owner.client.batches.create({ input_file_id: input.id, endpoint: '/v1/completions' as '/v1/chat/completions', completion_window: '24h' })).rejects.toMatchObject({ status: 400 });
    await expect(owner.client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '48h' as '24h' })).rejects.toMatchObject({ status: 400 });
    const userData = await owner.client.files.create({ file: await toFile(Buffer.from('{}\n'), 'x.jsonl'), purpose: 'user_data' });
    await expect(owner.client.batches.create({ input_file_id: userData.id, endpoint: '/v1/chat/completions', completion_window: '24h' })).rejects.toMatchObject({ status: 400 });
    await finished(owner, created.id);
  });
});
