import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { APIError } from 'openai';
import { startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { resetFakes, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { rawPost } from './messages-e2e-harness.js';
import { catalogYaml, tokenPricing, type CatalogModel } from './catalog-yaml.js';

// Issue 27, items 1 and 2: model fallbacks (`models`) and provider preferences (`provider`) through the
// whole stack, in the three dialects, streamed and not. Two OpenAI-compatible fakes are the providers;
// chat completions and responses go through the real `openai` client (the fields ride in the body, as
// `extra_body` does in the Python SDK), messages through raw HTTP.

const PRIMARY = 'testco/primary'; // only on upstream-one; 1 and 2 credits per million tokens
const BACKUP = 'testco/backup'; // only on upstream-two; 3 and 5 credits per million tokens
const DUAL = 'testco/dual'; // on both
const TINY = 'testco/tiny'; // on upstream-one; a 64-token context window
const DEAR = 'testco/dear'; // on upstream-two; half a credit per output token
const PLAIN = 'testco/plain'; // on upstream-two; lists no temperature

/** The fakes report these counts; every charge below is computed by hand from them. */
const USAGE = { prompt_tokens: 11, completion_tokens: 7 };
/** 11 × 0.000003 + 7 × 0.000005 = 0.000033 + 0.000035 = 0.000068 credits, in pico-credits. */
const BACKUP_CHARGE_PICO = 68_000_000n;
/** 11 × 0.000001 + 7 × 0.000002 = 0.000025 credits. */
const DUAL_CHARGE_PICO = 25_000_000n;

function catalog(one: FakeUpstream, two: FakeUpstream): string {
  const model = (id: string, input: string, output: string, providers: string[], window = 8000, supportedParameters = ['temperature', 'max_completion_tokens', 'max_tokens', 'stream_options']): CatalogModel => ({
    id, contextWindow: window, maxOutputTokens: Math.min(window, 1000), supportedParameters,
    pricing: tokenPricing(input, output),
    offers: providers.map((provider) => ({ provider, upstreamModel: `${id.split('/')[1]}-at-${provider}`, endpoints: ['chat.completions', 'messages', 'responses'] })),
  });
  return catalogYaml({
    providers: [
      { id: 'upstream-one', kind: 'openai', url: one.url, keyEnv: 'FALLBACK_KEY' },
      { id: 'upstream-two', kind: 'openai', url: two.url, keyEnv: 'FALLBACK_KEY' },
    ],
    limitGroups: [{ id: 'default', tiers: '{ tier-1: { minute: 6000 } }' }],
    models: [
      model(PRIMARY, '0.000001', '0.000002', ['upstream-one']),
      model(BACKUP, '0.000003', '0.000005', ['upstream-two']),
      model(DUAL, '0.000001', '0.000002', ['upstream-one', 'upstream-two']),
      model(DEAR, '0.000001', '0.5', ['upstream-two']),
      model(TINY, '0.000001', '0.000002', ['upstream-one'], 64),
      model(PLAIN, '0.000001', '0.000002', ['upstream-two'], 8000, ['max_completion_tokens', 'max_tokens', 'stream_options']),
    ],
  });
}

type DialectName = 'chat' | 'messages' | 'responses';
const DIALECTS: readonly DialectName[] = ['chat', 'messages', 'responses'];

interface Outcome {
  status: number;
  /** The model the answer names (the stream's first event for streams). */
  model: string | undefined;
  code: string | undefined;
  param: string | undefined;
  message?: string;
}

describe('model fallbacks and provider preferences (issue 27)', () => {
  let one: FakeUpstream;
  let two: FakeUpstream;
  let harness: ChatHarness;

  beforeAll(async () => {
    [one, two] = await Promise.all([startFakeUpstream(), startFakeUpstream()]);
    harness = await startChatHarness({ configYaml: catalog(one, two), providerSecrets: { FALLBACK_KEY: 'sk-fallback' }, credits: '10' });
  }, 120_000);
  afterAll(() => stopHarnessAndFakes(harness, [one, two]));
  beforeEach(() => resetFakes([one, two], { usage: USAGE }));

  /** One request in a dialect, with the routing fields in its body. */
  async function ask(dialect: DialectName, stream: boolean, fields: Record<string, unknown>): Promise<Outcome> {
    try {
      if (dialect === 'chat') {
        const params = { messages: [{ role: 'user' as const, content: 'Say hello' }], ...fields } as unknown as { model: string; messages: [] };
        if (!stream) {
          const answer = await harness.client.chat.completions.create(params);
          return { status: 200, model: answer.model, code: undefined, param: undefined };
        }
        let model: string | undefined;
        const chunks = await harness.client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
        for await (const chunk of chunks) model ??= chunk.model;
        return { status: 200, model, code: undefined, param: undefined };
      }
      if (dialect === 'responses') {
        const params = { input: 'Say hello', ...fields } as unknown as { model: string; input: string };
        if (!stream) {
          const answer = await harness.client.responses.create(params);
          return { status: 200, model: answer.model, code: undefined, param: undefined };
        }
        let model: string | undefined;
        const events = await harness.client.responses.create({ ...params, stream: true });
        for await (const event of events) if (event.type === 'response.completed') model = event.response.model;
        return { status: 200, model, code: undefined, param: undefined };
      }
    } catch (error) {
      if (!(error instanceof APIError)) throw error;
      const body = error.error as { code?: string; param?: string } | undefined;
      return { status: error.status ?? 0, model: undefined, code: body?.code ?? error.code ?? undefined, param: body?.param ?? undefined, message: error.message };
    }
    const answer = await rawPost(
      `${harness.stack.url}/v1/messages`,
      { authorization: `Bearer ${harness.apiKey}`, 'anthropic-version': '2023-06-01' },
      { max_tokens: 200, messages: [{ role: 'user', content: 'Say hello' }], ...(stream ? { stream: true } : {}), ...fields },
    );
    if (answer.status !== 200) {
      // The messages envelope has no code or param: the message names them.
      const message: string = answer.json?.error?.message ?? '';
      return { status: answer.status, model: undefined, code: /no provider of/.test(message) ? 'no_provider_matches' : /does not exist/.test(message) ? 'model_not_found' : undefined, param: undefined, message };
    }
    if (!stream) return { status: 200, model: answer.json.model, code: undefined, param: undefined };
    const start = answer.events.find((event) => event.event === 'message_start');
    expect(answer.events.at(-1)?.event).toBe('message_stop');
    return { status: 200, model: start?.data.message.model, code: undefined, param: undefined };
  }

  it('falls back to the second model when the first one’s only provider answers 503, in every dialect, streamed and not; each charge is exact at the second model’s prices', async () => {
    one.setFallback({ status: 503 });
    const before = await harness.charges(BACKUP);
    let served = 0;
    for (const dialect of DIALECTS) {
      for (const stream of [false, true]) {
        const outcome = await ask(dialect, stream, { model: PRIMARY, models: [BACKUP] });
        expect(outcome, `${dialect} stream=${stream}`).toMatchObject({ status: 200, model: BACKUP });
        served++;
      }
    }
    // Each request tried the first model's provider once, then the fallback's.
    expect(one.requests).toHaveLength(served);
    expect(two.requests).toHaveLength(served);
    expect(two.requests.every((request) => request.body.model === 'backup-at-upstream-two')).toBe(true);
    const charged = await harness.chargesSettleAt(BACKUP, before.requests + served);
    expect(charged.costPico - before.costPico).toBe(BACKUP_CHARGE_PICO * BigInt(served));
    // Nothing was charged at the first model's prices.
    expect((await harness.charges(PRIMARY)).requests).toBe(0);
  }, 60_000);

  it('`models` alone: the first one serves when it can, and the answer names it', async () => {
    const before = await harness.charges(DUAL);
    const outcome = await ask('chat', false, { models: [DUAL, BACKUP] });
    expect(outcome).toMatchObject({ status: 200, model: DUAL });
    expect(two.requests.length + one.requests.length).toBe(1);
    const charged = await harness.chargesSettleAt(DUAL, before.requests + 1);
    expect(charged.costPico - before.costPico).toBe(DUAL_CHARGE_PICO);
  });

  it('admission holds the dearest candidate: 402 when the balance covers the cheap model but not the dear one, before any upstream call', async () => {
    for (const dialect of DIALECTS) {
      // The cheap model alone is admitted (its worst case is a few thousandths of a credit)…
      expect((await ask(dialect, false, { model: PRIMARY })).status).toBe(200);
      // …with the dear one as a fallback, the worst case is 1,000 output tokens at 0.5 credits: more than the balance.
      const refused = await ask(dialect, false, { model: PRIMARY, models: [DEAR] });
      expect(refused.status, `${dialect}: ${refused.message}`).toBe(402);
    }
    expect(one.requests).toHaveLength(DIALECTS.length);
    expect(two.requests).toHaveLength(0);
  }, 60_000);

  it('invalid model names are 400 before any upstream call', async () => {
    for (const dialect of DIALECTS) {
      const unknown = await ask(dialect, false, { model: PRIMARY, models: [BACKUP, 'testco/nope'] });
      expect(unknown, dialect).toMatchObject({ status: 400, code: 'model_not_found' });
      // The messages envelope carries no param.
      if (dialect !== 'messages') expect(unknown.param).toBe('body.models.1');
      const tooMany = await ask(dialect, false, { models: Array.from({ length: 9 }, () => BACKUP) });
      expect(tooMany.status, dialect).toBe(400);
      const badProvider = await ask(dialect, false, { model: DUAL, provider: { sort: 'fastest' } });
      expect(badProvider.status, dialect).toBe(400);
      const unknownField = await ask(dialect, false, { model: DUAL, provider: { quantizations: ['int4'] } });
      expect(unknownField.status, dialect).toBe(400);
    }
    expect(one.requests.length + two.requests.length).toBe(0);
  }, 60_000);

  it('provider.order picks the named provider first, in every dialect', async () => {
    for (const dialect of DIALECTS) {
      for (const stream of [false, true]) {
        for (const first of ['upstream-two', 'upstream-one']) {
          one.reset();
          two.reset();
          const outcome = await ask(dialect, stream, { model: DUAL, provider: { order: [first] } });
          expect(outcome.status).toBe(200);
          expect((first === 'upstream-one' ? one : two).requests, `${dialect} ${first}`).toHaveLength(1);
          expect((first === 'upstream-one' ? two : one).requests).toHaveLength(0);
        }
      }
    }
  }, 60_000);

  it('only / ignore keep to the allowed providers, and none allowed is 400 no_provider_matches', async () => {
    for (const dialect of DIALECTS) {
      for (let run = 0; run < 3; run++) {
        expect((await ask(dialect, run === 1, { model: DUAL, provider: { only: ['upstream-one'] } })).status).toBe(200);
        expect((await ask(dialect, run === 1, { model: DUAL, provider: { ignore: ['upstream-one'] } })).status).toBe(200);
      }
      // Unknown provider ids are allowed (they match nothing).
      expect((await ask(dialect, false, { model: DUAL, provider: { ignore: ['no-such-provider'] } })).status).toBe(200);
      const none = await ask(dialect, false, { model: DUAL, provider: { only: ['upstream-one'], ignore: ['upstream-one'] } });
      expect(none, dialect).toMatchObject({ status: 400, code: 'no_provider_matches' });
    }
    // `only` upstream-one: 3 dialects × 3 runs; the ignore-an-unknown request went to either provider.
    const oneOnly = one.requests.length;
    const twoOnly = two.requests.length;
    expect(oneOnly + twoOnly).toBe(DIALECTS.length * 7);
    expect(oneOnly).toBeGreaterThanOrEqual(DIALECTS.length * 3);
    expect(twoOnly).toBeGreaterThanOrEqual(DIALECTS.length * 3);
    expect(oneOnly).toBeLessThanOrEqual(DIALECTS.length * 4);
  }, 60_000);

  it('allow_fallbacks: false with the ordered provider failing is an error, and no other provider is called', async () => {
    two.setFallback({ status: 503 });
    for (const dialect of DIALECTS) {
      for (const stream of [false, true]) {
        const outcome = await ask(dialect, stream, { model: DUAL, provider: { order: ['upstream-two'], allow_fallbacks: false } });
        expect(outcome.status, `${dialect} stream=${stream}`).toBe(503);
      }
    }
    expect(one.requests).toHaveLength(0);
    expect(two.requests).toHaveLength(DIALECTS.length * 2);
    // With fallbacks allowed (the default) the other provider answers.
    expect((await ask('chat', false, { model: DUAL, provider: { order: ['upstream-two'] } })).status).toBe(200);
    expect(one.requests).toHaveLength(1);
  }, 60_000);

  it('max_price: a ceiling below every candidate is 400 no_provider_matches; one at the exact price is accepted', async () => {
    for (const dialect of DIALECTS) {
      const none = await ask(dialect, false, { model: PRIMARY, models: [BACKUP], provider: { max_price: { prompt: '0.999999' } } });
      expect(none, dialect).toMatchObject({ status: 400, code: 'no_provider_matches' });
    }
    expect(one.requests.length + two.requests.length).toBe(0);
    // PRIMARY costs exactly 1 credit per million prompt tokens and 2 per million completion tokens.
    expect((await ask('chat', false, { model: PRIMARY, provider: { max_price: { prompt: 1, completion: '2' } } })).model).toBe(PRIMARY);
    // A ceiling the first model exceeds leaves the fallback: it serves.
    const cheaper = await ask('responses', false, { model: BACKUP, models: [PRIMARY], provider: { max_price: { completion: '2.5' } } });
    expect(cheaper).toMatchObject({ status: 200, model: PRIMARY });
    expect(two.requests).toHaveLength(0);
    const malformed = await ask('chat', false, { model: PRIMARY, provider: { max_price: { prompt: 'cheap' } } });
    expect(malformed.status).toBe(400);
  }, 60_000);

  it('a prompt too long for the first model’s window is served by the next model; too long for all is the first one’s 400', async () => {
    const long = Array.from({ length: 120 }, (_, index) => `word${index}`).join(' ');
    const messages = [{ role: 'user', content: long }];
    const served = await ask('chat', false, { model: TINY, models: [BACKUP], messages, max_completion_tokens: 10 });
    expect(served).toMatchObject({ status: 200, model: BACKUP });
    expect(one.requests).toHaveLength(0);
    expect(two.requests).toHaveLength(1);
    const refused = await ask('chat', false, { model: TINY, messages, max_completion_tokens: 10 });
    expect(refused).toMatchObject({ status: 400, code: 'context_length_exceeded' });
  });

  it('require_parameters leaves out a model that lacks a sent parameter', async () => {
    // Every model here has temperature; none lists top_p.
    expect((await ask('chat', false, { model: DUAL, temperature: 0.2, provider: { require_parameters: true } })).status).toBe(200);
    const none = await ask('chat', false, { model: DUAL, top_p: 0.5, provider: { require_parameters: true } });
    expect(none).toMatchObject({ status: 400, code: 'no_provider_matches' });
    // Without it the parameter is dropped and named, as before.
    expect((await ask('chat', false, { model: DUAL, top_p: 0.5 })).status).toBe(200);
  });

  it('a fallback that lacks a sent parameter serves without it, and the answer names it as dropped, in the client’s spelling, streamed and not', async () => {
    one.setFallback({ status: 503 });
    const chatUrl = `${harness.stack.url}/v1/chat/completions`;
    const auth = { authorization: `Bearer ${harness.apiKey}` };
    for (const stream of [false, true]) {
      two.reset();
      two.setFallback({ usage: USAGE });
      const chat = await fetch(chatUrl, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ model: PRIMARY, models: [PLAIN], temperature: 0.2, messages: [{ role: 'user', content: 'Say hello' }], ...(stream ? { stream: true } : {}) }),
      });
      expect(chat.status, `chat stream=${stream}`).toBe(200);
      expect(await chat.text()).toContain(PLAIN);
      // The fallback's provider was sent no temperature, and the answer says so.
      expect(two.requests).toHaveLength(1);
      expect(two.requests[0]!.body.temperature, `chat stream=${stream}`).toBeUndefined();
      expect(chat.headers.get('x-gateway-dropped-params')?.split(','), `chat stream=${stream}`).toContain('temperature');
    }
    // The first model serving: nothing dropped (it lists temperature), and the provider got it.
    one.setFallback({ usage: USAGE });
    one.reset();
    const first = await rawPost(chatUrl, auth, { model: PRIMARY, models: [PLAIN], temperature: 0.2, messages: [{ role: 'user', content: 'Say hello' }] });
    expect(first.status).toBe(200);
    expect(one.requests[0]!.body.temperature).toBe(0.2);
    expect(first.headers.get('x-gateway-dropped-params')).toBeNull();
    // Messages: the same parameter in its spelling.
    one.setFallback({ status: 503 });
    const messages = await rawPost(
      `${harness.stack.url}/v1/messages`,
      { ...auth, 'anthropic-version': '2023-06-01' },
      { model: PRIMARY, models: [PLAIN], temperature: 0.3, max_tokens: 50, messages: [{ role: 'user', content: 'Say hello' }] },
    );
    expect(messages.status).toBe(200);
    expect(messages.headers.get('x-gateway-dropped-params')?.split(',')).toContain('temperature');
  });
});
