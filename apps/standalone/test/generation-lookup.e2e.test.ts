import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { formatCredits, parseCredits } from '@gateway/platform';
import { eventually, startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { oneModelCatalog } from './chat-e2e-harness.js';
import { ctlJson, startStackOnCatalog, type StackOnCatalog } from './configured-stack.js';

// GET /v1/generation (issue 27 item 4) and zero-completion insurance (item 6) through the whole stack:
// the real `openai` client against an OpenAI-compatible fake upstream, Postgres and NATS. Every field
// of a record is checked against what the fake reported and the catalog's prices; money exactly.

const MODEL = 'testco/gen';
const INPUT_PRICE = '0.000003';
const OUTPUT_PRICE = '0.000015';
const inputPico = (tokens: number) => BigInt(tokens) * parseCredits(INPUT_PRICE);
const outputPico = (tokens: number) => BigInt(tokens) * parseCredits(OUTPUT_PRICE);

interface Account { apiKey: string; provisioningKey: string; client: OpenAI }

/** An answer with no output and no finish reason, as the fake's exact bytes. */
const EMPTY_JSON = JSON.stringify({
  id: 'chatcmpl-empty', object: 'chat.completion', created: 1_767_225_600, model: 'gen-upstream',
  choices: [{ index: 0, message: { role: 'assistant', content: '' }, finish_reason: null }],
  usage: { prompt_tokens: 12, completion_tokens: 0, total_tokens: 12 },
});
/** A stream that opens, sends no content and no finish reason, reports usage, and ends. */
const EMPTY_STREAM = [
  { id: 'chatcmpl-empty', object: 'chat.completion.chunk', created: 1_767_225_600, model: 'gen-upstream', choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] },
  { id: 'chatcmpl-empty', object: 'chat.completion.chunk', created: 1_767_225_600, model: 'gen-upstream', choices: [], usage: { prompt_tokens: 12, completion_tokens: 0, total_tokens: 12 } },
].map((chunk) => `data: ${JSON.stringify(chunk)}\n\n`).join('') + 'data: [DONE]\n\n';

