import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OpenAIAdapter } from '../openai/openai-adapter.js';
import { chatRequest, deltasOf, signal } from '../../../test/adapter-test-support.js';
import type { AdapterStreamPart } from '../provider-adapter.js';
import { DEFAULT_PROVIDER_CONNECTIONS } from './provider-pool.js';

const sse = (payload: unknown) => `data: ${JSON.stringify(payload)}\n\n`;
const chunk = (content: string, finish: string | null = null) =>
  sse({ id: 'chatcmpl-held', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content }, finish_reason: finish }] });

/**
 * Issue 39: a stream holds its upstream connection for its whole length, so the provider pool's
 * connection bound is the number of streams one routing process keeps open to one origin. An upstream
 * (a real HTTP server) answers each stream's first delta at once and holds the rest until told; every
 * one of STREAMS concurrent streams must get its first delta while all the others are still open.
 */
describe('provider pool: concurrent streams to one origin', () => {
  const STREAMS = 600;
  let server: Server;
  let adapter: OpenAIAdapter;
  const held: ServerResponse[] = [];
  let peak = 0;
  let open = 0;

  beforeAll(async () => {
    server = createServer((request, response) => {
      request.resume();
      request.on('end', () => {
        open += 1;
        peak = Math.max(peak, open);
        response.on('close', () => { open -= 1; });
        response.writeHead(200, { 'content-type': 'text/event-stream' });
        response.write(chunk('first'));
        held.push(response);
      });
    });
    server.maxConnections = STREAMS + 10;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    adapter = new OpenAIAdapter({ providerId: 'held', baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, apiKey: 'sk-test' });
  });
  afterAll(async () => {
    for (const response of held) response.destroy();
    await adapter.close();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it(`keeps ${STREAMS} streams open at once, each with its first delta before any ends`, async () => {
    expect(DEFAULT_PROVIDER_CONNECTIONS).toBeGreaterThanOrEqual(STREAMS);
    const iterators = Array.from({ length: STREAMS }, () => adapter.chatStream({ upstreamModel: 'm', chat: chatRequest('hold me') }, signal())[Symbol.asyncIterator]());
    // Each stream's first part, with a bound: a pool that queues streams beyond its connections never gets there.
    const firsts = await Promise.race([
      Promise.all(iterators.map((iterator) => iterator.next())),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`only ${held.length} of ${STREAMS} streams reached the upstream`)), 20_000)),
    ]);
    expect(firsts.every((first) => !first.done && first.value.type === 'delta' && first.value.delta.content === 'first')).toBe(true);
    expect(held).toHaveLength(STREAMS);
    expect(peak).toBe(STREAMS);
    // Each ends as a whole stream once its upstream finishes.
    for (const response of held) response.end(chunk(' last', 'stop') + 'data: [DONE]\n\n');
    const rests = await Promise.all(iterators.map(async (iterator) => {
      const parts: AdapterStreamPart[] = [];
      for (let next = await iterator.next(); !next.done; next = await iterator.next()) parts.push(next.value);
      return deltasOf(parts).map((delta) => delta.content).join('');
    }));
    expect(new Set(rests)).toEqual(new Set([' last']));
  }, 60_000);
});
