import Anthropic from '@anthropic-ai/sdk';
import { beforeAll, describe, expect, it } from 'vitest';
import { formatCredits, parseCredits } from '@gateway/platform';
import type { FakeBehaviour, FakeUpstream } from '@gateway/testing';
import { failFirstAttempt, type ChatHarness } from './chat-e2e-harness.js';
import { anthropicClient, expectWellFormedStream, rawPost, UPSTREAM_KINDS } from './messages-e2e-harness.js';
import { BILLED, CACHED_PRICE, CHAT, DUAL, INPUT_PRICE, messagesSuite, OUTPUT_PRICE, PING_INTERVAL_MS } from './messages-e2e-suite.js';


/*
 * The messages dialect's failures through the whole stack (each error in its envelope, failover before
 * the first content, a failure after it) and its billing identity with chat completions, against each
 * upstream kind (messages-e2e-harness.ts). The answers themselves: messages.e2e.test.ts.
 */

describe.each(UPSTREAM_KINDS)('messages dialect over the $kind fake upstream', (kind) => {
  const suite = messagesSuite(kind);
  const { messagesUrl, keyHeaders, oneCharge } = suite;
  let primary: FakeUpstream;
  let secondary: FakeUpstream;
  let harness: ChatHarness;
  let client: Anthropic;
  let poorKey = '';
  beforeAll(() => {
    ({ primary, secondary, harness, client, poorKey } = suite);
  });

  describe('errors, each in the messages envelope by status', () => {
    async function failure(promise: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
      const error = await promise.then(() => undefined, (caught: unknown) => caught);
      expect(error).toBeInstanceOf(Anthropic.APIError);
      return error as InstanceType<typeof Anthropic.APIError>;
    }
    const ask = (model: string, sdk = client) => sdk.messages.create({ model, max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] });

    it('400 invalid_request_error naming the field, 401 authentication_error, 402 billing_error, 403 permission_error', async () => {
      const invalid = await failure(client.messages.create({ model: CHAT, max_tokens: 50, temperature: 3, messages: [{ role: 'user', content: 'hi' }] } as never));
      expect([invalid.status, invalid.type]).toEqual([400, 'invalid_request_error']);
      expect(invalid.apiMessage).toMatch(/^body\.temperature: /);
      expect(invalid.requestID).toMatch(/^req_/);
      const unknownModel = await failure(ask('testco/unknown'));
      expect([unknownModel.status, unknownModel.type]).toEqual([400, 'invalid_request_error']);

      const unauthorized = await failure(ask(CHAT, anthropicClient(harness.stack.url, 'sk-not-a-real-key')));
      expect(unauthorized).toBeInstanceOf(Anthropic.AuthenticationError);
      expect(unauthorized.type).toBe('authentication_error');

      const broke = await failure(ask(CHAT, anthropicClient(harness.stack.url, poorKey)));
      expect([broke.status, broke.type]).toEqual([402, 'billing_error']);

      const forbidden = await failure(ask('testco/premium'));
      expect(forbidden).toBeInstanceOf(Anthropic.PermissionDeniedError);
      expect(forbidden.type).toBe('permission_error');
      expect(primary.requests).toHaveLength(0);
    });

    it('404 not_found_error for an unknown route under /v1/messages and a retired model (410)', async () => {
      // (Message Batches live under /v1/messages/batches now: an unknown path beside them is the 404.)
      const unknown = await failure(client.get('/v1/messages/no-such-route'));
      expect(unknown).toBeInstanceOf(Anthropic.NotFoundError);
      expect(unknown.type).toBe('not_found_error');
      expect(unknown.requestID).toMatch(/^req_/);
      const retired = await failure(ask('testco/retired'));
      expect([retired.status, retired.type]).toEqual([410, 'not_found_error']);
    });

    it('429 rate_limit_error with retry-after', async () => {
      await ask('testco/tight');
      const limited = await failure(ask('testco/tight'));
      expect(limited).toBeInstanceOf(Anthropic.RateLimitError);
      expect(limited.type).toBe('rate_limit_error');
      expect(Number(limited.headers?.get('retry-after'))).toBeGreaterThanOrEqual(1);
    });

    it('503 overloaded_error when no provider can answer, streamed or not, and nothing charged', async () => {
      const before = await harness.charges('testco/nowhere');
      const unary = await failure(ask('testco/nowhere'));
      expect([unary.status, unary.type]).toEqual([503, 'overloaded_error']);
      expect(unary.apiMessage).toBe('No upstream available.');
      const streamed = await failure(client.messages.stream({ model: 'testco/nowhere', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] }).finalMessage());
      expect([streamed.status, streamed.type]).toEqual([503, 'overloaded_error']);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(await harness.charges('testco/nowhere')).toEqual(before);
    });
  });

  describe('failover and failures', () => {
    const attempts = () => primary.requests.length + secondary.requests.length;

    it.each<[string, FakeBehaviour]>([
      ['HTTP 500', { status: 500 }],
      ['a connection reset', { reset: true }],
    ])('before the first content (%s) the other provider answers, charged once', async (_name, fault) => {
      failFirstAttempt([primary, secondary], fault);
      await oneCharge(DUAL, async () => {
        const message = await client.messages.create({ model: DUAL, max_tokens: 100, messages: [{ role: 'user', content: 'Fail over.' }] });
        expect(message.content).toEqual([{ type: 'text', text: 'Hello from the fake upstream.' }]);
      });
      expect(attempts()).toBe(2);
    });

    it.each<[string, FakeBehaviour]>([
      ['HTTP 500', { status: 500 }],
      ['a cut before the first chunk', { cutAfterChunks: 0 }],
    ])('streamed, before the first content (%s) the other provider answers, charged once', async (_name, fault) => {
      failFirstAttempt([primary, secondary], fault);
      await oneCharge(DUAL, async () => {
        const message = await client.messages.stream({ model: DUAL, max_tokens: 100, messages: [{ role: 'user', content: 'Fail over.' }] }).finalMessage();
        expect(message.content).toEqual([{ type: 'text', text: 'Hello from the fake upstream.' }]);
      });
      expect(attempts()).toBe(2);
    });

    it('a slow first token: the stream is committed with message_start and pings, and still fails over before content', async () => {
      failFirstAttempt([primary, secondary], { latencyMs: PING_INTERVAL_MS * 2 + 500, status: 500 });
      let raw!: Awaited<ReturnType<typeof rawPost>>;
      await oneCharge(DUAL, async () => {
        raw = await rawPost(messagesUrl(), keyHeaders(), { model: DUAL, max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'Take your time.' }] });
      });
      expect(raw.status).toBe(200);
      const names = raw.events.map(({ event }) => event);
      expect(names.slice(0, 3)).toEqual(['message_start', 'ping', 'ping']);
      expect(expectWellFormedStream(raw.events)).toEqual(['text']);
      expect(attempts()).toBe(2);
    });

    it('after the first content a failure ends the stream with an error event (never message_stop); the SDK throws; charged once', async () => {
      primary.setFallback({ cutAfterChunks: 1, chunkCount: 3 });
      let raw!: Awaited<ReturnType<typeof rawPost>>;
      await oneCharge(BILLED, async () => {
        raw = await rawPost(messagesUrl(), keyHeaders(), { model: BILLED, max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'Break.' }] });
      });
      const names = raw.events.map(({ event }) => event);
      expect(names).toContain('content_block_delta');
      expect(names.at(-1)).toBe('error');
      expect(names).not.toContain('message_stop');
      expect(raw.events.at(-1)!.data.error).toEqual({ type: expect.stringMatching(/^(api_error|overloaded_error)$/), message: expect.any(String) });

      await oneCharge(BILLED, async () => {
        let text = '';
        const stream = client.messages.stream({ model: BILLED, max_tokens: 100, messages: [{ role: 'user', content: 'Break again.' }] });
        stream.on('text', (piece) => (text += piece));
        const error = await stream.finalMessage().then(() => undefined, (caught: unknown) => caught);
        expect(error).toBeInstanceOf(Anthropic.APIError);
        expect(text.length).toBeGreaterThan(0);
        expect(text.length).toBeLessThan('Hello from the fake upstream.'.length);
      });
    });
  });

  describe('billing identity', () => {
    const conversation = { system: 'You are terse.', user: 'What is the capital of France?' };
    const chatParams = { model: BILLED, max_tokens: 100, messages: [{ role: 'system' as const, content: conversation.system }, { role: 'user' as const, content: conversation.user }] };
    const messagesParams = { model: BILLED, max_tokens: 100, system: conversation.system, messages: [{ role: 'user' as const, content: conversation.user }] };

    const exchanges: Record<string, () => Promise<unknown>> = {
      'chat': () => harness.client.chat.completions.create(chatParams),
      'chat streamed': async () => {
        for await (const _chunk of await harness.client.chat.completions.create({ ...chatParams, stream: true })) {
          // drained
        }
      },
      'messages': () => client.messages.create(messagesParams),
      'messages streamed': () => client.messages.stream(messagesParams).finalMessage(),
    };

    it('the same exchange costs exactly the same via chat and messages, streamed or not', async () => {
      const costs: Record<string, bigint> = {};
      for (const [name, exchange] of Object.entries(exchanges)) costs[name] = await oneCharge(BILLED, exchange);
      expect(costs.chat).toBeGreaterThan(0n);
      expect(new Set(Object.values(costs)).size, JSON.stringify(Object.fromEntries(Object.entries(costs).map(([name, cost]) => [name, formatCredits(cost)])))).toBe(1);
      // The upstream was sent the same conversation each time (its usage counts what it received).
      const sent = primary.requests.map((request) => JSON.stringify(kind.conversation(request)));
      expect(new Set(sent).size).toBe(1);
    });

    it('with prompt-cache reads: the same cost again, and messages usage reports input_tokens without the cached part', async () => {
      primary.setFallback({ usage: { prompt_tokens: 40, completion_tokens: 9, cached_tokens: 30 } });
      const costs: Record<string, bigint> = {};
      for (const [name, exchange] of Object.entries(exchanges)) costs[name] = await oneCharge(BILLED, exchange);
      expect(new Set(Object.values(costs)).size).toBe(1);
      // 10 uncached + 30 cached prompt tokens, each at its own price, and 9 output tokens.
      expect(costs.chat).toBe(10n * parseCredits(INPUT_PRICE) + 30n * parseCredits(CACHED_PRICE) + 9n * parseCredits(OUTPUT_PRICE));
      const expectedUsage = { input_tokens: 10, cache_read_input_tokens: 30, cache_creation_input_tokens: 0, output_tokens: 9 };
      const unary = await oneCharge(BILLED, async () => expect((await client.messages.create(messagesParams)).usage).toMatchObject(expectedUsage));
      const streamed = await oneCharge(BILLED, async () => expect((await client.messages.stream(messagesParams).finalMessage()).usage).toMatchObject(expectedUsage));
      expect([unary, streamed]).toEqual([costs.chat, costs.chat]);
    });
  });
});
