import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, formatCredits } from '@gateway/platform';
import { createDatabase, sql, type Kysely } from '@gateway/platform/db';
import { LedgerServiceClient, LedgerServiceService, Pricing, Usage, UsageEvent, UsageEventBatch, UsageOutcome } from '@gateway/proto';
import { createTestBus, createTestDatabase, natsUrl, testLogger, uniqueName, type TestBus, type TestDatabase } from '@gateway/testing';
import { startLedgerReplica, type RunningLedgerService } from '../src/index.js';
import { killAbruptly } from './process-stack.js';

// Spec §7 / issue 5: a stream's usage is never lost. A routing publisher process whose bus refuses
// the usage of streams already answered is SIGKILLed; the next start (a process again) replays its
// durable outbox, and the ledger charges every request exactly once (half of them had reached the bus
// before the crash). The publisher is routing's, run over its built dist by routing's own fixture.

const fixture = fileURLToPath(new URL('../../routing/test/fixtures/usage-outbox-process.mjs', import.meta.url));

/** The fixture in `mode` (its env besides MODE); resolves once it printed `ready`. */
async function startPublisherProcess(mode: 'crash' | 'replay', env: Record<string, string>, ready: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [fixture], { env: { ...process.env, MODE: mode, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => { output += chunk.toString(); if (output.includes(ready)) resolve(); });
    child.once('exit', (code) => reject(new Error(`publisher process (${mode}) exited early (${code})`)));
  });
  return child;
}
const PRICES = Pricing.create({ perInputToken: '0.0000005', perOutputToken: '0.0000015' });
const costPico = (usage: Usage) => BigInt(usage.inputTokens) * 500_000n + BigInt(usage.outputTokens) * 1_500_000n;

describe('usage republish after a publisher crash', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let directory: string;
  let db: Kysely<any>;
  let ledger: RunningLedgerService;

  beforeAll(async () => {
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    directory = await mkdtemp(join(tmpdir(), 'usage-outbox-'));
    ledger = await startLedgerReplica({ databaseUrl: database.url, bus: testBus.bus, logger: testLogger('ledger'), sweepIntervalMs: 600_000 });
    db = createDatabase({ url: database.url, schema: 'ledger', maxConnections: 2 });
  });
  afterAll(async () => {
    await ledger?.stop();
    await db?.destroy();
    await testBus?.destroy();
    await database?.drop();
    await rm(directory, { recursive: true, force: true });
  });

  const chargeCount = async () => Number((await sql<{ count: string }>`select count(*)::text as count from charges`.execute(db)).rows[0]!.count);

  it('replays the outbox on the next start: no event lost, none charged twice', async () => {
    const client = createClient(LedgerServiceClient, LedgerServiceService, ledger.address);
    const accountId = uniqueName('acc');
    await client.topUp({ accountId, credits: '10', idempotencyKey: uniqueName('topup'), note: '' });
    const events = Array.from({ length: 40 }, (_, index) => UsageEvent.create({
      requestId: `${accountId}-stream-${index}`, accountId, keyId: 'key_1', modelId: 'acme/chat-small', providerId: 'acme-cloud',
      endpoint: 'chat.completions', outcome: UsageOutcome.USAGE_OUTCOME_SERVED, streamed: true, prices: PRICES,
      usage: Usage.create({ inputTokens: 100 + index, outputTokens: 10 * index }), occurredAtMs: BigInt(Date.now()),
    }));
    for (const event of events) {
      await client.admit({ context: { requestId: event.requestId, accountId, keyId: 'key_1' }, modelId: event.modelId, paid: true, tier: '', limitGroup: '' });
    }

    // The publisher process: answers, fails to publish, keeps the events on disk, and is killed.
    const bus = { OUTBOX_DIR: directory, NATS_URL: natsUrl, NATS_NAMESPACE: testBus.namespace };
    const child = await startPublisherProcess('crash', { ...bus, EVENTS: Buffer.from(UsageEventBatch.encode({ batchId: 'x', events }).finish()).toString('base64') }, 'DURABLE');
    await killAbruptly(child);
    expect((await readdir(directory)).filter((name) => name.endsWith('.log')).length).toBeGreaterThan(0);

    // What reached the bus before the crash is charged; the rest waits in the outbox.
    await expect.poll(chargeCount, { timeout: 10_000 }).toBe(20);

    // Next start of the publisher: it replays the outbox (all 40; 20 of them a second time).
    const restarted = await startPublisherProcess('replay', bus, 'STARTED');
    const stopped = new Promise<number | null>((resolve) => restarted.once('exit', (code) => resolve(code)));
    try {
      await expect.poll(chargeCount, { timeout: 15_000 }).toBe(40);
      await expect.poll(async () => (await readdir(directory)).filter((name) => name.endsWith('.log')), { timeout: 10_000 }).toEqual([]);
    } finally {
      restarted.kill('SIGTERM');
    }
    expect(await stopped).toBe(0);

    const journal = await sql<{ request_id: string; entries: number }>`
      select request_id, count(*)::int as entries from journal_entries where kind = 'charge' group by request_id`.execute(db);
    expect(new Map(journal.rows.map((row) => [row.request_id, row.entries]))).toEqual(new Map(events.map((event) => [event.requestId, 1])));
    const spent = events.reduce((sum, event) => sum + costPico(event.usage!), 0n);
    const balance = await client.getBalance({ accountId });
    expect(balance).toEqual({ balance: formatCredits(10n * 1_000_000_000_000n - spent), available: formatCredits(10n * 1_000_000_000_000n - spent), reserved: '0' });
    expect((await client.verifyJournal({ accountId })).mismatches).toEqual([]);
    client.close();
  });
});
