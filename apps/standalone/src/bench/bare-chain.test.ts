import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBareChain } from './bare-chain.js';
import type { ExtraTarget } from './peers.js';

// The chain runs the built proxy (npm test builds before it tests), as the bench does.
const root = fileURLToPath(new URL('../../../../', import.meta.url));
const benchDir = fileURLToPath(new URL('../../dist/bench/', import.meta.url));

describe('bare chain (--bare-chain)', () => {
  let upstream: Server;
  let chain: ExtraTarget;
  const seen: { url: string; authorization: string | undefined; body: string }[] = [];

  beforeAll(async () => {
    upstream = createServer((request: IncomingMessage, response) => {
      let body = '';
      request.setEncoding('utf8').on('data', (chunk: string) => (body += chunk)).on('end', () => {
        seen.push({ url: request.url ?? '', authorization: request.headers.authorization, body });
        response.writeHead(200, { 'content-type': 'text/event-stream' });
        response.write('data: {"n":1}\n\n');
        setTimeout(() => response.end('data: [DONE]\n\n'), 20);
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    chain = await startBareChain(`http://127.0.0.1:${(upstream.address() as AddressInfo).port}`, benchDir, root);
  });

  afterAll(async () => {
    await chain?.stop();
    await new Promise((resolve) => upstream?.close(resolve));
  });

  it('relays a streamed request through two proxy processes to the upstream', async () => {
    const groups = await chain.groups();
    expect(groups.map((group) => group.name)).toEqual(['bare-outer', 'bare-inner']);
    const [outer, inner] = groups.map((group) => group.pids[0]!);
    expect(outer).not.toBe(inner);
    expect(outer).not.toBe(process.pid);

    const response = await fetch(`${chain.origin}/v1/chat/completions`, {
      method: 'POST', headers: { authorization: 'Bearer bench', 'content-type': 'application/json' }, body: '{"model":"m","stream":true}',
    });
    expect(response.status).toBe(200);
    expect(await response.text()).toBe('data: {"n":1}\n\ndata: [DONE]\n\n');
    expect(seen).toEqual([{ url: '/v1/chat/completions', authorization: 'Bearer bench', body: '{"model":"m","stream":true}' }]);
  });

  it('is in series: without the inner proxy the outer cannot reach the upstream', async () => {
    const inner = (await chain.groups())[1]!.pids[0]!;
    process.kill(inner, 'SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 100));
    const response = await fetch(`${chain.origin}/v1/models`, { headers: { connection: 'close' } });
    expect(response.status).toBe(502);
    expect(seen).toHaveLength(1);
  });
});
