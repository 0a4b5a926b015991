import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createClient, parseCredits, type PromiseClient } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { eventually, type FakeUpstream } from '@gateway/testing';
import { pricedTokens } from './chat-e2e-harness.js';
import { testAdmission } from './admission-mode.js';
import { expectNothingReservedAfterStop, startConfiguredStack, statusOf, testCatalog, type ConfiguredStack } from './configured-stack.js';

// The gateway against a hostile but honest caller (issue: billing integrity): a caller's x-request-id
// is never the key money moves under, a burst at a low balance is answered only 200 / 402 / 429, a prompt
// that cannot fit the model's context window is a 400 before any provider call, and admission holds the
// request's worst-case cost, so one request cannot overspend the balance. Runs in both admission modes.

const BURST = 'testco/burst';
const WINDOW = 'testco/small-window';
const WORST = 'testco/long-output';
const WORST_DROPPED = 'testco/long-output-no-max';
const INPUT_PRICE = '0.000001';
const OUTPUT_PRICE = '0.000002';

function config(upstream: FakeUpstream): string {
  return testCatalog(upstream, {
    apiKeyEnv: 'INTEGRITY_KEY',
    perMinute: 100_000,
    models: [
      // max_output_tokens keeps the worst case (≈0.002 credits) under the flat 0.05 hold.
      { id: BURST, upstreamModel: 'burst', inputPrice: INPUT_PRICE, outputPrice: OUTPUT_PRICE, contextWindow: 8_000, maxOutputTokens: 1_000,
        supportedParameters: ['max_completion_tokens', 'stream_options'] },
      { id: WINDOW, upstreamModel: 'window', inputPrice: INPUT_PRICE, outputPrice: OUTPUT_PRICE, contextWindow: 1_000,
        supportedParameters: ['max_completion_tokens'] },
      // No output cap: a request without max_completion_tokens may produce a whole window (128k × 0.0000015 ≈ 0.19).
      { id: WORST, upstreamModel: 'worst', inputPrice: '0.0000005', outputPrice: '0.0000015', contextWindow: 128_000,
        supportedParameters: ['max_completion_tokens'] },
      // max_completion_tokens is not forwarded to this model's providers, so it cannot bound the output.
      { id: WORST_DROPPED, upstreamModel: 'worst-dropped', inputPrice: '0.0000005', outputPrice: '0.0000015', contextWindow: 128_000,
        supportedParameters: ['temperature'] },
    ],
  });
}

type Status = number | string;

