import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type OpenAI from 'openai';
import { formatCredits, parseCredits } from '@gateway/platform';
import { startFakeAnthropicUpstream, startFakeUpstream, type FakeAnthropicUpstream, type FakeUpstream } from '@gateway/testing';
import { resetFakes, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { CACHE_PICO, CACHE_PRICES, CACHE_PRICING_YAML, cacheChargeOf } from './cache-prices.js';
import { anthropicClient } from './messages-e2e-harness.js';
import { catalogYaml, tokenPricing } from './catalog-yaml.js';

/*
 * Prompt caching billed right, end to end (issue 26): `cache_control` in each dialect reaches an
 * Anthropic-wire provider (and never the OpenAI wire), the provider's cache writes and reads come back
 * in each dialect's usage fields, streamed and not, and the ledger charges the three input kinds at
 * their own catalog prices (computed here by hand from the fake's counts). Cache affinity: requests of
 * one account with the same prompt_cache_key (or the same cacheable prefix) stay on the provider that
 * served the last one, and move when it fails.
 */

const CACHED = 'testco/claude-cached';
const PAIR = 'testco/claude-pair';
const GPT = 'testco/gpt-plain';

/** What the fake reports: a first request writes the prefix to the cache, the next one reads it. */
const WRITE = { input_tokens: 12, cache_creation_input_tokens: 2_048, cache_read_input_tokens: 0, output_tokens: 7 };
const READ = { input_tokens: 15, cache_creation_input_tokens: 0, cache_read_input_tokens: 2_048, output_tokens: 9 };

const SYSTEM = 'You are the reference librarian. '.repeat(40);

function catalog(cached: FakeAnthropicUpstream, left: FakeAnthropicUpstream, right: FakeAnthropicUpstream, openai: FakeUpstream): string {
  return catalogYaml({
    providers: [
      { id: 'anthropic-main', kind: 'anthropic', url: cached.url, keyEnv: 'CACHE_E2E_ANTHROPIC_KEY' },
      { id: 'anthropic-left', kind: 'anthropic', url: left.url, keyEnv: 'CACHE_E2E_ANTHROPIC_KEY' },
      { id: 'anthropic-right', kind: 'anthropic', url: right.url, keyEnv: 'CACHE_E2E_ANTHROPIC_KEY' },
      { id: 'openai-plain', kind: 'openai', url: openai.url, keyEnv: 'CACHE_E2E_OPENAI_KEY' },
    ],
    models: [
      {
        id: CACHED, inputModalities: ['text', 'image'], supportedParameters: ['tools', 'tool_choice', 'temperature', 'max_completion_tokens', 'max_tokens'],
        pricing: CACHE_PRICING_YAML,
        offers: [{ provider: 'anthropic-main', upstreamModel: 'claude-upstream', endpoints: ['chat.completions', 'responses', 'messages'] }],
      },
      {
        id: PAIR, supportedParameters: ['temperature', 'max_completion_tokens', 'max_tokens'], pricing: tokenPricing('0.000001', '0.000002'),
        offers: [
          { provider: 'anthropic-left', upstreamModel: 'claude-left', endpoints: ['chat.completions', 'responses', 'messages'] },
          { provider: 'anthropic-right', upstreamModel: 'claude-right', endpoints: ['chat.completions', 'responses', 'messages'] },
        ],
      },
      {
        id: GPT, supportedParameters: ['temperature', 'max_completion_tokens'],
        pricing: '{ per_input_token: "0.000001", per_cached_input_token: "0.0000001", per_output_token: "0.000002" }',
        offers: [{ provider: 'openai-plain', upstreamModel: 'gpt-upstream', endpoints: ['chat.completions', 'responses'] }],
      },
    ],
  });
}

describe('prompt caching, billed right', () => {
  let cached: FakeAnthropicUpstream;
  let left: FakeAnthropicUpstream;
  let right: FakeAnthropicUpstream;
  let openai: FakeUpstream;
  let harness: ChatHarness;
  let client: OpenAI;

  beforeAll(async () => {
    [cached, left, right, openai] = await Promise.all([startFakeAnthropicUpstream(), startFakeAnthropicUpstream(), startFakeAnthropicUpstream(), startFakeUpstream()]);
    harness = await startChatHarness({
      configYaml: catalog(cached, left, right, openai),
      providerSecrets: { CACHE_E2E_ANTHROPIC_KEY: 'anthropic-key', CACHE_E2E_OPENAI_KEY: 'openai-key' },
      credits: '100',
    });
    client = harness.client;
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [cached, left, right, openai]), 30_000);

  beforeEach(() => resetFakes([cached, left, right, openai]));

  /** The charge of the next `requests` answers of CACHED, once the ledger has them all. */
  async function chargedFor(requests: number, run: () => Promise<void>): Promise<bigint> {
    const before = await harness.charges(CACHED);
    await run();
    const after = await harness.chargesSettleAt(CACHED, before.requests + requests);
    return after.costPico - before.costPico;
  }

  /** Every cache_control the fake received, by where it sat in the Anthropic body. */
  function marksReceived(upstream: FakeAnthropicUpstream, index = 0): Record<string, unknown> {
    const body = upstream.requests[index]!.body;
    const marks: Record<string, unknown> = {};
    (Array.isArray(body.system) ? body.system : []).forEach((block: any, at: number) => { if (block.cache_control) marks[`system.${at}`] = block.cache_control; });
    body.messages.forEach((message: any, at: number) => {
      if (Array.isArray(message.content)) message.content.forEach((block: any, inner: number) => { if (block.cache_control) marks[`messages.${at}.content.${inner}`] = block.cache_control; });
    });
    return marks;
  }

  describe('chat completions', () => {
    const messages = (question: string) => [
      { role: 'system', content: [{ type: 'text', text: SYSTEM, cache_control: { type: 'ephemeral', ttl: '1h' } }] },
      { role: 'user', content: question },
    ] as unknown as OpenAI.ChatCompletionMessageParam[];

    it('cache_control reaches Anthropic; usage reports writes then reads; the ledger charges the three input kinds', async () => {
      cached.script({ usage: WRITE }, { usage: READ });
      const answers: OpenAI.CompletionUsage[] = [];
      const charged = await chargedFor(2, async () => {
        for (const question of ['First question?', 'Second question?']) {
          answers.push((await client.chat.completions.create({ model: CACHED, messages: messages(question) })).usage!);
        }
      });
      expect(marksReceived(cached)).toEqual({ 'system.0': { type: 'ephemeral', ttl: '1h' } });
      // Each answer's usage.cost (issue 27 item 3) is its own charge, as a decimal string.
      expect(answers).toEqual([
        { prompt_tokens: 2_060, completion_tokens: 7, total_tokens: 2_067, prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 2_048 }, completion_tokens_details: { reasoning_tokens: 0 },
          cost: formatCredits(cacheChargeOf(WRITE)), cost_details: { input: '0.000036', output: '0.000105', cache_read: '0', cache_write: '0.00768', reasoning: '0' } },
        { prompt_tokens: 2_063, completion_tokens: 9, total_tokens: 2_072, prompt_tokens_details: { cached_tokens: 2_048, cache_write_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 },
          cost: formatCredits(cacheChargeOf(READ)), cost_details: { input: '0.000045', output: '0.000135', cache_read: '0.0006144', cache_write: '0', reasoning: '0' } },
      ]);
      expect(charged).toBe(cacheChargeOf(WRITE) + cacheChargeOf(READ));
      // By hand: 12 × 3e6 + 2048 × 3.75e6 + 7 × 15e6, then 15 × 3e6 + 2048 × 0.3e6 + 9 × 15e6 pico.
      expect(charged).toBe(7_821_000_000n + 794_400_000n);
    });

    it('streamed: the usage chunk carries the same cache fields, and the charge is the same', async () => {
      cached.script({ usage: WRITE }, { usage: READ });
      const usages: unknown[] = [];
      const charged = await chargedFor(2, async () => {
        for (const question of ['First question?', 'Second question?']) {
          const stream = await client.chat.completions.create({ model: CACHED, messages: messages(question), stream: true, stream_options: { include_usage: true } });
          for await (const chunk of stream) if (chunk.usage) usages.push(chunk.usage.prompt_tokens_details);
        }
      });
      expect(usages).toEqual([{ cached_tokens: 0, cache_write_tokens: 2_048 }, { cached_tokens: 2_048, cache_write_tokens: 0 }]);
      expect(charged).toBe(cacheChargeOf(WRITE) + cacheChargeOf(READ));
    });

    it('cache_control on a tool definition and on an image part reaches Anthropic on the same blocks', async () => {
      const tools = [
        { type: 'function', function: { name: 'lookup', description: 'Looks a term up.', parameters: { type: 'object', properties: { term: { type: 'string' } } } }, cache_control: { type: 'ephemeral', ttl: '1h' } },
      ] as unknown as OpenAI.ChatCompletionTool[];
      const withImage = [
        { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' }, cache_control: { type: 'ephemeral' } }, { type: 'text', text: 'What is it?' }] },
      ] as unknown as OpenAI.ChatCompletionMessageParam[];
      // Charged like any answer: wait for it, so the next test's before/after charges are its own.
      await chargedFor(1, async () => { await client.chat.completions.create({ model: CACHED, messages: withImage, tools }); });
      const body = cached.requests[0]!.body;
      expect(body.tools).toEqual([expect.objectContaining({ name: 'lookup', cache_control: { type: 'ephemeral', ttl: '1h' } })]);
      expect(marksReceived(cached)).toEqual({ 'messages.0.content.0': { type: 'ephemeral' } });
      expect(body.messages[0].content[0].type).toBe('image');
    });

    it('a bad cache_control is a 400 naming the field; the provider is never called', async () => {
      const bad = [{ role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral', ttl: '24h' } }] }] as unknown as OpenAI.ChatCompletionMessageParam[];
      const error = await client.chat.completions.create({ model: CACHED, messages: bad }).catch((caught: unknown) => caught);
      expect(error).toMatchObject({ status: 400, param: 'body.messages.0.content.0.cache_control.ttl' });
      expect(cached.requests).toHaveLength(0);
    });

    it('an OpenAI-wire model takes the same request: cache_control is not sent and not reported as dropped', async () => {
      const { response } = await client.chat.completions
        .create({ model: GPT, messages: messages('Question?'), prompt_cache_key: 'session-1' } as OpenAI.ChatCompletionCreateParamsNonStreaming)
        .withResponse();
      expect(response.status).toBe(200);
      expect(response.headers.get('x-gateway-dropped-params')).toBeNull();
      expect(openai.requests).toHaveLength(1);
      expect(JSON.stringify(openai.requests[0]!.body)).not.toContain('cache_control');
    });
  });

  describe('responses', () => {
    const input = (question: string) => [
      { role: 'user', content: [{ type: 'input_text', text: SYSTEM, cache_control: { type: 'ephemeral' } }, { type: 'input_text', text: question }] },
    ] as unknown as OpenAI.Responses.ResponseInput;

    it('input_tokens_details.cached_tokens reports the read; input_tokens counts every prompt token; charged exactly', async () => {
      cached.script({ usage: WRITE }, { usage: READ });
      const usages: OpenAI.Responses.ResponseUsage[] = [];
      const charged = await chargedFor(2, async () => {
        for (const question of ['First?', 'Second?']) usages.push((await client.responses.create({ model: CACHED, input: input(question) })).usage!);
      });
      expect(marksReceived(cached)).toEqual({ 'messages.0.content.0': { type: 'ephemeral' } });
      expect(usages.map((usage) => [usage.input_tokens, usage.input_tokens_details.cached_tokens, usage.output_tokens])).toEqual([[2_060, 0, 7], [2_063, 2_048, 9]]);
      expect(charged).toBe(cacheChargeOf(WRITE) + cacheChargeOf(READ));
    });

    it('streamed: response.completed carries the same usage', async () => {
      cached.script({ usage: WRITE }, { usage: READ });
      const usages: unknown[] = [];
      const charged = await chargedFor(2, async () => {
        for (const question of ['First?', 'Second?']) {
          const stream = await client.responses.create({ model: CACHED, input: input(question), stream: true });
          for await (const event of stream) if (event.type === 'response.completed') usages.push(event.response.usage);
        }
      });
      expect(usages).toMatchObject([
        { input_tokens: 2_060, input_tokens_details: { cached_tokens: 0 }, output_tokens: 7 },
        { input_tokens: 2_063, input_tokens_details: { cached_tokens: 2_048 }, output_tokens: 9 },
      ]);
      expect(charged).toBe(cacheChargeOf(WRITE) + cacheChargeOf(READ));
    });
  });

  describe('messages', () => {
    const request = (question: string) => ({
      model: CACHED,
      max_tokens: 100,
      system: [{ type: 'text' as const, text: SYSTEM, cache_control: { type: 'ephemeral' as const, ttl: '5m' as const } }],
      messages: [{ role: 'user' as const, content: question }],
    });

    it('input_tokens excludes both cache parts, reported apart as Anthropic does; charged exactly', async () => {
      cached.script({ usage: WRITE }, { usage: READ });
      const anthropic = anthropicClient(harness.stack.url, harness.apiKey);
      const usages: unknown[] = [];
      const charged = await chargedFor(2, async () => {
        for (const question of ['First?', 'Second?']) usages.push((await anthropic.messages.create(request(question))).usage);
      });
      expect(marksReceived(cached)).toEqual({ 'system.0': { type: 'ephemeral', ttl: '5m' } });
      expect(usages).toMatchObject([
        { input_tokens: 12, cache_creation_input_tokens: 2_048, cache_read_input_tokens: 0, output_tokens: 7 },
        { input_tokens: 15, cache_creation_input_tokens: 0, cache_read_input_tokens: 2_048, output_tokens: 9 },
      ]);
      expect(charged).toBe(cacheChargeOf(WRITE) + cacheChargeOf(READ));
    });

    it('streamed: message_delta carries the same counts', async () => {
      cached.script({ usage: WRITE }, { usage: READ });
      const anthropic = anthropicClient(harness.stack.url, harness.apiKey);
      const usages: unknown[] = [];
      const charged = await chargedFor(2, async () => {
        for (const question of ['First?', 'Second?']) {
          const stream = anthropic.messages.stream(request(question));
          const deltas: unknown[] = [];
          stream.on('streamEvent', (event) => { if (event.type === 'message_delta') deltas.push(event.usage); });
          await stream.finalMessage();
          usages.push(deltas.at(-1));
        }
      });
      expect(usages).toMatchObject([
        { input_tokens: 12, cache_creation_input_tokens: 2_048, cache_read_input_tokens: 0, output_tokens: 7 },
        { input_tokens: 15, cache_creation_input_tokens: 0, cache_read_input_tokens: 2_048, output_tokens: 9 },
      ]);
      expect(charged).toBe(cacheChargeOf(WRITE) + cacheChargeOf(READ));
    });
  });

  it('the model listing shows the cache-write price beside the cached-input price', async () => {
    const response = await fetch(`${harness.stack.url}/v1/models`, { headers: { authorization: `Bearer ${harness.apiKey}` } });
    expect(response.status).toBe(200);
    const models = ((await response.json()) as { data: { id: string; pricing: Record<string, number> }[] }).data;
    expect(models.find((model) => model.id === CACHED)!.pricing).toMatchObject({
      per_input_token: Number(CACHE_PRICES.input), per_cached_input_token: Number(CACHE_PRICES.cached), per_cache_write_input_token: Number(CACHE_PRICES.write),
    });
    expect(parseCredits(CACHE_PRICES.write)).toBe(CACHE_PICO.write);
    // Not configured: not shown (the ledger charges writes at the input price then).
    expect(models.find((model) => model.id === GPT)!.pricing).not.toHaveProperty('per_cache_write_input_token');
  });

  describe('cache affinity', () => {
    const servedBy = () => ({ left: left.requests.length, right: right.requests.length });
    const ask = (extra: Record<string, unknown>, question: string) =>
      client.chat.completions.create({ model: PAIR, messages: [{ role: 'user', content: question }], ...extra } as OpenAI.ChatCompletionCreateParamsNonStreaming);

    it('one prompt_cache_key stays on one provider, moves when it fails, and stays where it moved', async () => {
      const key = { prompt_cache_key: 'affinity-session-1' };
      await ask(key, 'question 0');
      const first = servedBy().left === 1 ? left : right;
      const other = first === left ? right : left;
      // Without affinity the balanced strategy would pick each of two providers half the time: 8 in a row is 1 in 256.
      for (let index = 1; index <= 8; index++) await ask(key, `question ${index}`);
      expect(first.requests).toHaveLength(9);
      expect(other.requests).toHaveLength(0);

      // The pinned provider fails: the request fails over (the client sees an answer) and the survivor is pinned.
      first.setFallback({ status: 529 });
      const failedOver = await ask(key, 'question 9');
      expect(failedOver.choices[0]!.message.content).toBeTruthy();
      expect(other.requests).toHaveLength(1);
      first.setFallback({});
      const before = first.requests.length;
      for (let index = 10; index < 16; index++) await ask(key, `question ${index}`);
      expect(other.requests).toHaveLength(7);
      expect(first.requests).toHaveLength(before);
    });

    it('without a key, the same cacheable prefix (up to the last cache_control) sticks the same way, in every dialect', async () => {
      const marked = (question: string) => [
        { role: 'system', content: [{ type: 'text', text: SYSTEM, cache_control: { type: 'ephemeral' } }] },
        { role: 'user', content: question },
      ] as unknown as OpenAI.ChatCompletionMessageParam[];
      await client.chat.completions.create({ model: PAIR, messages: marked('question 0') });
      const first = servedBy().left === 1 ? left : right;
      const other = first === left ? right : left;
      for (let index = 1; index <= 6; index++) await client.chat.completions.create({ model: PAIR, messages: marked(`question ${index}`) });
      // The same prefix in the messages dialect is the same canonical prefix: the same provider.
      const anthropic = anthropicClient(harness.stack.url, harness.apiKey);
      for (let index = 0; index < 2; index++) {
        await anthropic.messages.create({
          model: PAIR, max_tokens: 50,
          system: [{ type: 'text', text: SYSTEM, cache_control: { type: 'ephemeral' } }],
          messages: [{ role: 'user', content: `messages question ${index}` }],
        });
      }
      expect(first.requests).toHaveLength(9);
      expect(other.requests).toHaveLength(0);
    });
  });
});
