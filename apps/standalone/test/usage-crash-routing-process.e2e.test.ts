import { createServer, connect, type Server, type Socket } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createTestBus, createTestDatabase, natsUrl, startFakeUpstream, type FakeUpstream, type TestBus, type TestDatabase, TEST_ADMIN_TOKEN } from '@gateway/testing';
import { runGatewayctlProcess } from '../src/bench/gatewayctl-process.js';
import {
  CRASH_MODEL, UPSTREAM_KEY_ENV, crashCatalog, crashUpstreamScript, expectChargedOnce, followStream, untilKillPoint, type FollowedStream, type StreamKind,
} from './crash-streams.js';
import { killAbruptly, startProcessStack, type ProcessStack } from './process-stack.js';
import { gatewayctlEnv } from './stack-harness.js';

// Issue 13 part 5, every service as its own process: the routing process is SIGKILLed while 15 streams
// are mid-flight and 5 more have delivered all their content and wait for their usage publish (routing's
// NATS connection runs through a relay the test holds, so JetStream never acknowledges). Restarted on
// the same USAGE_OUTBOX_DIR, routing publishes the checkpoints those streams left, and the ledger
// charges every one of them exactly once.
// Issue 36 (the 10-minute chaos run): a whole answer streamed in a few milliseconds, complete at its
// client, younger than any checkpoint, whose usage publish had not been acknowledged when routing was
// SIGKILLed, was never charged. Only the edge, which routing handed the usage event to and which saw the
// stream break before routing confirmed it stored, can charge it (LedgerService.SettleUsage).

/** A TCP relay to NATS whose client-to-server direction the test can hold: a publish then waits for an ack that never comes. */
async function startHoldableRelay(target: string) {
  const { hostname, port } = new URL(target);
  const sockets = new Set<Socket>();
  const clients = new Set<Socket>();
  let held = false;
  const server: Server = createServer((client) => {
    const upstream = connect(Number(port), hostname);
    sockets.add(client).add(upstream);
    clients.add(client);
    upstream.pipe(client);
    if (!held) client.pipe(upstream);
    const close = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
      clients.delete(client);
    };
    client.on('close', close).on('error', close);
    upstream.on('close', close).on('error', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return {
    url: `nats://127.0.0.1:${address.port}`,
    hold() {
      held = true;
      for (const client of clients) client.unpipe().pause();
    },
    close: () => new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      server.close(() => resolve());
    }),
  };
}

/** gatewayctl (its CLI, a process of its own) against the stack's services: a JSON command runner, and `ledger verify`'s output. */
function gatewayctlFor(addresses: { auth: string; ledger: string; catalog: string }) {
  const env = gatewayctlEnv(addresses, TEST_ADMIN_TOKEN);
  const ctl = async (...argv: string[]) => {
    const result = await runGatewayctlProcess([...argv, '--json'], env);
    expect(result.code, result.stdout + result.stderr).toBe(0);
    return JSON.parse(result.stdout) as Record<string, string>;
  };
  /** `gatewayctl ledger verify`, which must exit 0: its output. */
  const verify = async () => {
    const result = await runGatewayctlProcess(['ledger', 'verify'], env);
    expect(result.code, result.stdout + result.stderr).toBe(0);
    return result.stdout + result.stderr;
  };
  return { ctl, verify };
}

