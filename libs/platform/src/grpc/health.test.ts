import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { MediaServiceService, type MediaServiceServer } from '@gateway/proto';
import { createLogger } from '../logger.js';
import { createMetricsRegistry } from '../metrics/index.js';
import type { DependencyCheck } from '../health.js';
import { postgresCheck } from '../db/postgres-check.js';
import { createHealthClient, startGrpcServer, type HealthClient } from './index.js';

const logger = createLogger('health-test', 'silent');
const postgres = new URL(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres');

const binding = { definition: MediaServiceService, implementation: {} as MediaServiceServer, name: 'gateway.v1.MediaService' };

async function eventually(assertion: () => Promise<void>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await assertion();
      return;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }
}

async function expectStatus(client: HealthClient, status: string, service = ''): Promise<void> {
  await eventually(async () => expect(await client.check(service)).toBe(status));
}

/**
 * A TCP relay in front of the real Postgres that a test can cut and restore: Postgres "stops" for the
 * service behind it (connections reset, new ones refused) without touching the shared server.
 */
async function startPostgresRelay(): Promise<{ url: string; cut(): Promise<void>; restore(): Promise<void>; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  let port = 0;
  const listen = async () => {
    const relay = createServer((client) => {
      const upstream = connect(Number(postgres.port || 5432), postgres.hostname);
      sockets.add(client).add(upstream);
      const close = () => { client.destroy(); upstream.destroy(); sockets.delete(client); sockets.delete(upstream); };
      client.on('error', close).on('close', close);
      upstream.on('error', close).on('close', close);
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => relay.listen(port, '127.0.0.1', resolve));
    port = (relay.address() as AddressInfo).port;
    server = relay;
  };
  const cut = async () => {
    const relay = server;
    server = undefined;
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => (relay ? relay.close(() => resolve()) : resolve()));
  };
  await listen();
  const url = new URL(postgres.href);
  url.host = `127.0.0.1:${port}`;
  return { url: url.href, cut, restore: listen, close: cut };
}

describe('gRPC health', () => {
  it('answers NOT_SERVING while a dependency check fails, SERVING once it passes again, and NOT_SERVING for good once draining', async () => {
    let reachable = true;
    const dependency: DependencyCheck = {
      name: 'nats',
      check: async () => { if (!reachable) throw new Error('not connected'); },
    };
    const metrics = createMetricsRegistry();
    const server = await startGrpcServer({ address: '127.0.0.1:0', services: [binding], logger, dependencies: [dependency], healthCheckIntervalMs: 20, metrics });
    const client = createHealthClient(server.address);
    try {
      await expectStatus(client, 'SERVING');
      await expectStatus(client, 'SERVING', 'gateway.v1.MediaService');
      expect(await metrics.metrics()).toContain('gateway_dependency_up{server="gateway.v1.MediaService",dependency="nats"} 1');
      reachable = false;
      await expectStatus(client, 'NOT_SERVING');
      await expectStatus(client, 'NOT_SERVING', 'gateway.v1.MediaService');
      expect(await metrics.metrics()).toContain('gateway_dependency_up{server="gateway.v1.MediaService",dependency="nats"} 0');
      reachable = true;
      await expectStatus(client, 'SERVING');
      server.drain();
      expect(await client.check('')).toBe('NOT_SERVING');
      // The checks stopped: a passing dependency does not bring a draining server back.
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(await client.check('')).toBe('NOT_SERVING');
    } finally {
      client.close();
      await server.stop();
    }
  });

  it('follows a real Postgres: NOT_SERVING while it is unreachable, SERVING when it is back', async () => {
    const relay = await startPostgresRelay();
    const server = await startGrpcServer({
      address: '127.0.0.1:0', services: [binding], logger, dependencies: [postgresCheck(relay.url, 'health-test', 500)], healthCheckIntervalMs: 50,
    });
    const client = createHealthClient(server.address);
    try {
      await expectStatus(client, 'SERVING');
      await relay.cut();
      await expectStatus(client, 'NOT_SERVING');
      await relay.restore();
      await expectStatus(client, 'SERVING');
    } finally {
      client.close();
      await server.stop();
      await relay.close();
    }
  });

  it('starts NOT_SERVING when a dependency is already down, rather than failing to start', async () => {
    const relay = await startPostgresRelay();
    await relay.cut();
    const server = await startGrpcServer({
      address: '127.0.0.1:0', services: [binding], logger, dependencies: [postgresCheck(relay.url, 'health-test', 500)], healthCheckIntervalMs: 50,
    });
    const client = createHealthClient(server.address);
    try {
      expect(await client.check('')).toBe('NOT_SERVING');
    } finally {
      client.close();
      await server.stop();
    }
  });
});
