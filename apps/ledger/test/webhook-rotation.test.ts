import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { GrpcStatus } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { eventually, uniqueName } from '@gateway/testing';
import { createLedgerHarness, rejection, type LedgerClient, type LedgerHarness } from './harness.js';

// Webhook secret rotation (issue 42): a new secret answered once; during the overlap window a delivery
// carries a signature with the new secret and one with the old (the `standardwebhooks` package, an
// independent implementation, verifies it with either); after the window, only with the new one.
// Another account's endpoint is not found and is not touched.

type Received = { headers: IncomingHttpHeaders; body: string };

async function startReceiver() {
  const received: Received[] = [];
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      received.push({ headers: request.headers, body: Buffer.concat(chunks).toString('utf8') });
      response.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`, received,
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

const verify = (secret: string, entry: Received) => new Webhook(secret).verify(entry.body, {
  'webhook-id': String(entry.headers['webhook-id']),
  'webhook-timestamp': String(entry.headers['webhook-timestamp']),
  'webhook-signature': String(entry.headers['webhook-signature']),
}) as { type: string; account_id: string };

describe('webhooks: secret rotation', () => {
  let harness: LedgerHarness;
  let ledger: LedgerClient;

  beforeAll(async () => {
    harness = await createLedgerHarness();
    ({ client: ledger } = await harness.start({ webhooks: { allowPrivate: true, intervalMs: 40, baseBackoffMs: 100, maxBackoffMs: 400, secretOverlapMs: 3_600_000 } }));
  }, 60_000);
  afterAll(async () => { await harness?.close(); });

  it('signs with the new and the old secret during the overlap, then only with the new one; a stranger is not found', async () => {
    const receiver = await startReceiver();
    try {
      const accountId = uniqueName('acc');
      const stranger = uniqueName('acc');
      const created = await ledger.createWebhookEndpoint({ accountId, url: receiver.url, eventTypes: ['credits.topped_up'], enabled: true });
      const endpointId = created.endpoint!.id;
      const topUp = async (count: number) => {
        await ledger.topUp({ accountId, credits: '1', idempotencyKey: uniqueName('topup'), note: '' });
        await eventually(async () => expect(receiver.received).toHaveLength(count), 10_000);
        return receiver.received[count - 1]!;
      };
      expect(verify(created.secret, await topUp(1))).toMatchObject({ type: 'credits.topped_up', account_id: accountId });

      // Another account: not found, and the endpoint keeps its secret.
      expect((await rejection(ledger.rotateWebhookSecret({ accountId: stranger, endpointId }))).status).toBe(GrpcStatus.NOT_FOUND);
      expect((await rejection(ledger.rotateWebhookSecret({ accountId, endpointId: 'whe_none' }))).status).toBe(GrpcStatus.NOT_FOUND);
      const stillOld = await topUp(2);
      expect(String(stillOld.headers['webhook-signature']).split(' ')).toHaveLength(1);
      verify(created.secret, stillOld);

      const before = Date.now();
      const rotated = await ledger.rotateWebhookSecret({ accountId, endpointId });
      expect(rotated.secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);
      expect(rotated.secret).not.toBe(created.secret);
      expect(rotated.endpoint).toMatchObject({ id: endpointId, url: receiver.url, enabled: true });
      expect(Number(rotated.previousSecretExpiresAtMs)).toBeGreaterThanOrEqual(before + 3_600_000 - 5_000);

      // In the overlap: two signatures, each secret verifies.
      const overlap = await topUp(3);
      expect(String(overlap.headers['webhook-signature'])).toMatch(/^v1,\S+ v1,\S+$/);
      expect(verify(rotated.secret, overlap).account_id).toBe(accountId);
      expect(verify(created.secret, overlap).account_id).toBe(accountId);
      expect(() => verify(`whsec_${Buffer.alloc(24, 7).toString('base64')}`, overlap)).toThrow();

      // The window ends (moved in the row, as a clock would): only the new secret.
      await sql`update ledger.webhook_endpoints set previous_secret_until = now() - interval '1 second' where id = ${endpointId}`.execute(harness.db);
      const after = await topUp(4);
      expect(String(after.headers['webhook-signature']).split(' ')).toHaveLength(1);
      expect(verify(rotated.secret, after).account_id).toBe(accountId);
      expect(() => verify(created.secret, after)).toThrow();

      // Audited, never with a secret.
      const audit = (await ledger.listLedgerAuditEntries({ accountId, limit: 10, cursor: '' })).entries;
      expect(audit.map((entry) => entry.action).filter((action) => action.startsWith('webhook.'))).toEqual(['webhook.rotate_secret', 'webhook.create']);
      const auditText = JSON.stringify(audit, (_, value: unknown) => (typeof value === 'bigint' ? value.toString() : value));
      expect(auditText).not.toContain('whsec_');
      expect(auditText).not.toContain(rotated.secret.slice('whsec_'.length));
      expect((await ledger.listLedgerAuditEntries({ accountId: stranger, limit: 10, cursor: '' })).entries).toEqual([]);
    } finally {
      await receiver.close();
    }
  });
});

describe('webhooks: secrets encrypted at rest', () => {
  let harness: LedgerHarness;
  const key = Buffer.alloc(32, 41).toString('base64');
  const webhooks = { allowPrivate: true, intervalMs: 40, baseBackoffMs: 100, maxBackoffMs: 400 };
  const stored = async (id: string) => (await sql<{ secret: string; previous_secret: string | null }>`
    select secret, previous_secret from ledger.webhook_endpoints where id = ${id}`.execute(harness.db)).rows[0]!;

  beforeAll(async () => { harness = await createLedgerHarness(); }, 60_000);
  afterAll(async () => { await harness?.close(); });

  it('stores no plaintext secret, seals a row written before at start, and every delivery still verifies', async () => {
    const receiver = await startReceiver();
    try {
      const accountId = uniqueName('acc');
      // A row as the ledger wrote it before encryption: the plaintext secret.
      const legacyId = uniqueName('whe');
      const legacySecret = `whsec_${Buffer.alloc(24, 3).toString('base64')}`;
      // The schema exists once a ledger has migrated it.
      await (await harness.start({ webhookSecretKey: key, webhooks: { ...webhooks, enabled: false }, consumer: { enabled: false } })).stop();
      await sql`insert into ledger.webhook_endpoints (id, account_id, url, event_types, secret)
        values (${legacyId}, ${accountId}, ${receiver.url}, array['credits.topped_up'], ${legacySecret})`.execute(harness.db);
      expect((await stored(legacyId)).secret).toBe(legacySecret);

      const { client: ledger, stop } = await harness.start({ webhookSecretKey: key, webhooks });
      const legacyRow = await stored(legacyId);
      expect(legacyRow.secret).toMatch(/^gcm1:/);
      expect(legacyRow.secret).not.toContain(legacySecret.slice('whsec_'.length));

      const created = await ledger.createWebhookEndpoint({ accountId, url: receiver.url, eventTypes: ['credits.topped_up'], enabled: true });
      const rotated = await ledger.rotateWebhookSecret({ accountId, endpointId: created.endpoint!.id });
      const row = await stored(created.endpoint!.id);
      const rowText = JSON.stringify(row);
      for (const secret of [created.secret, rotated.secret]) expect(rowText).not.toContain(secret.slice('whsec_'.length));
      expect(row.secret).toMatch(/^gcm1:/);
      expect(row.previous_secret).toMatch(/^gcm1:/);
      // Every column of every row: no plaintext secret anywhere in the table.
      const table = JSON.stringify((await sql`select * from ledger.webhook_endpoints`.execute(harness.db)).rows);
      expect(table).not.toContain('whsec_');

      await ledger.topUp({ accountId, credits: '1', idempotencyKey: uniqueName('topup'), note: '' });
      await eventually(async () => expect(receiver.received).toHaveLength(2), 10_000);
      // One delivery per endpoint; the legacy one verifies with its old plaintext secret, the new one with the rotated and the created.
      const verifiedBy = (secret: string) => receiver.received.filter((entry) => { try { verify(secret, entry); return true; } catch { return false; } }).length;
      expect(verifiedBy(legacySecret)).toBe(1);
      expect(verifiedBy(rotated.secret)).toBe(1);
      expect(verifiedBy(created.secret)).toBe(1);
      await stop();

      // Another key does not open the sealed secrets: that ledger refuses to start instead of signing with garbage.
      await expect(harness.start({ webhookSecretKey: Buffer.alloc(32, 42).toString('base64'), webhooks })).rejects.toThrow(/WEBHOOK_SECRET_KEY/);
      await expect(harness.start({ webhookSecretKey: 'c2hvcnQ=', webhooks })).rejects.toThrow(/32 bytes/);
    } finally {
      await receiver.close();
    }
  });
});
