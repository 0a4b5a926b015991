import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { CatalogChanged, KeysChanged, type GetSnapshotResponse } from '@gateway/proto';
import { ErrorReason, GatewayError, GrpcStatus, subjects } from '@gateway/platform';
import { createTestBus, eventually, testLogger, type TestBus } from '@gateway/testing';
import { startEdge, type RunningEdge } from '../src/index.js';
import { chatResponse, delta, deltaEvent, model, startEvent, startFakeServices, usage, type FakeServices } from './fakes.js';

const logger = testLogger('edge-test');

function snapshot(version: string, extraModels: ReturnType<typeof model>[] = []): GetSnapshotResponse {
  return {
    version,
    unchanged: false,
  moderationModel: '',
    models: [
      model({ id: 'acme/chat-small', aliases: ['chat-small'], created: 1_767_225_600n, ownedBy: 'acme' }),
      model({ id: 'acme/free-tiny', created: 1_767_312_000n, pricing: { perInputToken: '0', perOutputToken: '0' }, supportedParameters: ['temperature'] }),
      model({ id: 'acme/embed', created: 1_767_000_000n, offers: [{ providerId: 'acme-cloud', upstreamModel: 'e', endpoints: ['embeddings'] }] }),
      model({ id: 'acme/retired', created: 1_766_000_000n, expiresAt: 1_700_000_000n }),
      ...extraModels,
    ],
    providers: [],
    startups: [
      { id: 'zeta', displayName: 'Zeta Labs', iconUrl: '/static/startups/zeta.svg', created: 1_767_000_000n },
      { id: 'acme', displayName: 'Acme AI', iconUrl: '/static/startups/acme.svg', websiteUrl: 'https://acme.example', created: 1_767_000_000n },
    ],
    limitGroups: [{ id: 'default', tiers: { free: { minute: 20, day: 200 }, 'tier-1': { minute: 600 } } }],
  };
}

let testBus: TestBus;
let fakes: FakeServices;
let edge: RunningEdge;
let slowEdge: RunningEdge;

const client = (apiKey: string) => new OpenAI({ baseURL: `${edge.url}/v1`, apiKey, maxRetries: 0 });

beforeAll(async () => {
  testBus = await createTestBus('nats');
  fakes = await startFakeServices(snapshot('v1'), logger);
  fakes.auth.apiKeys.set('sk-good', { accountId: 'acct_1', keyId: 'key_1', tier: 'tier-1', defaultRoutingStrategy: 'latency' });
  fakes.auth.apiKeys.set('sk-poor', { accountId: 'acct_2', keyId: 'key_2', tier: 'free', defaultRoutingStrategy: '' });
  fakes.auth.apiKeys.set('sk-revocable', { accountId: 'acct_1', keyId: 'key_9', tier: 'tier-1', defaultRoutingStrategy: '' });
  fakes.auth.provisioningKeys.set('pk-good', 'acct_1');
  fakes.ledger.available.set('acct_1', '10.5');
  fakes.ledger.available.set('acct_2', '0.049999999999');
  // These tests assert what the edge sends to Ledger.Admit (the fake ledger has no leases): per-request admission.
  edge = await startEdge({ port: 0, ...fakes.addresses, bus: testBus.bus, logger, authCacheTtlMs: 60_000, catalogRefreshMs: 60_000, admission: 'ledger' });
  slowEdge = await startEdge({
    port: 0,
    ...fakes.addresses,
    bus: testBus.bus,
    logger,
    admission: 'ledger',
    bodyLimits: { stallTimeoutMs: 300, totalTimeoutMs: 1_500 },
    streamIdleTimeoutMs: 400,
  });
});

afterAll(async () => {
  await edge?.stop();
  await slowEdge?.stop();
  await fakes?.stop();
  await testBus?.destroy();
});