describe('generation lookup and zero-completion insurance, end to end', () => {
  let upstream: FakeUpstream;
  let base: StackOnCatalog;
  let url: string;
  let owner: Account;
  let stranger: Account;

  async function account(name: string): Promise<Account> {
    const created = await ctlJson(base.stack, 'accounts', 'create', '--name', name, '--credits', '10', '--tier', 'tier-1', '--json');
    const apiKey = (await ctlJson(base.stack, 'keys', 'create', created.account_id!, '--name', `${name}-key`, '--json')).api_key!;
    return { apiKey, provisioningKey: created.provisioning_key!, client: new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 }) };
  }

  const lookup = (id: string, key: string) => fetch(`${url}/v1/generation?id=${encodeURIComponent(id)}`, { headers: { authorization: `Bearer ${key}` } });

  /** The settled record (polls past the 404 that comes before settlement). */
  async function settled(id: string, key = owner.apiKey): Promise<Record<string, any>> {
    let body: Record<string, any> = {};
    await eventually(async () => {
      const response = await lookup(id, key);
      expect(response.status).toBe(200);
      body = ((await response.json()) as { data: Record<string, any> }).data;
    }, 15_000);
    return body;
  }

  async function balance(who: Account): Promise<bigint> {
    const response = await fetch(`${url}/v1/account/balance`, { headers: { authorization: `Bearer ${who.provisioningKey}` } });
    expect(response.status).toBe(200);
    return parseCredits(((await response.json()) as { balance: string }).balance);
  }

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    base = await startStackOnCatalog('generation', oneModelCatalog({
      model: MODEL, provider: { kind: 'openai', url: upstream.url, keyEnv: 'GENERATION_KEY' }, upstreamModel: 'gen-upstream',
      supportedParameters: ['temperature', 'max_completion_tokens', 'stream_options'], endpoints: ['chat.completions'],
      inputPrice: INPUT_PRICE, outputPrice: OUTPUT_PRICE,
    }), { keyHashSecret: 'generation-e2e-secret-0123456789abcdef', providerSecrets: { GENERATION_KEY: 'sk-generation' } });
    url = base.stack.url;
    owner = await account('gen-owner');
    stranger = await account('gen-stranger');
  }, 120_000);

  afterAll(async () => {
    await base?.stop();
    await upstream?.close();
  });

  beforeEach(() => upstream.reset());

  it('a chat answer looked up by its x-request-id: every field from the fake’s usage and the catalog’s prices, cost exactly the charge', async () => {
    const before = await balance(owner);
    upstream.script({ text: 'Exactly eleven tokens worth of text here.', usage: { prompt_tokens: 37, completion_tokens: 11 } });
    const startedAt = Date.now();
    const { data, response } = await owner.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }] }).withResponse();
    const id = response.headers.get('x-request-id')!;
    expect(id).toBe(response.headers.get('x-gateway-request-id'));
    expect(data.choices[0]!.finish_reason).toBe('stop');

    const record = await settled(id);
    const cost = inputPico(37) + outputPico(11);
    expect(record).toMatchObject({
      id, model: MODEL, provider_name: 'upstream-one', endpoint: 'chat.completions', streamed: false, cancelled: false,
      finish_reason: 'stop', tokens_prompt: 37, tokens_completion: 11, tokens_reasoning: 0, tokens_cached: 0, tokens_cache_write: 0,
      native_tokens_prompt: 37, native_tokens_completion: 11, native_tokens_reasoning: 0, native_tokens_cached: 0,
      estimated: false, total_cost: formatCredits(cost),
      cost_details: { input: formatCredits(inputPico(37)), output: formatCredits(outputPico(11)), cache_read: '0', cache_write: '0', reasoning: '0' },
      insured: false, insured_reason: null,
    });
    expect(record.usage).toMatchObject({ input_tokens: 37, output_tokens: 11 });
    expect(typeof record.total_cost).toBe('string');
    expect(record.latency).toBeGreaterThanOrEqual(0);
    expect(record.generation_time).toBeGreaterThanOrEqual(record.latency);
    expect(record.generation_time).toBeLessThan(Date.now() - startedAt + 1_000);
    expect(Math.abs(record.created_at - startedAt / 1000)).toBeLessThan(60);
    // The record is the charge: the balance moved by exactly its cost.
    await eventually(async () => expect(await balance(owner)).toBe(before - cost), 10_000);
    // The account's provisioning key reads the same record.
    expect(await settled(id, owner.provisioningKey)).toEqual(record);
    // Another account's key (API or provisioning): 404 in the error envelope, nothing of the record.
    for (const key of [stranger.apiKey, stranger.provisioningKey]) {
      const other = await lookup(id, key);
      expect(other.status).toBe(404);
      const body = (await other.json()) as { error: { type: string; message: string }; data?: unknown };
      expect(body.error.type).toBe('not_found_error');
      expect(typeof body.error.message).toBe('string');
      expect(body.data).toBeUndefined();
    }
    // No id: 400; no credential: 401.
    expect((await fetch(`${url}/v1/generation`, { headers: { authorization: `Bearer ${owner.apiKey}` } })).status).toBe(400);
    expect((await fetch(`${url}/v1/generation?id=${id}`)).status).toBe(401);
  });

  it('before the request settles: 404 with retry_after and Retry-After; the streamed record afterwards', async () => {
    upstream.script({ text: 'slow streamed words arriving', chunkCount: 3, chunkDelayMs: 1_200, usage: { prompt_tokens: 20, completion_tokens: 9 } });
    const { data: stream, response } = await owner.client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'Stream' }], stream: true, stream_options: { include_usage: true } })
      .withResponse();
    const id = response.headers.get('x-request-id')!;
    const early = await lookup(id, owner.apiKey);
    expect(early.status).toBe(404);
    expect(early.headers.get('retry-after')).toBe('1');
    const earlyBody = (await early.json()) as { error: { type: string; code: string }; retry_after: number };
    expect(earlyBody.error.type).toBe('not_found_error');
    expect(earlyBody.error.code).toBe('generation_pending');
    expect(earlyBody.retry_after).toBe(1);
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    expect(text).toBe('slow streamed words arriving');

    const record = await settled(id);
    expect(record).toMatchObject({
      streamed: true, cancelled: false, finish_reason: 'stop', tokens_prompt: 20, tokens_completion: 9,
      native_tokens_prompt: 20, native_tokens_completion: 9, total_cost: formatCredits(inputPico(20) + outputPico(9)), insured: false,
    });
    // Two 1.2 s gaps between the chunks: generation time spans them, the first content came before.
    expect(record.generation_time).toBeGreaterThanOrEqual(2_000);
    expect(record.latency).toBeLessThan(record.generation_time - 2_000);
  });

  /** A settled insured record: no charge, the reason, the provider's prompt count kept. */
  async function expectInsured(id: string, streamed: boolean) {
    const record = await settled(id);
    expect(record).toMatchObject({
      streamed, finish_reason: null, tokens_prompt: 12, tokens_completion: 0, native_tokens_prompt: 12, native_tokens_completion: 0,
      total_cost: '0', cost_details: { input: '0', output: '0', cache_read: '0', cache_write: '0', reasoning: '0' },
      insured: true, insured_reason: 'no_output_no_finish_reason',
    });
  }

  it('a stream with zero output and no finish reason: nothing charged, the record says insured and why', async () => {
    const before = await balance(owner);
    upstream.script({ replay: { contentType: 'text/event-stream', body: EMPTY_STREAM } });
    const { data: stream, response } = await owner.client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'Nothing streamed?' }], stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let content = '';
    for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? '';
    expect(content).toBe('');
    await expectInsured(response.headers.get('x-request-id')!, true);
    // Settled (the record is written with its charge): the balance did not move.
    expect(await balance(owner)).toBe(before);
  });

  it('a whole answer with zero output and no finish reason: nothing charged, the record says insured and why', async () => {
    const before = await balance(owner);
    upstream.script({ replay: { contentType: 'application/json', body: EMPTY_JSON } });
    const { response } = await owner.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Nothing?' }] }).withResponse();
    await expectInsured(response.headers.get('x-request-id')!, false);
    expect(await balance(owner)).toBe(before);
  });

  it('a stream the caller abandons after its first content: cancelled, streamed, charged for what was delivered', async () => {
    upstream.script({ text: 'one two three four five six', chunkCount: 6, chunkDelayMs: 700, usage: { prompt_tokens: 15, completion_tokens: 6 } });
    const { data: stream, response } = await owner.client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'Then stop reading' }], stream: true })
      .withResponse();
    const id = response.headers.get('x-request-id')!;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) break; // leaving the loop aborts the request
    }
    const record = await settled(id);
    expect(record).toMatchObject({ streamed: true, cancelled: true, finish_reason: null, insured: false });
    // The provider never sent its usage: the gateway counted what reached the caller, and charged it.
    expect(record.estimated).toBe(true);
    expect(record.tokens_completion).toBeGreaterThan(0);
    expect(record.native_tokens_prompt).toBeNull();
    expect(parseCredits(record.total_cost)).toBe(inputPico(record.tokens_prompt) + outputPico(record.tokens_completion));
  });

  it('GET /v1/account/generations: the account\'s records newest first, each as GET /v1/generation renders it, in pages, by key, never another account\'s', async () => {
    const created = await ctlJson(base.stack, 'accounts', 'create', '--name', 'gen-lister', '--credits', '10', '--tier', 'tier-1', '--json');
    const [first, second] = [
      await ctlJson(base.stack, 'keys', 'create', created.account_id!, '--name', 'lister-one', '--json'),
      await ctlJson(base.stack, 'keys', 'create', created.account_id!, '--name', 'lister-two', '--json'),
    ];
    const provisioningKey = created.provisioning_key!;
    const list = async (query: string, key = provisioningKey) => {
      const response = await fetch(`${url}/v1/account/generations${query}`, { headers: { authorization: `Bearer ${key}` } });
      return { status: response.status, body: (await response.json()) as Record<string, any> };
    };
    // Three answers, one after another: first key, second key, first key.
    const ids: string[] = [];
    for (const [index, key] of [first, second, first].entries()) {
      upstream.script({ text: `answer ${index}`, usage: { prompt_tokens: 10 + index, completion_tokens: 3 } });
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key!.api_key!, maxRetries: 0, timeout: 30_000 });
      const { response } = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `Q${index}` }] }).withResponse();
      ids.push(response.headers.get('x-request-id')!);
    }
    const newestFirst = [...ids].reverse();
    let everything: Array<Record<string, any>> = [];
    await eventually(async () => {
      const answer = await list('');
      expect(answer.status).toBe(200);
      everything = answer.body.data;
      expect(everything.map((record) => record.id)).toEqual(newestFirst);
      expect(answer.body.next_cursor).toBeNull();
    }, 15_000);
    // Each entry is exactly GET /v1/generation's `data` for that id.
    for (const record of everything) expect(record).toEqual(await settled(record.id, provisioningKey));
    expect(everything.map((record) => record.tokens_prompt)).toEqual([12, 11, 10]);

    // limit=1: one record per page, next_cursor to the next, null after the last; none twice or lost.
    const paged: string[] = [];
    let cursor: string | null = '';
    for (let page = 0; cursor !== null && page < 10; page++) {
      const answer = await list(`?limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      expect(answer.status).toBe(200);
      expect(answer.body.data).toHaveLength(1);
      paged.push(answer.body.data[0].id);
      cursor = answer.body.next_cursor;
    }
    expect(paged).toEqual(newestFirst);
    const twoPages = await list('?limit=2');
    expect(twoPages.body.data.map((record: { id: string }) => record.id)).toEqual(newestFirst.slice(0, 2));
    expect(typeof twoPages.body.next_cursor).toBe('string');

    // key_id: that key's records only.
    expect((await list(`?key_id=${first!.key_id}`)).body.data.map((record: { id: string }) => record.id)).toEqual([ids[2], ids[0]]);
    expect((await list(`?key_id=${second!.key_id}`)).body.data.map((record: { id: string }) => record.id)).toEqual([ids[1]]);

    // Another account's provisioning key sees none of them, even when it names this account's key or cursor.
    for (const query of ['', `?key_id=${first!.key_id}`, `?cursor=${encodeURIComponent(twoPages.body.next_cursor)}`]) {
      const theirs = await list(query, stranger.provisioningKey);
      expect(theirs.status).toBe(200);
      expect(theirs.body.data.map((record: { id: string }) => record.id).filter((id: string) => ids.includes(id))).toEqual([]);
    }
    // An API key is not a provisioning key (401); no credential: 401.
    expect((await list('', first!.api_key!)).status).toBe(401);
    expect((await fetch(`${url}/v1/account/generations`)).status).toBe(401);
    // A bad limit or cursor: 400 in the error envelope.
    for (const query of ['?limit=0', '?limit=101', '?limit=abc', '?cursor=not-a-cursor', `?cursor=${'x'.repeat(401)}`, '?key_id=']) {
      const answer = await list(query);
      expect(answer.status, query).toBe(400);
      expect(answer.body.error.type, query).toBe('invalid_request_error');
    }
  });

  it('a stream cut before any content: no charge, no record', async () => {
    const before = await balance(owner);
    upstream.script({ cutAfterChunks: 0 });
    let id = '';
    let failed = false;
    try {
      const { data: stream, response } = await owner.client.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'Cut' }], stream: true }).withResponse();
      id = response.headers.get('x-request-id')!;
      for await (const chunk of stream) void chunk;
    } catch (error) {
      failed = true;
      const status = (error as { status?: number }).status;
      if (status !== undefined) expect(status).toBe(503);
    }
    expect(failed).toBe(true);
    // A later, settled request proves the settler has passed this one: still no charge for it.
    upstream.script({ usage: { prompt_tokens: 5, completion_tokens: 2 } });
    const { response } = await owner.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'After' }] }).withResponse();
    await settled(response.headers.get('x-request-id')!);
    expect(await balance(owner)).toBe(before - inputPico(5) - outputPico(2));
    if (id !== '') expect((await lookup(id, owner.apiKey)).status).toBe(404);
  });
});
