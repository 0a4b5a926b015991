import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, ErrorReason, GatewayError, GrpcStatus } from '@gateway/platform';
import { MediaServiceClient, MediaServiceService } from '@gateway/proto';
import { testLogger } from '@gateway/testing';
import { startMediaService } from '../src/index.js';

async function rejection(promise: Promise<unknown>): Promise<GatewayError> {
  const error = await promise.then(() => undefined, (caught: unknown) => caught);
  expect(error).toBeInstanceOf(GatewayError);
  return error as GatewayError;
}

const MAX_BYTES = 64 * 1024;

describe('media service: FetchUrl', () => {
  let files: Server;
  let base = '';
  const hits: string[] = [];
  let permissive: Awaited<ReturnType<typeof startMediaService>>;
  let strict: Awaited<ReturnType<typeof startMediaService>>;
  let client: ReturnType<typeof createClient<MediaServiceClient>>;
  let strictClient: ReturnType<typeof createClient<MediaServiceClient>>;

  beforeAll(async () => {
    // A loopback file server: plain files, redirect chains, oversized and slow answers.
    files = createServer((request, response) => {
      const path = request.url ?? '/';
      hits.push(path);
      const redirect = /^\/chain\/(\d+)$/.exec(path);
      if (redirect) {
        const left = Number(redirect[1]);
        response.writeHead(302, { location: left > 0 ? `/chain/${left - 1}` : '/file.txt' });
        response.end();
        return;
      }
      switch (path) {
        case '/file.txt':
          response.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
          response.end('hello from a file');
          return;
        case '/to-private':
          response.writeHead(301, { location: 'http://10.0.0.1/secret' });
          response.end();
          return;
        case '/to-metadata':
          response.writeHead(307, { location: 'http://169.254.169.254/latest/meta-data/' });
          response.end();
          return;
        case '/to-metadata-v6':
          response.writeHead(308, { location: 'http://[fd00:ec2::254]/latest/' });
          response.end();
          return;
        case '/to-ftp':
          response.writeHead(302, { location: 'ftp://example.com/file' });
          response.end();
          return;
        case '/declared-too-large':
          response.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(MAX_BYTES + 1) });
          response.end(Buffer.alloc(MAX_BYTES + 1));
          return;
        case '/streamed-too-large':
          // No content-length: the cap must hold while reading.
          response.writeHead(200, { 'content-type': 'application/octet-stream' });
          for (let index = 0; index < 10; index++) response.write(Buffer.alloc(MAX_BYTES / 4));
          response.end();
          return;
        case '/slow':
          response.writeHead(200, { 'content-type': 'text/plain' });
          response.write('partial');
          return; // never ends
        case '/missing':
          response.writeHead(404);
          response.end('no');
          return;
        default:
          response.writeHead(500);
          response.end();
      }
    });
    await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
    permissive = await startMediaService({
      listenAddress: '127.0.0.1:0',
      logger: testLogger('media'),
      allowLoopbackUrlsForTests: true,
      urlFetchLimits: { maxBytes: MAX_BYTES, defaultTimeoutMs: 5_000 },
    });
    strict = await startMediaService({ listenAddress: '127.0.0.1:0', logger: testLogger('media') });
    client = createClient(MediaServiceClient, MediaServiceService, permissive.address, { maxAttempts: 1 });
    strictClient = createClient(MediaServiceClient, MediaServiceService, strict.address, { maxAttempts: 1 });
  });

  afterAll(async () => {
    client.close();
    strictClient.close();
    await permissive.stop();
    await strict.stop();
    files.closeAllConnections();
    await new Promise((resolve) => files.close(resolve));
  });

  const fetchWith = (target: typeof client, url: string, timeoutMs = 0) => target.fetchUrl({ url, maxBytes: 0, timeoutMs });

  it('fetches a file with its content type', async () => {
    const answer = await fetchWith(client, `${base}/file.txt`);
    expect(Buffer.from(answer.data).toString()).toBe('hello from a file');
    expect(answer.contentType).toBe('text/plain');
    expect(answer.finalUrl).toBe(`${base}/file.txt`);
  });

  it('follows up to 3 redirects and refuses a 4th', async () => {
    const answer = await fetchWith(client, `${base}/chain/2`); // chain/2 -> 1 -> 0 -> file.txt: 3 redirects
    expect(Buffer.from(answer.data).toString()).toBe('hello from a file');
    expect(answer.finalUrl).toBe(`${base}/file.txt`);
    hits.length = 0;
    const error = await rejection(fetchWith(client, `${base}/chain/3`));
    expect([error.status, error.reason]).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST]);
    expect(error.message).toMatch(/redirected more than 3 times/);
    expect(hits).not.toContain('/file.txt');
  });

  it('re-checks every redirect target: private, metadata (v4 and v6), other schemes', async () => {
    for (const path of ['/to-private', '/to-metadata', '/to-metadata-v6']) {
      const error = await rejection(fetchWith(client, `${base}${path}`));
      expect(error.reason, path).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
      expect(error.message, path).toMatch(/(private|metadata) address/);
    }
    const ftp = await rejection(fetchWith(client, `${base}/to-ftp`));
    expect(ftp.message).toMatch(/Only http and https/);
  });

  it('refuses loopback and internal URLs without the test switch, also behind a name', async () => {
    hits.length = 0;
    for (const url of [`${base}/file.txt`, 'http://localhost:1/x', 'http://[::1]/x', 'http://169.254.169.254/latest/meta-data/', 'http://10.1.2.3/',
      'http://0.0.0.0/', 'http://2130706433/', 'http://[::ffff:127.0.0.1]/']) {
      const error = await rejection(fetchWith(strictClient, url));
      expect([error.status, error.reason], url).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST]);
      expect(error.message, url).toMatch(/address, which is not fetched/);
    }
    expect(hits).toEqual([]);
  });

  it('refuses other schemes, credentials and garbage', async () => {
    for (const url of ['file:///etc/passwd', 'ftp://example.com/x', 'gopher://example.com', 'not a url', `http://user:pass@127.0.0.1:1/`]) {
      const error = await rejection(fetchWith(client, url));
      expect(error.reason, url).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
    }
  });

  it('caps the size, declared or streamed, as PAYLOAD_TOO_LARGE', async () => {
    for (const path of ['/declared-too-large', '/streamed-too-large']) {
      const error = await rejection(fetchWith(client, `${base}${path}`));
      expect([error.status, error.reason], path).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE]);
    }
    // The caller may ask for less than the service bound.
    const smaller = await rejection(client.fetchUrl({ url: `${base}/file.txt`, maxBytes: 4, timeoutMs: 0 }));
    expect(smaller.reason).toBe(ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE);
  });

  it('gives up on a slow URL at the timeout', async () => {
    const startedAt = Date.now();
    const error = await rejection(fetchWith(client, `${base}/slow`, 300));
    expect(error.status).toBe(GrpcStatus.DEADLINE_EXCEEDED);
    expect(error.reason).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
    expect(Date.now() - startedAt).toBeLessThan(3_000);
  });

  it('reports an error status of the URL', async () => {
    const error = await rejection(fetchWith(client, `${base}/missing`));
    expect(error.message).toMatch(/HTTP 404/);
  });
});
