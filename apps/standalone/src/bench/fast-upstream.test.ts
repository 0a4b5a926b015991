import { request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Sha256 } from '@aws-crypto/sha256-js';
import { EventStreamMarshaller } from '@smithy/core/event-streams';
import { HttpRequest } from '@smithy/protocol-http';
import { SignatureV4 } from '@smithy/signature-v4';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateCatalogText } from '@gateway/platform/catalog-document';
import { BEDROCK_UPSTREAM_MODEL, BENCH_AWS_ACCESS_KEY_ID, BENCH_AWS_SECRET_ACCESS_KEY, parseWires, wireModel, wireRoutingEnv } from './bench-wires.js';
import { createFastUpstream } from './fast-upstream.js';
import { BENCH_MODEL, benchConfigYaml } from './gateway-cluster.js';

// The bench's fast upstream on each wire, read the way each provider's official SDK reads it: Gemini's SSE
// lines by the line pattern of googleapis/js-genai, Bedrock's event stream by the Smithy marshaller that
// aws-sdk-js-v3's client-bedrock-runtime deserializes ConverseStream with.

const GAP_MS = 150;
const GEMINI_KEY = 'test-gemini-key';
let server: Server;
let origin: string;

beforeAll(async () => {
  server = createFastUpstream({ firstChunkGapMs: GAP_MS, geminiApiKey: GEMINI_KEY, awsAccessKeyId: BENCH_AWS_ACCESS_KEY_ID });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

interface Exchange {
  status: number;
  headers: IncomingMessage['headers'];
  /** Each body piece with the ms since the headers when it arrived. */
  pieces: { at: number; bytes: Buffer }[];
  body: Buffer;
}

function post(path: string, headers: Record<string, string>, body: string): Promise<Exchange> {
  return new Promise((resolve, reject) => {
    const sent = httpRequest(`${origin}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers } }, (response) => {
      const start = performance.now();
      const pieces: Exchange['pieces'] = [];
      response.on('data', (bytes: Buffer) => pieces.push({ at: performance.now() - start, bytes }));
      response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, pieces, body: Buffer.concat(pieces.map((piece) => piece.bytes)) }));
      response.on('error', reject);
    });
    sent.on('error', reject);
    sent.end(body);
  });
}

describe('fast upstream, Gemini wire', () => {
  const body = JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'Say hello to the bench.' }] }], generationConfig: { maxOutputTokens: 16 } });
  const path = '/v1beta/models/bench-upstream-model';

  it('answers generateContent with a GenerateContentResponse carrying usage', async () => {
    const answer = await post(`${path}:generateContent`, { 'x-goog-api-key': GEMINI_KEY }, body);
    expect(answer.status).toBe(200);
    expect(answer.headers['content-type']).toBe('application/json');
    const json = JSON.parse(answer.body.toString('utf8'));
    expect(json.candidates).toHaveLength(1);
    expect(json.candidates[0]).toMatchObject({ content: { role: 'model', parts: [{ text: 'Hello from the bench upstream.' }] }, finishReason: 'STOP', index: 0 });
    expect(json.usageMetadata).toMatchObject({ promptTokenCount: 9, candidatesTokenCount: 7, totalTokenCount: 16 });
    expect(typeof json.modelVersion).toBe('string');
  });

  it('streams SSE events ending in CRLF CRLF, the first at once, the last finishing with complete usage', async () => {
    const answer = await post(`${path}:streamGenerateContent?alt=sse`, { 'x-goog-api-key': GEMINI_KEY }, body);
    expect(answer.status).toBe(200);
    expect(answer.headers['content-type']).toBe('text/event-stream');
    // The SDK's pattern: one `data: <json>` per event, ended by a blank line.
    let text = answer.body.toString('utf8');
    const events: any[] = [];
    for (let match = /^data: (.*)(?:\n\n|\r\r|\r\n\r\n)/.exec(text); match; match = /^data: (.*)(?:\n\n|\r\r|\r\n\r\n)/.exec(text)) {
      expect(match[0].endsWith('\r\n\r\n')).toBe(true);
      events.push(JSON.parse(match[1]!));
      text = text.slice(match[0].length);
    }
    expect(text).toBe('');
    expect(events.length).toBeGreaterThanOrEqual(2);
    expect(events.map((event) => event.candidates[0].content.parts[0].text).join('')).toBe('Hello from the bench upstream.');
    for (const event of events) expect(event.candidates[0].content.role).toBe('model');
    expect(events.slice(0, -1).every((event) => event.candidates[0].finishReason === undefined)).toBe(true);
    const last = events.at(-1);
    expect(last.candidates[0].finishReason).toBe('STOP');
    expect(last.usageMetadata).toMatchObject({ promptTokenCount: 9, candidatesTokenCount: 7, totalTokenCount: 16 });
    // The first event leaves before the gap, the rest after it.
    expect(answer.pieces[0]!.bytes.toString('utf8')).toMatch(/^data: .*"Hello"/);
    expect(answer.pieces.at(-1)!.at).toBeGreaterThanOrEqual(GAP_MS - 20);
  });

  it('refuses a wrong or missing key as the API does (400 API_KEY_INVALID), and a stream without alt=sse', async () => {
    for (const headers of [{ 'x-goog-api-key': 'wrong' }, {}] as Record<string, string>[]) {
      const answer = await post(`${path}:generateContent`, headers, body);
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.body.toString('utf8')).error.details[0].reason).toBe('API_KEY_INVALID');
    }
    expect((await post(`${path}:streamGenerateContent`, { 'x-goog-api-key': GEMINI_KEY }, body)).status).toBe(400);
  });
});

describe('fast upstream, Bedrock wire', () => {
  const body = JSON.stringify({ messages: [{ role: 'user', content: [{ text: 'Say hello to the bench.' }] }], inferenceConfig: { maxTokens: 16 } });
  const modelPath = `/model/${encodeURIComponent(BEDROCK_UPSTREAM_MODEL)}`;
  const signer = new SignatureV4({
    service: 'bedrock',
    region: 'us-east-1',
    sha256: Sha256,
    credentials: { accessKeyId: BENCH_AWS_ACCESS_KEY_ID, secretAccessKey: BENCH_AWS_SECRET_ACCESS_KEY },
  });
  /** Headers of the request signed with SigV4 as the adapter signs it. */
  async function signed(path: string): Promise<Record<string, string>> {
    const url = new URL(`${origin}${path}`);
    const request = new HttpRequest({ method: 'POST', protocol: 'http:', hostname: url.hostname, port: Number(url.port), path: url.pathname, headers: { host: url.host, 'content-type': 'application/json' }, body });
    const { headers } = await signer.sign(request);
    return headers as Record<string, string>;
  }

  it('answers Converse with the output message, stop reason and usage', async () => {
    const answer = await post(`${modelPath}/converse`, await signed(`${modelPath}/converse`), body);
    expect(answer.status).toBe(200);
    expect(answer.headers['content-type']).toBe('application/json');
    const json = JSON.parse(answer.body.toString('utf8'));
    expect(json).toMatchObject({
      output: { message: { role: 'assistant', content: [{ text: 'Hello from the bench upstream.' }] } },
      stopReason: 'end_turn',
      usage: { inputTokens: 9, outputTokens: 7, totalTokens: 16 },
    });
  });

  it('streams ConverseStream events that the SDK marshaller decodes: start, deltas, stops, usage metadata', async () => {
    const answer = await post(`${modelPath}/converse-stream`, await signed(`${modelPath}/converse-stream`), body);
    expect(answer.status).toBe(200);
    expect(answer.headers['content-type']).toBe('application/vnd.amazon.eventstream');
    const { Readable } = await import('node:stream');
    const marshaller = new EventStreamMarshaller({ utf8Encoder: toUtf8, utf8Decoder: fromUtf8 });
    // As de_ConverseStreamOutput: the event's name is the union member, its body the member's JSON.
    const events = marshaller.deserialize(Readable.from(answer.pieces.map((piece) => piece.bytes)), async (event) => {
      const [name, message] = Object.entries(event)[0]!;
      expect(message.headers[':content-type']?.value).toBe('application/json');
      return { name, payload: JSON.parse(toUtf8(message.body)) as Record<string, any> };
    });
    const decoded: { name: string; payload: Record<string, any> }[] = [];
    for await (const event of events) decoded.push(event);
    expect(decoded.map((event) => event.name)).toEqual(['messageStart', 'contentBlockDelta', 'contentBlockDelta', 'contentBlockDelta', 'contentBlockStop', 'messageStop', 'metadata']);
    expect(decoded[0]!.payload.role).toBe('assistant');
    const deltas = decoded.filter((event) => event.name === 'contentBlockDelta');
    expect(deltas.map((event) => event.payload.delta.text).join('')).toBe('Hello from the bench upstream.');
    expect(deltas.every((event) => event.payload.contentBlockIndex === 0)).toBe(true);
    expect(decoded[4]!.payload.contentBlockIndex).toBe(0);
    expect(decoded[5]!.payload.stopReason).toBe('end_turn');
    expect(decoded[6]!.payload.usage).toEqual({ inputTokens: 9, outputTokens: 7, totalTokens: 16 });
    // Bedrock pads every payload.
    expect(decoded.every((event) => typeof event.payload.p === 'string')).toBe(true);
    // The first text leaves at once, the rest after the gap.
    expect(answer.pieces.at(-1)!.at).toBeGreaterThanOrEqual(GAP_MS - 20);
    expect(answer.pieces[0]!.at).toBeLessThan(GAP_MS / 2);
  });

  it('refuses a request without a SigV4 Authorization header naming the access key', async () => {
    expect((await post(`${modelPath}/converse`, {}, body)).status).toBe(403);
    const headers = await signed(`${modelPath}/converse`);
    const otherKey = { ...headers, authorization: headers.authorization!.replace(BENCH_AWS_ACCESS_KEY_ID, 'AKIAOTHEROTHEROTHER0') };
    expect((await post(`${modelPath}/converse`, otherKey, body)).status).toBe(403);
  });
});

describe('fast upstream, OpenAI wire', () => {
  it('still answers chat completions whole and streamed', async () => {
    const whole = await post('/v1/chat/completions', {}, '{"model":"x","messages":[]}');
    expect(JSON.parse(whole.body.toString('utf8')).choices[0].message.content).toBe('Hello from the bench upstream.');
    const streamed = await post('/v1/chat/completions', {}, '{"model":"x","messages":[],"stream":true}');
    expect(streamed.body.toString('utf8')).toMatch(/"usage":\{"prompt_tokens":9.*data: \[DONE\]\n\n$/s);
    expect((await post('/v1/unknown', {}, '{}')).status).toBe(404);
  });
});

describe('bench wires', () => {
  it('always measures the OpenAI wire first and refuses unknown or repeated wires', () => {
    expect(parseWires(undefined)).toEqual(['openai']);
    expect(parseWires('gemini,bedrock')).toEqual(['openai', 'gemini', 'bedrock']);
    expect(parseWires('bedrock, openai')).toEqual(['openai', 'bedrock']);
    expect(() => parseWires('vertex')).toThrow(/--wire/);
    expect(() => parseWires('gemini,gemini')).toThrow(/distinct/);
  });

  it('serves the bench model over each wire from a valid catalog, bedrock with static credentials to sign with', () => {
    const { document, problems } = validateCatalogText(benchConfigYaml('http://127.0.0.1:12345/v1', ['openai', 'gemini', 'bedrock']));
    expect(problems).toEqual([]);
    expect(document?.providers.map((provider) => provider.kind)).toEqual(['openai', 'gemini', 'bedrock']);
    expect(document?.providers[1]).toMatchObject({ base_url: 'http://127.0.0.1:12345/v1beta', api_key_env: 'BENCH_GEMINI_API_KEY' });
    expect(document?.providers[2]).toMatchObject({ base_url: 'http://127.0.0.1:12345', region: 'us-east-1', access_key_id_env: 'BENCH_AWS_ACCESS_KEY_ID', secret_access_key_env: 'BENCH_AWS_SECRET_ACCESS_KEY' });
    expect(document?.models.map((model) => model.id)).toEqual([BENCH_MODEL, wireModel(BENCH_MODEL, 'gemini'), wireModel(BENCH_MODEL, 'bedrock')]);
    expect(document?.models[2]?.offers[0]).toMatchObject({ provider: 'bench-bedrock', upstream_model: BEDROCK_UPSTREAM_MODEL });
    expect(wireRoutingEnv(['openai', 'bedrock'])).toEqual({ BENCH_AWS_ACCESS_KEY_ID, BENCH_AWS_SECRET_ACCESS_KEY });
    // Without --wire the catalog is the one the bench always had: one provider, one model.
    const plain = validateCatalogText(benchConfigYaml('http://127.0.0.1:12345/v1')).document;
    expect(plain?.providers).toHaveLength(1);
    expect(plain?.models).toHaveLength(1);
  });
});
