import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type OpenAI from 'openai';
import { formatCredits, parseCredits } from '@gateway/platform';
import { startFakeAnthropicUpstream, startFakeUpstream, type FakeAnthropicUpstream, type FakeUpstream } from '@gateway/testing';
import { resetFakes, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { generationRecord } from './configured-stack.js';
import { CACHE_PICO, CACHE_PRICES, CACHE_PRICING_YAML, cacheChargeParts } from './cache-prices.js';
import { anthropicClient } from './messages-e2e-harness.js';
import { catalogYaml, tokenPricing } from './catalog-yaml.js';

/*
 * Cost in every answer (issue 27 item 3), through the whole stack (edge, routing, ledger, Postgres,
 * NATS) and the real SDKs: `usage.cost` (a decimal credit string) and `usage.cost_details` in every JSON
 * answer and in the last streamed usage event of the three dialects, and in embeddings answers. Each is
 * compared with the ledger's own record of that request's charge (GET /v1/generation: total_cost and
 * cost_details, written in the charge's transaction) byte for byte, and with the charge worked out by
 * hand from the fake's counts and the catalog's prices; the parts add up to the cost.
 */

const CACHED = 'testco/claude-costed';
const EMBED = 'testco/embed-costed';
const FALLBACK_DEAD = 'testco/claude-dead';
const GPT = 'testco/gpt-costed';

/** A stream that opens, sends no content and no finish reason, reports usage, and ends (zero-completion insurance). */
const EMPTY_STREAM = [
  { id: 'chatcmpl-empty', object: 'chat.completion.chunk', created: 1_767_225_600, model: 'gpt-upstream', choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] },
  { id: 'chatcmpl-empty', object: 'chat.completion.chunk', created: 1_767_225_600, model: 'gpt-upstream', choices: [], usage: { prompt_tokens: 12, completion_tokens: 0, total_tokens: 12 } },
].map((chunk) => `data: ${JSON.stringify(chunk)}\n\n`).join('') + 'data: [DONE]\n\n';

/** The embeddings model's price, and the same in pico-credits per token. */
const EMBED_PRICE = '0.00000013';
const EMBED_PICO = 130_000n;

/** What the Anthropic fake reports: plain input, cache writes, cache reads and output all at once. */
const USAGE = { input_tokens: 12, cache_creation_input_tokens: 100, cache_read_input_tokens: 2_048, output_tokens: 7 };
const EXPECTED = cacheChargeParts(USAGE);
const EXPECTED_TOTAL = EXPECTED.input + EXPECTED.cache_write + EXPECTED.cache_read + EXPECTED.output;
const EXPECTED_JSON = {
  cost: formatCredits(EXPECTED_TOTAL),
  cost_details: {
    input: formatCredits(EXPECTED.input), output: formatCredits(EXPECTED.output), cache_read: formatCredits(EXPECTED.cache_read),
    cache_write: formatCredits(EXPECTED.cache_write), reasoning: '0',
  },
};

function catalog(claude: FakeAnthropicUpstream, dead: FakeAnthropicUpstream, openai: FakeUpstream): string {
  // The Claude models also take max_tokens (the Messages spelling).
  const claudeParameters = ['temperature', 'max_completion_tokens', 'max_tokens', 'stream_options'];
  return catalogYaml({
    providers: [
      { id: 'anthropic-main', kind: 'anthropic', url: claude.url, keyEnv: 'COST_E2E_ANTHROPIC_KEY' },
      { id: 'anthropic-dead', kind: 'anthropic', url: dead.url, keyEnv: 'COST_E2E_ANTHROPIC_KEY' },
      { id: 'openai-embed', kind: 'openai', url: openai.url, keyEnv: 'COST_E2E_OPENAI_KEY' },
    ],
    models: [
      {
        id: CACHED, supportedParameters: claudeParameters, pricing: CACHE_PRICING_YAML,
        offers: [{ provider: 'anthropic-main', upstreamModel: 'claude-upstream', endpoints: ['chat.completions', 'responses', 'messages'] }],
      },
      {
        id: FALLBACK_DEAD, supportedParameters: claudeParameters, pricing: tokenPricing('0.000001', '0.000002'),
        offers: [{ provider: 'anthropic-dead', upstreamModel: 'claude-dead', endpoints: ['chat.completions', 'responses', 'messages'] }],
      },
      {
        id: GPT, supportedParameters: ['temperature', 'max_completion_tokens', 'stream_options'],
        pricing: `{ per_input_token: "${CACHE_PRICES.input}", per_cached_input_token: "${CACHE_PRICES.cached}", per_output_token: "${CACHE_PRICES.output}" }`,
        offers: [{ provider: 'openai-embed', upstreamModel: 'gpt-upstream', endpoints: ['chat.completions'] }],
      },
      {
        id: EMBED, outputModalities: ['embeddings'], supportedParameters: ['dimensions'], pricing: `{ per_input_token: "${EMBED_PRICE}" }`,
        offers: [{ provider: 'openai-embed', upstreamModel: 'embed-upstream', endpoints: ['embeddings'] }],
      },
    ],
  });
}

