import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI, { toFile } from 'openai';
import { parseCredits, type PromiseClient } from '@gateway/platform';
import type { LedgerServiceClient } from '@gateway/proto';
import { eventually, type FakeUpstream } from '@gateway/testing';
import { catalogYaml, tokenPricing, type CatalogModel } from './catalog-yaml.js';
import { ctlJson, type StackOnCatalog } from './configured-stack.js';
import { settledResponse, startBackgroundStack, type BackgroundStack } from './background-harness.js';

// Background responses (`background: true`, docs/stored-responses.md) end to end: the edge answers
// `queued` at once, the jobs service runs the request through routing (admission, the provider, usage
// events) and the real `openai` client polls it with responses.retrieve and stops it with
// responses.cancel. A second account plays the hostile caller; a 0-credit account's run fails with 402.

const MODEL = 'testco/bg';
const PROMPT_TOKENS = 12;
const COMPLETION_TOKENS = 7;
const PRICE_IN = '0.000001';
const PRICE_OUT = '0.000002';
const COST = BigInt(PROMPT_TOKENS) * parseCredits(PRICE_IN) + BigInt(COMPLETION_TOKENS) * parseCredits(PRICE_OUT);
const MAX_ACTIVE = 2;

const HANGING = 'testco/bg-hang';

function catalog(upstream: FakeUpstream, hangingUrl: string): string {
  const model = (id: string, provider: string, upstreamModel: string): CatalogModel => ({
    id,
    contextWindow: 8000,
    maxOutputTokens: 100,
    supportedParameters: ['temperature', 'max_completion_tokens'],
    pricing: tokenPricing(PRICE_IN, PRICE_OUT),
    offers: [{ provider, upstreamModel, endpoints: ['chat.completions', 'responses'] }],
  });
  return catalogYaml({
    providers: [
      { id: 'upstream-one', kind: 'openai', url: upstream.url, keyEnv: 'BG_E2E_KEY' },
      { id: 'upstream-hang', kind: 'openai', url: hangingUrl, keyEnv: 'BG_E2E_KEY' },
    ],
    models: [model(MODEL, 'upstream-one', 'bg-upstream'), model(HANGING, 'upstream-hang', 'hang-upstream')],
  });
}

