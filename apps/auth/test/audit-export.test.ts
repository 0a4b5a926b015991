import { createServer } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { auditLogExportConfigured, setAuditEntrySink, startAuditLogExport, UNATTRIBUTED_AUDIT, type AuditRecord } from '@gateway/platform';
import { appendAudit, auditedTransaction } from '@gateway/platform/db';
import { testLogger } from '@gateway/testing';
import { startAuthRig, type AuthRig } from './auth-rig.js';

// What the audit log's OTLP export is handed (libs/platform audit-sink.ts, db/audit-log.ts), on the auth
// service's real database: an entry only once its transaction committed, none of a change that rolled
// back; and an export whose collector is unreachable never holds a change up.

type Entry = AuditRecord & { hash: string };

describe('audit entries handed to the OTLP export', () => {
  let rig: AuthRig;
  let accountId: string;
  const seen: Entry[] = [];
  const owner = { actor: { kind: 'provisioning_key', id: 'pkey_export', sourceAddress: '' } };

  beforeAll(async () => {
    rig = await startAuthRig('audit-export-test-secret-0123456789abcdefghij');
    accountId = (await rig.auth.createAccount({ name: 'Exported', tier: '', idempotencyKey: '' })).account!.id;
  });
  afterEach(() => {
    setAuditEntrySink(undefined);
    seen.length = 0;
  });
  afterAll(async () => rig?.stop());

  const change = { ...UNATTRIBUTED_AUDIT, accountId: 'acc_x', action: 'test.change', targetType: 'test', targetId: 't1', before: null, after: { n: 1 } };

  it('hands an entry over after its transaction committed, and never one of a change that rolled back', async () => {
    setAuditEntrySink((entry) => seen.push(entry));
    let seenInside = -1;
    const committed = await auditedTransaction(rig.db, async (trx) => {
      const entry = await appendAudit(trx, 'auth', change);
      seenInside = seen.length;
      return entry;
    });
    expect(seenInside).toBe(0);
    expect(seen).toEqual([committed]);

    await expect(auditedTransaction(rig.db, async (trx) => {
      await appendAudit(trx, 'auth', { ...change, targetId: 'rolled-back' });
      throw new Error('the change fails after its entry was appended');
    })).rejects.toThrow(/fails after/);
    expect(seen.map((entry) => entry.targetId)).toEqual(['t1']);

    // A service change goes the same way: the member added is handed over with its actor and request id.
    const added = await rig.auth.addMember({ accountId, role: 'viewer', email: 'seen@example.com', issuer: '', subject: '', actorRole: 'owner' }, { ...owner, requestId: 'req_seen' });
    expect(seen.at(-1)).toMatchObject({ chain: 'auth', action: 'member.add', targetId: added.member!.id, actorKind: 'provisioning_key', actorId: 'pkey_export', requestId: 'req_seen', accountId });
  });

  it('is off without an OTLP endpoint, or when turned off', () => {
    expect(auditLogExportConfigured({})).toBe(false);
    expect(auditLogExportConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' })).toBe(true);
    expect(auditLogExportConfigured({ OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: 'http://127.0.0.1:4318/v1/logs' })).toBe(true);
    expect(auditLogExportConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_LOGS_EXPORTER: 'none' })).toBe(false);
    expect(auditLogExportConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_SDK_DISABLED: 'true' })).toBe(false);
  });

  it('never holds a change up when the collector cannot be reached', async () => {
    // A port nobody listens on.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const saved = { endpoint: process.env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT, timeout: process.env.OTEL_EXPORTER_OTLP_LOGS_TIMEOUT };
    process.env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT = `http://127.0.0.1:${port}/v1/logs`;
    process.env.OTEL_EXPORTER_OTLP_LOGS_TIMEOUT = '500';
    const exporting = await startAuditLogExport('gateway-auth', testLogger('audit-export'));
    try {
      expect(exporting).toBeDefined();
      const started = Date.now();
      for (let index = 0; index < 30; index += 1) {
        await rig.auth.addMember({ accountId, role: 'viewer', email: `unreachable-${index}@example.com`, issuer: '', subject: '', actorRole: 'owner' }, owner);
      }
      // Thirty audited changes, each well under the exporter's timeout: none waited for the export.
      expect(Date.now() - started).toBeLessThan(15_000);
      const listed = await rig.auth.listMembers({ accountId });
      expect(listed.members.filter((member) => member.email.startsWith('unreachable-'))).toHaveLength(30);
    } finally {
      await exporting?.stop();
      if (saved.endpoint === undefined) delete process.env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT;
      else process.env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT = saved.endpoint;
      if (saved.timeout === undefined) delete process.env.OTEL_EXPORTER_OTLP_LOGS_TIMEOUT;
      else process.env.OTEL_EXPORTER_OTLP_LOGS_TIMEOUT = saved.timeout;
    }
  });
});
