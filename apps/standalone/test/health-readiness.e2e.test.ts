import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHealthClient } from '@gateway/platform';
import { askReflection, createTestBus, testLogger, type TestBus } from '@gateway/testing';
import { startEdgeReplica } from '../src/index.js';
import { OBSERVED_MODEL, startObservedStack, type ObservedStack } from './observability-harness.js';

/**
 * Starts a streamed chat and resolves once its first SSE event has arrived (the request is in flight
 * at the edge); `rest()` reads the remainder, rejecting when the stream is cut.
 */
async function streamUntilFirstEvent(baseUrl: string, apiKey: string): Promise<{ status: number; rest: () => Promise<string> }> {
  const response = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: OBSERVED_MODEL, messages: [{ role: 'user', content: 'Hi' }], stream: true }),
  });
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (!text.includes('data:')) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`the stream ended before its first event: ${text}`);
    text += decoder.decode(value, { stream: true });
  }
  return {
    status: response.status,
    rest: async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return text;
        text += decoder.decode(value, { stream: true });
      }
    },
  };
}

// Health end to end: every service's gRPC health SERVING with its dependencies up and server
// reflection answering as grpcurl asks it; the edge's /livez, /readyz (auth, ledger, routing behind
// it) and /healthz; and a graceful stop that finishes the streams in flight, within its bound.

const SERVICES = {
  auth: 'gateway.v1.AuthService',
  catalog: 'gateway.v1.CatalogService',
  ledger: 'gateway.v1.LedgerService',
  routing: 'gateway.v1.RouterService',
  media: 'gateway.v1.MediaService',
} as const;