describe('background responses, end to end', () => {
  let running: BackgroundStack;
  let upstream: FakeUpstream;
  /** A provider that never answers and notes when the gateway hung up on it. */
  let hanging: Server;
  const hangingCalls = { received: 0, closed: 0 };
  let base: StackOnCatalog;
  let ledger: PromiseClient<LedgerServiceClient>;
  let accountId: string;
  let client: OpenAI;
  let stranger: OpenAI;
  let broke: { client: OpenAI; accountId: string };

  const balance = (id: string) => running.balance(id);
  const charges = (id: string) => running.charges(id, MODEL);
  const settled = (response: OpenAI.Responses.Response, by: OpenAI = client) => settledResponse(by, response.id);

  beforeAll(async () => {
    hanging = createServer((request, response) => {
      hangingCalls.received++;
      request.resume();
      response.on('close', () => hangingCalls.closed++);
    });
    await new Promise<void>((resolve) => hanging.listen(0, '127.0.0.1', resolve));
    const hangingUrl = `http://127.0.0.1:${(hanging.address() as AddressInfo).port}/v1`;
    running = await startBackgroundStack('background', 'bg', (fake) => catalog(fake, hangingUrl), {
      keyHashSecret: 'bg-e2e-secret-bg-e2e-secret-0123456789',
      providerSecrets: { BG_E2E_KEY: 'sk-bg-e2e' },
      // One run at a time per replica: background runs and batch lines share it (the last test).
      jobs: { batches: { runner: { pollIntervalMs: 100, leaseMs: 3_000, concurrency: 1 } }, background: { maxActivePerAccount: MAX_ACTIVE } },
    });
    ({ upstream, base, ledger, accountId, client, stranger } = running);
    broke = await running.account('bg-broke', '0');
  }, 120_000);

  afterAll(async () => {
    await running?.stop();
    hanging?.closeAllConnections();
    await new Promise((resolve) => hanging?.close(resolve));
  });

  beforeEach(() => upstream.reset());

  it('answers queued at once, runs it in the jobs service, and retrieve polls it to completed with output and usage, charged once', async () => {
    upstream.setFallback({ latencyMs: 300, text: 'Done in the background.', usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    const before = await balance(accountId);
    const chargesBefore = await charges(accountId);
    const created = await client.responses.create({ model: MODEL, input: 'Work on this later.', background: true });
    expect(created).toMatchObject({ object: 'response', status: 'queued', background: true, store: true, output: [], usage: null, error: null });
    expect(created.id).toMatch(/^resp_/);
    const done = await settled(created);
    expect(done).toMatchObject({ id: created.id, status: 'completed', background: true, model: MODEL });
    expect(done.output_text).toBe('Done in the background.');
    expect(done.usage).toMatchObject({ input_tokens: PROMPT_TOKENS, output_tokens: COMPLETION_TOKENS, total_tokens: PROMPT_TOKENS + COMPLETION_TOKENS });
    expect(parseCredits((done.usage as unknown as { cost: string }).cost)).toBe(COST);
    // The provider got the request once, as routing sends any responses request.
    expect(upstream.requests).toHaveLength(1);
    expect(JSON.stringify(upstream.requests[0]!.body.messages)).toContain('Work on this later.');
    // Exactly one charge, of the answer's cost.
    await eventually(async () => expect(await charges(accountId)).toBe(chargesBefore + 1), 15_000);
    await eventually(async () => expect(before - (await balance(accountId))).toBe(COST), 15_000);
    // Stored: its input items list, and a retrieve again answers the same object.
    const items = await client.responses.inputItems.list(created.id);
    expect(items.data).toHaveLength(1);
    expect((await client.responses.retrieve(created.id)).output).toEqual(done.output);
    // A finished response's cancel answers it as it is.
    expect((await client.responses.cancel(created.id)).status).toBe('completed');
    // A continuation carries its input and output on.
    upstream.setFallback({ text: 'Continued.' });
    const next = await client.responses.create({ model: MODEL, previous_response_id: created.id, input: 'And then?' });
    expect(next.output_text).toBe('Continued.');
    const sent = (upstream.requests.at(-1)!.body.messages as { role: string; content: unknown }[]).map((message) => [message.role, JSON.stringify(message.content)]);
    expect(sent.map(([role]) => role)).toEqual(['user', 'assistant', 'user']);
    expect(sent[1]![1]).toContain('Done in the background.');
  }, 60_000);

  it("another account's id is 404 for retrieve and cancel; a synchronous response's cancel is 400; store false is 400", async () => {
    upstream.setFallback({ latencyMs: 50 });
    const mine = await client.responses.create({ model: MODEL, input: 'mine', background: true });
    await expect(stranger.responses.retrieve(mine.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(stranger.responses.cancel(mine.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(client.responses.cancel('resp_doesnotexist')).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    expect((await settled(mine)).status).toBe('completed');

    const synchronous = await client.responses.create({ model: MODEL, input: 'now' });
    const refused = await client.responses.cancel(synchronous.id).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).message).toContain('Cannot cancel a synchronous response');

    const unstored = await client.responses.create({ model: MODEL, input: 'x', background: true, store: false }).catch((error: unknown) => error);
    expect(unstored).toBeInstanceOf(OpenAI.BadRequestError);
    expect((unstored as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('body.store');
  }, 60_000);

  it('a 0-credit account: the response is queued, then ends failed with a 402-shaped error, and nothing is charged', async () => {
    upstream.setFallback({});
    const created = await broke.client.responses.create({ model: MODEL, input: 'no money', background: true });
    expect(created.status).toBe('queued');
    const ended = await settled(created, broke.client);
    expect(ended.status).toBe('failed');
    expect(ended.error).toMatchObject({ code: 'insufficient_quota' });
    expect(ended.output).toEqual([]);
    expect(upstream.requests).toHaveLength(0);
    expect(await balance(broke.accountId)).toBe(0n);
    expect(await charges(broke.accountId)).toBe(0);
  }, 60_000);

  it("an account past its budget's hard stop: the run ends failed with 402-shaped budget_exceeded (not a server_error), nothing charged, nothing sent", async () => {
    // Found by the invariant fuzzer (background-fuzz.ts): the runner classified the ledger's budget refusal as a 500.
    upstream.setFallback({});
    const created = await ctlJson(base.stack, 'accounts', 'create', '--name', 'bg-budgeted', '--credits', '10', '--tier', 'tier-1', '--json');
    const apiKey = (await ctlJson(base.stack, 'keys', 'create', created.account_id!, '--name', 'bg-budgeted-key', '--json')).api_key!;
    const budget = await fetch(`${base.stack.url}/v1/account/budgets/account`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${created.provisioning_key!}`, 'content-type': 'application/json' },
      body: JSON.stringify({ period: 'monthly', limit: '0.000001', hard_stop: true }),
    });
    expect(budget.status).toBe(200);
    const budgeted = new OpenAI({ baseURL: `${base.stack.url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
    const queued = await budgeted.responses.create({ model: MODEL, input: 'over budget', background: true });
    const ended = await settled(queued, budgeted);
    expect(ended.status).toBe('failed');
    expect(ended.error).toMatchObject({ code: 'budget_exceeded' });
    expect(upstream.requests).toHaveLength(0);
    expect(await balance(created.account_id!)).toBe(parseCredits('10'));
  }, 60_000);

  it('cancel stops a running response (the provider call is aborted), and the per-account cap refuses more than it with 429', async () => {
    // The provider never answers: the runs stay in_progress until cancelled.
    upstream.setFallback({ stall: true });
    const first = await client.responses.create({ model: HANGING, input: 'long one', background: true });
    const second = await client.responses.create({ model: MODEL, input: 'long two', background: true });
    const over = await client.responses.create({ model: MODEL, input: 'one too many', background: true }).catch((error: unknown) => error);
    expect(over).toBeInstanceOf(OpenAI.RateLimitError);
    expect((over as InstanceType<typeof OpenAI.RateLimitError>).code).toBe('background_responses_limit');
    await eventually(async () => expect((await client.responses.retrieve(first.id)).status).toBe('in_progress'), 15_000, 100);
    await eventually(async () => expect(hangingCalls.received).toBe(1), 15_000, 50);
    expect(hangingCalls.closed).toBe(0);
    const cancelled = await client.responses.cancel(first.id);
    expect(cancelled).toMatchObject({ id: first.id, status: 'cancelled', background: true, output: [] });
    // The provider call behind the run was hung up on (not left to run to its timeout), and not tried again.
    await eventually(async () => expect(hangingCalls.closed).toBe(1), 5_000, 50);
    expect(hangingCalls.received).toBe(1);
    // Charged what the provider had — the prompt, once sent (routing's estimate) — and no output, once.
    await eventually(async () => {
      const rows = (await ledger.getActivity({ accountId, days: 30, keyId: '' })).rows.filter((row) => row.modelId === HANGING);
      expect(rows.map((row) => row.requests)).toEqual([1]);
      expect(rows[0]!.usage).toMatchObject({ outputTokens: 0 });
      expect(parseCredits(rows[0]!.credits)).toBe(BigInt(rows[0]!.usage!.inputTokens) * parseCredits(PRICE_IN));
    }, 15_000, 100);
    const queuedCancel = await client.responses.cancel(second.id);
    expect(queuedCancel.status).toBe('cancelled');
    // The cap counts queued and running ones only: room again.
    upstream.setFallback({ latencyMs: 20 });
    const third = await client.responses.create({ model: MODEL, input: 'now there is room', background: true });
    expect((await settled(third)).status).toBe('completed');
    // Cancelled stays cancelled (a run that ended late records nothing over it).
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect((await client.responses.retrieve(first.id)).status).toBe('cancelled');
    expect((await client.responses.retrieve(second.id)).status).toBe('cancelled');
  }, 60_000);

  it('background runs and batch lines share one budget per replica: a batch line waits while a background run holds the only slot', async () => {
    upstream.setFallback({ latencyMs: 20, usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    const heldBefore = hangingCalls.received;
    const holding = await client.responses.create({ model: HANGING, input: 'hold the slot', background: true });
    await eventually(async () => expect(hangingCalls.received).toBe(heldBefore + 1), 15_000, 50);
    const line = JSON.stringify({ custom_id: 'only', method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, messages: [{ role: 'user', content: 'batch line' }] } });
    const input = await client.files.create({ file: await toFile(Buffer.from(`${line}\n`), 'shared-budget.jsonl'), purpose: 'batch' });
    const batch = await client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    await eventually(async () => expect((await client.batches.retrieve(batch.id)).status).toBe('in_progress'), 15_000, 100);
    // The slot is the background run's: the line does not start.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(upstream.requests).toHaveLength(0);
    expect((await client.batches.retrieve(batch.id)).request_counts?.completed).toBe(0);
    await client.responses.cancel(holding.id);
    await eventually(async () => expect((await client.batches.retrieve(batch.id)).status).toBe('completed'), 30_000, 100);
    expect(upstream.requests).toHaveLength(1);
  }, 60_000);
});