interface Shown { cost: string; cost_details: Record<string, string> }

describe('cost in every answer, equal to the ledger charge', () => {
  let claude: FakeAnthropicUpstream;
  let dead: FakeAnthropicUpstream;
  let openai: FakeUpstream;
  let harness: ChatHarness;
  let client: OpenAI;

  beforeAll(async () => {
    [claude, dead, openai] = await Promise.all([startFakeAnthropicUpstream(), startFakeAnthropicUpstream(), startFakeUpstream()]);
    harness = await startChatHarness({
      configYaml: catalog(claude, dead, openai),
      providerSecrets: { COST_E2E_ANTHROPIC_KEY: 'anthropic-key', COST_E2E_OPENAI_KEY: 'openai-key' },
      credits: '100',
    });
    client = harness.client;
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [claude, dead, openai]), 30_000);

  beforeEach(() => resetFakes([claude, dead, openai]));

  /** The answer's cost is the ledger's charge for its request, string for string, and its parts add up. */
  async function expectLedgerCharge(requestId: string | null, shown: Shown | undefined, expected: Shown): Promise<void> {
    expect(requestId).toBeTruthy();
    expect(shown).toBeDefined();
    expect(typeof shown!.cost).toBe('string');
    expect({ cost: shown!.cost, cost_details: shown!.cost_details }).toEqual(expected);
    const parts = Object.values(shown!.cost_details).reduce((sum, part) => sum + parseCredits(part), 0n);
    expect(parts).toBe(parseCredits(shown!.cost));
    const record = await generationRecord(harness.stack.url, harness.apiKey, requestId!);
    expect(record.total_cost).toBe(shown!.cost);
    expect(record.cost_details).toEqual(shown!.cost_details);
  }

  const pick = (usage: any): Shown => ({ cost: usage?.cost, cost_details: usage?.cost_details });

  describe('chat completions', () => {
    it('JSON answer: usage.cost and cost_details, the ledger charge of the request', async () => {
      claude.script({ usage: USAGE });
      const { data, response } = await client.chat.completions.create({ model: CACHED, messages: [{ role: 'user', content: 'Hi' }] }).withResponse();
      await expectLedgerCharge(response.headers.get('x-request-id'), pick(data.usage), EXPECTED_JSON);
    });

    it('stream: the usage chunk carries the same cost', async () => {
      claude.script({ usage: USAGE });
      const { data: stream, response } = await client.chat.completions
        .create({ model: CACHED, messages: [{ role: 'user', content: 'Hi' }], stream: true, stream_options: { include_usage: true } })
        .withResponse();
      let usage: unknown;
      for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
      await expectLedgerCharge(response.headers.get('x-request-id'), pick(usage), EXPECTED_JSON);
    });

    it('a fallback model served: the cost is at its prices, as charged', async () => {
      dead.setFallback({ status: 503 });
      claude.script({ usage: USAGE }, { usage: USAGE });
      const { data, response } = await client.chat.completions
        .create({ model: FALLBACK_DEAD, models: [FALLBACK_DEAD, CACHED], messages: [{ role: 'user', content: 'Hi' }] } as OpenAI.ChatCompletionCreateParamsNonStreaming)
        .withResponse();
      expect(data.model).toBe(CACHED);
      await expectLedgerCharge(response.headers.get('x-request-id'), pick(data.usage), EXPECTED_JSON);
      const { data: stream, response: streamed } = await client.chat.completions
        .create({ model: FALLBACK_DEAD, models: [FALLBACK_DEAD, CACHED], messages: [{ role: 'user', content: 'Hi' }], stream: true, stream_options: { include_usage: true } } as OpenAI.ChatCompletionCreateParamsStreaming)
        .withResponse();
      let usage: unknown;
      for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
      await expectLedgerCharge(streamed.headers.get('x-request-id'), pick(usage), EXPECTED_JSON);
    });

    it('an OpenAI-wire answer with cache reads: every part as the ledger splits it', async () => {
      openai.script({ usage: { prompt_tokens: 1_000, completion_tokens: 40, cached_tokens: 600 } });
      const { data, response } = await client.chat.completions.create({ model: GPT, messages: [{ role: 'user', content: 'Hi' }] }).withResponse();
      const parts = { input: 400n * CACHE_PICO.input, cache_read: 600n * CACHE_PICO.cached, output: 40n * CACHE_PICO.output };
      await expectLedgerCharge(response.headers.get('x-request-id'), pick(data.usage), {
        cost: formatCredits(parts.input + parts.cache_read + parts.output),
        cost_details: { input: formatCredits(parts.input), output: formatCredits(parts.output), cache_read: formatCredits(parts.cache_read), cache_write: '0', reasoning: '0' },
      });
    });

    it('an insured stream (no output, no finish reason): cost 0, as the ledger charges it', async () => {
      openai.script({ replay: { contentType: 'text/event-stream', body: EMPTY_STREAM } });
      const { data: stream, response } = await client.chat.completions
        .create({ model: GPT, messages: [{ role: 'user', content: 'Hi' }], stream: true, stream_options: { include_usage: true } })
        .withResponse();
      let usage: any;
      for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
      expect(usage.prompt_tokens).toBe(12);
      await expectLedgerCharge(response.headers.get('x-request-id'), pick(usage), {
        cost: '0', cost_details: { input: '0', output: '0', cache_read: '0', cache_write: '0', reasoning: '0' },
      });
      expect((await generationRecord(harness.stack.url, harness.apiKey, response.headers.get('x-request-id')!)).insured_reason).toBe('no_output_no_finish_reason');
    });
  });

  describe('responses', () => {
    it('JSON answer: usage.cost and cost_details', async () => {
      claude.script({ usage: USAGE });
      const { data, response } = await client.responses.create({ model: CACHED, input: 'Hi' }).withResponse();
      await expectLedgerCharge(response.headers.get('x-request-id'), pick(data.usage), EXPECTED_JSON);
    });

    it('stream: response.completed carries the same cost', async () => {
      claude.script({ usage: USAGE });
      const { data: stream, response } = await client.responses.create({ model: CACHED, input: 'Hi', stream: true }).withResponse();
      let usage: unknown;
      for await (const event of stream) if (event.type === 'response.completed') usage = event.response.usage;
      await expectLedgerCharge(response.headers.get('x-request-id'), pick(usage), EXPECTED_JSON);
    });
  });

  describe('messages', () => {
    it('JSON answer: usage.cost and cost_details', async () => {
      claude.script({ usage: USAGE });
      const anthropic = anthropicClient(harness.stack.url, harness.apiKey);
      const { data, response } = await anthropic.messages.create({ model: CACHED, max_tokens: 64, messages: [{ role: 'user', content: 'Hi' }] }).withResponse();
      await expectLedgerCharge(response.headers.get('x-request-id'), pick(data.usage), EXPECTED_JSON);
    });

    it('stream: message_delta carries the same cost', async () => {
      claude.script({ usage: USAGE });
      const anthropic = anthropicClient(harness.stack.url, harness.apiKey);
      const { data: stream, response } = await anthropic.messages
        .create({ model: CACHED, max_tokens: 64, messages: [{ role: 'user', content: 'Hi' }], stream: true })
        .withResponse();
      let usage: unknown;
      for await (const event of stream) if (event.type === 'message_delta') usage = event.usage;
      await expectLedgerCharge(response.headers.get('x-request-id'), pick(usage), EXPECTED_JSON);
    });
  });

  it('embeddings: usage.cost at the embedding price, the ledger charge', async () => {
    const { data, response } = await client.embeddings.create({ model: EMBED, input: 'some words to embed' }).withResponse();
    // The fake counts the input's tokens itself: the charge is that count at the embedding price.
    expect(data.usage.prompt_tokens).toBeGreaterThan(0);
    const pico = BigInt(data.usage.prompt_tokens) * EMBED_PICO;
    await expectLedgerCharge(response.headers.get('x-request-id'), pick(data.usage), {
      cost: formatCredits(pico), cost_details: { input: formatCredits(pico), output: '0', cache_read: '0', cache_write: '0', reasoning: '0' },
    });
  });
});
