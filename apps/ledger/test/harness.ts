import { GatewayError } from '@gateway/platform';
import { createClient, subjects, type DurableMessage, type EventBus, type PromiseClient } from '@gateway/platform';
import { createDatabase, type Kysely } from '@gateway/platform/db';
import { LedgerServiceClient, LedgerServiceService, Pricing, Usage, UsageEvent, UsageOutcome } from '@gateway/proto';
import { createTestBus, createTestDatabase, eventually, testLogger, uniqueName, type TestBus, type TestDatabase } from '@gateway/testing';
import { startLedgerService, type LedgerServiceOptions } from '../src/index.js';
import type { LedgerTables } from '../src/migrations.js';

export type LedgerClient = PromiseClient<LedgerServiceClient>;

export interface LedgerHarness {
  database: TestDatabase;
  testBus: TestBus;
  /** Direct access for assertions on tables the RPCs do not expose. */
  db: Kysely<LedgerTables>;
  start(overrides?: Partial<LedgerServiceOptions>): Promise<{ address: string; client: LedgerClient; stop(): Promise<void>; stopConsumer(): Promise<void> }>;
  close(): Promise<void>;
}

/** A fresh database, an isolated JetStream namespace, and services on port 0 started on demand. */
export async function createLedgerHarness(): Promise<LedgerHarness> {
  const database = await createTestDatabase();
  const testBus = await createTestBus('nats');
  const db = createDatabase<LedgerTables>({ url: database.url, schema: 'ledger', maxConnections: 2 });
  const running: Array<() => Promise<void>> = [];
  return {
    database,
    testBus,
    db,
    async start(overrides = {}) {
      const service = await startLedgerService({
        listenAddress: '127.0.0.1:0',
        databaseUrl: database.url,
        bus: testBus.bus,
        logger: testLogger('ledger'),
        sweepIntervalMs: 60_000,
        ...overrides,
        consumer: { ackWaitMs: 2_000, ...overrides.consumer },
      });
      const client = createClient(LedgerServiceClient, LedgerServiceService, service.address);
      const stop = async () => { client.close(); await service.stop(); };
      running.push(stop);
      return { address: service.address, client, stop, stopConsumer: service.stopConsumer };
    },
    async close() {
      for (const stop of running) await stop().catch(() => undefined);
      await db.destroy();
      await testBus.destroy();
      await database.drop();
    },
  };
}

export const CHAT_PRICES = Pricing.create({ perInputToken: '0.0000005', perOutputToken: '0.0000015', perCachedInputToken: '0.0000001' });

export function usageEvent(fields: Partial<UsageEvent> & { requestId: string; accountId: string }): UsageEvent {
  return UsageEvent.create({
    keyId: 'key_a',
    modelId: 'acme/chat-small',
    providerId: 'acme-cloud',
    endpoint: 'chat.completions',
    outcome: UsageOutcome.USAGE_OUTCOME_SERVED,
    usage: Usage.create({ inputTokens: 1000, cachedInputTokens: 400, outputTokens: 200 }),
    prices: CHAT_PRICES,
    occurredAtMs: BigInt(Date.now()),
    ...fields,
  });
}

/**
 * Wraps a bus so a settlement handler can be made to "crash" after its transaction committed but
 * before the ack: the bus sees a failure and redelivers what the ledger already settled.
 */
export function crashingBus(bus: EventBus, shouldCrash: (batch: DurableMessage[]) => boolean): EventBus & { crashes: number; redeliveredHandled: number } {
  const wrapper = {
    crashes: 0,
    /** Redelivered messages the ledger handled again without failing. */
    redeliveredHandled: 0,
    publishDurable: bus.publishDurable.bind(bus),
    broadcast: bus.broadcast.bind(bus),
    subscribe: bus.subscribe.bind(bus),
    close: bus.close.bind(bus),
    consumeDurable: (options: Parameters<EventBus['consumeDurable']>[0], handler: (batch: DurableMessage[]) => Promise<void>) =>
      bus.consumeDurable(options, async (batch) => {
        await handler(batch);
        if (shouldCrash(batch)) {
          wrapper.crashes++;
          throw new Error('simulated crash between commit and ack');
        }
        wrapper.redeliveredHandled += batch.filter((message) => message.redelivered).length;
      }),
  };
  return wrapper;
}

/** The GatewayError a call failed with (the test fails if it did not fail). */
export async function rejection(promise: Promise<unknown>): Promise<GatewayError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof GatewayError) return error;
    throw error;
  }
  throw new Error('expected the call to fail');
}

/** A new account topped up with `credits` (default 10); its id. */
export async function fundedAccount(client: LedgerClient, credits = '10'): Promise<string> {
  const accountId = uniqueName('acc');
  await client.topUp({ accountId, credits, idempotencyKey: uniqueName('topup'), note: '' });
  return accountId;
}

/** Publishes one usage event on the bus the harness's settler consumes (msg-id: the request id unless given). */
export function publishUsage(harness: LedgerHarness, event: UsageEvent, msgId = event.requestId): Promise<void> {
  return harness.testBus.bus.publishDurable(subjects.usageEvents, UsageEvent.encode(event).finish(), msgId);
}

/** Every event published before it is handled once a sentinel published now is charged (one consumer, in order). */
export async function drainUsage(harness: LedgerHarness, accountId: string): Promise<void> {
  const sentinel = uniqueName('sentinel');
  await publishUsage(harness, usageEvent({ requestId: sentinel, accountId, usage: Usage.create(), keyId: 'key_sentinel' }));
  await eventually(async () => {
    const row = await harness.db.selectFrom('charges').select('request_id').where('request_id', '=', sentinel).executeTakeFirst();
    if (row === undefined) throw new Error(`sentinel ${sentinel} not settled yet`);
  }, 8_000);
}