beforeEach(() => {
  fakes.ledger.admitError = undefined;
});

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
    const sent = fakes.router.chats.at(-1);
    expect(sent).toMatchObject({ modelId: 'acme/chat-small', routingStrategy: 'latency', endpoint: 'chat.completions', maxOutputTokens: 20 });
    expect(sent?.context).toEqual({ requestId, accountId: 'acct_1', keyId: 'key_1' });
    expect(JSON.stringify(sent, (_key, value: unknown) => (typeof value === 'bigint' ? String(value) : value))).not.toContain('logit');
    const admit = fakes.ledger.admits.at(-1);
    expect(admit).toMatchObject({ modelId: 'acme/chat-small', paid: true, tier: 'tier-1', limitGroup: 'default', requestsPerMinute: 600 });
    expect(admit?.requestsPerDay).toBeUndefined();
  });

  it('sends chats as Router.Exchange frames by default, and as a call each with routerTransport: calls', async () => {
    const perCallBefore = fakes.router.perCallChats;
    const exchangeCallsBefore = fakes.router.exchangeCalls;
    const viaExchange = await client('sk-good').chat.completions.create({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }] });
    expect(viaExchange.choices[0]?.message.content).toBe('Hello there.');
    expect(fakes.router.perCallChats).toBe(perCallBefore);
    const callsEdge = await startEdge({ port: 0, ...fakes.addresses, bus: testBus.bus, logger, admission: 'ledger', routerTransport: 'calls' });
    try {
      const callsClient = new OpenAI({ baseURL: `${callsEdge.url}/v1`, apiKey: 'sk-good', maxRetries: 0 });
      const plain = await callsClient.chat.completions.create({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }] });
      expect(plain.choices[0]?.message.content).toBe('Hello there.');
      let streamed = '';
      for await (const chunk of await callsClient.chat.completions.create({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }], stream: true })) {
        streamed += chunk.choices[0]?.delta.content ?? '';
      }
      expect(streamed).toBe('Hello!');
      expect(fakes.router.perCallChats - perCallBefore).toBe(2);
    } finally {
      await callsEdge.stop();
    }
    // Only the default edge's one long-lived call (opened by its first chat, here or earlier in the file).
    expect(fakes.router.exchangeCalls - exchangeCallsBefore).toBeLessThanOrEqual(1);
  });

  it('lists the parameters dropped by the edge and by the router in x-gateway-dropped-params', async () => {
    const previous = fakes.router.chatAnswer;
    fakes.router.chatAnswer = async (request) => ({ ...chatResponse(request, 'ok'), droppedParams: ['stop'] });
    try {
      const { response } = await client('sk-good')
        .chat.completions.create({ model: 'acme/free-tiny', messages: [{ role: 'user', content: 'x' }], top_p: 0.5, stop: 'END' })
        .withResponse();
      // free-tiny supports only temperature: the edge drops stop and top_p itself; the router's list is merged.
      expect(response.headers.get('x-gateway-dropped-params')).toBe('stop,top_p');
      const sent = fakes.router.chats.at(-1);
      expect(sent?.topP).toBeUndefined();
      expect(sent?.stop).toEqual([]);
      expect(fakes.ledger.admits.at(-1)?.paid).toBe(false);
    } finally {
      fakes.router.chatAnswer = previous;
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
    expect(fakes.router.chats.at(-1)?.includeUsage).toBe(false);
  });

  it('asks for the first delta inside the start and streams it first when the router sends it there', async () => {
    const previous = fakes.router.streamScript;
    fakes.router.streamScript = async function* (request) {
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
      expect(fakes.router.combinedStarts.at(-1)).toBe(true);
    } finally {
      fakes.router.streamScript = previous;
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
    expect(fakes.router.chats.at(-1)?.includeUsage).toBe(true);
  });

  it('ends a stream that fails after content with an error chunk (the SDK throws), not a clean close', async () => {
    const previous = fakes.router.streamScript;
    fakes.router.streamScript = async function* (request) {
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
      fakes.router.streamScript = previous;
    }
  });

  it('answers a stream failing before any content as a normal HTTP error and releases the reservation', async () => {
    const previous = fakes.router.streamScript;
    fakes.router.streamScript = async function* (request) {
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
      await eventually(() => expect(fakes.ledger.releases.some((release) => release.context?.requestId === requestId)).toBe(true));
    } finally {
      fakes.router.streamScript = previous;
    }
  });

  it('a failed Router.Chat is a 500 (never 502) with the reservation released', async () => {
    const previous = fakes.router.chatAnswer;
    fakes.router.chatAnswer = async () => {
      throw new Error('router bug');
    };
    try {
      const failure = (await client('sk-good')
        .chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] })
        .catch((error: unknown) => error)) as InstanceType<typeof OpenAI.APIError>;
      expect(failure.status).toBe(500);
      expect(failure.type).toBe('api_error');
      const requestId = failure.headers?.get('x-request-id');
      await eventually(() => expect(fakes.ledger.releases.some((release) => release.context?.requestId === requestId)).toBe(true));
    } finally {
      fakes.router.chatAnswer = previous;
    }
  });

  it('ends a Router stream that goes silent after content with an error chunk', async () => {
    const previous = fakes.router.streamScript;
    fakes.router.streamScript = async function* (request) {
      yield startEvent(request);
      yield deltaEvent('partial');
      await new Promise((resolve) => setTimeout(resolve, 5_000));
    };
    try {
      const openai = new OpenAI({ baseURL: `${slowEdge.url}/v1`, apiKey: 'sk-good', maxRetries: 0 });
      const stream = await openai.chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }], stream: true });
      let text = '';
      const failure = await (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      })().catch((error: unknown) => error);
      expect(text).toBe('partial');
      expect(failure).toBeInstanceOf(OpenAI.APIError);
    } finally {
      fakes.router.streamScript = previous;
    }
  });

  it('a client that disconnects mid-stream cancels the Router stream', async () => {
    const previous = fakes.router.streamScript;
    const before = fakes.router.streamCancelled;
    fakes.router.streamScript = async function* (request) {
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
      await eventually(() => expect(fakes.router.streamCancelled).toBeGreaterThan(before));
    } finally {
      fakes.router.streamScript = previous;
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
    fakes.ledger.admitError = new GatewayError(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_RATE_LIMITED, 'window full', {
      retryAfterSeconds: 9,
    });
    const chatsBefore = fakes.router.chats.length;
    const failure = (await client('sk-good')
      .chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] })
      .catch((error: unknown) => error)) as InstanceType<typeof OpenAI.APIError>;
    expect(failure).toBeInstanceOf(OpenAI.RateLimitError);
    expect(failure.type).toBe('rate_limit_exceeded');
    expect(failure.message).toContain('Rate limit reached. Please try again in 9s.');
    expect(failure.headers?.get('retry-after')).toBe('9');
    expect(fakes.router.chats.length).toBe(chatsBefore);
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

