import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayError } from '@gateway/platform';
import { fetchUrl, type ResolveHost } from './fetch-url.js';

describe('fetchUrl: DNS answers are checked and the connection is pinned to them', () => {
  let server: Server;
  let port = 0;
  const hosts: string[] = [];

  beforeAll(async () => {
    server = createServer((request, response) => {
      hosts.push(request.headers.host ?? '');
      if (request.url === '/hop') {
        response.writeHead(302, { location: `http://second.test:${port}/file` });
        response.end();
        return;
      }
      response.writeHead(200, { 'content-type': 'text/plain' });
      response.end('pinned');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('connects to the address it checked, never asking the system resolver again (no rebinding)', async () => {
    // `.test` names do not resolve on this machine: the fetch succeeds only through the pinned address.
    const asked: string[] = [];
    const resolveHost: ResolveHost = async (host) => {
      asked.push(host);
      return [{ address: '127.0.0.1', family: 4 }];
    };
    hosts.length = 0;
    const fetched = await fetchUrl(`http://first.test:${port}/hop`, { maxBytes: 0, timeoutMs: 5_000 }, { allowLoopback: true, resolveHost });
    expect(fetched.data.toString()).toBe('pinned');
    expect(asked).toEqual(['first.test', 'second.test']);
    // The Host header keeps the name (virtual hosts and TLS still work); only the address is pinned.
    expect(hosts).toEqual([`first.test:${port}`, `second.test:${port}`]);
  });

  it('refuses a name when any of its addresses is internal, before connecting', async () => {
    hosts.length = 0;
    const mixed: ResolveHost = async () => [
      { address: '127.0.0.1', family: 4 },
      { address: '10.0.0.7', family: 4 },
    ];
    const error = await fetchUrl(`http://mixed.test:${port}/file`, { maxBytes: 0, timeoutMs: 5_000 }, { allowLoopback: true, resolveHost: mixed }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(GatewayError);
    expect((error as Error).message).toMatch(/private address/);
    expect(hosts).toEqual([]);
  });

  it('refuses a redirect whose new name resolves to the metadata address', async () => {
    const rebinding: ResolveHost = async (host) => [{ address: host === 'first.test' ? '127.0.0.1' : '169.254.169.254', family: 4 }];
    const error = await fetchUrl(`http://first.test:${port}/hop`, { maxBytes: 0, timeoutMs: 5_000 }, { allowLoopback: true, resolveHost: rebinding }).catch((caught: unknown) => caught);
    expect((error as Error).message).toMatch(/metadata address/);
  });
});
