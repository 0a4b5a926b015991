import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, beforeEach } from 'vitest';
import OpenAI from 'openai';
import type { GetSnapshotResponse } from '@gateway/proto';
import { createTestBus, testLogger, type TestBus } from '@gateway/testing';
import { startEdge, type RunningEdge } from '../src/index.js';
import { model, startFakeServices, type FakeServices } from './fakes.js';

/*
 * The edge integration files' fixture: a real edge (and one with short body and stream timeouts) in
 * front of fake auth, catalog, ledger and routing services (fakes.ts) and a real NATS bus.
 */

export const logger = testLogger('edge-test');

export function snapshot(version: string, extraModels: ReturnType<typeof model>[] = []): GetSnapshotResponse {
  return {
    version,
    unchanged: false,
  moderationModel: '', defaultModels: {},
    models: [
      model({ id: 'acme/chat-small', aliases: ['chat-small'], created: 1_767_225_600n, ownedBy: 'acme' }),
      model({ id: 'acme/free-tiny', created: 1_767_312_000n, pricing: { perInputToken: '0', perOutputToken: '0' }, supportedParameters: ['temperature'] }),
      model({ id: 'acme/embed', created: 1_767_000_000n, offers: [{ providerId: 'acme-cloud', upstreamModel: 'e', endpoints: ['embeddings'] }] }),
      model({ id: 'acme/retired', created: 1_766_000_000n, expiresAt: 1_700_000_000n }),
      ...extraModels,
    ],
    providers: [],
    startups: [
      { id: 'zeta', displayName: 'Zeta Labs', iconUrl: '/static/startups/zeta.svg', created: 1_767_000_000n },
      { id: 'acme', displayName: 'Acme AI', iconUrl: '/static/startups/acme.svg', websiteUrl: 'https://acme.example', created: 1_767_000_000n },
    ],
    limitGroups: [{ id: 'default', tiers: { free: { minute: 20, day: 200 }, 'tier-1': { minute: 600 } } }],
  };
}

export interface EdgeFixture {
  testBus: TestBus;
  fakes: FakeServices;
  edge: RunningEdge;
  slowEdge: RunningEdge;
  /** The openai SDK against `edge` with this API key, retrying nothing. */
  client(apiKey: string): OpenAI;
}

/** Starts the fixture before the calling file's tests and stops it after; each test starts with no admission error set. */
export function useEdgeFixture(): EdgeFixture {
  let testBus: TestBus;
  let fakes: FakeServices;
  let edge: RunningEdge;
  let slowEdge: RunningEdge;
  const fixture = {
    client: (apiKey: string) => new OpenAI({ baseURL: `${fixture.edge.url}/v1`, apiKey, maxRetries: 0 }),
  } as EdgeFixture;

  beforeAll(async () => {
    testBus = await createTestBus('nats');
    fakes = await startFakeServices(snapshot('v1'), logger);
    fakes.auth.apiKeys.set('sk-good', { accountId: 'acct_1', keyId: 'key_1', tier: 'tier-1', defaultRoutingStrategy: 'latency' });
    fakes.auth.apiKeys.set('sk-poor', { accountId: 'acct_2', keyId: 'key_2', tier: 'free', defaultRoutingStrategy: '' });
    fakes.auth.apiKeys.set('sk-revocable', { accountId: 'acct_1', keyId: 'key_9', tier: 'tier-1', defaultRoutingStrategy: '' });
    fakes.auth.provisioningKeys.set('pk-good', 'acct_1');
    fakes.ledger.available.set('acct_1', '10.5');
    fakes.ledger.available.set('acct_2', '0.049999999999');
    // These tests assert what the edge sends to Ledger.Admit (the fake ledger has no leases): per-request admission.
    edge = await startEdge({ port: 0, ...fakes.addresses, bus: testBus.bus, logger, authCacheTtlMs: 60_000, catalogRefreshMs: 60_000, admission: 'ledger' });
    slowEdge = await startEdge({
      port: 0,
      ...fakes.addresses,
      bus: testBus.bus,
      logger,
      admission: 'ledger',
      bodyLimits: { stallTimeoutMs: 300, totalTimeoutMs: 1_500 },
      streamIdleTimeoutMs: 400,
    });
    Object.assign(fixture, { testBus, fakes, edge, slowEdge });
  });

  afterAll(async () => {
    await edge?.stop();
    await slowEdge?.stop();
    await fakes?.stop();
    await testBus?.destroy();
  });

  beforeEach(() => {
    fakes.ledger.admitError = undefined;
  });

  return fixture;
}

/** A raw HTTP exchange, for what an SDK will not send (chunked oversize bodies, stalls, odd headers). */
export function rawRequest(
  url: string,
  options: { method: string; path: string; headers?: Record<string, string>; write?: (request: ReturnType<typeof httpRequest>) => void },
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(`${url}${options.path}`, { method: options.method, headers: options.headers ?? {} }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks).toString() }));
    });
    request.on('error', reject);
    if (options.write) options.write(request);
    else request.end();
  });
}