/** A raw HTTP exchange, for what an SDK will not send (chunked oversize bodies, stalls, odd headers). */
function rawRequest(
  url: string,
  options: { method: string; path: string; headers?: Record<string, string>; write?: (request: ReturnType<typeof httpRequest>) => void },
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(`${url}${options.path}`, { method: options.method, headers: options.headers ?? {} }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks).toString() }));
    });
    request.on('error', reject);
    if (options.write) options.write(request);
    else request.end();
  });
}

describe('body limits', () => {
  it('413 on a chunked body that grows past 32 MiB, counted while reading', async () => {
    const chunk = Buffer.alloc(1024 * 1024, 0x61);
    const answer = await rawRequest(edge.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: 'Bearer sk-good', 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      write: (request) => {
        let sent = 0;
        const pump = () => {
          while (sent < 40) {
            sent++;
            if (!request.write(chunk)) {
              request.once('drain', pump);
              return;
            }
          }
          request.end();
        };
        request.on('error', () => undefined);
        pump();
      },
    }).catch((error: unknown) => ({ status: -1, headers: {} as Record<string, string | undefined>, body: String(error) }));
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body).error.type).toBe('invalid_request_error');
    expect(answer.headers['x-request-id']).toBeTruthy();
  });

  it('408 when the body stalls', async () => {
    const answer = await rawRequest(slowEdge.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: 'Bearer sk-good', 'content-type': 'application/json', 'content-length': '100' },
      write: (request) => request.write('{"model":'),
    });
    expect(answer.status).toBe(408);
    expect(answer.headers['x-request-id']).toBeTruthy();
  });

  it('400 on a body that is not JSON', async () => {
    const answer = await rawRequest(edge.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: 'Bearer sk-good', 'content-type': 'application/json' },
      write: (request) => request.end('{"model": nope'),
    });
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body).error.type).toBe('invalid_request_error');
  });
});

describe('inference route dispatch', () => {
  // POST /v1/chat/completions is handed to its handler directly; other spellings go through express.
  it('answers every spelling express accepts the same way, with a query string too', async () => {
    const body = JSON.stringify({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }] });
    for (const path of ['/v1/chat/completions', '/v1/chat/completions?trace=1', '/v1/chat/completions/', '/V1/Chat/Completions']) {
      const answer = await rawRequest(edge.url, {
        method: 'POST', path,
        headers: { authorization: 'Bearer sk-good', 'content-type': 'application/json', 'x-request-id': 'dispatch-check-1' },
        write: (request) => request.end(body),
      });
      expect(answer.status, path).toBe(200);
      expect(JSON.parse(answer.body).choices[0].message.content, path).toBe('Hello there.');
      expect(answer.headers['x-request-id'], path).toBe('dispatch-check-1');
      expect(answer.headers['x-gateway-api-version'], path).toBe('2026-03-31');
      // The caller's id is echoed only: the router (and so the usage event and charge) gets the gateway's own id.
      const gatewayId = answer.headers['x-gateway-request-id'] as string;
      expect(gatewayId, path).toMatch(/^req_[0-9a-f]{32}$/);
      expect(fakes.router.chats.at(-1)?.context?.requestId, path).toBe(gatewayId);
    }
  });

  it('answers errors on both paths in the same envelope', async () => {
    const answers = [];
    for (const path of ['/v1/chat/completions', '/v1/chat/completions/']) {
      answers.push(await rawRequest(edge.url, {
        method: 'POST', path, headers: { authorization: 'Bearer sk-good', 'content-type': 'application/json' }, write: (request) => request.end('{not json'),
      }));
    }
    for (const answer of answers) {
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.body).error).toMatchObject({ type: 'invalid_request_error' });
      expect(answer.headers['x-request-id']).toMatch(/^req_/);
    }
    expect(JSON.parse(answers[0]!.body).error.message).toBe(JSON.parse(answers[1]!.body).error.message);
    // Other methods on the inference path are express's: 404 in the envelope.
    const get = await rawRequest(edge.url, { method: 'GET', path: '/v1/chat/completions' });
    expect(get.status).toBe(404);
    expect(JSON.parse(get.body).error.type).toBeTruthy();
  });
});

