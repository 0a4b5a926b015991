import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { OpenAIAdapter } from './openai-adapter.js';
import { adapterRequest, chatRequest, collect, deltasOf, failureOf, signal } from '../../../test/adapter-test-support.js';
import type { AdapterStreamPart } from '../provider-adapter.js';

// The batch reader the router reads OpenAI streams with (OpenAIStreamReader): the parts of one upstream
// read per next(), against a real HTTP server whose writes the test times.

const chunk = (content: string, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;
const usageChunk = `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 } })}\n\n`;

type Handler = (request: IncomingMessage, response: ServerResponse) => void;

describe('OpenAIStreamReader', () => {
  let server: Server;
  let adapter: OpenAIAdapter;
  let handler: Handler = () => undefined;
  /** Whether each request's connection closed before its response ended (the reader dropped it). */
  const dropped: Promise<boolean>[] = [];

  beforeAll(async () => {
    server = createServer((request, response) => {
      dropped.push(new Promise((resolve) => response.on('close', () => resolve(!response.writableFinished))));
      request.resume();
      request.on('end', () => handler(request, response));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    adapter = new OpenAIAdapter({ providerId: 'fake', baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, apiKey: 'sk-test' });
  });
  afterAll(async () => {
    await adapter.close();
    await new Promise((resolve) => server.close(resolve));
  });
  afterEach(() => {
    dropped.length = 0;
  });

  const sse = (response: ServerResponse) => response.writeHead(200, { 'content-type': 'text/event-stream' });
  const tick = () => new Promise((resolve) => setTimeout(resolve, 30));

  it('hands over the parts of one upstream read together, then those of the next, then the end', async () => {
    handler = (_request, response) => {
      sse(response);
      // One write of three events, then one of the finish, the usage and [DONE].
      response.write(chunk('a') + chunk('b') + chunk('c'));
      setTimeout(() => response.end(chunk('', 'stop') + usageChunk + 'data: [DONE]\n\n'), 50);
    };
    const reader = adapter.chatStreamReader(adapterRequest('m', chatRequest('hi')), signal());
    const first = await reader.next();
    expect(deltasOf(first!).map((delta) => delta.content)).toEqual(['a', 'b', 'c']);
    const second = await reader.next();
    expect(second!.map((part) => part.type)).toEqual(['delta', 'usage']);
    expect(deltasOf(second!)[0]!.finishReason).toBe('stop');
    expect(second![1]).toMatchObject({ type: 'usage', usage: { inputTokens: 3, outputTokens: 4 }, response: { id: 'chatcmpl-1', model: 'm' } });
    expect(await reader.next()).toBeUndefined();
    // Read to its end after [DONE]: the connection was not dropped.
    expect(await dropped[0]).toBe(false);
  });

  it('chatStream is the same parts one by one', async () => {
    handler = (_request, response) => {
      sse(response);
      response.write(chunk('a') + chunk('b'));
      setTimeout(() => response.end(chunk('c', 'stop') + usageChunk + 'data: [DONE]\n\n'), 20);
    };
    const parts: AdapterStreamPart[] = await collect(adapter.chatStream(adapterRequest('m', chatRequest('hi')), signal()));
    expect(deltasOf(parts).map((delta) => delta.content)).toEqual(['a', 'b', 'c']);
    expect(parts.at(-1)?.type).toBe('usage');
  });

  it('a stream cut before its finish fails as a connection failure, never as a complete answer', async () => {
    handler = (_request, response) => {
      sse(response);
      response.end(chunk('a'));
    };
    const reader = adapter.chatStreamReader(adapterRequest('m', chatRequest('hi')), signal());
    expect(deltasOf((await reader.next())!).map((delta) => delta.content)).toEqual(['a']);
    const failure = await failureOf(reader.next());
    expect(failure.kind).toBe('connection');
    expect(failure.providerMessage).toBe('stream ended before it finished');
  });

  it('close() mid-stream drops the upstream connection, and a closed reader reads no more', async () => {
    handler = (_request, response) => {
      sse(response);
      response.write(chunk('a'));
      // Never ends on its own.
    };
    const reader = adapter.chatStreamReader(adapterRequest('m', chatRequest('hi')), signal());
    expect(deltasOf((await reader.next())!).map((delta) => delta.content)).toEqual(['a']);
    reader.close();
    reader.close();
    expect(await dropped[0]).toBe(true);
    await expect(reader.next()).rejects.toMatchObject({ kind: 'connection' });
  });

  it('close() before the answer\'s headers came drops the request once they come', async () => {
    let answer: (() => void) | undefined;
    handler = (_request, response) => {
      answer = () => {
        sse(response);
        response.write(chunk('a'));
      };
    };
    const reader = adapter.chatStreamReader(adapterRequest('m', chatRequest('hi')), signal());
    await tick();
    expect(answer).toBeDefined();
    reader.close();
    answer!();
    expect(await dropped[0]).toBe(true);
  });

  it('a malformed chunk fails the read as a connection failure and drops the connection', async () => {
    handler = (_request, response) => {
      sse(response);
      response.write('data: {"choices": "not a list"}\n\n');
    };
    const reader = adapter.chatStreamReader(adapterRequest('m', chatRequest('hi')), signal());
    const failure = await failureOf(reader.next());
    expect(failure.kind).toBe('connection');
    expect(failure.providerMessage).toMatch(/^malformed stream chunk/);
    expect(await dropped[0]).toBe(true);
  });
});
