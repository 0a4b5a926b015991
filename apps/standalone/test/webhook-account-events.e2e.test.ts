import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Anthropic from '@anthropic-ai/sdk';
import pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { formatCredits, subjects } from '@gateway/platform';
import { AccountEvent } from '@gateway/proto';
import { eventually, startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { bearerJson, ctlJson, startStackOnCatalog, type StackOnCatalog } from './configured-stack.js';
import { batchCatalog, COMPLETION_TOKENS, LINE_COST, MODEL, PROMPT_TOKENS } from './batches-harness.js';
import { startWebhookReceiver, type ReceivedWebhook } from './webhook-receiver.js';

// Webhook events of keys and batches (issue 42 item 4, docs/governance.md "Webhooks") through the whole
// stack: auth and jobs write them to their outboxes in the change's transaction, a relay publishes them on
// JetStream (real NATS), the ledger's consumer makes them webhook events, the dispatcher sends them signed
// to a real HTTP receiver. Creating, disabling, deleting a key and a key expiring each deliver exactly one
// event; a message batch ending delivers one batch.completed; an account without an endpoint gets no
// event rows; an outbox row relayed twice, or one event published twice, is delivered once.

const RELAYED = ['api_key.created', 'api_key.disabled', 'api_key.deleted', 'api_key.expired', 'batch.completed'];
const DELIVERED_WITHIN_MS = 30_000;

type Delivered = { id: string; type: string; account_id: string; timestamp: string; data: Record<string, any> };

describe('key and batch webhook events, end to end', () => {
  let upstream: FakeUpstream;
  let base: StackOnCatalog;
  let db: pg.Client;
  let received: ReceivedWebhook[] = [];
  let receiverUrl = '';
  let closeReceiver = async () => undefined as void;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    upstream.setFallback({ usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    base = await startStackOnCatalog('keyevents', batchCatalog(upstream, 'chat.completions, messages'), {
      keyHashSecret: 'key-events-e2e-secret-0123456789abcdef',
      providerSecrets: { BATCH_KEY: 'sk-batch' },
      ledger: { webhooks: { allowPrivate: true, intervalMs: 50, baseBackoffMs: 100, maxBackoffMs: 400 } },
      auth: { events: { relayIntervalMs: 100, expirySweepIntervalMs: 200 } },
      jobs: { eventRelayIntervalMs: 100, batches: { runner: { pollIntervalMs: 100, leaseMs: 3_000 } } },
    });
    db = new pg.Client({ connectionString: base.database.url });
    await db.connect();
    const receiver = await startWebhookReceiver('/hooks');
    ({ received, url: receiverUrl, close: closeReceiver } = receiver);
  }, 120_000);

  afterAll(async () => {
    await closeReceiver();
    await db?.end();
    await base?.stop();
    await upstream?.close();
  });

  const call = (method: string, path: string, bearer: string, body?: unknown) => bearerJson(`${base.stack.url}${path}`, method, bearer, body);

  /** An account (its first key made before any endpoint: never announced) and, unless `hooked` is false, an endpoint for every relayed type. */
  async function account(name: string, hooked = true) {
    const created = await ctlJson(base.stack, 'accounts', 'create', '--name', name, '--credits', '10', '--tier', 'tier-1', '--json');
    const apiKey = (await ctlJson(base.stack, 'keys', 'create', created.account_id!, '--name', `${name}-key`, '--json')).api_key!;
    const provisioningKey = created.provisioning_key!;
    let secret = '';
    if (hooked) {
      const endpoint = await call('POST', '/v1/account/webhooks', provisioningKey, { url: receiverUrl, event_types: RELAYED });
      expect(endpoint.status, endpoint.text).toBe(201);
      secret = endpoint.body.secret as string;
    }
    return { accountId: created.account_id!, provisioningKey, apiKey, secret };
  }

  /** The account's deliveries so far, each verified against its endpoint's secret (a bad signature throws). */
  const deliveredTo = (who: { accountId: string; secret: string }): Delivered[] => received
    .map((entry) => ({ entry, event: JSON.parse(entry.body) as Delivered }))
    .filter(({ event }) => event.account_id === who.accountId)
    .map(({ entry, event }) => {
      new Webhook(who.secret).verify(entry.body, {
        'webhook-id': String(entry.headers['webhook-id']), 'webhook-timestamp': String(entry.headers['webhook-timestamp']), 'webhook-signature': String(entry.headers['webhook-signature']),
      });
      expect(entry.headers['webhook-id']).toBe(event.id);
      return event;
    });

  const ofType = (events: Delivered[], type: string, keyId: string) => events.filter((event) => event.type === type && event.data.key_id === keyId);

  it('delivers one signed event per key created, disabled, deleted and expired; nothing for an account without an endpoint', async () => {
    const quiet = await account('quiet-keys', false);
    const owner = await account('hooked-keys');
    // The quiet account's changes go first: once the owner's later events arrived, the consumer has passed them.
    const quietKey = await call('POST', '/v1/account/keys', quiet.provisioningKey, { name: 'quiet', credit_limit: null, expires_at: new Date(Date.now() + 1_000).toISOString() });
    expect(quietKey.status, quietKey.text).toBe(201);
    expect((await call('PATCH', `/v1/account/keys/${quietKey.body.id}`, quiet.provisioningKey, { disabled: true })).status).toBe(200);

    const made = await call('POST', '/v1/account/keys', owner.provisioningKey, { name: 'short-lived', credit_limit: null });
    expect(made.status, made.text).toBe(201);
    const keyId = made.body.id as string;
    const plaintext = made.body.key as string;
    expect((await call('PATCH', `/v1/account/keys/${keyId}`, owner.provisioningKey, { disabled: true })).status).toBe(200);
    // Disabled once: a second PATCH that changes nothing about it, and re-enabling, send nothing.
    expect((await call('PATCH', `/v1/account/keys/${keyId}`, owner.provisioningKey, { name: 'renamed' })).status).toBe(200);
    expect((await call('DELETE', `/v1/account/keys/${keyId}`, owner.provisioningKey)).status).toBe(200);
    const expiresAt = new Date(Date.now() + 1_500);
    const expiring = await call('POST', '/v1/account/keys', owner.provisioningKey, { name: 'expiring', credit_limit: null, expires_at: expiresAt.toISOString() });
    expect(expiring.status, expiring.text).toBe(201);
    const expiringId = expiring.body.id as string;

    await eventually(async () => {
      expect(ofType(deliveredTo(owner), 'api_key.expired', expiringId)).toHaveLength(1);
      expect(ofType(deliveredTo(owner), 'api_key.deleted', keyId)).toHaveLength(1);
    }, DELIVERED_WITHIN_MS, 100);
    // Past the expiry by several sweeps: still one of each.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const events = deliveredTo(owner);
    expect(events.map((event) => `${event.type}:${event.data.key_id}`).sort()).toEqual([
      `api_key.created:${expiringId}`, `api_key.created:${keyId}`, `api_key.deleted:${keyId}`, `api_key.disabled:${keyId}`, `api_key.expired:${expiringId}`,
    ].sort());
    expect(new Set(events.map((event) => event.id)).size).toBe(events.length);
    expect(ofType(events, 'api_key.created', keyId)[0]!.data).toMatchObject({ key_id: keyId, name: 'short-lived', label: made.body.label });
    expect(ofType(events, 'api_key.disabled', keyId)[0]!.data).toMatchObject({ key_id: keyId, name: 'short-lived' });
    expect(ofType(events, 'api_key.deleted', keyId)[0]!.data).toMatchObject({ key_id: keyId, name: 'renamed' });
    expect(new Date(ofType(events, 'api_key.expired', expiringId)[0]!.data.expired_at as string).getTime()).toBe(expiresAt.getTime());
    for (const event of events) {
      expect(Object.keys(event.data).sort()).toEqual(['key_id', 'label', 'name', event.type.replace('api_key.', '') + '_at'].sort());
      expect(JSON.stringify(event)).not.toContain(plaintext);
      expect(JSON.stringify(event)).not.toContain(plaintext.slice(-20));
    }

    // The quiet account's key was created, disabled and expired too; no event row was made for it.
    const rows = await db.query('select count(*)::int as n from ledger.webhook_events where account_id = $1', [quiet.accountId]);
    expect(rows.rows[0].n).toBe(0);
    expect(received.some((entry) => entry.body.includes(quiet.accountId))).toBe(false);
    // Relayed and gone from the outbox (the expired key's event was written before the owner's).
    expect((await db.query('select count(*)::int as n from auth.account_event_outbox')).rows[0].n).toBe(0);
  }, 90_000);

  it('delivers one batch.completed when a message batch ends, with its counts and cost', async () => {
    const owner = await account('hooked-batches');
    const anthropic = new Anthropic({ baseURL: base.stack.url, apiKey: owner.apiKey, maxRetries: 0, timeout: 60_000 });
    const batch = await anthropic.messages.batches.create({
      requests: ['a', 'b'].map((id) => ({ custom_id: id, params: { model: MODEL, max_tokens: 50, messages: [{ role: 'user' as const, content: `hello ${id}` }] } })),
    });
    await eventually(async () => {
      expect(deliveredTo(owner).filter((event) => event.type === 'batch.completed')).toHaveLength(1);
    }, DELIVERED_WITHIN_MS, 100);
    expect((await anthropic.messages.batches.retrieve(batch.id)).processing_status).toBe('ended');
    const [event] = deliveredTo(owner).filter((entry) => entry.type === 'batch.completed');
    expect(event!.data).toMatchObject({
      batch_id: batch.id, kind: 'messages', status: 'ended',
      request_counts: { processing: 0, succeeded: 2, errored: 0, canceled: 0, expired: 0 },
      cost: formatCredits(2n * LINE_COST),
    });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(deliveredTo(owner).filter((entry) => entry.type === 'batch.completed')).toHaveLength(1);
  }, 90_000);

  it('delivers an event once when its outbox row is relayed twice or it is published twice', async () => {
    const owner = await account('hooked-twice');
    const made = await call('POST', '/v1/account/keys', owner.provisioningKey, { name: 'twice', credit_limit: null });
    expect(made.status, made.text).toBe(201);
    const keyId = made.body.id as string;
    await eventually(async () => expect(ofType(deliveredTo(owner), 'api_key.created', keyId)).toHaveLength(1), DELIVERED_WITHIN_MS, 100);
    const [first] = ofType(deliveredTo(owner), 'api_key.created', keyId);
    // A relay that died after publishing and before deleting its rows: the row is back in the outbox.
    await db.query('insert into auth.account_event_outbox (event_id, account_id, type, data) values ($1, $2, $3, $4)',
      [first!.id, owner.accountId, first!.type, JSON.stringify(first!.data)]);
    // And the event published again under another message id, past the stream's deduplication.
    await base.testBus.bus.publishDurable(subjects.accountEvents, AccountEvent.encode({
      eventId: first!.id, accountId: owner.accountId, type: first!.type, dataJson: JSON.stringify(first!.data), occurredAtMs: BigInt(Date.now()),
    }).finish(), `${first!.id}-again`);
    // A later event marks that the consumer has passed both copies.
    const later = await call('POST', '/v1/account/keys', owner.provisioningKey, { name: 'later', credit_limit: null });
    expect(later.status, later.text).toBe(201);
    await eventually(async () => expect(ofType(deliveredTo(owner), 'api_key.created', later.body.id as string)).toHaveLength(1), DELIVERED_WITHIN_MS, 100);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(deliveredTo(owner).filter((event) => event.id === first!.id)).toHaveLength(1);
    expect((await db.query('select count(*)::int as n from ledger.webhook_events where event_id = $1', [first!.id])).rows[0].n).toBe(1);
    expect((await db.query('select count(*)::int as n from auth.account_event_outbox')).rows[0].n).toBe(0);
  }, 90_000);
});