describe('x-request-id', () => {
  it('is on every response, errors included, and a caller-supplied valid id is honoured', async () => {
    const paths: Array<[string, string, Record<string, string>]> = [
      ['GET', '/v1/models', {}],
      ['GET', '/v1/nowhere', {}],
      ['GET', '/v1/models', { authorization: 'Bearer sk-wrong' }],
      ['POST', '/v1/chat/completions', {}],
      ['GET', '/v1/account/balance', {}],
    ];
    for (const [method, path, headers] of paths) {
      const answer = await rawRequest(edge.url, { method, path, headers });
      expect(answer.headers['x-request-id'], `${method} ${path}`).toMatch(/^req_[0-9a-f]{32}$/);
      expect(answer.headers['x-gateway-api-version']).toBe('2026-03-31');
    }
    const honoured = await rawRequest(edge.url, { method: 'GET', path: '/v1/nowhere', headers: { 'x-request-id': 'client-chosen-id-123' } });
    expect(honoured.status).toBe(404);
    expect(JSON.parse(honoured.body).error.type).toBeTruthy();
    expect(honoured.headers['x-request-id']).toBe('client-chosen-id-123');
    const replaced = await rawRequest(edge.url, { method: 'GET', path: '/v1/models', headers: { 'x-request-id': 'bad id!' } });
    expect(replaced.headers['x-request-id']).toMatch(/^req_/);
  });
});