describe(`billing integrity under hostile callers (${testAdmission} admission)`, () => {
  let fixture: ConfiguredStack | undefined;
  const accounts: string[] = [];

  const account = async (credits: string, keyArgs: string[] = []) => {
    const { accountId, apiKey } = await fixture!.accountKey('hostile', credits, keyArgs);
    accounts.push(accountId);
    const client = (headers: Record<string, string> = {}) =>
      new OpenAI({ baseURL: `${fixture!.stack.url}/v1`, apiKey, maxRetries: 0, timeout: 60_000, defaultHeaders: headers });
    return { accountId, client };
  };
  const withLedger = async <T>(use: (client: PromiseClient<LedgerServiceClient>) => Promise<T>): Promise<T> => {
    const client = createClient(LedgerServiceClient, LedgerServiceService, fixture!.stack.addresses.ledger);
    try {
      return await use(client);
    } finally {
      client.close();
    }
  };
  const charged = (accountId: string, model: string) => fixture!.charged(accountId, model);
  const statusCounts = (statuses: Status[]) => {
    const counts: Record<string, number> = {};
    for (const status of statuses) counts[String(status)] = (counts[String(status)] ?? 0) + 1;
    return counts;
  };

  beforeAll(async () => {
    fixture = await startConfiguredStack({
      name: 'integrity', config, keyHashSecret: 'integrity-e2e-secret-integrity-e2e-01', providerSecrets: { INTEGRITY_KEY: 'sk-integrity' },
      ledger: { leaseDrainMs: 500 },
    });
  }, 120_000);

  afterAll(async () => {
    await fixture?.stop();
  });

  describe('x-request-id is a correlation id, never the key of a charge', () => {
    it('ten sequential requests reusing one id are each answered and each charged', async () => {
      const { accountId, client } = await account('10');
      const reused = client({ 'x-request-id': 'hostile-reused-0001' });
      const gatewayIds = new Set<string>();
      let expected = 0n;
      for (let index = 0; index < 10; index++) {
        const { data, response } = await reused.chat.completions.create({ model: BURST, messages: [{ role: 'user', content: `Reused ${index}` }] }).withResponse();
        expect(response.headers.get('x-request-id')).toBe('hostile-reused-0001');
        gatewayIds.add(response.headers.get('x-gateway-request-id')!);
        expected += pricedTokens(data.usage!.prompt_tokens, data.usage!.completion_tokens, INPUT_PRICE, OUTPUT_PRICE);
      }
      expect(gatewayIds.size).toBe(10);
      for (const id of gatewayIds) expect(id).toMatch(/^req_[0-9a-f]{32}$/);
      await eventually(async () => expect(await charged(accountId, BURST)).toEqual({ requests: 10, costPico: expected }), 15_000);
    });

    it("another account reusing the first account's id is answered and charged, and the first is not charged for it", async () => {
      const first = await account('10');
      const second = await account('10');
      const id = { 'x-request-id': 'hostile-cross-account-0001' };
      const one = await first.client(id).chat.completions.create({ model: BURST, messages: [{ role: 'user', content: 'First account' }] });
      const two = await second.client(id).chat.completions.create({ model: BURST, messages: [{ role: 'user', content: 'Second account, longer prompt' }] });
      await eventually(async () => {
        expect(await charged(first.accountId, BURST)).toEqual({ requests: 1, costPico: pricedTokens(one.usage!.prompt_tokens, one.usage!.completion_tokens, INPUT_PRICE, OUTPUT_PRICE) });
        expect(await charged(second.accountId, BURST)).toEqual({ requests: 1, costPico: pricedTokens(two.usage!.prompt_tokens, two.usage!.completion_tokens, INPUT_PRICE, OUTPUT_PRICE) });
      }, 15_000);
    });

    it('100 concurrent streams with one id on 0.3 credits: only 200 or 402, every delivered stream charged once', async () => {
      const { accountId, client } = await account('0.3');
      const reused = client({ 'x-request-id': 'hostile-concurrent-0001' });
      fixture!.upstream.setFallback({ chunkDelayMs: 100, chunkCount: 3 });
      let delivered = 0;
      try {
        const statuses = await Promise.all(Array.from({ length: 100 }, (_, index) => statusOf((async () => {
          const stream = await reused.chat.completions.create({ model: BURST, messages: [{ role: 'user', content: `Concurrent ${index}` }], stream: true });
          let content = '';
          for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? '';
          expect(content.length).toBeGreaterThan(0);
          delivered++;
        })())));
        const counts = statusCounts(statuses);
        expect(Object.keys(counts).every((status) => status === '200' || status === '402 insufficient_quota'), JSON.stringify(counts)).toBe(true);
        expect(counts['200']).toBeGreaterThan(0);
        expect(counts['402 insufficient_quota']).toBeGreaterThan(0);
      } finally {
        fixture!.upstream.setFallback({});
      }
      await eventually(async () => expect((await charged(accountId, BURST)).requests).toBe(delivered), 15_000);
      const balance = await withLedger((ledger) => ledger.getBalance({ accountId }));
      expect(parseCredits(balance.balance)).toBe(parseCredits('0.3') - (await charged(accountId, BURST)).costPico);
    }, 90_000);
  });

  describe('a burst of 100 paid requests at a low balance: only 200 / 402 / 429', () => {
    for (const credits of ['0.06', '0.3', '1']) {
      it(`at ${credits} credits`, async () => {
        const { accountId, client } = await account(credits);
        fixture!.upstream.setFallback({ latencyMs: 200 });
        let statuses: Status[];
        const startedAt = performance.now();
        try {
          statuses = await Promise.all(Array.from({ length: 100 }, (_, index) =>
            statusOf(client().chat.completions.create({ model: BURST, messages: [{ role: 'user', content: `Burst ${index}` }] }))));
        } finally {
          fixture!.upstream.setFallback({});
        }
        const counts = statusCounts(statuses);
        console.log(`burst of 100 at ${credits} credits (${testAdmission}): ${JSON.stringify(counts)} in ${Math.round(performance.now() - startedAt)} ms`);
        expect(Object.keys(counts).every((status) => ['200', '402 insufficient_quota', '429'].includes(status)), JSON.stringify(counts)).toBe(true);
        expect(counts['200'] ?? 0).toBeGreaterThan(0);
        expect(counts['402 insufficient_quota'] ?? 0).toBeGreaterThan(0);
        await eventually(async () => expect((await charged(accountId, BURST)).requests).toBe(counts['200']), 15_000);
        const { costPico } = await charged(accountId, BURST);
        const balance = await withLedger((ledger) => ledger.getBalance({ accountId }));
        expect(parseCredits(balance.balance)).toBe(parseCredits(credits) - costPico);
        expect(parseCredits(balance.balance)).toBeGreaterThanOrEqual(0n);
      }, 90_000);
    }

    it('on a key whose credit_limit is 0.06', async () => {
      const { accountId, client } = await account('10', ['--credit-limit', '0.06']);
      fixture!.upstream.setFallback({ latencyMs: 200 });
      let statuses: Status[];
      try {
        statuses = await Promise.all(Array.from({ length: 100 }, (_, index) =>
          statusOf(client().chat.completions.create({ model: BURST, messages: [{ role: 'user', content: `Key burst ${index}` }] }))));
      } finally {
        fixture!.upstream.setFallback({});
      }
      const counts = statusCounts(statuses);
      expect(Object.keys(counts).every((status) => ['200', '402 key_limit_exceeded', '402 insufficient_quota', '429'].includes(status)), JSON.stringify(counts)).toBe(true);
      expect(counts['200'] ?? 0).toBeGreaterThan(0);
      await eventually(async () => expect((await charged(accountId, BURST)).requests).toBe(counts['200']), 15_000);
      expect((await charged(accountId, BURST)).costPico).toBeLessThanOrEqual(parseCredits('0.06'));
    }, 90_000);
  });

  describe("the model's context window and the request's worst-case cost", () => {
    it('a prompt larger than the context window is a 400 naming it, before any provider call and without a charge', async () => {
      const { accountId, client } = await account('10');
      const before = fixture!.upstream.requests.length;
      const tooLong = 'lorem ipsum dolor sit amet '.repeat(2_000);
      const failure = await client().chat.completions.create({ model: WINDOW, messages: [{ role: 'user', content: tooLong }] }).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(OpenAI.BadRequestError);
      const error = failure as InstanceType<typeof OpenAI.BadRequestError>;
      expect(error.code).toBe('context_length_exceeded');
      expect(error.param).toBe('body.messages');
      expect(error.message).toContain('1000 tokens');
      expect(error.headers?.get('x-request-id')).toBeTruthy();
      // An 8 MB prompt is refused as quickly (the tokenizer stops once the window is exceeded), never a 5xx.
      const huge = await client().chat.completions.create({ model: WINDOW, messages: [{ role: 'user', content: 'x y '.repeat(2_000_000) }] }).catch((caught: unknown) => caught);
      expect((huge as InstanceType<typeof OpenAI.APIError>).status).toBe(400);
      expect((huge as InstanceType<typeof OpenAI.APIError>).code).toBe('context_length_exceeded');
      // A prompt that fits but asks for more output than the window leaves.
      const asksTooMuch = await client().chat.completions.create({ model: WINDOW, messages: [{ role: 'user', content: 'Hello' }], max_completion_tokens: 5_000 })
        .catch((caught: unknown) => caught) as InstanceType<typeof OpenAI.APIError>;
      expect(asksTooMuch.status).toBe(400);
      expect(asksTooMuch.param).toBe('body.max_completion_tokens');
      expect(fixture!.upstream.requests.length).toBe(before);
      // A prompt that fits is served.
      await client().chat.completions.create({ model: WINDOW, messages: [{ role: 'user', content: 'Hello' }], max_completion_tokens: 100 });
      await eventually(async () => expect((await charged(accountId, WINDOW)).requests).toBe(1), 15_000);
    }, 60_000);

    it('admission holds the worst case: 402 naming the affordable output when it does not fit, 200 with a smaller max_completion_tokens', async () => {
      const { accountId, client } = await account('0.1');
      const before = fixture!.upstream.requests.length;
      const unbounded = await client().chat.completions.create({ model: WORST, messages: [{ role: 'user', content: 'Write a lot.' }] })
        .catch((caught: unknown) => caught) as InstanceType<typeof OpenAI.APIError>;
      expect(unbounded.status).toBe(402);
      expect(unbounded.code).toBe('insufficient_quota');
      expect(unbounded.message).toContain('128000 output tokens');
      expect(unbounded.message).toContain('max_completion_tokens');
      // Not forwarded to this model's providers, so max_completion_tokens does not bound it: still 402.
      const dropped = await client().chat.completions.create({ model: WORST_DROPPED, messages: [{ role: 'user', content: 'Write a lot.' }], max_completion_tokens: 100 })
        .catch((caught: unknown) => caught) as InstanceType<typeof OpenAI.APIError>;
      expect(dropped.status).toBe(402);
      expect(fixture!.upstream.requests.length).toBe(before);
      await client().chat.completions.create({ model: WORST, messages: [{ role: 'user', content: 'Write a little.' }], max_completion_tokens: 1_000 });
      await eventually(async () => expect((await charged(accountId, WORST)).requests).toBe(1), 15_000);
    }, 60_000);

    it('a worst case above the key credit limit is a 402 key_limit_exceeded', async () => {
      const { client } = await account('10', ['--credit-limit', '0.1']);
      const refused = await client().chat.completions.create({ model: WORST, messages: [{ role: 'user', content: 'Write a lot.' }] })
        .catch((caught: unknown) => caught) as InstanceType<typeof OpenAI.APIError>;
      expect(refused.status).toBe(402);
      expect(refused.code).toBe('key_limit_exceeded');
    }, 60_000);
  });

  it('after the stack stops nothing stays reserved, and the journal matches every balance', async () => {
    await expectNothingReservedAfterStop(fixture!, accounts);
  }, 60_000);
});
