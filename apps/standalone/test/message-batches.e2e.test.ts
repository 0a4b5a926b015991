import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { formatCredits, parseCredits, type PromiseClient } from '@gateway/platform';
import type { LedgerServiceClient } from '@gateway/proto';
import { eventually, type FakeUpstream } from '@gateway/testing';
import { ctlJson, type StackOnCatalog } from './configured-stack.js';
import { startBatchStack, type BatchStack } from './batches-stack.js';
import { BATCH_IN, COMPLETION_TOKENS, LINE_COST, MODEL, PROMPT_TOKENS } from './batches-harness.js';

// Also the OpenAI Batch lines of /v1/responses and /v1/moderations (issue 41 item 3), with the openai client.
//
// Anthropic Message Batches through the whole stack with the official `@anthropic-ai/sdk` client:
// create (every request validated and converted before anything is stored), retrieve, list (paged),
// cancel, results() (JSONL), delete; the lines run by the jobs service's one batch runner (Ledger.Admit
// per line at the batch prices, Router.Chat, the ledger's settlement). Money is checked exactly.

interface Account { accountId: string; anthropic: Anthropic; openai: OpenAI }

const ENDED_WITHIN_MS = 30_000;

describe('Anthropic Message Batches with the @anthropic-ai/sdk client, at batch prices', () => {
  let batches: BatchStack;
  let upstream: FakeUpstream;
  let base: StackOnCatalog;
  let ledger: PromiseClient<LedgerServiceClient>;
  let owner: Account;
  let stranger: Account;

  async function account(name: string, credits: string): Promise<Account> {
    const { accountId, apiKey } = await batches.account(name, credits);
    return {
      accountId,
      anthropic: new Anthropic({ baseURL: base.stack.url, apiKey, maxRetries: 0, timeout: 60_000 }),
      openai: new OpenAI({ baseURL: `${base.stack.url}/v1`, apiKey, maxRetries: 0, timeout: 60_000 }),
    };
  }

  const balance = (who: Account) => batches.balance(who.accountId);
  const request = (customId: string, text: string, extra: Record<string, unknown> = {}) => ({
    custom_id: customId,
    params: { model: MODEL, max_tokens: 50, messages: [{ role: 'user' as const, content: text }], ...extra },
  });

  async function ended(who: Account, id: string) {
    let batch = await who.anthropic.messages.batches.retrieve(id);
    await eventually(async () => {
      batch = await who.anthropic.messages.batches.retrieve(id);
      expect(batch.processing_status).toBe('ended');
    }, ENDED_WITHIN_MS, 100);
    return batch;
  }

  async function results(who: Account, id: string) {
    const entries: Anthropic.Messages.Batches.MessageBatchIndividualResponse[] = [];
    for await (const entry of await who.anthropic.messages.batches.results(id)) entries.push(entry);
    return entries;
  }

  beforeAll(async () => {
    batches = await startBatchStack('msgbatches', 'message-batches-e2e-secret-0123456789', 'chat.completions, messages, responses, moderations');
    ({ upstream, base, ledger } = batches);
    owner = await account('msgbatch-owner', '10');
    stranger = await account('msgbatch-stranger', '10');
  }, 120_000);

  afterAll(() => batches?.stop());

  it('runs every request once at the batch price; results() gives Messages answers charged exactly what the ledger took; then delete', async () => {
    const before = await balance(owner);
    const upstreamBefore = upstream.requests.length;
    const created = await owner.anthropic.messages.batches.create({
      requests: [request('q-0', 'first'), request('q-1', 'second', { system: 'Be brief.', temperature: 0.3 }), request('q-2', 'third')],
    });
    expect(created).toMatchObject({
      type: 'message_batch', processing_status: 'in_progress', results_url: null, ended_at: null, archived_at: null, cancel_initiated_at: null,
    });
    expect(created.id).toMatch(/^msgbatch_/);
    expect(Date.parse(created.expires_at) - Date.parse(created.created_at)).toBe(24 * 3600 * 1000);
    expect(created.request_counts.processing + created.request_counts.succeeded).toBe(3);

    const batch = await ended(owner, created.id);
    expect(batch.request_counts).toEqual({ processing: 0, succeeded: 3, errored: 0, canceled: 0, expired: 0 });
    expect(batch.ended_at).not.toBeNull();
    expect(batch.results_url).toBe(`${base.stack.url}/v1/messages/batches/${created.id}/results`);

    const entries = await results(owner, created.id);
    expect(entries.map((entry) => entry.custom_id)).toEqual(['q-0', 'q-1', 'q-2']);
    let charged = 0n;
    for (const entry of entries) {
      expect(entry.result.type).toBe('succeeded');
      if (entry.result.type !== 'succeeded') continue;
      const message = entry.result.message;
      expect(message).toMatchObject({ type: 'message', role: 'assistant', model: MODEL, usage: { input_tokens: PROMPT_TOKENS, output_tokens: COMPLETION_TOKENS } });
      expect(message.content).toEqual([{ type: 'text', text: 'Hello from the fake upstream.' }]);
      const cost = (message.usage as unknown as { cost: string }).cost;
      expect(cost).toBe(formatCredits(LINE_COST));
      charged += parseCredits(cost);
    }
    // Each request reached the upstream once, with what it asked (system turn, temperature, max tokens).
    const sent = upstream.requests.slice(upstreamBefore);
    expect(sent.length).toBe(3);
    const second = sent.find((entry) => JSON.stringify(entry.body.messages).includes('second'))!;
    expect(second.body).toMatchObject({ model: 'batchy-upstream', temperature: 0.3 });
    expect(second.body.messages[0]).toMatchObject({ role: 'system' });
    // The ledger took exactly the sum of the results' costs, at the batch price (once per request).
    await eventually(async () => expect(before - (await balance(owner))).toBe(charged), 10_000);
    expect(charged).toBe(LINE_COST * 3n);

    // The list shows it (Anthropic's page shape), the OpenAI Batch list does not, gatewayctl shows the kind.
    const page = await owner.anthropic.messages.batches.list({ limit: 20 });
    expect(page.data.map((entry) => entry.id)).toContain(created.id);
    expect((await owner.openai.batches.list()).data.map((entry) => entry.id)).not.toContain(created.id);
    const listed = (await ctlJson(base.stack, 'batches', 'list', owner.accountId, '--json')) as unknown as { batches: Record<string, unknown>[] };
    expect(listed.batches.find((entry) => entry.batch_id === created.id)).toMatchObject({ kind: 'messages', status: 'completed', completed: 3, cost: formatCredits(charged) });

    const deleted = await owner.anthropic.messages.batches.delete(created.id);
    expect(deleted).toEqual({ id: created.id, type: 'message_batch_deleted' });
    await expect(owner.anthropic.messages.batches.retrieve(created.id)).rejects.toBeInstanceOf(Anthropic.NotFoundError);
  });

  it('a malformed request refuses the whole batch with a 400 naming it, before anything is stored or run', async () => {
    const before = await balance(owner);
    const upstreamBefore = upstream.requests.length;
    const listedBefore = (await owner.anthropic.messages.batches.list({ limit: 100 })).data.length;
    const refusals: [unknown[], RegExp][] = [
      // max_tokens missing in the second request.
      [[request('a', 'x'), { custom_id: 'b', params: { model: MODEL, messages: [{ role: 'user', content: 'x' }] } }], /requests\.1\.params/],
      [[request('a', 'x'), request('a', 'y')], /duplicate custom_id/],
      [[request('a', 'x', { model: 'testco/nope' })], /requests\.0\.params/],
      [[request('a', 'x', { stream: true })], /requests\.0\.params.*stream/],
      [[request('bad id!', 'x')], /custom_id/],
      [[], /requests/],
    ];
    for (const [requests, message] of refusals) {
      const refusal = await owner.anthropic.messages.batches.create({ requests } as never).then(() => undefined, (error: unknown) => error);
      expect(refusal).toBeInstanceOf(Anthropic.BadRequestError);
      const error = refusal as InstanceType<typeof Anthropic.BadRequestError>;
      expect((error.error as { type: string; error: { type: string; message: string } }).error.type).toBe('invalid_request_error');
      expect((error.error as { error: { message: string } }).error.message).toMatch(message);
    }
    expect(upstream.requests.length).toBe(upstreamBefore);
    expect((await owner.anthropic.messages.batches.list({ limit: 100 })).data.length).toBe(listedBefore);
    expect(await balance(owner)).toBe(before);
  });

  it('an account with no credits: every request ends errored (billing_error), nothing charged, nothing reaches the upstream', async () => {
    const broke = await account('msgbatch-broke', '0');
    const upstreamBefore = upstream.requests.length;
    const created = await broke.anthropic.messages.batches.create({ requests: [request('a', 'one'), request('b', 'two')] });
    const batch = await ended(broke, created.id);
    expect(batch.request_counts).toEqual({ processing: 0, succeeded: 0, errored: 2, canceled: 0, expired: 0 });
    const entries = await results(broke, created.id);
    expect(entries.map((entry) => entry.custom_id)).toEqual(['a', 'b']);
    for (const entry of entries) {
      expect(entry.result).toMatchObject({ type: 'errored', error: { type: 'error', error: { type: 'billing_error' } } });
    }
    expect(upstream.requests.length).toBe(upstreamBefore);
    expect(await balance(broke)).toBe(0n);
  });

  it('cancel mid-batch: no new request starts, the running ones finish, the rest end canceled, only finished ones are charged', async () => {
    const before = await balance(owner);
    const upstreamBefore = upstream.requests.length;
    upstream.setFallback({ latencyMs: 700, usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    try {
      const created = await owner.anthropic.messages.batches.create({ requests: Array.from({ length: 10 }, (_, index) => request(`slow-${index}`, `slow ${index}`)) });
      await eventually(async () => expect((await owner.anthropic.messages.batches.retrieve(created.id)).request_counts.succeeded).toBeGreaterThan(0), 20_000, 50);
      // Not ended: neither results nor delete yet.
      const early = await owner.anthropic.messages.batches.delete(created.id).then(() => undefined, (error: unknown) => error);
      expect(early).toBeInstanceOf(Anthropic.BadRequestError);
      const canceling = await owner.anthropic.messages.batches.cancel(created.id);
      expect(['canceling', 'ended']).toContain(canceling.processing_status);
      expect(canceling.cancel_initiated_at).not.toBeNull();
      await ended(owner, created.id);
      // On a loaded machine a request whose lease lapsed may still be in flight when the batch ends; it is
      // recorded (and charged) when it finishes. What must hold, once it settles: every request that reached
      // the upstream is a succeeded result charged once, every other one is canceled and charged nothing.
      await eventually(async () => {
        const batch = await owner.anthropic.messages.batches.retrieve(created.id);
        const { succeeded, canceled, errored, processing } = batch.request_counts;
        expect([processing, errored, succeeded + canceled]).toEqual([0, 0, 10]);
        expect(canceled).toBeGreaterThan(0);
        const entries = await results(owner, created.id);
        expect(entries.length).toBe(10);
        expect(entries.filter((entry) => entry.result.type === 'succeeded').length).toBe(succeeded);
        expect(entries.filter((entry) => entry.result.type === 'canceled').length).toBe(canceled);
        expect(upstream.requests.length - upstreamBefore).toBe(succeeded);
        expect(before - (await balance(owner))).toBe(LINE_COST * BigInt(succeeded));
      }, 15_000, 200);
      // Cancelling an ended batch answers it as it is.
      expect((await owner.anthropic.messages.batches.cancel(created.id)).processing_status).toBe('ended');
    } finally {
      upstream.setFallback({ usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    }
  });

  it("batches are the account's own: another account's id is a 404 not_found_error on every route, and never listed", async () => {
    const created = await owner.anthropic.messages.batches.create({ requests: [request('mine', 'x')] });
    await ended(owner, created.id);
    const foreign = stranger.anthropic.messages.batches;
    for (const attempt of [() => foreign.retrieve(created.id), () => foreign.cancel(created.id), () => foreign.delete(created.id), () => foreign.results(created.id)]) {
      const refusal = await attempt().then(() => undefined, (error: unknown) => error);
      expect(refusal).toBeInstanceOf(Anthropic.NotFoundError);
      expect((refusal as InstanceType<typeof Anthropic.NotFoundError>).error).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
    }
    // The results URL itself, asked with the stranger's key.
    const direct = await fetch(`${base.stack.url}/v1/messages/batches/${created.id}/results`, { headers: { 'x-api-key': stranger.anthropic.apiKey! } });
    expect(direct.status).toBe(404);
    expect((await stranger.anthropic.messages.batches.list()).data.map((entry) => entry.id)).not.toContain(created.id);
    // An OpenAI batch route does not answer for a message batch either.
    await expect(owner.openai.batches.retrieve(created.id)).rejects.toMatchObject({ status: 404 });
    // Still there for its owner.
    expect((await owner.anthropic.messages.batches.retrieve(created.id)).id).toBe(created.id);
  });

  it('list pages newest first with has_more, first_id, last_id; after_id and before_id move between pages; the SDK auto-pages', async () => {
    const pager = await account('msgbatch-pager', '10');
    const ids: string[] = [];
    for (let index = 0; index < 5; index++) ids.push((await pager.anthropic.messages.batches.create({ requests: [request(`p${index}`, `page ${index}`)] })).id);
    const newestFirst = [...ids].reverse();
    const first = await pager.anthropic.messages.batches.list({ limit: 2 });
    expect(first.data.map((entry) => entry.id)).toEqual(newestFirst.slice(0, 2));
    expect(first.has_more).toBe(true);
    expect([first.first_id, first.last_id]).toEqual([newestFirst[0], newestFirst[1]]);
    const second = await pager.anthropic.messages.batches.list({ limit: 2, after_id: first.last_id! });
    expect(second.data.map((entry) => entry.id)).toEqual(newestFirst.slice(2, 4));
    const back = await pager.anthropic.messages.batches.list({ limit: 2, before_id: second.first_id! });
    expect(back.data.map((entry) => entry.id)).toEqual(newestFirst.slice(0, 2));
    expect(back.has_more).toBe(false);
    const all: string[] = [];
    for await (const entry of pager.anthropic.messages.batches.list({ limit: 2 })) all.push(entry.id);
    expect(all).toEqual(newestFirst);
    await expect(pager.anthropic.messages.batches.list({ limit: 2, after_id: 'msgbatch_000000000000000000000000' })).rejects.toBeInstanceOf(Anthropic.BadRequestError);
    for (const id of ids) await ended(pager, id);
  });

  describe('OpenAI Batch lines for /v1/responses and /v1/moderations', () => {
    async function runOpenAIBatch(who: Account, endpoint: '/v1/responses' | '/v1/moderations', lines: object[]) {
      const text = lines.map((line) => JSON.stringify(line)).join('\n');
      const file = await who.openai.files.create({ file: new File([text], 'lines.jsonl'), purpose: 'batch' });
      const created = await who.openai.batches.create({ input_file_id: file.id, endpoint, completion_window: '24h' });
      let batch = created;
      await eventually(async () => {
        batch = await who.openai.batches.retrieve(created.id);
        expect(['completed', 'failed', 'cancelled', 'expired']).toContain(batch.status);
      }, ENDED_WITHIN_MS, 100);
      const read = async (id: string | null | undefined) => (id ? (await (await who.openai.files.content(id)).text()).split('\n').filter(Boolean).map((line) => JSON.parse(line)) : []);
      return { batch, output: await read(batch.output_file_id), errors: await read(batch.error_file_id) };
    }

    it('responses lines run on the chat path at the batch price and answer OpenAI response objects', async () => {
      const before = await balance(owner);
      const upstreamBefore = upstream.requests.length;
      const line = (id: string, body: Record<string, unknown>) => ({ custom_id: id, method: 'POST', url: '/v1/responses', body: { model: MODEL, ...body } });
      const { batch, output } = await runOpenAIBatch(owner, '/v1/responses', [
        line('r-0', { input: 'hello', instructions: 'Be brief.', max_output_tokens: 40, temperature: 0.2 }),
        line('r-1', { input: [{ role: 'user', content: [{ type: 'input_text', text: 'one' }] }, { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' }, { type: 'function_call_output', call_id: 'c1', output: 'done' }] }),
      ]);
      expect(batch).toMatchObject({ status: 'completed', request_counts: { total: 2, completed: 2, failed: 0 } });
      expect(output.map((entry) => entry.custom_id)).toEqual(['r-0', 'r-1']);
      let charged = 0n;
      for (const entry of output) {
        const body = entry.response.body;
        expect(body).toMatchObject({ object: 'response', status: 'completed', model: MODEL, usage: { input_tokens: PROMPT_TOKENS, output_tokens: COMPLETION_TOKENS } });
        expect(body.output[0]).toMatchObject({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hello from the fake upstream.' }] });
        expect(body.usage.cost).toBe(formatCredits(LINE_COST));
        charged += parseCredits(body.usage.cost);
      }
      const sent = upstream.requests.slice(upstreamBefore);
      expect(sent.length).toBe(2);
      const first = sent.find((entry) => JSON.stringify(entry.body.messages).includes('hello'))!;
      expect(first.body.messages[0]).toMatchObject({ role: 'system', content: 'Be brief.' });
      expect(first.body.temperature).toBe(0.2);
      const second = sent.find((entry) => JSON.stringify(entry.body.messages).includes('done'))!;
      expect(second.body.messages.map((message: { role: string }) => message.role)).toEqual(['user', 'assistant', 'tool']);
      await eventually(async () => expect(before - (await balance(owner))).toBe(charged), 10_000);
    });

    it('a responses line with what a batch cannot carry fails the batch at validation, naming it; nothing runs', async () => {
      const upstreamBefore = upstream.requests.length;
      const line = (id: string, body: Record<string, unknown>) => ({ custom_id: id, method: 'POST', url: '/v1/responses', body: { model: MODEL, input: 'x', ...body } });
      const { batch } = await runOpenAIBatch(owner, '/v1/responses', [
        line('ok', {}),
        line('stored', { store: true }),
        line('chained', { previous_response_id: 'resp_1' }),
        line('search', { tools: [{ type: 'web_search' }] }),
      ]);
      expect(batch.status).toBe('failed');
      expect(batch.errors?.data?.map((error) => [error.line, error.param])).toEqual([[2, 'body.store'], [3, 'body.previous_response_id'], [4, 'body.tools.0.type']]);
      expect(upstream.requests.length).toBe(upstreamBefore);
    });

    it('moderations lines answer moderation objects, charged at the batch input price', async () => {
      const before = await balance(owner);
      const line = (id: string, input: unknown) => ({ custom_id: id, method: 'POST', url: '/v1/moderations', body: { model: MODEL, input } });
      const { batch, output } = await runOpenAIBatch(owner, '/v1/moderations', [line('m-0', 'a calm sentence'), line('m-1', ['plan an attack', 'tea'])]);
      expect(batch).toMatchObject({ status: 'completed', request_counts: { total: 2, completed: 2, failed: 0 } });
      expect(output[0].response.body.results.map((result: { flagged: boolean }) => result.flagged)).toEqual([false]);
      expect(output[1].response.body.results.map((result: { flagged: boolean }) => result.flagged)).toEqual([true, false]);
      let charged = 0n;
      for (const entry of output) {
        const usage = entry.response.body.usage;
        expect(usage.cost).toBe(formatCredits(BigInt(usage.prompt_tokens) * parseCredits(BATCH_IN)));
        charged += parseCredits(usage.cost);
      }
      expect(charged).toBeGreaterThan(0n);
      await eventually(async () => expect(before - (await balance(owner))).toBe(charged), 10_000);
    });
  });
});
