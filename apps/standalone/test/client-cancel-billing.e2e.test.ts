import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import pg from 'pg';
import { formatCredits, parseCredits } from '@gateway/platform';
import { eventually, startFakeAnthropicUpstream, startFakeUpstream, type FakeAnthropicUpstream, type FakeUpstream } from '@gateway/testing';
import { ctlJson, generationRecord, startStackOnCatalog, type StackOnCatalog } from './configured-stack.js';
import { catalogYaml, tokenPricing, type CatalogModel } from './catalog-yaml.js';

// Issue 35 item 4: a caller who leaves before the first content still pays for the prompt an upstream
// already received (providers bill its prefill), and the generation record says it was cancelled; a
// caller who leaves before any upstream was called pays nothing. The real `openai` and
// `@anthropic-ai/sdk` clients against the whole stack (Postgres, NATS) and an OpenAI-compatible fake
// that takes 2.5 s to answer; the client aborts at 1.5 s. Money exactly, from the ledger's rows.

const MODEL = 'testco/cancel';
/** Served by an Anthropic-kind provider, whose stream reports the prompt's usage before the first content. */
const CLAUDE = 'testco/cancel-claude';
const INPUT_PRICE = '0.000003';
const OUTPUT_PRICE = '0.000015';
const UPSTREAM_DELAY_MS = 2_500;
const ABORT_AT_MS = 1_500;

function catalog(upstream: FakeUpstream, claude: FakeAnthropicUpstream): string {
  const model = (id: string, offers: { provider: string; upstreamModel: string }[]): CatalogModel => ({
    id,
    supportedParameters: ['temperature', 'max_completion_tokens', 'stream_options'],
    pricing: tokenPricing(INPUT_PRICE, OUTPUT_PRICE),
    offers: offers.map((offer) => ({ ...offer, endpoints: ['chat.completions', 'messages'] })),
  });
  return catalogYaml({
    providers: [
      // Two providers on the same fake, told apart by a static header, for the failover case.
      { id: 'upstream-one', kind: 'openai', url: upstream.url, keyEnv: 'CANCEL_KEY', extra: 'headers: { x-which: one }' },
      { id: 'upstream-two', kind: 'openai', url: upstream.url, keyEnv: 'CANCEL_KEY', extra: 'headers: { x-which: two }' },
      { id: 'claude-one', kind: 'anthropic', url: claude.url, keyEnv: 'CANCEL_KEY' },
    ],
    models: [
      model(MODEL, [{ provider: 'upstream-one', upstreamModel: 'cancel-upstream' }, { provider: 'upstream-two', upstreamModel: 'cancel-upstream' }]),
      model(CLAUDE, [{ provider: 'claude-one', upstreamModel: 'claude-cancel' }]),
    ],
  });
}

interface Account { accountId: string; apiKey: string; provisioningKey: string; openai: OpenAI; anthropic: Anthropic }

