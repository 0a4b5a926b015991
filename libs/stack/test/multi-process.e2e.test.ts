import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { credentials, makeGenericClientConstructor } from '@grpc/grpc-js';
import OpenAI from 'openai';
import { runGatewayctl } from '@gateway/gatewayctl';
import { createTestBus, createTestDatabase, eventually, natsUrl, type TestBus, type TestDatabase } from '@gateway/testing';
import { freePort } from '../src/index.js';
import { service as healthService } from 'grpc-health-check';
import { testAdmission } from './admission-mode.js';

const HealthClient = makeGenericClientConstructor(healthService, 'grpc.health.v1.Health');

// Each server app as its own OS process (`node apps/<name>/dist/main.js`, configured by env only),
// wired like a real deployment: proves the standalone entry points, the health service, and the
// whole request path across process boundaries.
const root = fileURLToPath(new URL('../../../', import.meta.url));

describe('every service as its own process', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  const processes: ChildProcess[] = [];
  const addresses: Record<string, string> = {};
  let edgeUrl = '';
  const logs: string[] = [];

  const launch = (app: string, env: Record<string, string>) => {
    const child = spawn(process.execPath, [`apps/${app}/dist/main.js`], {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'warn', DATABASE_URL: database.url, NATS_URL: natsUrl, NATS_NAMESPACE: testBus.namespace, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (chunk: Buffer) => logs.push(`[${app}] ${chunk}`));
    child.stderr!.on('data', (chunk: Buffer) => logs.push(`[${app}] ${chunk}`));
    processes.push(child);
    return child;
  };

  const serving = (address: string) =>
    new Promise<string>((resolve, reject) => {
      const client = new HealthClient(address, credentials.createInsecure());
      const check = (client as unknown as { check: (request: object, options: object, callback: (error: Error | null, response?: { status: unknown }) => void) => void }).check;
      check.call(client, { service: '' }, { deadline: Date.now() + 1_000 }, (error, response) => {
        client.close();
        if (error) reject(error);
        // The health proto's enum arrives as its name or its number (1 = SERVING) depending on the loader.
        else resolve(response?.status === 1 ? 'SERVING' : String(response?.status));
      });
    });

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    for (const app of ['auth', 'catalog', 'ledger', 'routing', 'media']) addresses[app] = `127.0.0.1:${await freePort()}`;
    const edgePort = await freePort();
    edgeUrl = `http://127.0.0.1:${edgePort}`;
    launch('auth', { GRPC_LISTEN: addresses.auth!, KEY_HASH_SECRET: 'multi-process-secret-multi-process-0001' });
    launch('catalog', { GRPC_LISTEN: addresses.catalog!, GATEWAY_CONFIG: `${root}deploy/config/gateway.example.yaml` });
    launch('ledger', { GRPC_LISTEN: addresses.ledger! });
    launch('media', { GRPC_LISTEN: addresses.media! });
    for (const app of ['auth', 'catalog', 'ledger', 'media']) {
      await eventually(async () => expect(await serving(addresses[app]!)).toBe('SERVING'), 30_000, 200).catch((error) => {
        throw new Error(`${app} never became healthy: ${error}\n${logs.join('')}`);
      });
    }
    launch('routing', { GRPC_LISTEN: addresses.routing!, CATALOG_ADDR: addresses.catalog! });
    await eventually(async () => expect(await serving(addresses.routing!)).toBe('SERVING'), 30_000, 200);
    launch('edge', {
      PORT: String(edgePort), AUTH_ADDR: addresses.auth!, CATALOG_ADDR: addresses.catalog!, LEDGER_ADDR: addresses.ledger!,
      ROUTER_ADDR: addresses.routing!, MEDIA_ADDR: addresses.media!, EDGE_ADMISSION: testAdmission,
    });
    await eventually(async () => expect((await fetch(`${edgeUrl}/v1/models`)).status).toBe(200), 30_000, 200).catch((error) => {
      throw new Error(`edge never answered: ${error}\n${logs.join('')}`);
    });
  }, 120_000);

  afterAll(async () => {
    await Promise.all(processes.map((child) => new Promise<void>((resolve) => {
      if (child.exitCode !== null) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
      setTimeout(() => { child.kill('SIGKILL'); }, 8_000).unref();
    })));
    await testBus?.destroy();
    await database?.drop();
  }, 30_000);

  it('serves and bills a chat completion across six processes', async () => {
    const out: string[] = [];
    const io = { env: { AUTH_ADDR: addresses.auth!, LEDGER_ADDR: addresses.ledger!, CATALOG_ADDR: addresses.catalog! }, stdout: (text: string) => out.push(text), stderr: (text: string) => out.push(text) };
    expect(await runGatewayctl(['accounts', 'create', '--name', 'mp', '--credits', '1', '--json'], io)).toBe(0);
    const account = JSON.parse(out.join('')) as { account_id: string; provisioning_key: string };
    out.length = 0;
    expect(await runGatewayctl(['keys', 'create', account.account_id, '--name', 'mp', '--json'], io)).toBe(0);
    const apiKey = (JSON.parse(out.join('')) as { api_key: string }).api_key;

    const client = new OpenAI({ baseURL: `${edgeUrl}/v1`, apiKey, maxRetries: 0 });
    const completion = await client.chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'one two three' }] });
    expect(completion.choices[0]?.message.content).toBeTruthy();
    await eventually(async () => {
      const response = await fetch(`${edgeUrl}/v1/account/balance`, { headers: { authorization: `Bearer ${account.provisioning_key}` } });
      const { balance } = (await response.json()) as { balance: string };
      expect(balance).not.toBe('1');
      expect(Number(balance)).toBeLessThan(1);
    }, 10_000);
  });

  it('stops every process cleanly on SIGTERM', async () => {
    const exits = processes.map((child) => new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code))));
    for (const child of processes) child.kill('SIGTERM');
    expect(await Promise.all(exits)).toEqual(processes.map(() => 0));
  }, 30_000);
});
