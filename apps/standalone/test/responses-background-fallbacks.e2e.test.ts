import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createClient, parseCredits, type PromiseClient } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { eventually, startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { catalogYaml, tokenPricing, type CatalogModel } from './catalog-yaml.js';
import { startStackOnCatalog, type StackOnCatalog } from './configured-stack.js';
import { openAiAccount, settledResponse } from './background-harness.js';

// Background responses with model fallbacks and provider preferences (OpenRouter's `models` and
// `provider`; docs/stored-responses.md): the jobs service hands routing the request with its choices,
// so a run walks them as an interactive request does. The answer, polled or streamed, names the model
// that served; the charge is exact at that model's prices; a 0-credit key whose first model is free but
// whose fallback is paid is refused before any provider is asked (the hold covers every model left).

const PRIMARY = 'testco/bg-primary';
const BACKUP = 'testco/bg-backup';
const DUAL = 'testco/bg-dual';
const FREE = 'testco/bg-free';
const USAGE = { prompt_tokens: 11, completion_tokens: 7 };
/** 11 × 0.000003 + 7 × 0.000005 credits, the backup's prices. */
const BACKUP_COST = 11n * parseCredits('0.000003') + 7n * parseCredits('0.000005');
/** 11 × 0.000001 + 7 × 0.000002 credits, the dual model's prices. */
const DUAL_COST = 11n * parseCredits('0.000001') + 7n * parseCredits('0.000002');

function catalog(one: FakeUpstream, two: FakeUpstream): string {
  const model = (id: string, providers: string[], pricing?: string): CatalogModel => ({
    id,
    contextWindow: 8000,
    maxOutputTokens: 100,
    supportedParameters: ['temperature', 'max_completion_tokens'],
    ...(pricing === undefined ? {} : { pricing }),
    offers: providers.map((provider) => ({ provider, upstreamModel: `${id.split('/')[1]}-at-${provider}`, endpoints: ['chat.completions', 'responses'] })),
  });
  return catalogYaml({
    providers: [
      { id: 'upstream-one', kind: 'openai', url: one.url, keyEnv: 'BG_FALLBACK_KEY' },
      { id: 'upstream-two', kind: 'openai', url: two.url, keyEnv: 'BG_FALLBACK_KEY' },
    ],
    models: [
      model(PRIMARY, ['upstream-one'], tokenPricing('0.000001', '0.000002')),
      model(BACKUP, ['upstream-two'], tokenPricing('0.000003', '0.000005')),
      model(DUAL, ['upstream-one', 'upstream-two'], tokenPricing('0.000001', '0.000002')),
      model(FREE, ['upstream-one']),
    ],
  });
}

describe('background responses with model fallbacks and provider preferences', () => {
  let one: FakeUpstream;
  let two: FakeUpstream;
  let base: StackOnCatalog;
  let ledger: PromiseClient<LedgerServiceClient>;
  let payer: { accountId: string; client: OpenAI };
  let broke: { accountId: string; client: OpenAI };

  const balance = async (accountId: string) => parseCredits((await ledger.getBalance({ accountId })).balance);

  beforeAll(async () => {
    [one, two] = await Promise.all([startFakeUpstream(), startFakeUpstream()]);
    base = await startStackOnCatalog('background-fallbacks', catalog(one, two), {
      keyHashSecret: 'bg-fallback-secret-bg-fallback-secret-0123',
      providerSecrets: { BG_FALLBACK_KEY: 'sk-bg-fallback' },
      jobs: { batches: { runner: { pollIntervalMs: 100, leaseMs: 3_000, concurrency: 2 } } },
    });
    ledger = createClient(LedgerServiceClient, LedgerServiceService, base.stack.addresses.ledger);
    payer = await openAiAccount(base.stack, 'bg-fallback-payer', '10');
    broke = await openAiAccount(base.stack, 'bg-fallback-broke', '0');
  }, 120_000);

  afterAll(async () => {
    ledger?.close();
    await base?.stop();
    await Promise.all([one?.close(), two?.close()]);
  });

  beforeEach(() => {
    one.reset();
    two.reset();
    one.setFallback({ usage: USAGE, text: 'from one' });
    two.setFallback({ usage: USAGE, text: 'from two' });
  });

  it('the first model’s provider fails: the run falls back, the response names the backup, charged once at its prices', async () => {
    one.setFallback({ status: 503 });
    const before = await balance(payer.accountId);
    const created = await payer.client.responses.create({ model: PRIMARY, models: [BACKUP], input: 'Work on this later.', background: true } as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    expect(created).toMatchObject({ status: 'queued', model: PRIMARY });
    const done = await settledResponse(payer.client, created.id);
    expect(done).toMatchObject({ status: 'completed', model: BACKUP });
    expect(done.output_text).toBe('from two');
    expect(parseCredits((done.usage as unknown as { cost: string }).cost)).toBe(BACKUP_COST);
    expect(two.requests).toHaveLength(1);
    expect(two.requests[0]!.body.model).toBe('bg-backup-at-upstream-two');
    await eventually(async () => expect(before - (await balance(payer.accountId))).toBe(BACKUP_COST), 15_000);
  }, 60_000);

  it('streamed: the events after the fallback name the backup, and the stream ends completed with its answer', async () => {
    one.setFallback({ status: 503 });
    const before = await balance(payer.accountId);
    const events = await payer.client.responses.create({ model: PRIMARY, models: [BACKUP], input: 'Stream it.', background: true, stream: true } as unknown as OpenAI.Responses.ResponseCreateParamsStreaming);
    const seen: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of events) seen.push(event);
    expect(seen[0]).toMatchObject({ type: 'response.created', response: { status: 'queued', model: PRIMARY } });
    const completed = seen.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
    expect(completed.type).toBe('response.completed');
    expect(completed.response.model).toBe(BACKUP);
    const text = seen.flatMap((event) => (event.type === 'response.output_text.delta' ? [event.delta] : [])).join('');
    expect(text).toBe('from two');
    // Numbered without a gap, whatever writer rendered them.
    expect(seen.map((event) => event.sequence_number)).toEqual(seen.map((_, index) => index));
    await eventually(async () => expect(before - (await balance(payer.accountId))).toBe(BACKUP_COST), 15_000);
  }, 60_000);

  it('provider preferences: `provider.only` sends the run to the named provider of a model both serve', async () => {
    const created = await payer.client.responses.create({ model: DUAL, input: 'Only two.', background: true, provider: { only: ['upstream-two'] } } as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    const done = await settledResponse(payer.client, created.id);
    expect(done).toMatchObject({ status: 'completed', model: DUAL });
    expect(done.output_text).toBe('from two');
    expect(one.requests).toHaveLength(0);
    expect(parseCredits((done.usage as unknown as { cost: string }).cost)).toBe(DUAL_COST);
  }, 60_000);

  it('a 0-credit key with a free first model and a paid fallback: failed with 402-shaped insufficient_quota, no provider asked, nothing charged', async () => {
    // Were the run admitted as free, the free model's failing provider would hand it to the paid backup.
    one.setFallback({ status: 503 });
    const created = await broke.client.responses.create({ model: FREE, models: [BACKUP], input: 'No money.', background: true } as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    const ended = await settledResponse(broke.client, created.id);
    expect(ended.status).toBe('failed');
    expect(ended.error).toMatchObject({ code: 'insufficient_quota' });
    expect(one.requests).toHaveLength(0);
    expect(two.requests).toHaveLength(0);
    expect(await balance(broke.accountId)).toBe(0n);
    // The free model alone is served to the same key (the refusal was the paid fallback's).
    one.setFallback({ usage: USAGE, text: 'from one' });
    const free = await broke.client.responses.create({ model: FREE, input: 'Free only.', background: true });
    expect(await settledResponse(broke.client, free.id)).toMatchObject({ status: 'completed', model: FREE, output_text: 'from one' });
    expect(await balance(broke.accountId)).toBe(0n);
  }, 60_000);
});
