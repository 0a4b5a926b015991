import { Sha256 } from '@aws-crypto/sha256-js';
import { EventStreamCodec, type Message } from '@smithy/eventstream-codec';
import { HttpRequest } from '@smithy/protocol-http';
import { SignatureV4 } from '@smithy/signature-v4';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFakeBedrockUpstream, type FakeBedrockUpstream } from './fake-bedrock-upstream.js';

const KEY_ID = 'AKIAFAKETEST0000001';
const SECRET = 'fake-test-secret';
const TOKEN = 'fake-session-token';
const MODEL = 'arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.anthropic.claude-3-7-sonnet-20250219-v1:0';
const codec = new EventStreamCodec(toUtf8, fromUtf8);

interface Credentials { accessKeyId: string; secretAccessKey: string; sessionToken?: string }

/** A Converse call signed the way the AWS SDK signs it (service bedrock), independent of the gateway's adapter. */
async function call(
  upstream: FakeBedrockUpstream, body: unknown, options: { credentials?: Credentials; stream?: boolean; tamper?: boolean; region?: string } = {},
): Promise<Response> {
  const url = new URL(upstream.url);
  const path = `/model/${encodeURIComponent(MODEL)}/${options.stream ? 'converse-stream' : 'converse'}`;
  const text = JSON.stringify(body);
  const signer = new SignatureV4({
    service: 'bedrock', region: options.region ?? upstream.region, sha256: Sha256,
    credentials: options.credentials ?? { accessKeyId: KEY_ID, secretAccessKey: SECRET, sessionToken: TOKEN },
  });
  const signed = await signer.sign(new HttpRequest({
    method: 'POST', protocol: url.protocol, hostname: url.hostname, port: Number(url.port), path,
    headers: { host: url.host, 'content-type': 'application/json' }, body: text,
  }));
  const { host: _host, ...headers } = signed.headers;
  return fetch(`${upstream.url}${path}`, { method: 'POST', headers, body: options.tamper ? text.replace('Hi', 'Ho') : text });
}

const hello = { messages: [{ role: 'user', content: [{ text: 'Hi' }] }] };

async function refusal(upstream: FakeBedrockUpstream, body: unknown): Promise<{ status: number; type: string; message: string }> {
  const response = await call(upstream, body);
  const json = (await response.json()) as { message: string };
  return { status: response.status, type: (response.headers.get('x-amzn-errortype') ?? '').split(':')[0]!, message: json.message };
}

/** Splits an eventstream body into messages by their length prefix and decodes each with the smithy codec. */
function framesOf(bytes: Uint8Array): Message[] {
  const buffer = Buffer.from(bytes);
  const messages: Message[] = [];
  for (let offset = 0; offset < buffer.length;) {
    const length = buffer.readUInt32BE(offset);
    messages.push(codec.decode(buffer.subarray(offset, offset + length)));
    offset += length;
  }
  return messages;
}

const header = (message: Message, name: string) => message.headers[name]?.value;