describe('routing process killed with streams in flight', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let upstream: FakeUpstream;
  let relay: Awaited<ReturnType<typeof startHoldableRelay>>;
  let directory: string;
  let stack: ProcessStack;
  const gatewayctl = () => gatewayctlFor(stack.addresses);
  /** SIGKILLs the routing process and waits for it to exit and for every followed stream to end; returns when it was killed. */
  const killRouting = async (streams: FollowedStream[]): Promise<number> => {
    const killedAt = Date.now();
    await killAbruptly(stack.running.get('routing')!);
    await Promise.all(streams.map((stream) => stream.finished));
    return killedAt;
  };

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    upstream = await startFakeUpstream();
    crashUpstreamScript(upstream, { doneStalls: false });
    relay = await startHoldableRelay(natsUrl);
    directory = await mkdtemp(join(tmpdir(), 'routing-crash-'));
    const configPath = join(directory, 'gateway.yaml');
    await writeFile(configPath, crashCatalog(upstream));
    stack = await startProcessStack(database, testBus, {
      catalog: { GATEWAY_CONFIG: configPath },
      routing: { USAGE_OUTBOX_DIR: join(directory, 'usage-outbox'), NATS_URL: relay.url, [UPSTREAM_KEY_ENV]: 'crash-test-key' },
    });
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
    await relay?.close();
    await upstream?.close();
    await testBus?.destroy();
    await database?.drop();
    await rm(directory, { recursive: true, force: true });
  }, 30_000);

  it('charges every stream that reached its caller exactly once after routing restarts on the same outbox', async () => {
    const { ctl, verify } = gatewayctl();
    const account = await ctl('accounts', 'create', '--name', 'crash', '--credits', '10', '--tier', 'tier-1');
    const { api_key: apiKey } = await ctl('keys', 'create', account.account_id!, '--name', 'crash');
    const client = new OpenAI({ baseURL: `${stack.edgeUrl}/v1`, apiKey, maxRetries: 0 });

    const answered: string[] = [];
    for (let index = 0; index < 3; index++) {
      const { response } = await client.chat.completions.create({ model: CRASH_MODEL, messages: [{ role: 'user', content: 'short answer' }] }).withResponse();
      answered.push(response.headers.get('x-request-id')!);
    }
    // From here routing's usage publishes hang: the "done" streams end upstream and wait for their ack.
    relay.hold();
    const kinds: StreamKind[] = [...Array<StreamKind>(15).fill('slow'), ...Array<StreamKind>(5).fill('done')];
    const streams = await Promise.all(kinds.map((kind) => followStream(client, kind)));
    await untilKillPoint(streams);

    const killedAt = await killRouting(streams);

    stack.launch('routing', { NATS_URL: natsUrl });
    await stack.untilServing('routing');
    await expectChargedOnce(database.url, streams, killedAt, answered).catch((error: Error) => {
      throw new Error(`${error.message}\n${stack.logs.join('')}`);
    });
    expect(await verify()).toMatch(/0 mismatches/);
  }, 120_000);

  it('charges whole streams that ended at their caller while their usage publish was unacknowledged (no checkpoint) when routing dies', async () => {
    const { ctl, verify } = gatewayctl();
    const account = await ctl('accounts', 'create', '--name', 'short-streams', '--credits', '10', '--tier', 'tier-1');
    const { api_key: apiKey } = await ctl('keys', 'create', account.account_id!, '--name', 'short-streams');
    const client = new OpenAI({ baseURL: `${stack.edgeUrl}/v1`, apiKey, maxRetries: 0 });

    // Routing again behind a relay the test can hold, and with no checkpoint for 10 minutes: a SIGKILL
    // loses every usage event the bus has not acknowledged, as one inside the first checkpoint delay does.
    const previous = stack.running.get('routing')!;
    const stopped = new Promise((resolve) => previous.once('exit', resolve));
    previous.kill('SIGTERM');
    await stopped;
    const shortRelay = await startHoldableRelay(natsUrl);
    try {
      stack.launch('routing', { NATS_URL: shortRelay.url, USAGE_CHECKPOINT_AFTER_MS: '600000' });
      await stack.untilServing('routing');
      const warm = await client.chat.completions.create({ model: CRASH_MODEL, messages: [{ role: 'user', content: 'short answer' }] }).withResponse();
      shortRelay.hold();
      const streams = await Promise.all(Array.from({ length: 5 }, () => followStream(client, 'short')));
      await untilKillPoint(streams);

      const killedAt = await killRouting(streams);
      // Every client got its whole answer, end included, before the kill.
      expect(streams.every((stream) => stream.complete)).toBe(true);

      stack.launch('routing', { NATS_URL: natsUrl });
      await stack.untilServing('routing');
      await expectChargedOnce(database.url, streams, killedAt, [warm.response.headers.get('x-request-id')!]).catch((error: Error) => {
        throw new Error(`${error.message}\n${stack.logs.join('')}`);
      });
      expect(await verify()).toMatch(/0 mismatches/);
    } finally {
      await shortRelay.close();
    }
  }, 120_000);
});
