import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, subjects, type EventBus, type Subscription } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { AccountEvent, AuthServiceClient, AuthServiceService } from '@gateway/proto';
import { eventually, testLogger } from '@gateway/testing';
import { startAuthService, type RunningAuthService } from '../src/index.js';
import { startAuthRig, type AuthRig } from './auth-rig.js';

// Key events for webhooks (docs/governance.md "Webhooks") at the auth service: the outbox written in the
// change's transaction, the relay to JetStream (real NATS) surviving a bus it cannot reach and a restart,
// a row relayed twice stored once, and a key's expiry announced once by two replicas sweeping together.

const SECRET = 'auth-key-events-secret-0123456789abcdefghijklmnop';

let rig: AuthRig | undefined;
let accountId: string;
const seen: AccountEvent[] = [];
let reader: Subscription | undefined;
const replicas: RunningAuthService[] = [];

beforeAll(async () => {
  // The rig's own relay reads the outbox only when its own changes wake it (no timer within a test).
  rig = await startAuthRig(SECRET, { events: { relayIntervalMs: 3_600_000, expirySweepIntervalMs: 3_600_000 } });
  accountId = (await rig.auth.createAccount({ name: 'events', tier: 'tier-1', idempotencyKey: '' })).account!.id;
  reader = await rig.testBus.bus.consumeDurable({ subject: subjects.accountEvents, durable: 'key-events-test', maxBatch: 50, lingerMs: 0 }, async (batch) => {
    for (const message of batch) seen.push(AccountEvent.decode(message.data));
  });
});

afterAll(async () => {
  await reader?.stop();
  for (const replica of replicas) await replica.stop();
  await rig?.stop();
});

const outboxSize = async () => Number((await sql<{ n: string }>`select count(*)::text as n from account_event_outbox`.execute(rig!.db)).rows[0]!.n);
const eventsOf = (keyId: string) => seen.filter((event) => JSON.parse(event.dataJson).key_id === keyId);

async function replica(bus: EventBus, events: { relayIntervalMs?: number; expirySweepIntervalMs?: number } = {}) {
  const service = await startAuthService({ listenAddress: '127.0.0.1:0', databaseUrl: rig!.database.url, bus, logger: testLogger('auth-replica'), keyHashSecret: SECRET, events });
  replicas.push(service);
  return service;
}

describe('key events', () => {
  it('keeps events in the outbox while the bus refuses them, and a restarted relay publishes each once', async () => {
    // A replica whose bus is gone (closed): its relay's publishes fail, the rows stay.
    const closedBus = await rig!.testBus.connectAnother();
    await closedBus.close();
    const cut = await replica(closedBus, { relayIntervalMs: 50 });
    const client = createClient(AuthServiceClient, AuthServiceService, cut.address);
    const created = (await client.createApiKey({ accountId, name: 'kept', defaultRoutingStrategy: '' })).key!;
    client.close();
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(eventsOf(created.id)).toEqual([]);
    expect(await outboxSize()).toBe(1);
    await cut.stop();
    replicas.splice(replicas.indexOf(cut), 1);
    // A fresh replica on a working bus publishes what is left.
    await replica(await rig!.testBus.connectAnother(), { relayIntervalMs: 50 });
    await eventually(async () => {
      expect(eventsOf(created.id).map((event) => event.type)).toEqual(['api_key.created']);
      expect(await outboxSize()).toBe(0);
    }, 10_000, 50);
    const [event] = eventsOf(created.id);
    expect(event).toMatchObject({ accountId, type: 'api_key.created' });
    expect(event!.eventId).toMatch(/^evt_[0-9a-f]{32}$/);
    expect(JSON.parse(event!.dataJson)).toEqual({ key_id: created.id, name: 'kept', label: created.label, created_at: expect.any(String) });

    // Published, then the relay died before deleting: the row is back; the stream stores it once.
    await sql`insert into account_event_outbox (event_id, account_id, type, data) values (${event!.eventId}, ${accountId}, ${event!.type}, ${event!.dataJson}::jsonb)`.execute(rig!.db);
    const marker = (await rig!.auth.createApiKey({ accountId, name: 'marker', defaultRoutingStrategy: '' })).key!;
    await eventually(async () => {
      expect(eventsOf(marker.id)).toHaveLength(1);
      expect(await outboxSize()).toBe(0);
    }, 10_000, 50);
    expect(seen.filter((entry) => entry.eventId === event!.eventId)).toHaveLength(1);
  });

  it('writes disabled once, deleted once, and nothing for other changes; never the key hash', async () => {
    const created = (await rig!.auth.createApiKey({ accountId, name: 'changing', defaultRoutingStrategy: '' })).key!;
    await rig!.auth.updateApiKey({ accountId, keyId: created.id, clearCreditLimit: false, name: 'renamed' });
    await rig!.auth.updateApiKey({ accountId, keyId: created.id, clearCreditLimit: false, disabled: true });
    await rig!.auth.updateApiKey({ accountId, keyId: created.id, clearCreditLimit: false, disabled: true });
    await rig!.auth.updateApiKey({ accountId, keyId: created.id, clearCreditLimit: false, disabled: false });
    await rig!.auth.deleteApiKey({ accountId, keyId: created.id });
    await eventually(async () => expect(eventsOf(created.id).map((event) => event.type)).toContain('api_key.deleted'), 10_000, 50);
    expect(eventsOf(created.id).map((event) => event.type)).toEqual(['api_key.created', 'api_key.disabled', 'api_key.deleted']);
    const hash = (await sql<{ key_hash: string }>`select key_hash from api_keys where id = ${created.id}`.execute(rig!.db)).rows[0]!.key_hash;
    for (const event of eventsOf(created.id)) expect(event.dataJson).not.toContain(hash);
  });

  it('announces an expiry once with two replicas sweeping, and a moved expiry again', async () => {
    for (let index = 0; index < 2; index += 1) await replica(await rig!.testBus.connectAnother(), { relayIntervalMs: 50, expirySweepIntervalMs: 20 });
    const expiresAtMs = Date.now() + 400;
    const created = (await rig!.auth.createApiKey({ accountId, name: 'expiring', defaultRoutingStrategy: '', expiresAtMs: BigInt(expiresAtMs) })).key!;
    await eventually(async () => expect(eventsOf(created.id).map((event) => event.type)).toContain('api_key.expired'), 10_000, 50);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const expired = eventsOf(created.id).filter((event) => event.type === 'api_key.expired');
    expect(expired).toHaveLength(1);
    expect(new Date(JSON.parse(expired[0]!.dataJson).expired_at as string).getTime()).toBe(expiresAtMs);
    // A new expiry is announced when it passes.
    await rig!.auth.updateApiKey({ accountId, keyId: created.id, clearCreditLimit: false, expiresAtMs: BigInt(Date.now() + 300) });
    await eventually(async () => expect(eventsOf(created.id).filter((event) => event.type === 'api_key.expired')).toHaveLength(2), 10_000, 50);
  });
});