describe('fake Bedrock upstream', () => {
  let upstream: FakeBedrockUpstream;
  beforeAll(async () => {
    upstream = await startFakeBedrockUpstream({ region: 'us-west-2', accessKeyId: KEY_ID, secretAccessKey: SECRET, sessionToken: TOKEN });
  });
  afterAll(() => upstream.close());
  beforeEach(() => upstream.reset());

  it('answers a request SigV4-signed with its credentials (model ARN encoded in the path)', async () => {
    upstream.script({ text: 'Hello!', usage: { inputTokens: 3, outputTokens: 2, cacheReadInputTokens: 10, cacheWriteInputTokens: 4 } });
    const response = await call(upstream, hello);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({
      output: { message: { role: 'assistant', content: [{ text: 'Hello!' }] } },
      stopReason: 'end_turn',
      usage: { inputTokens: 3, outputTokens: 2, totalTokens: 19, cacheReadInputTokens: 10, cacheWriteInputTokens: 4 },
      metrics: { latencyMs: 42 },
    });
  });

  it('refuses a wrong secret, an unknown key, a foreign region, a missing session token and a body changed after signing', async () => {
    const cases: [Parameters<typeof call>[2], number, string, RegExp][] = [
      [{ credentials: { accessKeyId: KEY_ID, secretAccessKey: 'wrong', sessionToken: TOKEN } }, 403, 'InvalidSignatureException', /signature we calculated does not match/],
      [{ credentials: { accessKeyId: 'AKIAOTHER', secretAccessKey: SECRET, sessionToken: TOKEN } }, 403, 'UnrecognizedClientException', /security token/],
      [{ region: 'eu-west-1' }, 403, 'InvalidSignatureException', /scoped/],
      [{ credentials: { accessKeyId: KEY_ID, secretAccessKey: SECRET } }, 403, 'UnrecognizedClientException', /security token/],
      [{ tamper: true }, 400, 'ValidationException', /x-amz-content-sha256/],
    ];
    for (const [options, status, type, message] of cases) {
      const response = await call(upstream, hello, options);
      const json = (await response.json()) as { message: string };
      expect([response.status, response.headers.get('x-amzn-errortype')?.split(':')[0]]).toEqual([status, type]);
      expect(json.message).toMatch(message);
    }
    const unsigned = await fetch(`${upstream.url}/model/m/converse`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(hello) });
    expect(unsigned.status).toBe(403);
  });

  it('refuses what Converse refuses', async () => {
    const toolTurns = [
      { role: 'user', content: [{ text: 'Weather?' }] },
      { role: 'assistant', content: [{ toolUse: { toolUseId: 't1', name: 'weather', input: {} } }] },
      { role: 'user', content: [{ toolResult: { toolUseId: 't1', content: [{ text: 'sunny' }] } }] },
    ];
    const tools = { tools: [{ toolSpec: { name: 'weather', inputSchema: { json: { type: 'object' } } } }] };
    const document = (name: string) => ({ messages: [{ role: 'user', content: [{ text: 'Read' }, { document: { format: 'pdf', name, source: { bytes: 'JVBERg==' } } }] }] });
    const cases: [unknown, RegExp][] = [
      [document('report.pdf'), /document\.name is invalid/],
      [{ messages: toolTurns }, /toolConfig field must be defined/],
      [{ messages: [{ role: 'user', content: [{ text: 'Hi' }, { cachePoint: { type: 'default', ttl: '10m' } }] }] }, /ttl.*\[5m, 1h\]/],
      [{ messages: [{ role: 'user', content: [{ text: 'Hi' }, { cachePoint: { type: 'ephemeral' } }] }] }, /cachePoint\.type/],
      [{ ...hello, model: 'x' }, /extraneous key \[model\]/],
      [{ messages: [{ role: 'user', content: [{ text: 'Hi', cache_control: { type: 'ephemeral' } }] }] }, /exactly one member/],
      [{ messages: [{ role: 'user', content: [{ text: '  ' }] }] }, /is blank/],
      [{ messages: [{ role: 'assistant', content: [{ text: 'Hi' }] }] }, /must start with a user message/],
      [{ messages: [hello.messages[0], hello.messages[0]] }, /must alternate/],
      [{ messages: [toolTurns[0], toolTurns[1], { role: 'user', content: [{ text: 'no result' }] }], toolConfig: tools }, /Expected toolResult blocks/],
      [{ messages: [toolTurns[0], { role: 'assistant', content: [{ reasoningContent: { reasoningText: { text: 'hm', signature: 'forged' } } }, { text: 'x' }] }, { role: 'user', content: [{ text: 'y' }] }] }, /Invalid signature/],
      [{ ...hello, toolConfig: { ...tools, toolChoice: { tool: { name: 'other' } } } }, /toolChoice\.tool\.name/],
      [{ ...hello, inferenceConfig: { maxTokens: 100, topK: 5 } }, /extraneous key \[topK\]/],
      [{ ...hello, inferenceConfig: { maxTokens: 2000 }, additionalModelRequestFields: { thinking: { type: 'enabled', budget_tokens: 4000 } } }, /max_tokens.*greater/],
      // Claude's betas: a list of flags Bedrock knows.
      [{ ...hello, additionalModelRequestFields: { anthropic_beta: 'interleaved-thinking-2025-05-14' } }, /anthropic_beta must be an array/],
      [{ ...hello, additionalModelRequestFields: { anthropic_beta: ['no-such-beta-2020-01-01'] } }, /invalid beta flag/],
    ];
    for (const [body, message] of cases) {
      const refused = await refusal(upstream, body);
      expect([refused.status, refused.type]).toEqual([400, 'ValidationException']);
      expect(refused.message).toMatch(message);
    }
    // The same conversations are taken when well-formed.
    expect((await call(upstream, document('report-pdf'))).status).toBe(200);
    expect((await call(upstream, { messages: toolTurns, toolConfig: tools })).status).toBe(200);
    expect((await call(upstream, { messages: [{ role: 'user', content: [{ text: 'Hi' }, { cachePoint: { type: 'default', ttl: '1h' } }] }] })).status).toBe(200);
    expect((await call(upstream, { ...hello, additionalModelRequestFields: { anthropic_beta: ['interleaved-thinking-2025-05-14'] } })).status).toBe(200);
  });

  it('streams binary eventstream frames: typed headers, p padding, no start event for text, a start for each toolUse, metadata last', async () => {
    upstream.script({ text: 'Hi there', chunkCount: 2, toolCalls: [{ id: 't9', name: 'weather', input: { city: 'Oslo' } }], usage: { inputTokens: 4, outputTokens: 6 } });
    const response = await call(upstream, { ...hello, toolConfig: { tools: [{ toolSpec: { name: 'weather', inputSchema: { json: { type: 'object' } } } }] } }, { stream: true });
    expect(response.headers.get('content-type')).toBe('application/vnd.amazon.eventstream');
    const frames = framesOf(new Uint8Array(await response.arrayBuffer()));
    for (const frame of frames) {
      expect([header(frame, ':message-type'), header(frame, ':content-type')]).toEqual(['event', 'application/json']);
      expect(JSON.parse(toUtf8(frame.body)).p).toMatch(/^[a-zA-Z0-9]+$/);
    }
    const events = frames.map((frame) => [header(frame, ':event-type'), JSON.parse(toUtf8(frame.body))] as const);
    expect(events.map(([type]) => type)).toEqual([
      'messageStart', 'contentBlockDelta', 'contentBlockDelta', 'contentBlockStop',
      'contentBlockStart', 'contentBlockDelta', 'contentBlockDelta', 'contentBlockStop', 'messageStop', 'metadata',
    ]);
    expect(events[4]![1]).toMatchObject({ contentBlockIndex: 1, start: { toolUse: { toolUseId: 't9', name: 'weather' } } });
    expect(events.filter(([type, payload]) => type === 'contentBlockDelta' && payload.contentBlockIndex === 1).map(([, payload]) => payload.delta.toolUse.input).join('')).toBe('{"city":"Oslo"}');
    expect(events[8]![1]).toMatchObject({ stopReason: 'tool_use' });
    expect(events[9]![1]).toMatchObject({ usage: { inputTokens: 4, outputTokens: 6, totalTokens: 10 } });
  });

  it('sends an exception frame mid-stream and scripted HTTP errors with their type header', async () => {
    upstream.script({ text: 'abcdef', chunkCount: 3, exceptionAfterChunks: 1, exceptionType: 'modelStreamErrorException' }, { status: 429 });
    const frames = framesOf(new Uint8Array(await (await call(upstream, hello, { stream: true })).arrayBuffer()));
    const last = frames.at(-1)!;
    expect([header(last, ':message-type'), header(last, ':exception-type')]).toEqual(['exception', 'modelStreamErrorException']);
    expect(frames.filter((frame) => header(frame, ':event-type') === 'contentBlockDelta')).toHaveLength(1);
    const throttled = await refusal(upstream, hello);
    expect([throttled.status, throttled.type]).toEqual([429, 'ThrottlingException']);
  });
});
