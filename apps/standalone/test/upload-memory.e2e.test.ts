import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { credentials, Metadata, status, type ServiceError } from '@grpc/grpc-js';
import { MediaServiceClient } from '@gateway/proto';
import { freePort } from '../src/index.js';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBus, createTestDatabase, pcmWav, startFakeUpstream, type FakeUpstream, type TestBus, type TestDatabase } from '@gateway/testing';
import { createAccountKey, startProcessStack, type ProcessStack } from './process-stack.js';
import { FILE_BYTES, measureConcurrentUploads, MiB, pause, rssOf, upload, uploadMemoryCatalog, UPLOADS } from './upload-memory-harness.js';

// Issue 29 item 8: uploads are streamed to disk at the edge and only a bounded number of them is held
// in memory at once, so 20 concurrent 19 MiB transcription uploads move the resident memory of the
// edge, media and routing processes (each its own OS process, as deployed) by at most 250 MB, and it
// comes back within 100 MB of where it was once they are answered.

/** One ConvertAudio call without the internal credential; resolves its status code. */
function unauthenticatedConvert(address: string, bytes: number): Promise<number> {
  const client = new MediaServiceClient(address, credentials.createInsecure(), { 'grpc.max_send_message_length': 64 * MiB });
  return new Promise<number>((resolve) => {
    client.convertAudio({ data: Buffer.alloc(bytes, 1), targetFormat: 'wav', filename: 'x.wav' }, new Metadata(), { deadline: Date.now() + 30_000 }, (error: ServiceError | null) => {
      client.close();
      resolve(error ? error.code : status.OK);
    });
  });
}

