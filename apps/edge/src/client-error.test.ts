import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { answerClientError } from './client-error.js';
import { API_VERSION } from './http.js';

// node:http's parser failures answered by answerClientError, over real loopback sockets: the status,
// the JSON envelope, x-request-id and the API version on each, and nothing written where nothing may be.

const HEADERS_TIMEOUT_MS = 300;

let server: Server | undefined;

afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  server = undefined;
});

async function startServer(options: { headersTimeout?: number; onConnection?: (socket: Socket) => void } = {}): Promise<number> {
  server = createServer(
    { headersTimeout: options.headersTimeout ?? 60_000, requestTimeout: options.headersTimeout ?? 60_000, connectionsCheckingInterval: 50 },
    (_request, response) => {
      response.setHeader('content-length', 2);
      response.end('ok');
    },
  );
  const listening = server;
  listening.on('clientError', (error: Error, socket) => answerClientError(error, socket, listening.headersTimeout));
  if (options.onConnection) listening.on('connection', options.onConnection);
  await new Promise<void>((resolve) => listening.listen(0, '127.0.0.1', resolve));
  return (listening.address() as AddressInfo).port;
}

/** Writes `bytes` (then, if given, `later` after a pause) and collects all that comes back until the server closes. */
function exchange(port: number, bytes: string, boundMs = 5_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    const received: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the server did not close within ${boundMs} ms; got ${Buffer.concat(received).toString('latin1').slice(0, 300)}`));
    }, boundMs);
    socket.on('data', (chunk) => received.push(chunk));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(received).toString('latin1'));
    });
    if (bytes) socket.write(bytes);
  });
}

/** The raw answers in `raw`, in order (several when a good request came first on the connection). */
function parseAnswers(raw: string) {
  const answers: Array<{ status: number; headers: Map<string, string>; body: string }> = [];
  let rest = raw;
  while (rest.length > 0) {
    const headerEnd = rest.indexOf('\r\n\r\n');
    expect(headerEnd).toBeGreaterThan(0);
    const [statusLine, ...lines] = rest.slice(0, headerEnd).split('\r\n');
    const headers = new Map(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
    const length = Number(headers.get('content-length'));
    const body = Buffer.from(rest.slice(headerEnd + 4), 'latin1').subarray(0, length).toString('utf8');
    answers.push({ status: Number(statusLine!.split(' ')[1]), headers, body });
    rest = rest.slice(headerEnd + 4 + length);
  }
  return answers;
}

function expectEnvelope(answer: { status: number; headers: Map<string, string>; body: string }, status: number, code: string) {
  expect(answer.status).toBe(status);
  expect(answer.headers.get('content-type')).toBe('application/json; charset=utf-8');
  expect(answer.headers.get('x-request-id')).toMatch(/\S{8,}/);
  expect(answer.headers.get('x-gateway-api-version')).toBe(API_VERSION);
  expect(answer.headers.get('connection')).toBe('close');
  const body = JSON.parse(answer.body) as { error: { type: string; code: string; message: string } };
  expect(body.error).toMatchObject({ type: 'invalid_request_error', code });
  expect(body.error.message.length).toBeLessThan(200);
}

describe('answerClientError (clientError of node:http)', () => {
  it('headers over the limit: 431 in the envelope, then close', async () => {
    const port = await startServer();
    const raw = await exchange(port, `GET / HTTP/1.1\r\nhost: x\r\nx-padding: ${'h'.repeat(64 * 1024)}\r\n\r\n`);
    const [answer, ...more] = parseAnswers(raw);
    expectEnvelope(answer!, 431, 'request_header_fields_too_large');
    expect(more).toHaveLength(0);
  });

  it('bytes that are not HTTP: 400 malformed_request', async () => {
    const port = await startServer();
    const [answer] = parseAnswers(await exchange(port, '\u0000\u0001 nothing like HTTP\r\n\r\n'));
    expectEnvelope(answer!, 400, 'malformed_request');
    expect(JSON.parse(answer!.body).error.message).toMatch(/^Malformed HTTP request \(HPE_[A-Z_]+\)\.$/);
  });

  it('each refused connection gets its own request id', async () => {
    const port = await startServer();
    const ids = new Set<string | undefined>();
    for (let index = 0; index < 3; index++) ids.add(parseAnswers(await exchange(port, 'garbage\r\n\r\n'))[0]!.headers.get('x-request-id'));
    expect(ids.size).toBe(3);
  });

  it('headers that never finish: 408 once the headers timeout passes', async () => {
    const port = await startServer({ headersTimeout: HEADERS_TIMEOUT_MS });
    const [answer] = parseAnswers(await exchange(port, 'GET / HTTP/1.1\r\nhost: x\r\n'));
    expectEnvelope(answer!, 408, 'request_timeout');
  });

  it('after a complete answer on a keep-alive connection, garbage gets its own 400', async () => {
    const port = await startServer();
    const socket = connect({ host: '127.0.0.1', port });
    const received: Buffer[] = [];
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    let sentGarbage = false;
    socket.on('data', (chunk) => {
      received.push(chunk);
      if (!sentGarbage) {
        sentGarbage = true;
        socket.write('GARBAGE\r\n\r\n');
      }
    });
    socket.write('GET / HTTP/1.1\r\nhost: x\r\n\r\n');
    await closed;
    const answers = parseAnswers(Buffer.concat(received).toString('latin1'));
    expect(answers.map((answer) => answer.status)).toEqual([200, 400]);
    expectEnvelope(answers[1]!, 400, 'malformed_request');
  });

  it('garbage in the same chunk as a request being answered: no second answer is spliced into the first', async () => {
    const port = await startServer();
    const answers = parseAnswers(await exchange(port, 'GET / HTTP/1.1\r\nhost: x\r\n\r\nGARBAGE\r\n\r\n'));
    expect(answers.map((answer) => answer.status)).toEqual([200]);
    expect(answers[0]!.body).toBe('ok');
  });

  it('writes nothing to a socket whose writing side has ended: it is destroyed instead', async () => {
    let serverSide: Socket | undefined;
    const port = await startServer({ onConnection: (socket) => (serverSide = socket) });
    const closed = exchange(port, '');
    await new Promise((resolve) => setTimeout(resolve, 50));
    serverSide!.end();
    answerClientError(Object.assign(new Error('parse error'), { code: 'HPE_INVALID_METHOD' }), serverSide!, HEADERS_TIMEOUT_MS);
    expect(await closed).toBe('');
    expect(serverSide!.destroyed).toBe(true);
  });

  it('a client that reset the connection gets nothing written', async () => {
    let serverSide: Socket | undefined;
    const port = await startServer({ onConnection: (socket) => (serverSide = socket) });
    const closed = exchange(port, '');
    await new Promise((resolve) => setTimeout(resolve, 50));
    const write = serverSide!.write.bind(serverSide);
    let writes = 0;
    serverSide!.write = ((...args: Parameters<Socket['write']>) => {
      writes++;
      return write(...args);
    }) as Socket['write'];
    answerClientError(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }), serverSide!, HEADERS_TIMEOUT_MS);
    expect(writes).toBe(0);
    expect(serverSide!.destroyed).toBe(true);
    await closed;
  });
});
