import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { IncomingHttpHeaders } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProviderError, type AttemptSignal } from '../provider-adapter.js';
import { MAX_ERROR_BODY_BYTES } from './buffered-request.js';
import { createProviderPool } from './provider-pool.js';
import { StreamedBody, streamingRequest } from './streaming-request.js';

/** What the upstream does with a request, by its path. */
type Route = (request: IncomingMessage, response: ServerResponse) => void;

const httpError = (status: number, text: string, headers: IncomingHttpHeaders) =>
  new ProviderError('rejected', `${status} ${text} ${String(headers['x-error-type'])}`, status);

/** An AbortController's signal that also counts requestSent, as an attempt's does. */
function attemptSignal(): { signal: AttemptSignal; controller: AbortController; sent: () => number } {
  const controller = new AbortController();
  let sent = 0;
  const signal = Object.assign(controller.signal, { requestSent: () => { sent += 1; } }) as unknown as AttemptSignal;
  return { signal, controller, sent: () => sent };
}

describe('streamingRequest (undici handler, no Readable)', () => {
  let server: Server;
  let pool: ReturnType<typeof createProviderPool>;
  const routes = new Map<string, Route>();
  /** Each answer's close: true when it finished, false when the connection went first. */
  const closes = new Map<string, Promise<boolean>>();

  beforeAll(async () => {
    server = createServer((request, response) => {
      closes.set(request.url!, new Promise((resolve) => response.on('close', () => resolve(response.writableFinished))));
      request.resume();
      request.on('end', () => routes.get(request.url!)!(request, response));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    pool = createProviderPool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  });
  afterAll(async () => {
    await pool.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  const post = (path: string, signal: AttemptSignal) => streamingRequest(pool, { method: 'POST', path, headers: { 'content-type': 'application/json' }, body: '{}' }, signal, httpError);

  it('hands each chunk over as it arrives, with the headers, and tells the signal the request was sent', async () => {
    let next: (() => void) | undefined;
    routes.set('/paced', (_request, response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream', 'X-Request-Id': 'abc' });
      let sent = 0;
      const write = () => {
        sent += 1;
        if (sent === 3) response.end(`part ${sent}`);
        else response.write(`part ${sent};`);
      };
      next = write;
      write();
    });
    const { signal, sent } = attemptSignal();
    const response = await post('/paced', signal);
    expect(response.statusCode).toBe(200);
    expect(response.headers['x-request-id']).toBe('abc');
    expect(response.headers['content-type']).toBe('text/event-stream');
    expect(sent()).toBe(1);
    const read: string[] = [];
    for await (const chunk of response.body) {
      read.push(chunk.toString());
      // The next chunk leaves the upstream only once this one was read.
      next!();
    }
    expect(read.join('')).toBe('part 1;part 2;part 3');
    expect(await closes.get('/paced')).toBe(true);
  });

  it('turns an error status into httpError with its body and headers', async () => {
    routes.set('/refused', (_request, response) => {
      response.writeHead(429, { 'x-error-type': 'throttled' }).end('{"error":"slow down"}');
    });
    const error = await post('/refused', attemptSignal().signal).then(() => undefined, (rejection: unknown) => rejection);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).message).toContain('429 {"error":"slow down"} throttled');
  });

  it('refuses an error answer larger than its bound as a broken answer', async () => {
    routes.set('/huge-error', (_request, response) => {
      response.writeHead(500).end('x'.repeat(MAX_ERROR_BODY_BYTES + 1024));
    });
    const error = await post('/huge-error', attemptSignal().signal).then(() => undefined, (rejection: unknown) => rejection);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).message).toContain(`answer larger than ${MAX_ERROR_BODY_BYTES} bytes`);
  });

  it('drops the connection when the reader destroys the body or leaves its loop early', async () => {
    routes.set('/endless', (_request, response) => {
      response.writeHead(200);
      const timer = setInterval(() => response.write('more;'), 5);
      response.on('close', () => clearInterval(timer));
    });
    const destroyed = await post('/endless', attemptSignal().signal);
    await destroyed.body.next();
    destroyed.body.destroy();
    expect(await closes.get('/endless')).toBe(false);
    await expect(destroyed.body.next()).rejects.toThrow('destroyed');

    const left = await post('/endless', attemptSignal().signal);
    for await (const chunk of left.body) if (chunk.length > 0) break;
    expect(await closes.get('/endless')).toBe(false);
  });

  it('fails the reader with the signal\'s abort mid-body, and ends the upstream request', async () => {
    routes.set('/aborted', (_request, response) => {
      response.writeHead(200);
      response.write('first;');
    });
    const { signal, controller } = attemptSignal();
    const response = await post('/aborted', signal);
    expect((await response.body.next()).value?.toString()).toBe('first;');
    const reading = response.body.next();
    controller.abort(new Error('caller went away'));
    const error = await reading.then(() => undefined, (rejection: unknown) => rejection);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).message).toContain('request aborted');
    expect(await closes.get('/aborted')).toBe(false);
  });

  it('refuses at once a signal already aborted (nothing is sent)', async () => {
    let reached = false;
    routes.set('/never', (_request, response) => { reached = true; response.end(); });
    const { signal, controller, sent } = attemptSignal();
    controller.abort(new Error('gone'));
    await expect(post('/never', signal)).rejects.toBeInstanceOf(ProviderError);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(reached).toBe(false);
    expect(sent()).toBe(0);
  });
});

describe('StreamedBody', () => {
  it('holds the socket past 64 KiB unread and resumes it once the reader drained below', async () => {
    const body = new StreamedBody();
    let resumed = 0;
    body.resumeSocket = () => { resumed += 1; };
    const piece = Buffer.alloc(16 * 1024, 1);
    const accepted = [body.push(piece), body.push(piece), body.push(piece), body.push(piece)];
    expect(accepted).toEqual([true, true, true, false]);
    await body.next();
    expect(resumed).toBe(1);
    // Resumed once, not per read.
    await body.next();
    expect(resumed).toBe(1);
    body.end();
    const rest: number[] = [];
    for await (const chunk of body) rest.push(chunk.length);
    expect(rest).toEqual([piece.length, piece.length]);
  });

  it('hands a chunk straight to a pending read, and ends a pending read at the end', async () => {
    const body = new StreamedBody();
    const first = body.next();
    expect(body.push(Buffer.from('a'))).toBe(true);
    expect((await first).value?.toString()).toBe('a');
    const second = body.next();
    body.end();
    expect((await second).done).toBe(true);
  });
});