describe('upload memory (edge, media and routing as separate processes)', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let upstream: FakeUpstream;
  let directory: string;
  let stack: ProcessStack;
  let apiKey: string;

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    upstream = await startFakeUpstream();
    directory = await mkdtemp(join(tmpdir(), 'upload-memory-'));
    const configPath = join(directory, 'gateway.yaml');
    await writeFile(configPath, uploadMemoryCatalog(upstream));
    stack = await startProcessStack(database, testBus, {
      catalog: { GATEWAY_CONFIG: configPath },
      routing: { MEMORY_E2E_KEY: 'memory-upstream-key' },
      edge: { EDGE_UPLOAD_DIR: directory },
    });
    ({ apiKey } = await createAccountKey(stack, 'upload-memory', '100'));
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
    await upstream?.close();
    await testBus?.destroy();
    await database?.drop();
    if (directory) await rm(directory, { recursive: true, force: true });
  });

  it(`${UPLOADS} concurrent ${FILE_BYTES / MiB} MiB transcription uploads stay within idle + 250 MB and give it back`, async () => {
    const pids = (['edge', 'media', 'routing'] as const).map((app) => stack.running.get(app)!.pid!);
    const { idle, idleEach, peak, after } = await measureConcurrentUploads({ url: stack.edgeUrl, apiKey, upstream, pids });
    // Every spool file is gone once its answer is over.
    const spools = (await readdir(directory)).filter((name) => name.startsWith('gateway-uploads-'));
    expect(spools).toHaveLength(1);
    expect(await readdir(join(directory, spools[0]!))).toEqual([]);
    const figures = `idle ${(idle / MiB).toFixed(0)} MiB, peak ${(peak / MiB).toFixed(0)} MiB, after ${(after / MiB).toFixed(0)} MiB`;
    console.log(`upload memory: ${figures}; per process after: ${pids.map((pid) => (rssOf(pid) / MiB).toFixed(0)).join(' / ')} MiB (edge / media / routing; idle ${idleEach.map((bytes) => (bytes / MiB).toFixed(0)).join(' / ')})`);
    expect(peak - idle, figures).toBeLessThanOrEqual(250 * 1e6);
    expect(after - idle, figures).toBeLessThanOrEqual(100 * 1e6);
  }, 300_000);

  it('refuses unauthenticated ConvertAudio calls before reading their message: 40 MiB ones by size, 16 MiB ones by credential, without the memory', async () => {
    const media = stack.running.get('media')!.pid!;
    const before = rssOf(media);
    let peak = before;
    const sampler = setInterval(() => { peak = Math.max(peak, rssOf(media)); }, 10);
    const oversized = await Promise.all(Array.from({ length: 5 }, () => unauthenticatedConvert(stack.addresses.media, 40 * MiB)));
    const underBound = await Promise.all(Array.from({ length: 5 }, () => unauthenticatedConvert(stack.addresses.media, 16 * MiB)));
    clearInterval(sampler);
    peak = Math.max(peak, rssOf(media));
    expect(oversized.every((code) => code === status.RESOURCE_EXHAUSTED || code === status.UNAUTHENTICATED), oversized.join(',')).toBe(true);
    expect(underBound).toEqual(Array(5).fill(status.UNAUTHENTICATED));
    // Receiving even one of the ten messages would take 16-40 MiB at once (and more in decoded copies).
    const grown = peak - before;
    expect(grown, `media RSS peaked ${(grown / MiB).toFixed(1)} MiB above where it was`).toBeLessThan(16 * MiB);
  }, 120_000);

  it('answers a 413 for an oversized upload with Connection: close and closes the connection within a second', async () => {
    const url = new URL(stack.edgeUrl);
    const socket = connect(Number(url.port), url.hostname);
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    const received: Buffer[] = [];
    let answeredAt = 0;
    let closedAt = 0;
    socket.on('data', (chunk: Buffer) => {
      received.push(chunk);
      if (answeredAt === 0 && Buffer.concat(received).includes('\r\n\r\n')) answeredAt = Date.now();
    });
    const closed = new Promise<void>((resolve) => {
      const done = () => { closedAt ||= Date.now(); resolve(); };
      socket.once('end', done);
      socket.once('close', done);
    });
    socket.on('error', () => undefined);
    socket.write(
      `POST /v1/audio/transcriptions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${apiKey}\r\n` +
        `Content-Type: multipart/form-data; boundary=b\r\nContent-Length: ${40 * MiB}\r\n\r\n`,
    );
    // A first part of the body, then nothing more: the rest stays unsent.
    socket.write(Buffer.alloc(256 * 1024, 0x61));
    await Promise.race([closed, pause(5_000)]);
    const text = Buffer.concat(received).toString('latin1');
    expect(text).toMatch(/^HTTP\/1\.1 413 /);
    expect(text.toLowerCase()).toContain('connection: close');
    expect(closedAt, 'the server never closed the connection').toBeGreaterThan(0);
    expect(closedAt - answeredAt).toBeLessThan(1_000);
    socket.destroy();
  }, 30_000);

  it('counts a chunked body against the in-flight body bytes as it is read: the one past the bound is a 503', async () => {
    const port = await freePort();
    const metricsPort = await freePort();
    const edge = stack.launch('edge', { PORT: String(port), METRICS_PORT: String(metricsPort), EDGE_MAX_IN_FLIGHT_BODY_BYTES: String(30 * MiB) });
    try {
      const url = `http://127.0.0.1:${port}`;
      for (let attempt = 0; ; attempt++) {
        if ((await fetch(`${url}/v1/models`).then((response) => response.status, () => 0)) === 200) break;
        if (attempt > 150) throw new Error(`second edge never ready:\n${stack.logs.join('')}`);
        await pause(100);
      }
      const file = pcmWav((FILE_BYTES - 44) / 32_000);
      // The first upload sends its file and holds its last bytes back, so its 19 MiB stay in flight.
      const boundary = 'memory-test-boundary';
      const holding = httpRequest(`${url}/v1/audio/transcriptions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
      });
      const first = new Promise<number>((resolve, reject) => {
        holding.on('response', (response) => { response.resume(); response.on('end', () => resolve(response.statusCode ?? 0)); });
        holding.on('error', reject);
      });
      holding.write(`--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\ncloud/transcribe\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`);
      holding.write(file);
      await pause(1_500);
      const second = await upload(url, apiKey, file, { chunked: true });
      expect(second.status, second.body).toBe(503);
      expect(JSON.parse(second.body).error.code).toBe('overloaded');
      holding.end(`\r\n--${boundary}--\r\n`);
      expect(await first).toBe(200);
      // Once the first is answered its bytes are out of the count: the same upload goes through.
      const third = await upload(url, apiKey, file, { chunked: true });
      expect(third.status, third.body).toBe(200);
    } finally {
      edge.kill('SIGTERM');
      await new Promise((resolve) => edge.once('exit', resolve));
    }
  }, 120_000);
});
