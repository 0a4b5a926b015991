import type { ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createTestDatabase, npmStartBanner, startFakeUpstream, startNpmStart, type FakeUpstream, type NpmStart, type TestDatabase } from '@gateway/testing';
import { runGatewayctlProcess } from '../src/bench/gatewayctl-process.js';
import type { DevKeys } from '../src/index.js';
import { testAdmission } from './admission-mode.js';
import {
  CRASH_MODEL, UPSTREAM_KEY_ENV, crashCatalog, crashUpstreamScript, expectChargedOnce, followStream, untilKillPoint, type StreamKind,
} from './crash-streams.js';
import { killAbruptly } from './process-stack.js';

// Issue 13 part 5: `npm start` (every service in one process, the in-process bus) SIGKILLed while 20
// streams are mid-flight used to charge none of them. Here the real entry point
// (`node apps/standalone/dist/main.js`) runs without NATS_URL, once on a fresh database of the machine's
// Postgres (DATABASE_URL) and once on its embedded Postgres exactly as `npm start` runs it (the crashed
// run's Postgres must not stop the restart: part 4), and is killed once every stream has delivered
// content; restarted on the same GATEWAY_DATA_DIR it must start cleanly and charge each of them exactly
// once: the slow ones from their checkpoints, the ones whose content was all delivered in full, and
// non-streamed answers too.

interface RunningGateway extends NpmStart {
  url: string;
  ledgerAddress: string;
}

/** The embedded Postgres of a data dir, as the running gateway left it: its port and generated password. */
async function embeddedDatabaseUrl(dataDir: string): Promise<string> {
  const port = (await readFile(join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[3]!.trim();
  const password = (await readFile(join(dataDir, 'postgres-password'), 'utf8')).trim();
  return `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/gateway`;
}

describe.each(['external', 'embedded'] as const)('npm start killed with streams in flight (%s Postgres)', (postgres) => {
  let database: TestDatabase;
  let upstream: FakeUpstream;
  let dataDirectory: string;
  let configPath: string;
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    database = await createTestDatabase();
    upstream = await startFakeUpstream();
    crashUpstreamScript(upstream, { doneStalls: true });
    dataDirectory = await mkdtemp(join(tmpdir(), 'gateway-crash-'));
    // As root, the embedded Postgres runs as the `postgres` user, which must be able to enter the data dir's parents.
    await chmod(dataDirectory, 0o755);
    configPath = join(dataDirectory, 'gateway.yaml');
    await writeFile(configPath, crashCatalog(upstream));
  });

  afterAll(async () => {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await upstream?.close();
    await database?.drop();
    await rm(dataDirectory, { recursive: true, force: true });
  });

  /** `npm start`'s entry point on the test's database and data directory; resolves once it printed its banner. */
  async function startGateway(): Promise<RunningGateway> {
    const gateway = startNpmStart({
      // NATS_URL deliberately absent: the in-process bus.
      GATEWAY_DATA_DIR: join(dataDirectory, 'data'), GATEWAY_CONFIG: configPath,
      ...(postgres === 'external' ? { DATABASE_URL: database.url } : {}),
      LOG_LEVEL: 'warn', EDGE_ADMISSION: testAdmission, [UPSTREAM_KEY_ENV]: 'crash-test-key',
    });
    children.push(gateway.child);
    const { url, ledgerAddress } = await npmStartBanner(gateway, 180_000);
    return { ...gateway, url, ledgerAddress };
  }

  it('charges every stream that reached its caller exactly once after a SIGKILL and a restart', async () => {
    const first = await startGateway();
    const keys = JSON.parse(await readFile(join(dataDirectory, 'data', 'dev-keys.json'), 'utf8')) as DevKeys;
    const client = new OpenAI({ baseURL: `${first.url}/v1`, apiKey: keys.api_key, maxRetries: 0 });

    const answered: string[] = [];
    for (let index = 0; index < 3; index++) {
      const { response } = await client.chat.completions.create({ model: CRASH_MODEL, messages: [{ role: 'user', content: 'short answer' }] }).withResponse();
      answered.push(response.headers.get('x-request-id')!);
    }
    const kinds: StreamKind[] = [...Array<StreamKind>(15).fill('slow'), ...Array<StreamKind>(5).fill('done')];
    const streams = await Promise.all(kinds.map((kind) => followStream(client, kind)));
    await untilKillPoint(streams);

    const killedAt = Date.now();
    await killAbruptly(first.child);
    await Promise.all(streams.map((stream) => stream.finished));

    const second = await startGateway();
    const databaseUrl = postgres === 'external' ? database.url : await embeddedDatabaseUrl(join(dataDirectory, 'data'));
    await expectChargedOnce(databaseUrl, streams, killedAt, answered);
    // The data dir gives gatewayctl npm start's admin credential.
    const verify = await runGatewayctlProcess(['ledger', 'verify'], { LEDGER_ADDR: second.ledgerAddress, GATEWAY_DATA_DIR: join(dataDirectory, 'data') });
    expect(verify.code, verify.stdout + verify.stderr).toBe(0);
    expect(verify.stdout + verify.stderr).toMatch(/0 mismatches/);

    // An orderly stop after the recovery: every service, then the embedded Postgres.
    const stopped = new Promise<number | null>((resolve) => second.child.once('exit', (code) => resolve(code)));
    second.child.kill('SIGTERM');
    expect(await stopped, second.output()).toBe(0);
  }, 180_000);
});
