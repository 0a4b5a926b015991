import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { eventually } from '@gateway/testing';
import { DONE_TOKENS, SLOW_TOKENS, UPSTREAM_KEY_ENV, expectChargedOnce, followStream } from './crash-streams.js';
import { createAccountKey, paidModelFixture, startProcessStack, type PaidModelFixture, type ProcessStack } from './process-stack.js';

// Issue 16, "usage never left behind at scale-down": the chart keeps routing's outbox on a per-pod
// PersistentVolumeClaim, AND an orderly stop drains: a routing pod told to stop (SIGTERM, what a
// scale-down sends) tells the edges to move new exchanges elsewhere, lets the streams in flight finish,
// waits for JetStream to acknowledge their usage, and leaves its outbox empty — nothing waits for a pod
// that may never come back under that name.

describe('routing scaled down with streams in flight', () => {
  let fixture: PaidModelFixture;
  let outboxDirectory: string;
  let stack: ProcessStack;

  beforeAll(async () => {
    fixture = await paidModelFixture('routing-scale-down-');
    outboxDirectory = join(fixture.directory, 'usage-outbox');
    stack = await startProcessStack(fixture.database, fixture.testBus, {
      catalog: { GATEWAY_CONFIG: fixture.configPath },
      routing: { USAGE_OUTBOX_DIR: outboxDirectory, [UPSTREAM_KEY_ENV]: 'scale-down-key' },
    });
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
    await fixture?.dispose();
  }, 30_000);

  it('finishes the streams in flight, gets their usage acknowledged, exits 0 and leaves the outbox empty', async () => {
    const { apiKey } = await createAccountKey(stack, 'scale', '5');
    const client = new OpenAI({ baseURL: `${stack.edgeUrl}/v1`, apiKey, maxRetries: 0 });

    const streams = await Promise.all([
      ...Array.from({ length: 6 }, () => followStream(client, 'slow')),
      ...Array.from({ length: 3 }, () => followStream(client, 'done')),
    ]);
    // Every slow stream is mid-flight (content delivered, most of it still to come) when the stop arrives.
    await eventually(() => {
      for (const stream of streams.filter((each) => each.kind === 'slow')) expect(stream.tokenTimes.length).toBeGreaterThanOrEqual(5);
    }, 20_000, 20);
    const routing = stack.running.get('routing')!;
    const exited = new Promise<number | null>((resolve) => routing.once('exit', (code) => resolve(code)));
    routing.kill('SIGTERM');
    await Promise.all(streams.map((stream) => stream.finished));
    expect(await exited, stack.logs.join('')).toBe(0);

    // Drained, not cut: every stream got all its content.
    for (const stream of streams) expect(stream.tokenTimes.length, `${stream.kind} ${stream.requestId}`).toBe(stream.kind === 'slow' ? SLOW_TOKENS : DONE_TOKENS);
    // Each charged once, for everything it delivered (no crash: nothing to lose).
    await expectChargedOnce(fixture.database.url, streams, Date.now());

    // Nothing left for a successor: no unsent event, no open stream checkpoint (the outbox opened as the
    // next routing process would, by routing's own fixture in a process of its own).
    const inspect = fileURLToPath(new URL('../../routing/test/fixtures/usage-outbox-process.mjs', import.meta.url));
    const { stdout } = await promisify(execFile)(process.execPath, [inspect], { env: { ...process.env, MODE: 'inspect', OUTBOX_DIR: outboxDirectory } });
    const { recovered, pendingCount } = JSON.parse(stdout) as { recovered: string[]; pendingCount: number };
    expect(recovered).toEqual([]);
    expect(pendingCount).toBe(0);
  });
});
