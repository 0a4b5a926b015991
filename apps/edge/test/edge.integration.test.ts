import { describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { ErrorReason, GatewayError, GrpcStatus } from '@gateway/platform';
import { eventually } from '@gateway/testing';
import { startEdge } from '../src/index.js';
import { logger, useEdgeFixture } from './edge-fixture.js';
import { chatResponse, delta, deltaEvent, startEvent, usage } from './fakes.js';

// POST /v1/chat/completions through a real edge in front of fake services (edge-fixture.ts). The edge's other
// routes and its body limits, dispatch, caches: edge-routes.integration.test.ts.
const fixture = useEdgeFixture();
const { client } = fixture;

describe('POST /v1/chat/completions with the openai SDK', () => {
  it('answers a plain completion in the spec 2.5 shape, resolving the alias and routing by the key default', async () => {
    const { data, response } = await client('sk-good')
      .chat.completions.create({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 20, logit_bias: { '1': 5 } })
      .withResponse();
    expect(data.id).toMatch(/^chatcmpl-/);
    expect(data.object).toBe('chat.completion');
    expect(data.model).toBe('acme/chat-small');
    expect(data.choices[0]?.message).toMatchObject({ role: 'assistant', content: 'Hello there.' });
    expect(data.choices[0]?.finish_reason).toBe('stop');
    expect(data.usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 3, total_tokens: 14 });
    const requestId = response.headers.get('x-request-id');
    expect(requestId).toBeTruthy();
    expect(response.headers.get('x-gateway-api-version')).toBe('2026-03-31');
    expect(response.headers.get('x-gateway-routing-strategy')).toBe('latency');
    expect(response.headers.get('x-gateway-dropped-params')).toBe('logit_bias');
    const sent = fixture.fakes.router.chats.at(-1);
    expect(sent).toMatchObject({ modelId: 'acme/chat-small', routingStrategy: 'latency', endpoint: 'chat.completions', maxOutputTokens: 20 });
    expect(sent?.context).toEqual({ requestId, accountId: 'acct_1', keyId: 'key_1' });
    expect(JSON.stringify(sent, (_key, value: unknown) => (typeof value === 'bigint' ? String(value) : value))).not.toContain('logit');
    const admit = fixture.fakes.ledger.admits.at(-1);
    expect(admit).toMatchObject({ modelId: 'acme/chat-small', paid: true, tier: 'tier-1', limitGroup: 'default', requestsPerMinute: 600 });
    expect(admit?.requestsPerDay).toBeUndefined();
  });

  it('sends chats as Router.Exchange frames by default, and as a call each with routerTransport: calls', async () => {
    const perCallBefore = fixture.fakes.router.perCallChats;
    const exchangeCallsBefore = fixture.fakes.router.exchangeCalls;
    const viaExchange = await client('sk-good').chat.completions.create({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }] });
    expect(viaExchange.choices[0]?.message.content).toBe('Hello there.');
    expect(fixture.fakes.router.perCallChats).toBe(perCallBefore);
    const callsEdge = await startEdge({ port: 0, ...fixture.fakes.addresses, bus: fixture.testBus.bus, logger, admission: 'ledger', routerTransport: 'calls' });
    try {
      const callsClient = new OpenAI({ baseURL: `${callsEdge.url}/v1`, apiKey: 'sk-good', maxRetries: 0 });
      const plain = await callsClient.chat.completions.create({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }] });
      expect(plain.choices[0]?.message.content).toBe('Hello there.');
      let streamed = '';
      for await (const chunk of await callsClient.chat.completions.create({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }], stream: true })) {
        streamed += chunk.choices[0]?.delta.content ?? '';
      }
      expect(streamed).toBe('Hello!');
      expect(fixture.fakes.router.perCallChats - perCallBefore).toBe(2);
    } finally {
      await callsEdge.stop();
    }
    // Only the default edge's one long-lived call (opened by its first chat, here or earlier in the file).
    expect(fixture.fakes.router.exchangeCalls - exchangeCallsBefore).toBeLessThanOrEqual(1);
  });

  it('lists the parameters dropped by the edge and by the router in x-gateway-dropped-params', async () => {
    const previous = fixture.fakes.router.chatAnswer;
    fixture.fakes.router.chatAnswer = async (request) => ({ ...chatResponse(request, 'ok'), droppedParams: ['stop'] });
    try {
      const { response } = await client('sk-good')
        .chat.completions.create({ model: 'acme/free-tiny', messages: [{ role: 'user', content: 'x' }], top_p: 0.5, stop: 'END' })
        .withResponse();
      // free-tiny supports only temperature: the edge drops stop and top_p itself; the router's list is merged.
      expect(response.headers.get('x-gateway-dropped-params')).toBe('stop,top_p');
      const sent = fixture.fakes.router.chats.at(-1);
      expect(sent?.topP).toBeUndefined();
      expect(sent?.stop).toEqual([]);
      expect(fixture.fakes.ledger.admits.at(-1)?.paid).toBe(false);
    } finally {
      fixture.fakes.router.chatAnswer = previous;
    }
  });

  it('takes the strategy from the body over the header, and the header over the key default', async () => {
    const openai = client('sk-good');
    const fromHeader = await openai.chat.completions
      .create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'x' }] }, { headers: { 'x-gateway-routing-strategy': 'cache' } })
      .withResponse();
    expect(fromHeader.response.headers.get('x-gateway-routing-strategy')).toBe('cache');
    const fromBody = await openai.chat.completions
      .create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'x' }], routing: 'throughput' } as never, {
        headers: { 'x-gateway-routing-strategy': 'cache' },
      })
      .withResponse();
    expect(fromBody.response.headers.get('x-gateway-routing-strategy')).toBe('throughput');
    const unknown = await openai.chat.completions
      .create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'x' }] }, { headers: { 'x-gateway-routing-strategy': 'fastest' } })
      .catch((error: unknown) => error);
    expect(unknown).toBeInstanceOf(OpenAI.BadRequestError);
  });

  it('streams chunks without a usage chunk when include_usage is not set', async () => {
    const stream = await client('sk-good').chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }], stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? '').join('')).toBe('Hello!');
    expect(chunks.every((chunk) => chunk.object === 'chat.completion.chunk' && chunk.model === 'acme/chat-small')).toBe(true);
    expect(chunks[0]?.choices[0]?.delta.role).toBe('assistant');
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('stop');
    expect(chunks.some((chunk) => chunk.usage)).toBe(false);
    expect(fixture.fakes.router.chats.at(-1)?.includeUsage).toBe(false);
  });

  it('asks for the first delta inside the start and streams it first when the router sends it there', async () => {
    const previous = fixture.fakes.router.streamScript;
    fixture.fakes.router.streamScript = async function* (request) {
      const start = startEvent(request);
      if (start.event?.$case === 'start') start.event.value.firstDelta = delta('Hel');
      yield start;
      yield deltaEvent('lo', 'stop');
      yield { event: { $case: 'usage', value: usage(7, 2) } };
    };
    try {
      const stream = await client('sk-good').chat.completions.create({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }], stream: true });
      const pieces: string[] = [];
      for await (const chunk of stream) pieces.push(chunk.choices[0]?.delta?.content ?? '');
      expect(pieces.join('')).toBe('Hello');
      expect(pieces[0]).toBe('Hel');
      expect(fixture.fakes.router.combinedStarts.at(-1)).toBe(true);
    } finally {
      fixture.fakes.router.streamScript = previous;
    }
  });

  it('streams a final usage chunk when stream_options.include_usage is true', async () => {
    const stream = await client('sk-good').chat.completions.create({
      model: 'acme/chat-small',
      messages: [{ role: 'user', content: 'Hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1);
    expect(last?.choices).toEqual([]);
    expect(last?.usage).toMatchObject({ prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 });
    expect(fixture.fakes.router.chats.at(-1)?.includeUsage).toBe(true);
  });

  it('ends a stream that fails after content with an error chunk (the SDK throws), not a clean close', async () => {
    const previous = fixture.fakes.router.streamScript;
    fixture.fakes.router.streamScript = async function* (request) {
      yield startEvent(request);
      yield deltaEvent('partial ');
      throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'provider reset', { retryAfterSeconds: 2 });
    };
    try {
      const stream = await client('sk-good').chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }], stream: true });
      let text = '';
      const failure = await (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      })().catch((error: unknown) => error);
      expect(text).toBe('partial ');
      expect(failure).toBeInstanceOf(OpenAI.APIError);
      expect((failure as InstanceType<typeof OpenAI.APIError>).message).toContain('No upstream available.');
    } finally {
      fixture.fakes.router.streamScript = previous;
    }
  });

  it('answers a stream failing before any content as a normal HTTP error and releases the reservation', async () => {
    const previous = fixture.fakes.router.streamScript;
    fixture.fakes.router.streamScript = async function* (request) {
      yield startEvent(request);
      throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'every attempt failed', { retryAfterSeconds: 4 });
    };
    try {
      const failure = await client('sk-good')
        .chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }], stream: true })
        .catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(OpenAI.APIError);
      const apiError = failure as InstanceType<typeof OpenAI.APIError>;
      expect(apiError.status).toBe(503);
      expect(apiError.headers?.get('retry-after')).toBe('4');
      const requestId = apiError.headers?.get('x-request-id');
      await eventually(() => expect(fixture.fakes.ledger.releases.some((release) => release.context?.requestId === requestId)).toBe(true));
    } finally {
      fixture.fakes.router.streamScript = previous;
    }
  });

  it('a failed Router.Chat is a 500 (never 502) with the reservation released', async () => {
    const previous = fixture.fakes.router.chatAnswer;
    fixture.fakes.router.chatAnswer = async () => {
      throw new Error('router bug');
    };
    try {
      const failure = (await client('sk-good')
        .chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] })
        .catch((error: unknown) => error)) as InstanceType<typeof OpenAI.APIError>;
      expect(failure.status).toBe(500);
      expect(failure.type).toBe('api_error');
      const requestId = failure.headers?.get('x-request-id');
      await eventually(() => expect(fixture.fakes.ledger.releases.some((release) => release.context?.requestId === requestId)).toBe(true));
    } finally {
      fixture.fakes.router.chatAnswer = previous;
    }
  });

  it('ends a Router stream that goes silent after content with an error chunk', async () => {
    const previous = fixture.fakes.router.streamScript;
    fixture.fakes.router.streamScript = async function* (request) {
      yield startEvent(request);
      yield deltaEvent('partial');
      await new Promise((resolve) => setTimeout(resolve, 5_000));
    };
    try {
      const openai = new OpenAI({ baseURL: `${fixture.slowEdge.url}/v1`, apiKey: 'sk-good', maxRetries: 0 });
      const stream = await openai.chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }], stream: true });
      let text = '';
      const failure = await (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      })().catch((error: unknown) => error);
      expect(text).toBe('partial');
      expect(failure).toBeInstanceOf(OpenAI.APIError);
    } finally {
      fixture.fakes.router.streamScript = previous;
    }
  });

  it('a client that disconnects mid-stream cancels the Router stream', async () => {
    const previous = fixture.fakes.router.streamScript;
    const before = fixture.fakes.router.streamCancelled;
    fixture.fakes.router.streamScript = async function* (request) {
      yield startEvent(request);
      for (let index = 0; index < 1_000; index++) {
        yield deltaEvent(`${index} `);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    try {
      const abort = new AbortController();
      const stream = await client('sk-good').chat.completions.create(
        { model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }], stream: true },
        { signal: abort.signal },
      );
      await (async () => {
        for await (const chunk of stream) {
          if (chunk.choices[0]?.delta.content) {
            abort.abort();
          }
        }
      })().catch(() => undefined);
      await eventually(() => expect(fixture.fakes.router.streamCancelled).toBeGreaterThan(before));
    } finally {
      fixture.fakes.router.streamScript = previous;
    }
  });

  it('401 in the envelope for a wrong key, with x-request-id', async () => {
    const failure = (await client('sk-wrong')
      .chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] })
      .catch((error: unknown) => error)) as InstanceType<typeof OpenAI.APIError>;
    expect(failure).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(failure.status).toBe(401);
    expect(failure.type).toBe('invalid_api_key');
    expect(failure.requestID).toBeTruthy();
  });

  it('a provisioning key cannot reach a model', async () => {
    const failure = (await client('pk-good')
      .chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] })
      .catch((error: unknown) => error)) as InstanceType<typeof OpenAI.APIError>;
    expect(failure.status).toBe(401);
    expect(failure.type).toBe('invalid_api_key');
  });

  it('400 for an unknown model, 410 past its stop time, 400 on a model without the endpoint', async () => {
    const unknown = (await client('sk-good')
      .chat.completions.create({ model: 'nobody/nothing', messages: [{ role: 'user', content: 'Hi' }] })
      .catch((error: unknown) => error)) as InstanceType<typeof OpenAI.APIError>;
    expect(unknown).toBeInstanceOf(OpenAI.BadRequestError);
    expect(unknown.type).toBe('invalid_request_error');
    expect(unknown.code).toBe('model_not_found');
    const retired = (await client('sk-good')
      .chat.completions.create({ model: 'acme/retired', messages: [{ role: 'user', content: 'Hi' }] })
      .catch((error: unknown) => error)) as InstanceType<typeof OpenAI.APIError>;
    expect(retired.status).toBe(410);
    const embed = (await client('sk-good')
      .chat.completions.create({ model: 'acme/embed', messages: [{ role: 'user', content: 'Hi' }] })
      .catch((error: unknown) => error)) as InstanceType<typeof OpenAI.APIError>;
    expect(embed.status).toBe(400);
  });

  it('400 naming the field path on a schema violation, 400 on an image to a text-only model', async () => {
    const invalid = (await client('sk-good')
      .chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }], temperature: 3 })
      .catch((error: unknown) => error)) as InstanceType<typeof OpenAI.APIError>;
    expect(invalid.status).toBe(400);
    expect(invalid.message).toContain('body.temperature');
    const image = (await client('sk-good')
      .chat.completions.create({
        model: 'acme/chat-small',
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/y.png' } }] }],
      })
      .catch((error: unknown) => error)) as InstanceType<typeof OpenAI.APIError>;
    expect(image.status).toBe(400);
    expect(image.code).toBe('unsupported_modality');
  });

  it('429 from admission carries Retry-After and the spec message; the router is not called', async () => {
    fixture.fakes.ledger.admitError = new GatewayError(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_RATE_LIMITED, 'window full', {
      retryAfterSeconds: 9,
    });
    const chatsBefore = fixture.fakes.router.chats.length;
    const failure = (await client('sk-good')
      .chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] })
      .catch((error: unknown) => error)) as InstanceType<typeof OpenAI.APIError>;
    expect(failure).toBeInstanceOf(OpenAI.RateLimitError);
    expect(failure.type).toBe('rate_limit_exceeded');
    expect(failure.message).toContain('Rate limit reached. Please try again in 9s.');
    expect(failure.headers?.get('retry-after')).toBe('9');
    expect(fixture.fakes.router.chats.length).toBe(chatsBefore);
  });

  it('413 on a body over 32 MiB', async () => {
    const huge = 'a'.repeat(33 * 1024 * 1024);
    const failure = (await client('sk-good')
      .chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: huge }] })
      .catch((error: unknown) => error)) as InstanceType<typeof OpenAI.APIError>;
    expect(failure).toBeInstanceOf(OpenAI.APIError);
    expect(failure.status).toBe(413);
    expect(failure.type).toBe('invalid_request_error');
    expect(failure.requestID).toBeTruthy();
  });
});