describe('catalog routes', () => {
  it('lists models newest first in the spec 2.6 shape', async () => {
    const page = await client('unused').models.list({ headers: { authorization: null } } as never);
    const ids = page.data.map((entry) => entry.id);
    expect(ids).toEqual(['acme/free-tiny', 'acme/chat-small', 'acme/embed', 'acme/retired']);
    const response = await fetch(`${edge.url}/v1/models`);
    const text = await response.text();
    // Prices are JSON numbers written from the decimal text (no 5e-7).
    expect(text).toContain('"per_input_token":0.0000005');
    const chatSmall = (JSON.parse(text) as { data: Array<Record<string, unknown>> }).data.find((entry) => entry.id === 'acme/chat-small');
    expect(chatSmall).toMatchObject({
      object: 'model',
      created: 1_767_225_600,
      owned_by: 'acme',
      supported_endpoints: ['chat.completions', 'messages'],
      pricing: { per_input_token: 0.0000005, per_output_token: 0.0000015 },
      architecture: { input_modalities: ['text'], output_modalities: ['text'] },
      available_tiers: ['free', 'tier-1'],
      context_window: 128_000,
    });
    const retired = (JSON.parse(text) as { data: Array<Record<string, unknown>> }).data.find((entry) => entry.id === 'acme/retired');
    expect(retired?.expires_at).toBe(1_700_000_000);
    expect((JSON.parse(text) as { data: Array<Record<string, unknown>> }).data.find((entry) => entry.id === 'acme/free-tiny')?.owned_by).toBeNull();
  });

  it('narrows the listing to what the balance reaches; a wrong key is 401', async () => {
    const rich = await client('sk-good').models.list();
    expect(rich.data.map((entry) => entry.id)).toContain('acme/chat-small');
    const poor = await client('sk-poor').models.list();
    expect(poor.data.map((entry) => entry.id)).toEqual(['acme/free-tiny']);
    const wrong = await client('sk-wrong').models.list().catch((error: unknown) => error);
    expect(wrong).toBeInstanceOf(OpenAI.AuthenticationError);
  });

  it('serves /v1/models from memory: no Catalog call per request', async () => {
    const before = fakes.catalog.snapshotCalls;
    for (let index = 0; index < 20; index++) {
      const response = await fetch(`${edge.url}/v1/models`);
      expect(response.status).toBe(200);
      await response.arrayBuffer();
    }
    expect(fakes.catalog.snapshotCalls).toBe(before);
  });

  it('gets one model by id or alias, 404 otherwise', async () => {
    const byAlias = await client('sk-good').models.retrieve('chat-small');
    expect(byAlias.id).toBe('acme/chat-small');
    const byId = await client('sk-good').models.retrieve('acme/chat-small');
    expect(byId).toMatchObject({ id: 'acme/chat-small', object: 'model', owned_by: 'acme' });
    const rawPath = await fetch(`${edge.url}/v1/models/acme/chat-small`);
    expect(((await rawPath.json()) as { id: string }).id).toBe('acme/chat-small');
    const missing = await client('sk-good').models.retrieve('nobody/nothing').catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('lists startups by name, limits per tier, and serves icons at both paths', async () => {
    const startups = (await (await fetch(`${edge.url}/v1/startups`)).json()) as { object: string; data: Array<Record<string, unknown>> };
    expect(startups.object).toBe('list');
    expect(startups.data.map((startup) => startup.id)).toEqual(['acme', 'zeta']);
    expect(startups.data[1]).toMatchObject({ object: 'startup', website_url: null, icon_url: '/static/startups/zeta.svg' });
    const all = (await (await fetch(`${edge.url}/v1/limits`)).json()) as { data: Array<{ tiers: Record<string, unknown> }> };
    expect(Object.keys(all.data[0]?.tiers ?? {})).toEqual(['free', 'tier-1']);
    const mine = (await (await fetch(`${edge.url}/v1/limits`, { headers: { authorization: 'Bearer sk-poor' } })).json()) as {
      data: Array<{ id: string; object: string; tiers: Record<string, unknown> }>;
    };
    expect(mine.data).toEqual([{ id: 'default', object: 'limit_group', tiers: { free: { minute: 20, day: 200 } } }]);
    for (const path of ['/v1/startups/acme/icon.svg', '/static/startups/acme.svg']) {
      const icon = await fetch(`${edge.url}${path}`);
      expect(icon.status).toBe(200);
      expect(icon.headers.get('content-type')).toBe('image/svg+xml');
      expect(await icon.text()).toContain('<title>acme</title>');
    }
    expect((await fetch(`${edge.url}/v1/startups/nobody/icon.svg`)).status).toBe(404);
  });

  it('picks up a new catalog version on a catalog.changed broadcast', async () => {
    fakes.catalog.snapshot = snapshot('v2', [model({ id: 'acme/brand-new', created: 1_768_000_000n })]);
    testBus.bus.broadcast(subjects.catalogChanged, CatalogChanged.encode({ version: 'v2' }).finish());
    await eventually(async () => {
      const page = (await (await fetch(`${edge.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
      expect(page.data[0]?.id).toBe('acme/brand-new');
    });
  });
});

describe('account routes', () => {
  it('answers the balance as a decimal string for a provisioning key; an API key there is 401', async () => {
    const ok = await fetch(`${edge.url}/v1/account/balance`, { headers: { authorization: 'Bearer pk-good' } });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ balance: '10.5' });
    const withApiKey = await fetch(`${edge.url}/v1/account/balance`, { headers: { authorization: 'Bearer sk-good' } });
    expect(withApiKey.status).toBe(401);
    expect(((await withApiKey.json()) as { error: { type: string } }).error.type).toBe('invalid_request_error');
  });
});

describe('API key cache', () => {
  it('serves a verified key from cache and drops it on a keys.changed broadcast', async () => {
    const openai = client('sk-revocable');
    await openai.chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] });
    const callsAfterFirst = fakes.auth.verifyCalls;
    // Revoked at Auth, but the edge still holds the answer: served without another Auth call.
    fakes.auth.apiKeys.delete('sk-revocable');
    await openai.chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] });
    expect(fakes.auth.verifyCalls).toBe(callsAfterFirst);
    testBus.bus.broadcast(subjects.keysChanged, KeysChanged.encode({ accountId: 'acct_1', keyIds: ['key_9'] }).finish());
    await eventually(async () => {
      const failure = await openai.chat.completions
        .create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] })
        .catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(OpenAI.AuthenticationError);
    });
    // Other keys of the account stay cached.
    const before = fakes.auth.verifyCalls;
    await client('sk-good').chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] });
    expect(fakes.auth.verifyCalls).toBe(before);
  });
});