describe('health, readiness, reflection and drain', () => {
  let fixture: ObservedStack;
  let otherBus: TestBus;

  beforeAll(async () => {
    fixture = await startObservedStack({ name: 'health' });
    otherBus = await createTestBus('nats');
  }, 120_000);

  afterAll(async () => {
    await otherBus?.destroy();
    await fixture?.stop();
  });

  it('reports every service SERVING on gRPC health and lists it through server reflection', async () => {
    for (const [name, service] of Object.entries(SERVICES)) {
      const address = fixture.stack.addresses[name as keyof typeof SERVICES];
      const health = createHealthClient(address);
      try {
        expect(await health.check('')).toBe('SERVING');
        expect(await health.check(service)).toBe('SERVING');
      } finally {
        health.close();
      }
      const reflected = await askReflection(address, service);
      expect(reflected.error).toBeUndefined();
      expect(reflected.services.sort()).toEqual([service, 'grpc.health.v1.Health'].sort());
      // The file declaring the service, as grpcurl `describe` decodes it: the proto file and the service in it.
      const files = reflected.fileDescriptors.map((file) => file.toString('latin1'));
      expect(files.some((file) => file.includes(service.split('.').pop()!) && file.includes('gateway/v1/'))).toBe(true);
    }
  });

  it('answers /livez, /readyz and /healthz, and /readyz names a dependency that is down', async () => {
    const { stack } = fixture;
    expect(await (await fetch(`${stack.url}/livez`)).json()).toEqual({ status: 'ok' });
    const ready = await fetch(`${stack.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ok', checks: { catalog: 'ok', auth: 'ok', ledger: 'ok', routing: 'ok' } });
    expect((await fetch(`${stack.url}/healthz`)).status).toBe(200);

    // An edge whose routing address answers nothing: alive, not ready.
    const { addresses } = stack;
    const edge = await startEdgeReplica(addresses, {
      port: 0, routerAddress: '127.0.0.1:1', bus: otherBus.bus, logger: testLogger('edge-no-routing'),
    });
    try {
      expect((await fetch(`${edge.url}/livez`)).status).toBe(200);
      const notReady = await fetch(`${edge.url}/readyz`);
      expect(notReady.status).toBe(503);
      const report = (await notReady.json()) as { status: string; checks: Record<string, string> };
      expect(report.status).toBe('unavailable');
      expect(report.checks).toMatchObject({ catalog: 'ok', auth: 'ok', ledger: 'ok' });
      expect(report.checks.routing).toMatch(/^unreachable/);
    } finally {
      await edge.stop();
    }
  });

  it('on stop, answers a request whose connection the kernel accepted while the edge was busy (issue 36 item 5: the listen backlog)', async () => {
    const { stack } = fixture;
    const { addresses } = stack;
    const edge = await startEdgeReplica(addresses, {
      port: 0, bus: otherBus.bus, logger: testLogger('edge-backlog'), drainTimeoutMs: 5_000,
    });
    // Another process connects and sends its request while this process's event loop is blocked: the
    // connection completes in the kernel's listen backlog, with the request in its buffer, unaccepted.
    const client = spawn(process.execPath, ['-e', `
      const net = require('node:net');
      process.stdout.write('ready\\n');
      setTimeout(() => {
        const socket = net.connect(${edge.port}, '127.0.0.1', () => {
          socket.write('GET /livez HTTP/1.1\\r\\nHost: edge\\r\\n\\r\\n');
          process.stdout.write('sent\\n');
        });
        let answer = '';
        socket.on('data', (chunk) => { answer += chunk; });
        socket.on('error', (error) => process.stdout.write('result ' + error.code + '\\n'));
        socket.on('close', () => process.stdout.write('result ' + (answer.split('\\r\\n')[0] || 'closed without an answer') + '\\n'));
      }, 50);
    `], { stdio: ['ignore', 'pipe', 'inherit'] });
    let output = '';
    const result = new Promise<string>((resolve) => {
      client.stdout!.on('data', (chunk: Buffer) => {
        output += chunk;
        const match = /result (.*)\n/.exec(output);
        if (match) resolve(match[1]!);
      });
    });
    await new Promise<void>((resolve) => client.stdout!.once('data', () => resolve()));
    // Blocked: the child connects and writes meanwhile; then the stop begins in this same turn.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1_500);
    const stopping = edge.stop();
    expect(await result, output).toBe('HTTP/1.1 200 OK');
    await stopping;
  });

  it('on stop, lets a stream in flight finish, refuses new connections, and cuts what outlives the drain bound', async () => {
    const { stack, upstream } = fixture;
    const { apiKey } = await fixture.account('drain');
    const { addresses } = stack;
    const edge = await startEdgeReplica(addresses, {
      port: 0, bus: otherBus.bus, logger: testLogger('edge-drain'), drainTimeoutMs: 10_000,
    });
    // ~1 s of stream: 5 chunks, 250 ms apart; the edge stops once the first one is here (in flight).
    upstream.setFallback({ chunkCount: 5, chunkDelayMs: 250, text: 'one two three four five' });
    const stream = await streamUntilFirstEvent(edge.url, apiKey);
    expect(stream.status).toBe(200);
    const stoppedAt = performance.now();
    const stopping = edge.stop();
    // stop() closes the listener within one event-loop turn (after accepting what the kernel had already
    // accepted): a new connection after that is refused.
    await new Promise((resolve) => setTimeout(resolve, 50));
    await expect(fetch(`${edge.url}/livez`)).rejects.toThrow();
    const text = await stream.rest();
    expect(text).toContain('data: [DONE]');
    await stopping;
    // The stop waited for the stream, and not for the whole bound.
    expect(performance.now() - stoppedAt).toBeLessThan(5_000);

    // A stream that would outlive the bound is cut at it.
    const short = await startEdgeReplica(addresses, {
      port: 0, bus: otherBus.bus, logger: testLogger('edge-drain-short'), drainTimeoutMs: 300,
    });
    upstream.setFallback({ chunkCount: 2, stallAfterChunks: 1 });
    const inFlight = await streamUntilFirstEvent(short.url, apiKey);
    expect(inFlight.status).toBe(200);
    const stalled = inFlight.rest().then(() => 'completed', () => 'cut');
    const cutAt = performance.now();
    await short.stop();
    expect(performance.now() - cutAt).toBeLessThan(3_000);
    expect(await stalled).toBe('cut');
    upstream.setFallback({});
  });
});