describe('a caller who leaves before the first content, end to end', () => {
  let upstream: FakeUpstream;
  let claude: FakeAnthropicUpstream;
  let base: StackOnCatalog;
  let pool: pg.Pool;
  let files: Server;
  let filesUrl = '';
  let url = '';

  async function account(name: string): Promise<Account> {
    const created = await ctlJson(base.stack, 'accounts', 'create', '--name', name, '--credits', '10', '--tier', 'tier-1', '--json');
    const apiKey = (await ctlJson(base.stack, 'keys', 'create', created.account_id!, '--name', `${name}-key`, '--json')).api_key!;
    return {
      accountId: created.account_id!, apiKey, provisioningKey: created.provisioning_key!,
      openai: new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 }),
      anthropic: new Anthropic({ baseURL: url, apiKey, maxRetries: 0, timeout: 30_000 }),
    };
  }

  /** The account's charge rows (the ledger's own table). */
  async function charges(accountId: string): Promise<Array<Record<string, any>>> {
    return (await pool.query('select * from ledger.charges where account_id = $1 order by occurred_at', [accountId])).rows;
  }

  async function balance(who: Account): Promise<bigint> {
    const response = await fetch(`${url}/v1/account/balance`, { headers: { authorization: `Bearer ${who.provisioningKey}` } });
    return parseCredits(((await response.json()) as { balance: string }).balance);
  }

  /** Runs `call` with a signal aborted at ABORT_AT_MS; it must end by that abort. */
  async function abortedAt(call: (signal: AbortSignal) => Promise<unknown>): Promise<void> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), ABORT_AT_MS);
    const startedAt = Date.now();
    const outcome = await call(controller.signal).then(() => 'answered', (error: unknown) => error);
    clearTimeout(timer);
    expect(outcome).not.toBe('answered');
    expect(Date.now() - startedAt).toBeLessThan(UPSTREAM_DELAY_MS);
  }

  /**
   * The one charge of a cancelled request: its prompt at the input price, nothing else, its generation
   * record cancelled; the balance moved by exactly that. `promptTokens`: the gateway's count of the same
   * prompt on an answered request, the account's first charge (so this one is its second).
   */
  async function expectPromptCharged(who: Account, before: bigint, promptTokens: number, streamed: boolean) {
    // The provider whose upstream had the request last (the strategy picks either).
    const provider = upstream.requests.at(-1)!.headers['x-which'] === 'two' ? 'upstream-two' : 'upstream-one';
    let rows: Array<Record<string, any>> = [];
    await eventually(async () => {
      rows = await charges(who.accountId);
      expect(rows).toHaveLength(2);
    }, 15_000);
    const row = rows[1]!;
    const cost = BigInt(promptTokens) * parseCredits(INPUT_PRICE);
    expect(Number(row.input_tokens)).toBe(promptTokens);
    expect(Number(row.output_tokens)).toBe(0);
    expect(BigInt(row.cost_pico)).toBe(cost);
    expect(row.provider_id).toBe(provider);
    expect(row.streamed).toBe(streamed);
    const record = await generationRecord(url, who.apiKey, row.request_id);
    expect(record).toMatchObject({
      id: row.request_id, model: MODEL, provider_name: provider, streamed, cancelled: true, finish_reason: 'cancelled',
      tokens_prompt: promptTokens, tokens_completion: 0, estimated: true, insured: false, insured_reason: null,
      total_cost: formatCredits(cost), cost_details: { input: formatCredits(cost), output: '0', cache_read: '0', cache_write: '0', reasoning: '0' },
    });
    await eventually(async () => expect(await balance(who)).toBe(before - cost), 10_000);
  }

  /** The gateway's own prompt count of these messages: an answered request whose upstream reports no usage. */
  async function gatewayCount(who: Account, dialect: 'chat' | 'messages', text: string): Promise<number> {
    upstream.script({ usage: 'absent' });
    if (dialect === 'chat') {
      const answer = await who.openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: text }] });
      await eventually(async () => expect(await charges(who.accountId)).toHaveLength(1), 15_000);
      return answer.usage!.prompt_tokens;
    }
    const answer = await who.anthropic.messages.create({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: text }] });
    await eventually(async () => expect(await charges(who.accountId)).toHaveLength(1), 15_000);
    return answer.usage.input_tokens;
  }

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    claude = await startFakeAnthropicUpstream();
    // A file server that takes 3 s: a caller can leave while the gateway still fetches its file.
    files = createServer((_request, response) => {
      setTimeout(() => {
        response.writeHead(200, { 'content-type': 'text/plain' });
        response.end('a slow file');
      }, 3_000);
    });
    await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
    filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
    base = await startStackOnCatalog('cancel', catalog(upstream, claude), {
      keyHashSecret: 'cancel-e2e-secret-cancel-e2e-secret-0123',
      providerSecrets: { CANCEL_KEY: 'sk-cancel' },
      media: { allowLoopbackUrlsForTests: true },
    });
    url = base.stack.url;
    pool = new pg.Pool({ connectionString: base.database.url, max: 2 });
  }, 120_000);

  afterAll(async () => {
    await pool?.end().catch(() => undefined);
    await base?.stop();
    await upstream?.close();
    await claude?.close();
    files?.closeAllConnections();
    await new Promise((resolve) => files?.close(resolve));
  });

  beforeEach(() => { upstream.reset(); claude.reset(); });

  for (const streamed of [false, true]) {
    it(`chat completions${streamed ? ', streamed' : ''}: the upstream had the prompt, so it is charged at the input price and the record says cancelled`, async () => {
      const who = await account(`chat-${streamed}`);
      const text = 'Please think about this for a long time before answering.';
      const promptTokens = await gatewayCount(who, 'chat', text);
      const before = await balance(who);
      upstream.reset();
      upstream.script({ latencyMs: UPSTREAM_DELAY_MS, usage: { prompt_tokens: 999, completion_tokens: 999 } });
      await abortedAt(async (signal) => {
        if (!streamed) return who.openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: text }] }, { signal });
        const stream = await who.openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: text }], stream: true }, { signal });
        for await (const _chunk of stream) { /* nothing arrives before the abort */ }
      });
      expect(upstream.requests).toHaveLength(1);
      await expectPromptCharged(who, before, promptTokens, streamed);
    });

    it(`messages${streamed ? ', streamed' : ''}: the upstream had the prompt, so it is charged at the input price and the record says cancelled`, async () => {
      const who = await account(`messages-${streamed}`);
      const text = 'Consider every option carefully, then answer in one word.';
      const promptTokens = await gatewayCount(who, 'messages', text);
      const before = await balance(who);
      upstream.reset();
      upstream.script({ latencyMs: UPSTREAM_DELAY_MS });
      await abortedAt(async (signal) => {
        if (!streamed) return who.anthropic.messages.create({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: text }] }, { signal });
        const stream = await who.anthropic.messages.create({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: text }], stream: true }, { signal });
        for await (const _event of stream) { /* nothing arrives before the abort */ }
      });
      expect(upstream.requests).toHaveLength(1);
      await expectPromptCharged(who, before, promptTokens, streamed);
    });
  }

  for (const dialect of ['chat', 'messages'] as const) {
    it(`${dialect}, streamed, to an Anthropic upstream that reported the prompt's usage before its slow first token: charged the provider's count`, async () => {
      const who = await account(`claude-${dialect}`);
      const before = await balance(who);
      claude.script({ firstChunkDelayMs: UPSTREAM_DELAY_MS, usage: { input_tokens: 42, output_tokens: 7, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 } });
      const content = 'Answer slowly.';
      await abortedAt(async (signal) => {
        if (dialect === 'chat') {
          const stream = await who.openai.chat.completions.create({ model: CLAUDE, messages: [{ role: 'user', content }], stream: true }, { signal });
          for await (const _chunk of stream) { /* nothing arrives before the abort */ }
        } else {
          const stream = await who.anthropic.messages.create({ model: CLAUDE, max_tokens: 100, messages: [{ role: 'user', content }], stream: true }, { signal });
          for await (const _event of stream) { /* message_start may arrive; no content before the abort */ }
        }
      });
      expect(claude.requests).toHaveLength(1);
      let rows: Array<Record<string, any>> = [];
      await eventually(async () => {
        rows = await charges(who.accountId);
        expect(rows).toHaveLength(1);
      }, 15_000);
      const cost = 42n * parseCredits(INPUT_PRICE);
      expect(rows[0]).toMatchObject({ input_tokens: 42n, output_tokens: 0n, cost_pico: cost, provider_id: 'claude-one', estimated: false });
      const record = await generationRecord(url, who.apiKey, rows[0]!.request_id);
      expect(record).toMatchObject({
        model: CLAUDE, provider_name: 'claude-one', streamed: true, cancelled: true, finish_reason: 'cancelled', tokens_prompt: 42,
        tokens_completion: 0, native_tokens_prompt: 42, estimated: false, insured: false, total_cost: formatCredits(cost),
      });
      await eventually(async () => expect(await balance(who)).toBe(before - cost), 10_000);
    });
  }

  it('failover: attempt 1 fails after its request was sent, attempt 2 is cancelled: one charge, the prompt once, at the provider that had it', async () => {
    const who = await account('failover');
    const text = 'One provider fails, the other is slow.';
    const promptTokens = await gatewayCount(who, 'chat', text);
    const before = await balance(who);
    upstream.reset();
    upstream.script({ status: 500 }, { latencyMs: UPSTREAM_DELAY_MS });
    await abortedAt(async (signal) => {
      const stream = await who.openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: text }], stream: true }, { signal });
      for await (const _chunk of stream) { /* nothing arrives before the abort */ }
    });
    expect(upstream.requests).toHaveLength(2);
    expect(upstream.requests[0]!.headers['x-which']).not.toBe(upstream.requests[1]!.headers['x-which']);
    // Charged once, at the second provider (expectPromptCharged names the one that had the request last).
    await expectPromptCharged(who, before, promptTokens, true);
  });

  it('a caller who leaves while the gateway fetches its file (before any upstream call) is charged nothing and leaves no record', async () => {
    const who = await account('before-upstream');
    const before = await balance(who);
    for (const streamed of [false, true]) {
      await abortedAt(async (signal) => {
        const messages = [{ role: 'user' as const, content: [{ type: 'text' as const, text: 'Read this.' }, { type: 'file' as const, file: { file_url: `${filesUrl}/slow.txt` } as never }] }];
        if (!streamed) return who.openai.chat.completions.create({ model: MODEL, messages }, { signal });
        const stream = await who.openai.chat.completions.create({ model: MODEL, messages, stream: true }, { signal });
        for await (const _chunk of stream) { /* nothing arrives before the abort */ }
      });
    }
    // The file arrives (3 s) after the caller left; whatever the gateway does then, no upstream is called.
    await new Promise((resolve) => setTimeout(resolve, 3_500));
    expect(upstream.requests).toHaveLength(0);
    expect(await charges(who.accountId)).toEqual([]);
    expect(await balance(who)).toBe(before);
    const listed = await fetch(`${url}/v1/account/generations`, { headers: { authorization: `Bearer ${who.provisioningKey}` } });
    expect(((await listed.json()) as { data: unknown[] }).data).toEqual([]);
  });
});
