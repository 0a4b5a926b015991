import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { createTestBus, createTestDatabase, eventually, type TestBus, type TestDatabase } from '@gateway/testing';
import type { RunningStack } from '../src/index.js';
import { createAccount, type TestAccount } from './catalog-e2e-helpers.js';
import { startTestStack } from './configured-stack.js';

/*
 * Issue 37: what the official SDKs' own resource calls hit, against the stack `npm start` runs (the
 * example catalog, every model on the simulated provider), through the real `openai` and
 * `@anthropic-ai/sdk` clients.
 */
const configPath = fileURLToPath(new URL('../../../deploy/config/gateway.example.yaml', import.meta.url));

describe('SDK resources against the example stack (issue 37)', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let stack: RunningStack;
  let account: TestAccount;
  let openai: OpenAI;
  let anthropic: Anthropic;

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    stack = await startTestStack(database, testBus, { configPath, keyHashSecret: 'sdk-resources-secret-sdk-resources-0000' });
    account = await createAccount(stack, 'sdk-resources', { credits: '10', tier: 'tier-2' });
    openai = new OpenAI({ apiKey: account.apiKey, baseURL: `${stack.url}/v1`, maxRetries: 0 });
    anthropic = new Anthropic({ apiKey: account.apiKey, baseURL: stack.url, maxRetries: 0 });
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
    await testBus?.destroy();
    await database?.drop();
  });

  it('chat.completions.create with reasoning_effort none and xhigh (item 1)', async () => {
    for (const effort of ['none', 'xhigh'] as const) {
      const completion = await openai.chat.completions.create({ model: 'nebula/reasoner', reasoning_effort: effort, messages: [{ role: 'user', content: 'hi' }] });
      expect(completion.choices[0]!.message.role).toBe('assistant');
    }
  });

  it('responses.create and responses.compact with instructions and no input (item 5)', async () => {
    const response = await openai.responses.create({ model: 'acme/chat-small', instructions: 'Say hello.' });
    expect(response.status).toBe('completed');
    expect(response.output_text.length).toBeGreaterThan(0);
    const compacted = await openai.responses.compact({ model: 'acme/chat-small', instructions: 'Say hello.' });
    expect(compacted.object).toBe('response.compaction');
    const refused = await openai.responses.create({ model: 'acme/chat-small' }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).message).toContain('body.input: is required when `instructions` is empty');
  });

  it('images.generate and images.edit with size auto (item 3)', async () => {
    const generated = await openai.images.generate({ model: 'nebula/image-1', prompt: 'a red square', size: 'auto', response_format: 'b64_json' });
    expect(generated.data?.[0]?.b64_json?.length).toBeGreaterThan(0);
    const png = Buffer.from(generated.data![0]!.b64_json!, 'base64');
    const edited = await openai.images.edit({
      model: 'nebula/image-1',
      prompt: 'make it blue',
      size: 'auto',
      response_format: 'b64_json',
      image: await OpenAI.toFile(png, 'square.png', { type: 'image/png' }),
    });
    expect(edited.data?.[0]?.b64_json?.length).toBeGreaterThan(0);
  });

  it('beta.messages.countTokens and beta.messages.create (?beta=true) (item 8)', async () => {
    const counted = await anthropic.beta.messages.countTokens({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Count these words.' }] });
    expect(counted.input_tokens).toBeGreaterThan(0);
    const message = await anthropic.beta.messages.create({ model: 'acme/chat-small', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] });
    expect(message.type).toBe('message');
  });

  it('responses.inputTokens.count: the gateway tokenizer count, key required, nothing charged (item 4)', async () => {
    const body = { model: 'acme/chat-small', instructions: 'Be brief.', input: 'How many tokens is this question?' } as const;
    // An account of its own: no earlier request's charge can still be settling while its balance is compared.
    const counter = await createAccount(stack, 'sdk-resources-counter', { credits: '1', tier: 'tier-2' });
    const counting = new OpenAI({ apiKey: counter.apiKey, baseURL: `${stack.url}/v1`, maxRetries: 0 });
    const before = await balance(counter);
    const counted = await counting.responses.inputTokens.count(body);
    expect(counted).toEqual({ object: 'response.input_tokens', input_tokens: expect.any(Number) });
    expect(counted.input_tokens).toBeGreaterThan(5);
    // The same prompt through the messages dialect's count_tokens counts the same.
    const messages = await anthropic.messages.countTokens({ model: 'acme/chat-small', system: 'Be brief.', messages: [{ role: 'user', content: 'How many tokens is this question?' }] });
    expect(counted.input_tokens).toBe(messages.input_tokens);
    // A longer input counts more; tools count too.
    const longer = await counting.responses.inputTokens.count({ ...body, input: 'How many tokens is this question? '.repeat(20) });
    expect(longer.input_tokens).toBeGreaterThan(counted.input_tokens);
    expect(await balance(counter)).toBe(before);
    const anonymous = await fetch(`${stack.url}/v1/responses/input_tokens`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect(anonymous.status).toBe(401);
    const unknown = await openai.responses.inputTokens.count({ ...body, model: 'acme/nope' }).catch((error: unknown) => error);
    expect(unknown).toBeInstanceOf(OpenAI.BadRequestError);
  });

  it('responses.inputTokens.count with no input, and with no body at all: a count calls no model, so it counts what it is given (the SDK test)', async () => {
    // `input`, `instructions` and `model` are all optional on OpenAI's input_tokens endpoint; the SDK's
    // generated test calls `count()` with an empty body. Nothing to send a model is no refusal here: no model is called.
    const empty = await openai.responses.inputTokens.count({ model: 'acme/chat-small' });
    expect(empty).toEqual({ object: 'response.input_tokens', input_tokens: expect.any(Number) });
    const some = await openai.responses.inputTokens.count({ model: 'acme/chat-small', input: 'How many tokens is this question?' });
    expect(some.input_tokens).toBeGreaterThan(empty.input_tokens);
    // No model: the catalog's default for responses (the example sets none: the first model by id served on responses).
    const bare = await openai.responses.inputTokens.count();
    expect(bare).toEqual(empty);
    const bareWithInput = await openai.responses.inputTokens.count({ input: 'How many tokens is this question?' });
    expect(bareWithInput).toEqual(some);
    // The default is judged like a named model: an unknown name in `model` is still a 400.
    const unknown = await openai.responses.inputTokens.count({ model: 'acme/nope' }).catch((error: unknown) => error);
    expect(unknown).toBeInstanceOf(OpenAI.BadRequestError);
  });

  it('responses.compact with only a model: the summary prompt alone goes to the model (the SDK test)', async () => {
    const compacted = await openai.responses.compact({ model: 'acme/chat-small' });
    expect(compacted.object).toBe('response.compaction');
    // No user message to keep: the output is the one compaction item.
    expect(compacted.output.map((item) => item.type)).toEqual(['compaction']);
    expect(compacted.usage.input_tokens).toBeGreaterThan(0);
    // responses.create keeps refusing a request with nothing to send (covered above); create with no model too.
    const noModel = await openai.responses.create({ instructions: 'Say hello.' }).catch((error: unknown) => error);
    expect(noModel).toBeInstanceOf(OpenAI.BadRequestError);
    expect((noModel as InstanceType<typeof OpenAI.BadRequestError>).message).toContain('body.model: is required: name the model');
  });

  it('Anthropic SDK models.list and models.retrieve: Anthropic model objects and paging (item 7)', async () => {
    const openaiIds: string[] = [];
    for await (const model of openai.models.list()) openaiIds.push(model.id);
    expect(openaiIds.length).toBeGreaterThan(4);

    const first = await anthropic.models.list({ limit: 2 });
    expect(first.data).toHaveLength(2);
    expect(first.has_more).toBe(true);
    expect(first.first_id).toBe(openaiIds[0]);
    expect(first.last_id).toBe(openaiIds[1]);
    for (const model of first.data) {
      expect(model).toMatchObject({ type: 'model', id: expect.any(String), display_name: expect.any(String), lifecycle: 'active' });
      expect(model.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
      expect(model).not.toHaveProperty('object');
    }
    // The SDK's auto-paging walks every page (after_id = last_id) and sees the same models in the same order.
    const walked: string[] = [];
    for await (const model of anthropic.models.list({ limit: 2 })) walked.push(model.id);
    expect(walked).toEqual(openaiIds);
    const whole = await anthropic.models.list();
    expect(whole.data.map((model) => model.id)).toEqual(openaiIds.slice(0, 20));
    expect(whole.has_more).toBe(openaiIds.length > 20);
    // before_id: the page just before that model, its predecessors remaining named by has_more.
    const before = await anthropic.models.list({ before_id: openaiIds[3]!, limit: 2 });
    expect(before.data.map((model) => model.id)).toEqual([openaiIds[1], openaiIds[2]]);
    expect(before.has_more).toBe(true);
    const after = await anthropic.models.list({ after_id: openaiIds.at(-2)!, limit: 5 });
    expect(after.data.map((model) => model.id)).toEqual([openaiIds.at(-1)]);
    expect(after.has_more).toBe(false);

    const model = await anthropic.models.retrieve('acme/chat-small');
    expect(model).toMatchObject({ type: 'model', id: 'acme/chat-small', display_name: expect.any(String), max_input_tokens: expect.any(Number) });
    expect(new Date(model.created_at).getTime()).toBeGreaterThan(0);

    const missing = await anthropic.models.retrieve('acme/nope').catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(Anthropic.NotFoundError);
    expect((missing as InstanceType<typeof Anthropic.NotFoundError>).error).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
    for (const query of [{ limit: 0 }, { limit: 1001 }, { after_id: 'acme/nope' }, { after_id: openaiIds[0]!, before_id: openaiIds[2]! }]) {
      const refused = await anthropic.models.list(query).catch((error: unknown) => error);
      expect(refused, JSON.stringify(query)).toBeInstanceOf(Anthropic.BadRequestError);
      expect((refused as InstanceType<typeof Anthropic.BadRequestError>).error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    }
    // Without anthropic-version the listing stays OpenAI's.
    const plain = await fetch(`${stack.url}/v1/models/acme/chat-small`, { headers: { authorization: `Bearer ${account.apiKey}` } });
    expect(await plain.json()).toMatchObject({ object: 'model', id: 'acme/chat-small' });
  });

  it('moderations.create and images.generate / images.edit without a model: the catalog defaults (item 2)', async () => {
    const moderation = await openai.moderations.create({ input: 'I want to hug a kitten.' });
    expect(moderation.model).toBe('acme/moderation-1');
    expect(moderation.results).toHaveLength(1);
    const generated = await openai.images.generate({ prompt: 'a green circle', response_format: 'b64_json' }).withResponse();
    // The generation record names the model that served (images answers carry no model field).
    await eventually(async () => {
      const lookup = await fetch(`${stack.url}/v1/generation?id=${generated.response.headers.get('x-gateway-request-id')}`, { headers: { authorization: `Bearer ${account.apiKey}` } });
      expect(lookup.status).toBe(200);
      expect(await lookup.json()).toMatchObject({ data: { model: 'nebula/image-1' } });
    }, 10_000);
    expect(generated.data.data?.[0]?.b64_json?.length).toBeGreaterThan(0);
    const png = Buffer.from(generated.data.data![0]!.b64_json!, 'base64');
    const edited = await openai.images.edit({ prompt: 'make it red', response_format: 'b64_json', image: await OpenAI.toFile(png, 'circle.png', { type: 'image/png' }) });
    expect(edited.data?.[0]?.b64_json?.length).toBeGreaterThan(0);
    // Embeddings keep `model` required (OpenAI's API does too).
    const embeddings = await fetch(`${stack.url}/v1/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${account.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input: 'x' }),
    });
    expect(embeddings.status).toBe(400);
    expect(await embeddings.json()).toMatchObject({ error: { param: 'body.model' } });
  });

  async function balance(owner: TestAccount): Promise<string> {
    const answer = await fetch(`${stack.url}/v1/account/balance`, { headers: { authorization: `Bearer ${owner.provisioningKey}` } });
    expect(answer.status).toBe(200);
    return JSON.stringify(await answer.json());
  }
});
