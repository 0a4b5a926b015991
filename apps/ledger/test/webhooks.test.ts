import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { createServer as createTcpServer, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { GrpcStatus } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { Pricing, Usage } from '@gateway/proto';
import { eventually, uniqueName } from '@gateway/testing';
import { sendWebhook } from '../src/webhooks/webhook-dispatcher.js';
import { createLedgerHarness, rejection, usageEvent, type LedgerClient, type LedgerHarness } from './harness.js';

// Webhooks (issue 42 item 4): endpoints per account, events written in the transaction that made them
// (a fired budget threshold, a top-up), delivered by a dispatcher in every ledger replica with leases
// (FOR UPDATE SKIP LOCKED), signed per Standard Webhooks (verified here with the `standardwebhooks`
// package, an independent implementation), retried with backoff while a receiver is down, in order per
// endpoint, dead-lettered after N attempts, and never sent to a loopback/private/metadata address
// unless the operator allows it.

type Received = { headers: IncomingHttpHeaders; body: string; at: number };

/** A real HTTP receiver; `status` decides each answer (default 200). */
async function startReceiver(status: (received: Received) => number = () => 200) {
  const received: Received[] = [];
  const answered: Array<{ id: string; status: number }> = [];
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const entry = { headers: request.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() };
      const code = status(entry);
      answered.push({ id: String(request.headers['webhook-id']), status: code });
      if (code >= 200 && code < 300) received.push(entry);
      response.writeHead(code, { 'content-type': 'text/plain' }).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/hooks`, port, received, answered,
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

const verified = (secret: string, entry: Received) => new Webhook(secret).verify(entry.body, {
  'webhook-id': String(entry.headers['webhook-id']),
  'webhook-timestamp': String(entry.headers['webhook-timestamp']),
  'webhook-signature': String(entry.headers['webhook-signature']),
}) as { id: string; type: string; account_id: string; data: Record<string, unknown> };

const priced = (credits: string) => ({ prices: Pricing.create({ perInputToken: credits }), usage: Usage.create({ inputTokens: 1 }) });

describe('webhooks: registration, ownership and the SSRF guard (private targets refused)', () => {
  let harness: LedgerHarness;
  let ledger: LedgerClient;

  beforeAll(async () => {
    harness = await createLedgerHarness();
    ({ client: ledger } = await harness.start({ webhooks: { allowPrivate: false, intervalMs: 50, baseBackoffMs: 50, maxBackoffMs: 100, maxAttempts: 2 } }));
  }, 60_000);
  afterAll(async () => { await harness?.close(); });

  it('refuses non-https and loopback, private, link-local, unique-local and metadata targets at registration', async () => {
    const accountId = uniqueName('acc');
    for (const url of [
      'http://example.com/hook', 'ftp://example.com/', 'not a url', 'https://127.0.0.1/hook', 'https://127.8.9.1/', 'https://localhost:8443/',
      'https://api.localhost/', 'https://10.1.2.3/', 'https://172.20.0.1/', 'https://192.168.1.1/', 'https://169.254.169.254/latest/meta-data',
      'https://100.64.0.1/', 'https://0.0.0.0/', 'https://[::1]/', 'https://[fd00::1]/', 'https://[fe80::1]/', 'https://[::ffff:127.0.0.1]/',
      'https://[::ffff:a9fe:a9fe]/', 'https://user:pass@example.com/', `https://example.com/${'a'.repeat(2_100)}`,
    ]) {
      const refused = await rejection(ledger.createWebhookEndpoint({ accountId, url, eventTypes: ['budget.threshold_crossed'], enabled: true }));
      expect(refused.status, url).toBe(GrpcStatus.INVALID_ARGUMENT);
      expect(refused.detail.param, url).toBe('url');
    }
    expect((await ledger.listWebhookEndpoints({ accountId })).endpoints).toEqual([]);
    // A public literal address is accepted (nothing is sent to it: no event happens).
    const created = await ledger.createWebhookEndpoint({ accountId, url: 'https://203.0.114.7/hook', eventTypes: ['credits.topped_up'], enabled: false });
    expect(created.secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);
    for (const eventTypes of [[], ['balance.exploded']]) {
      expect((await rejection(ledger.createWebhookEndpoint({ accountId, url: 'https://203.0.114.7/', eventTypes, enabled: true }))).detail.param).toBe('event_types');
    }
    expect((await rejection(ledger.updateWebhookEndpoint({ accountId, endpointId: created.endpoint!.id, url: 'https://10.0.0.1/', eventTypes: [], setEventTypes: false }))).status)
      .toBe(GrpcStatus.INVALID_ARGUMENT);
  });

  it('checks the resolved address at send time: a stored private target and a name resolving to loopback are never connected to', async () => {
    let connections = 0;
    const listener = createTcpServer((socket) => { connections++; socket.destroy(); });
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    const port = (listener.address() as AddressInfo).port;
    try {
      const limits = { allowPrivate: false, requestTimeoutMs: 2_000, responseBodyMaxBytes: 1_024 };
      const target = { secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', messageId: 'evt_1', body: '{}' };
      const byName = await sendWebhook({ ...target, url: `https://localhost:${port}/` }, limits);
      expect(byName).toMatchObject({ ok: false, status: null });
      expect(byName.error).toMatch(/refused address/);
      expect((await sendWebhook({ ...target, url: `https://127.0.0.1:${port}/` }, limits)).error).toMatch(/refused address/);
      expect((await sendWebhook({ ...target, url: `http://127.0.0.1:${port}/` }, limits)).error).toMatch(/https/);

      // An endpoint that got past registration (stored before its address changed) and its event: the
      // dispatcher refuses at send time and dead-letters it after the attempts.
      const accountId = uniqueName('acc');
      const endpointId = uniqueName('whe');
      await sql`insert into ledger.webhook_endpoints (id, account_id, url, event_types, secret)
        values (${endpointId}, ${accountId}, ${`https://127.0.0.1:${port}/`}, array['credits.topped_up'], 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')`.execute(harness.db);
      await ledger.topUp({ accountId, credits: '3', idempotencyKey: uniqueName('topup'), note: '' });
      await eventually(async () => {
        const deliveries = (await ledger.listWebhookDeliveries({ accountId, endpointId, limit: 10, cursor: '' })).deliveries;
        expect(deliveries).toHaveLength(1);
        expect(deliveries[0]).toMatchObject({ state: 'dead', attempts: 2, lastStatus: 0, eventType: 'credits.topped_up' });
        expect(deliveries[0]!.lastError).toMatch(/refused address 127\.0\.0\.1/);
      }, 10_000);
      expect(connections).toBe(0);
    } finally {
      await new Promise<void>((resolve) => listener.close(() => resolve()));
    }
  });

  it('another account\'s endpoint is not found, whatever the call', async () => {
    const owner = uniqueName('acc');
    const stranger = uniqueName('acc');
    const created = await ledger.createWebhookEndpoint({ accountId: owner, url: 'https://203.0.114.8/hook', eventTypes: ['budget.threshold_crossed'], enabled: true });
    const endpointId = created.endpoint!.id;
    const calls = [
      () => ledger.getWebhookEndpoint({ accountId: stranger, endpointId }),
      () => ledger.updateWebhookEndpoint({ accountId: stranger, endpointId, enabled: false, eventTypes: [], setEventTypes: false }),
      () => ledger.deleteWebhookEndpoint({ accountId: stranger, endpointId }),
      () => ledger.listWebhookDeliveries({ accountId: stranger, endpointId, limit: 10, cursor: '' }),
      () => ledger.redeliverWebhook({ accountId: stranger, endpointId, deliveryId: '1' }),
    ];
    for (const call of calls) expect((await rejection(call())).status).toBe(GrpcStatus.NOT_FOUND);
    expect((await ledger.listWebhookEndpoints({ accountId: stranger })).endpoints).toEqual([]);
    // Unchanged for its owner; the changes are in the ledger's audit chain, without the secret.
    expect((await ledger.getWebhookEndpoint({ accountId: owner, endpointId })).endpoint).toMatchObject({ enabled: true, url: 'https://203.0.114.8/hook' });
    const updated = await ledger.updateWebhookEndpoint({ accountId: owner, endpointId, enabled: false, eventTypes: ['credits.topped_up', 'budget.threshold_crossed'], setEventTypes: true });
    expect(updated.endpoint).toMatchObject({ enabled: false, eventTypes: ['budget.threshold_crossed', 'credits.topped_up'] });
    await ledger.deleteWebhookEndpoint({ accountId: owner, endpointId });
    expect((await rejection(ledger.getWebhookEndpoint({ accountId: owner, endpointId }))).status).toBe(GrpcStatus.NOT_FOUND);
    const audit = (await ledger.listLedgerAuditEntries({ accountId: owner, limit: 10, cursor: '' })).entries;
    expect(audit.map((entry) => entry.action)).toEqual(['webhook.delete', 'webhook.update', 'webhook.create']);
    const auditText = JSON.stringify(audit, (_, value: unknown) => (typeof value === 'bigint' ? value.toString() : value));
    expect(auditText).toContain('https://203.0.114.8/hook');
    expect(auditText).not.toContain(created.secret);
    expect(auditText).not.toContain('whsec_');
  });

  it('bounds the endpoints of an account', async () => {
    const accountId = uniqueName('acc');
    await Promise.all(Array.from({ length: 16 }, () => ledger.createWebhookEndpoint({ accountId, url: 'https://203.0.114.9/', eventTypes: ['credits.topped_up'], enabled: false })));
    const refused = await rejection(ledger.createWebhookEndpoint({ accountId, url: 'https://203.0.114.9/', eventTypes: ['credits.topped_up'], enabled: false }));
    expect(refused.detail.code).toBe('webhook_limit_reached');
    expect((await ledger.listWebhookEndpoints({ accountId })).endpoints).toHaveLength(16);
  });
});

