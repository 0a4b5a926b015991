// Settlement throughput: events already in JetStream, a fresh ledger consumer, time until all are
// charged. Run after a build: `node apps/ledger/scripts/bench-settle.mjs [events]`. Not a test.
import { createDatabase, subjects } from '@gateway/platform';
import { Pricing, Usage, UsageEvent, UsageEventBatch, UsageOutcome } from '@gateway/proto';
import { createTestBus, createTestDatabase, testLogger } from '@gateway/testing';
import { startLedgerService } from '../dist/index.js';

const total = Number(process.argv[2] ?? 20_000);
const prices = Pricing.create({ perInputToken: '0.0000005', perOutputToken: '0.0000015' });
const event = (requestId, index) => UsageEvent.create({
  requestId, accountId: `acc_${index % 50}`, keyId: `key_${index % 200}`, modelId: 'acme/chat-small', providerId: 'p',
  endpoint: 'chat.completions', outcome: UsageOutcome.USAGE_OUTCOME_SERVED,
  usage: Usage.create({ inputTokens: 100 + (index % 1000), outputTokens: index % 500 }), prices, occurredAtMs: BigInt(Date.now()),
});

async function run(kind) {
  const database = await createTestDatabase();
  const testBus = await createTestBus('nats');
  const db = createDatabase({ url: database.url, schema: 'ledger', maxConnections: 1 });
  const options = { listenAddress: '127.0.0.1:0', databaseUrl: database.url, bus: testBus.bus, logger: testLogger('bench'), sweepIntervalMs: 60_000 };
  const migrateOnly = await startLedgerService({ ...options, consumer: { enabled: false } });
  await migrateOnly.stop();
  if (kind === 'single') {
    for (let start = 0; start < total; start += 1_000) {
      await Promise.all(Array.from({ length: Math.min(1_000, total - start) }, (_, offset) => {
        const id = `r${start + offset}`;
        return testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(event(id, start + offset)).finish(), id);
      }));
    }
  } else {
    for (let start = 0; start < total; start += 256) {
      const events = Array.from({ length: Math.min(256, total - start) }, (_, offset) => event(`r${start + offset}`, start + offset));
      await testBus.bus.publishDurable(subjects.usageBatches, UsageEventBatch.encode({ batchId: `b${start}`, events }).finish(), `b${start}`);
    }
  }
  const started = performance.now();
  const service = await startLedgerService(options);
  for (;;) {
    const row = await db.selectFrom('charges').select((eb) => eb.fn.countAll().as('count')).executeTakeFirstOrThrow();
    if (Number(row.count) >= total) break;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const seconds = (performance.now() - started) / 1000;
  console.log(`${kind}: ${total} events settled in ${seconds.toFixed(2)} s = ${Math.round(total / seconds)} events/s`);
  await service.stop();
  await db.destroy();
  await testBus.destroy();
  await database.drop();
}

await run('single');
await run('batched');
