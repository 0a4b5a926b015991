import { connect } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { mixedProviderCatalog, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';

// Hostile input on POST /v1/chat/completions through the whole stack: absurd nesting, huge values the
// gateway might echo, malformed HTTP, files at the inline bound, invalid JSON schemas. Every answer
// must be a client error (4xx, never 5xx) in the JSON envelope, carry x-request-id, and keep its
// message short whatever the caller sent. The real `openai` client sends what it can; raw fetch and
// raw sockets send what it cannot (it cannot even serialize 5,000 levels of nesting).

const OPEN_MODEL = 'testco/open';
const SIMULATED_MODEL = 'testco/simulated';
/** An echoed value is cut to 256 characters plus a short note; a whole message stays under this. */
const MESSAGE_BOUND = 1_024;
const INLINE_FILE_BYTES = 20 * 1024 * 1024;

function configFor(upstream: FakeUpstream): string {
  return mixedProviderCatalog(upstream, {
    apiKeyEnv: 'HOSTILE_UPSTREAM_KEY',
    perMinute: 6000,
    models: [
      { id: OPEN_MODEL, modalities: '[text, file]', provider: 'fake-openai' },
      { id: SIMULATED_MODEL, modalities: '[text, file]', provider: 'simulated' },
    ],
  });
}

interface ErrorEnvelope {
  error: { type: string; message: string; code?: string; param?: string };
}

interface ClientErrorExpectation {
  status: number;
  type?: string;
  code?: string;
  param?: string;
  /** A piece the message must contain. */
  message?: string;
}

/** The checks every case shares: 4xx, the envelope, the request id, a bounded message. */
function expectClientError(status: number, requestId: string | null | undefined, body: unknown, expected: ClientErrorExpectation): ErrorEnvelope['error'] {
  expect(status).toBeGreaterThanOrEqual(400);
  expect(status).toBeLessThan(500);
  expect(status).toBe(expected.status);
  expect(requestId).toMatch(/\S/);
  const envelope = body as ErrorEnvelope;
  expect(envelope.error).toBeTypeOf('object');
  expect(envelope.error.type).toBe(expected.type ?? 'invalid_request_error');
  expect(envelope.error.message).toBeTypeOf('string');
  expect(envelope.error.message.length).toBeLessThanOrEqual(MESSAGE_BOUND);
  if (envelope.error.param !== undefined) expect(envelope.error.param.length).toBeLessThanOrEqual(MESSAGE_BOUND);
  if (expected.code !== undefined) expect(envelope.error.code).toBe(expected.code);
  if (expected.param !== undefined) expect(envelope.error.param).toBe(expected.param);
  if (expected.message !== undefined) expect(envelope.error.message).toContain(expected.message);
  return envelope.error;
}

/** An SDK call that must fail with a client error. */
async function expectSdkClientError(promise: Promise<unknown>, expected: ClientErrorExpectation): Promise<ErrorEnvelope['error']> {
  const caught = await promise.then(() => undefined, (error: unknown) => error);
  expect(caught).toBeInstanceOf(OpenAI.APIError);
  const error = caught as InstanceType<typeof OpenAI.APIError>;
  return expectClientError(error.status ?? 0, error.requestID, { error: error.error }, expected);
}

/** Nested objects `{"a":{"a":...}}`, `levels` deep, as text (JSON.stringify cannot make them that deep). */
function nestedObjectText(levels: number): string {
  return `${'{"a":'.repeat(levels - 1)}{}${'}'.repeat(levels - 1)}`;
}

/** A JSON schema whose `properties` nest `levels` objects deep (each object level is two JSON levels). */
function nestedSchema(levels: number): Record<string, unknown> {
  let schema: Record<string, unknown> = { type: 'string' };
  for (let level = 0; level < levels; level++) schema = { type: 'object', properties: { inner: schema }, required: ['inner'] };
  return schema;
}

describe('hostile input to chat completions, end to end', () => {
  let upstream: FakeUpstream;
  let harness: ChatHarness;

  const post = async (body: string, headers: Record<string, string> = {}, path = '/v1/chat/completions') => {
    const response = await fetch(`${harness.stack.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${harness.apiKey}`, 'content-type': 'application/json', ...headers },
      body,
      signal: AbortSignal.timeout(60_000),
    });
    return { status: response.status, headers: response.headers, body: (await response.json()) as unknown };
  };

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    harness = await startChatHarness({ configYaml: configFor(upstream), providerSecrets: { HOSTILE_UPSTREAM_KEY: 'sk-fake-hostile' } });
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [upstream]));

  beforeEach(() => upstream.reset());

  describe('nesting depth', () => {
    it('5,000 levels in tools[].function.parameters: 400 naming the field, nothing reaches the provider', async () => {
      const body = `{"model":"${OPEN_MODEL}","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"deep","parameters":${nestedObjectText(5_000)}}}]}`;
      const answer = await post(body);
      expectClientError(answer.status, answer.headers.get('x-request-id'), answer.body, {
        status: 400,
        code: 'nesting_too_deep',
        param: 'body.tools.0.function.parameters',
        message: 'body.tools.0.function.parameters: nesting deeper than 64 levels',
      });
      expect(answer.headers.get('x-gateway-api-version')).toMatch(/\S/);
      expect(upstream.requests).toHaveLength(0);
    });

    it('5,000 levels in response_format.json_schema.schema, on either provider kind: 400 naming the field', async () => {
      for (const model of [OPEN_MODEL, SIMULATED_MODEL]) {
        const body = `{"model":"${model}","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"deep","schema":${nestedObjectText(5_000)}}}}`;
        const answer = await post(body);
        expectClientError(answer.status, answer.headers.get('x-request-id'), answer.body, {
          status: 400,
          code: 'nesting_too_deep',
          param: 'body.response_format.json_schema.schema',
        });
      }
      expect(upstream.requests).toHaveLength(0);
    });

    it('a body that is one million nested arrays: 400, not a crash', async () => {
      const answer = await post(`${'['.repeat(1_000_000)}${']'.repeat(1_000_000)}`);
      expectClientError(answer.status, answer.headers.get('x-request-id'), answer.body, { status: 400, code: 'nesting_too_deep', param: 'body.0.0' });
    });

    it('just over the bound through the SDK is refused; a realistic deep schema passes', async () => {
      // 30 nested objects in the schema are 61 JSON levels; the tool's parameters sit at level 5 of the body: 65.
      await expectSdkClientError(
        harness.client.chat.completions.create({
          model: OPEN_MODEL,
          messages: [{ role: 'user', content: 'hi' }],
          tools: [{ type: 'function', function: { name: 'deep', parameters: nestedSchema(30) } }],
        }),
        { status: 400, code: 'nesting_too_deep', param: 'body.tools.0.function.parameters' },
      );
      // 20 object levels (41 JSON levels inside the field) are far beyond any real schema and still pass.
      const answer = await harness.client.chat.completions.create({
        model: OPEN_MODEL,
        messages: [{ role: 'user', content: 'hi' }],
        tools: [{ type: 'function', function: { name: 'deep', parameters: nestedSchema(20) } }],
      });
      expect(answer.choices[0]!.message.content).toBe('Hello from the fake upstream.');
      expect(upstream.requests[0]!.body.tools[0].function.parameters).toEqual(nestedSchema(20));
    });
  });

  describe('echoed client values are cut short', () => {
    it('a 31 MB model name: 400 model_not_found with the name cut and its length told', async () => {
      const model = 'm'.repeat(31 * 1024 * 1024);
      const answer = await post(`{"model":"${model}","messages":[{"role":"user","content":"hi"}]}`);
      const error = expectClientError(answer.status, answer.headers.get('x-request-id'), answer.body, {
        status: 400,
        code: 'model_not_found',
        param: 'body.model',
      });
      expect(error.message).toContain(`${'m'.repeat(256)}… (${model.length} characters)`);
      expect(error.message).not.toContain('m'.repeat(257));
    });

    it('a long routing-strategy header value: 400 with the value cut', async () => {
      const answer = await post(`{"model":"${OPEN_MODEL}","messages":[{"role":"user","content":"hi"}]}`, { 'x-gateway-routing-strategy': 's'.repeat(8_000) });
      const error = expectClientError(answer.status, answer.headers.get('x-request-id'), answer.body, { status: 400, param: 'header.x-gateway-routing-strategy' });
      expect(error.message).toContain('… (8000 characters)');
    });

    it('a long unknown path: 404 with the path cut', async () => {
      const answer = await post('{}', {}, `/v1/${'p'.repeat(8_000)}`);
      const error = expectClientError(answer.status, answer.headers.get('x-request-id'), answer.body, { status: 404, code: 'unknown_url' });
      expect(error.message).toContain('characters)');
    });

    it('a long unmatched tool_call_id: 400 tool_output_unmatched with the id cut', async () => {
      const id = 'c'.repeat(1_000_000);
      const answer = await post(JSON.stringify({ model: OPEN_MODEL, messages: [{ role: 'user', content: 'hi' }, { role: 'tool', tool_call_id: id, content: 'result' }] }));
      const error = expectClientError(answer.status, answer.headers.get('x-request-id'), answer.body, { status: 400, code: 'tool_output_unmatched' });
      expect(error.message).toContain(`… (${id.length} characters)`);
    });

    it('a validation failure under a long key: the param path is cut too', async () => {
      const answer = await post(JSON.stringify({ model: OPEN_MODEL, messages: [{ role: 'user', content: 'hi' }], logit_bias: { ['k'.repeat(100_000)]: 'not a number' } }));
      const error = expectClientError(answer.status, answer.headers.get('x-request-id'), answer.body, { status: 400 });
      expect(error.param).toMatch(/^body\.logit_bias\.k+… \(\d+ characters\)$/);
    });

    it('a long enum value through the SDK: 400 without the value', async () => {
      await expectSdkClientError(
        harness.client.chat.completions.create({
          model: OPEN_MODEL,
          messages: [{ role: 'user', content: 'hi' }],
          reasoning_effort: 'x'.repeat(100_000) as 'low',
        }),
        { status: 400, param: 'body.reasoning_effort' },
      );
    });
  });

  describe('malformed HTTP', () => {
    /** Sends raw bytes on a fresh connection and collects everything until the server closes it. */
    function exchangeRaw(bytes: string): Promise<string> {
      return new Promise((resolve, reject) => {
        const url = new URL(harness.stack.url);
        const socket = connect({ host: url.hostname, port: Number(url.port) });
        const received: Buffer[] = [];
        const timer = setTimeout(() => {
          socket.destroy();
          reject(new Error(`no close within 10 s; received: ${Buffer.concat(received).toString('latin1').slice(0, 500)}`));
        }, 10_000);
        socket.on('data', (chunk) => received.push(chunk));
        socket.on('error', () => undefined);
        socket.on('close', () => {
          clearTimeout(timer);
          resolve(Buffer.concat(received).toString('latin1'));
        });
        socket.write(bytes);
      });
    }

    function parseRawResponse(raw: string) {
      const headerEnd = raw.indexOf('\r\n\r\n');
      expect(headerEnd).toBeGreaterThan(0);
      const [statusLine, ...headerLines] = raw.slice(0, headerEnd).split('\r\n');
      const headers = new Map(headerLines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
      const body = raw.slice(headerEnd + 4);
      expect(Number(headers.get('content-length'))).toBe(Buffer.byteLength(body));
      expect(headers.get('content-type')).toMatch(/^application\/json/);
      expect(headers.get('x-gateway-api-version')).toMatch(/\S/);
      expect(headers.get('connection')).toBe('close');
      return { status: Number(statusLine!.split(' ')[1]), requestId: headers.get('x-request-id'), body: JSON.parse(body) as unknown };
    }

    it('headers over the size limit: 431 in the JSON envelope, with a request id, then the connection closes', async () => {
      const raw = await exchangeRaw(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-padding: ${'h'.repeat(64 * 1024)}\r\n\r\n`);
      const answer = parseRawResponse(raw);
      expectClientError(answer.status, answer.requestId, answer.body, { status: 431, code: 'request_header_fields_too_large' });
    });

    it('garbage instead of HTTP: 400 in the JSON envelope, with a request id', async () => {
      const raw = await exchangeRaw('\x00\x01GARBAGE \u00ff\r\n\r\n');
      const answer = parseRawResponse(raw);
      expectClientError(answer.status, answer.requestId, answer.body, { status: 400, code: 'malformed_request' });
    });

    it('a malformed chunked body after valid headers: 400 in the JSON envelope', async () => {
      const raw = await exchangeRaw(
        `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${harness.apiKey}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n`,
      );
      const answer = parseRawResponse(raw);
      expectClientError(answer.status, answer.requestId, answer.body, { status: 400 });
    });

    it('the server still answers normally afterwards', async () => {
      const answer = await harness.client.chat.completions.create({ model: OPEN_MODEL, messages: [{ role: 'user', content: 'hi' }] });
      expect(answer.choices[0]!.message.content).toBe('Hello from the fake upstream.');
    });
  });

  describe('inline file bound (spec §8: 20 MiB, larger is 413)', () => {
    const fileBlock = (bytes: number): OpenAI.Chat.Completions.ChatCompletionContentPart => ({
      type: 'file',
      file: { filename: 'blob.bin', file_data: `data:application/octet-stream;base64,${Buffer.alloc(bytes, 7).toString('base64')}` },
    });

    it('exactly 20 MiB passes and reaches the provider whole', async () => {
      const answer = await harness.client.chat.completions.create(
        { model: OPEN_MODEL, messages: [{ role: 'user', content: [{ type: 'text', text: 'read this' }, fileBlock(INLINE_FILE_BYTES)] }] },
        { timeout: 60_000 },
      );
      expect(answer.choices[0]!.message.content).toBe('Hello from the fake upstream.');
      const sent = (upstream.requests[0]!.body.messages[0].content as any[]).find((part) => part.type === 'file');
      const data = String(sent.file.file_data);
      expect(Buffer.from(data.slice(data.indexOf(',') + 1), 'base64').length).toBe(INLINE_FILE_BYTES);
    }, 60_000);

    it('20 MiB + 1 byte is 413 naming the field', async () => {
      await expectSdkClientError(
        harness.client.chat.completions.create(
          { model: OPEN_MODEL, messages: [{ role: 'user', content: [{ type: 'text', text: 'read this' }, fileBlock(INLINE_FILE_BYTES + 1)] }] },
          { timeout: 60_000 },
        ),
        { status: 413, code: 'payload_too_large', param: 'body.messages.0.content.1.file.file_data' },
      );
      expect(upstream.requests).toHaveLength(0);
    }, 60_000);
  });

  describe('an invalid JSON schema in response_format', () => {
    const schemas: Array<[string, Record<string, unknown>]> = [
      ['{"type": 12}', { type: 12 }],
      ['{"type": "object", "properties": 5}', { type: 'object', properties: 5 }],
    ];
    const messages = [{ role: 'user' as const, content: 'hi' }];
    const expected = {
      status: 400,
      code: 'invalid_json_schema',
      param: 'body.response_format.json_schema.schema',
      message: 'body.response_format.json_schema.schema: not a valid JSON Schema',
    };

    for (const model of [SIMULATED_MODEL, OPEN_MODEL]) {
      it.each(schemas)(`${model}: %s is 400 naming the schema, non-streamed and streamed; no provider is called`, async (_name, schema) => {
        const response_format = { type: 'json_schema' as const, json_schema: { name: 'bad', schema } };
        await expectSdkClientError(harness.client.chat.completions.create({ model, messages, response_format }), expected);
        await expectSdkClientError(harness.client.chat.completions.create({ model, messages, response_format, stream: true }), expected);
        expect(upstream.requests).toHaveLength(0);
      });
    }

    it('a $ref to nowhere (valid against the meta-schema): the simulated provider cannot use it — 400, not a provider failure', async () => {
      const response_format = { type: 'json_schema' as const, json_schema: { name: 'bad', schema: { type: 'object', properties: { a: { $ref: '#/definitions/missing' } } } } };
      const unusable = { status: 400, code: 'invalid_json_schema', param: 'body.response_format.json_schema.schema', message: 'not a usable JSON Schema' };
      // Repeated past any circuit breaker's threshold: a client's bad schema never counts against the provider.
      for (let attempt = 0; attempt < 6; attempt++) {
        await expectSdkClientError(harness.client.chat.completions.create({ model: SIMULATED_MODEL, messages, response_format }), unusable);
        await expectSdkClientError(harness.client.chat.completions.create({ model: SIMULATED_MODEL, messages, response_format, stream: true }), unusable);
      }
      const after = await harness.client.chat.completions.create({ model: SIMULATED_MODEL, messages });
      expect(after.choices[0]!.message.content).toMatch(/\S/);
      // An OpenAI-compatible provider compiles schemas itself: this one goes to it, and it decides.
      await harness.client.chat.completions.create({ model: OPEN_MODEL, messages, response_format });
      expect(upstream.requests[0]!.body.response_format.json_schema.schema).toEqual(response_format.json_schema.schema);
    });

    it('a valid schema still works on both provider kinds', async () => {
      const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false };
      const response_format = { type: 'json_schema' as const, json_schema: { name: 'good', schema, strict: true } };
      const simulated = await harness.client.chat.completions.create({ model: SIMULATED_MODEL, messages: [{ role: 'user', content: 'hi' }], response_format });
      expect(JSON.parse(simulated.choices[0]!.message.content!)).toHaveProperty('city');
      upstream.script({ text: '{"city":"Paris"}' });
      const open = await harness.client.chat.completions.create({ model: OPEN_MODEL, messages: [{ role: 'user', content: 'hi' }], response_format });
      expect(JSON.parse(open.choices[0]!.message.content!)).toEqual({ city: 'Paris' });
      expect(upstream.requests[0]!.body.response_format.json_schema.schema).toEqual(schema);
    });
  });
});