describe('webhooks: delivery from two ledger replicas', () => {
  let harness: LedgerHarness;
  let ledgerA: LedgerClient;
  let ledgerB: LedgerClient;
  const clock = Date.parse('2026-03-10T12:00:00.000Z');
  const webhooks = { allowPrivate: true, intervalMs: 40, baseBackoffMs: 100, maxBackoffMs: 400, maxAttempts: 8, requestTimeoutMs: 2_000 };

  beforeAll(async () => {
    harness = await createLedgerHarness();
    ({ client: ledgerA } = await harness.start({ now: () => clock, webhooks }));
    ({ client: ledgerB } = await harness.start({ now: () => clock, webhooks }));
  }, 60_000);
  afterAll(async () => { await harness?.close(); });

  it('50 concurrent settlements crossing 80 % send exactly one signed webhook', async () => {
    const receiver = await startReceiver();
    try {
      const accountId = uniqueName('acc');
      await ledgerA.topUp({ accountId, credits: '100', idempotencyKey: uniqueName('topup'), note: '' });
      const created = await ledgerA.createWebhookEndpoint({ accountId, url: receiver.url, eventTypes: ['budget.threshold_crossed'], enabled: true });
      await ledgerA.setBudget({ accountId, keyId: '', period: 'monthly', limit: '1', thresholds: [80], hardStop: false });
      // 50 charges of 0.018 on both replicas: 0.9 credits, 90 % of the budget.
      const settles = Array.from({ length: 50 }, (_, index) => (index % 2 === 0 ? ledgerA : ledgerB).settleUsage({
        events: [usageEvent({ requestId: uniqueName('req'), accountId, occurredAtMs: BigInt(clock), ...priced('0.018') })],
      }));
      expect((await Promise.all(settles)).reduce((total, answer) => total + answer.charged, 0)).toBe(50);
      await eventually(async () => expect(receiver.received).toHaveLength(1), 10_000);
      // Both replicas keep polling: still one.
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(receiver.answered).toHaveLength(1);
      const event = verified(created.secret, receiver.received[0]!);
      expect(event).toMatchObject({ type: 'budget.threshold_crossed', account_id: accountId, data: { scope: 'account', key_id: null, period: 'monthly', period_start: '2026-03-01', threshold: 80, limit: '1' } });
      expect(Number(event.data.spent)).toBeGreaterThanOrEqual(0.8);
      expect(receiver.received[0]!.headers['webhook-id']).toBe(event.id);
      // A tampered body fails the independent verifier.
      expect(() => verified(created.secret, { ...receiver.received[0]!, body: receiver.received[0]!.body.replace('"threshold":80', '"threshold":81') })).toThrow();
      await eventually(async () => expect((await ledgerA.listBudgets({ accountId })).alerts.map((alert) => alert.deliveryState)).toEqual(['delivered']), 5_000);
      const deliveries = (await ledgerB.listWebhookDeliveries({ accountId, endpointId: created.endpoint!.id, limit: 10, cursor: '' })).deliveries;
      expect(deliveries).toMatchObject([{ eventId: event.id, state: 'delivered', attempts: 1, lastStatus: 200 }]);
    } finally {
      await receiver.close();
    }
  });

  it('a receiver down for a while gets every event afterwards, in order per account, each exactly once', async () => {
    const downForMs = 600;
    let upAt = Number.POSITIVE_INFINITY;
    const receiver = await startReceiver(() => (Date.now() < upAt ? 503 : 200));
    try {
      const accounts = [uniqueName('acc'), uniqueName('acc')];
      const secrets = new Map<string, string>();
      for (const accountId of accounts) {
        const created = await ledgerA.createWebhookEndpoint({ accountId, url: receiver.url, eventTypes: ['credits.topped_up'], enabled: true });
        secrets.set(accountId, created.secret);
      }
      upAt = Date.now() + downForMs;
      // Five top-ups per account, through both replicas: balances 1, 2, 3, 4, 5.
      for (let round = 1; round <= 5; round++) {
        await Promise.all(accounts.map((accountId, index) => (index === 0 ? ledgerA : ledgerB).topUp({ accountId, credits: '1', idempotencyKey: uniqueName('topup'), note: '' })));
      }
      await eventually(async () => expect(receiver.received).toHaveLength(10), 15_000);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(receiver.received).toHaveLength(10);
      // While down, each endpoint was only ever offered its first event (a later one waits for it).
      const refusedIds = new Set(receiver.answered.filter((answer) => answer.status === 503).map((answer) => answer.id));
      expect(receiver.answered.filter((answer) => answer.status === 503).length).toBeGreaterThanOrEqual(2);
      expect(refusedIds.size).toBeLessThanOrEqual(2);
      for (const accountId of accounts) {
        // Each event is signed with its own account's endpoint secret (verify throws otherwise).
        const mine = receiver.received.filter((entry) => (JSON.parse(entry.body) as { account_id: string }).account_id === accountId);
        const events = mine.map((entry) => verified(secrets.get(accountId)!, entry));
        expect(events.map((event) => event.data.balance)).toEqual(['1', '2', '3', '4', '5']);
        expect(new Set(mine.map((entry) => entry.headers['webhook-id'])).size).toBe(5);
        expect(mine.every((entry) => entry.at >= upAt)).toBe(true);
      }
    } finally {
      await receiver.close();
    }
  });

  it('one account\'s slow receivers hold at most 4 sends at once, and another account\'s event goes meanwhile', async () => {
    let open = 0;
    let mostOpen = 0;
    const slowAccount = uniqueName('acc');
    const quickAccount = uniqueName('acc');
    const arrivals: Array<{ account: string; at: number }> = [];
    const server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        const account = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { account_id: string }).account_id;
        arrivals.push({ account, at: Date.now() });
        if (account !== slowAccount) return void response.writeHead(200).end();
        open++;
        mostOpen = Math.max(mostOpen, open);
        setTimeout(() => { open--; response.writeHead(200).end(); }, 800);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    try {
      for (let index = 0; index < 8; index++) await ledgerA.createWebhookEndpoint({ accountId: slowAccount, url, eventTypes: ['credits.topped_up'], enabled: true });
      await ledgerA.createWebhookEndpoint({ accountId: quickAccount, url, eventTypes: ['credits.topped_up'], enabled: true });
      await ledgerA.topUp({ accountId: slowAccount, credits: '1', idempotencyKey: uniqueName('topup'), note: '' });
      await eventually(async () => expect(open).toBe(4), 5_000);
      const quickFrom = Date.now();
      await ledgerB.topUp({ accountId: quickAccount, credits: '1', idempotencyKey: uniqueName('topup'), note: '' });
      await eventually(async () => expect(arrivals.some((arrival) => arrival.account === quickAccount)).toBe(true), 5_000);
      // The quick account's event did not wait for the slow receivers' 800 ms.
      expect(arrivals.find((arrival) => arrival.account === quickAccount)!.at - quickFrom).toBeLessThan(700);
      await eventually(async () => expect(arrivals.filter((arrival) => arrival.account === slowAccount)).toHaveLength(8), 10_000);
      expect(mostOpen).toBe(4);
    } finally {
      await new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); });
    }
  });

  it('dead-letters after the attempts, lets the next event through, and redelivers on request', async () => {
    let failing = true;
    const receiver = await startReceiver(() => (failing ? 500 : 204));
    try {
      const accountId = uniqueName('acc');
      const created = await ledgerA.createWebhookEndpoint({ accountId, url: receiver.url, eventTypes: ['credits.topped_up'], enabled: true });
      const endpointId = created.endpoint!.id;
      await ledgerA.topUp({ accountId, credits: '1', idempotencyKey: uniqueName('topup'), note: '' });
      await eventually(async () => {
        const [first] = (await ledgerA.listWebhookDeliveries({ accountId, endpointId, limit: 10, cursor: '' })).deliveries;
        expect(first).toMatchObject({ state: 'dead', attempts: 8, lastStatus: 500, lastError: 'receiver answered 500', nextAttemptAtMs: 0n });
      }, 15_000);
      expect(receiver.answered.filter((answer) => answer.status === 500)).toHaveLength(8);
      failing = false;
      // The dead one no longer holds the queue.
      await ledgerB.topUp({ accountId, credits: '1', idempotencyKey: uniqueName('topup'), note: '' });
      await eventually(async () => expect(receiver.received).toHaveLength(1), 5_000);
      expect(verified(created.secret, receiver.received[0]!).data.balance).toBe('2');
      const deliveries = (await ledgerA.listWebhookDeliveries({ accountId, endpointId, limit: 10, cursor: '' })).deliveries;
      expect(deliveries.map((delivery) => delivery.state)).toEqual(['delivered', 'dead']);
      // Only a dead one may be redelivered; then it arrives with its original id.
      expect((await rejection(ledgerA.redeliverWebhook({ accountId, endpointId, deliveryId: deliveries[0]!.id }))).detail.code).toBe('delivery_not_dead');
      await ledgerA.redeliverWebhook({ accountId, endpointId, deliveryId: deliveries[1]!.id });
      await eventually(async () => expect(receiver.received).toHaveLength(2), 5_000);
      expect(receiver.received[1]!.headers['webhook-id']).toBe(deliveries[1]!.eventId);
      expect(verified(created.secret, receiver.received[1]!).data.balance).toBe('1');
      // Paging: one per page, newest first.
      const page = await ledgerA.listWebhookDeliveries({ accountId, endpointId, limit: 1, cursor: '' });
      expect(page.deliveries).toHaveLength(1);
      const next = await ledgerA.listWebhookDeliveries({ accountId, endpointId, limit: 1, cursor: page.nextCursor });
      expect(next.deliveries[0]!.id).not.toBe(page.deliveries[0]!.id);
      expect((await rejection(ledgerA.listWebhookDeliveries({ accountId, endpointId, limit: 101, cursor: '' }))).status).toBe(GrpcStatus.INVALID_ARGUMENT);
      expect((await rejection(ledgerA.listWebhookDeliveries({ accountId, endpointId, limit: 1, cursor: 'x' }))).status).toBe(GrpcStatus.INVALID_ARGUMENT);
    } finally {
      await receiver.close();
    }
  });
});
