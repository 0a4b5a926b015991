import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAuditLogExport, type AuditLogExport } from '@gateway/platform';
import { eventually, startOtlpCollector, testLogger, type OtlpCollector } from '@gateway/testing';
import { startAccountStack, type AccountStack } from './account-harness.js';

// The audit log exported as OpenTelemetry log records (docs/governance.md "Export as OTLP logs"): a whole
// stack with internal authentication in this process, its services' audit entries (auth, ledger and
// catalog chains) sent by the OTLP log exporters to a real HTTP receiver that decodes the payload
// (protobuf, the default, and JSON); each chain's entries arrive once each, with the chain, seq, actor,
// action, target, request id and hash, matching the chain as stored.

const LOG_ENV = ['OTEL_EXPORTER_OTLP_LOGS_ENDPOINT', 'OTEL_EXPORTER_OTLP_LOGS_PROTOCOL', 'OTEL_BLRP_SCHEDULE_DELAY', 'OTEL_SERVICE_NAME'] as const;

describe('audit log export over OTLP (e2e)', () => {
  let collector: OtlpCollector;
  let exporting: AuditLogExport | undefined;
  let harness: AccountStack;
  const saved = new Map<string, string | undefined>(LOG_ENV.map((name) => [name, process.env[name]]));

  const startExport = async (protocol: 'http/protobuf' | 'http/json') => {
    await exporting?.stop();
    process.env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT = `${collector.url}/v1/logs`;
    process.env.OTEL_EXPORTER_OTLP_LOGS_PROTOCOL = protocol;
    process.env.OTEL_BLRP_SCHEDULE_DELAY = '100';
    process.env.OTEL_SERVICE_NAME = 'gateway-audit-test';
    exporting = await startAuditLogExport('gateway', testLogger('audit-export'));
    expect(exporting).toBeDefined();
  };

  /** The chain as stored (the operator's view), every entry. */
  const chainOf = async (chain: string) => {
    const answer = await harness.call('GET', `/v1/admin/audit?chain=${chain}&limit=1000`, { bearer: harness.internalTokens!.admin });
    expect(answer.status, answer.text).toBe(200);
    return answer.body.data as Array<{ seq: number; hash: string; action: string; actor: { type: string; id: string | null }; target: { type: string; id: string }; request_id: string | null; account_id: string | null }>;
  };
  const recordsOf = (chain: string) => collector.logs.filter((record) => record.attributes['gateway.audit.chain'] === chain);

  beforeAll(async () => {
    collector = await startOtlpCollector();
    await startExport('http/protobuf');
    harness = await startAccountStack({ internalAuth: true });
  }, 120_000);

  afterAll(async () => {
    await harness?.stop();
    await exporting?.stop();
    await collector?.close();
    for (const [name, value] of saved) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });

  it('sends every entry of the auth, ledger and catalog chains once, as protobuf, matching the stored chain', async () => {
    const account = await harness.newAccount('exported', '3');
    const key = await harness.createKey(account, { name: 'exported-key', credit_limit: 2 });
    const budget = await harness.call('PUT', '/v1/account/budgets/account', { bearer: account.provisioningKey, body: { period: 'monthly', limit: '5' } });
    expect(budget.status, budget.text).toBe(200);
    const member = await harness.call('POST', '/v1/account/members', { bearer: account.provisioningKey, body: { email: 'exported@example.com', role: 'admin' } });
    expect(member.status, member.text).toBe(201);

    const stored = { auth: await chainOf('auth'), ledger: await chainOf('ledger'), catalog: await chainOf('catalog') };
    expect(stored.auth.map((entry) => entry.action)).toEqual(expect.arrayContaining(['account.create', 'api_key.create', 'member.add']));
    expect(stored.ledger.map((entry) => entry.action)).toEqual(expect.arrayContaining(['credits.top_up', 'budget.create']));
    expect(stored.catalog.map((entry) => entry.action)).toContain('catalog.load');
    await exporting!.flush();
    await eventually(async () => {
      for (const chain of ['auth', 'ledger', 'catalog'] as const) {
        expect(recordsOf(chain).map((record) => record.attributes['gateway.audit.seq']).sort((a, b) => Number(a) - Number(b)), chain).toEqual(stored[chain].map((entry) => entry.seq));
      }
    });
    for (const chain of ['auth', 'ledger', 'catalog'] as const) {
      for (const entry of stored[chain]) {
        const record = recordsOf(chain).find((candidate) => candidate.attributes['gateway.audit.seq'] === entry.seq)!;
        expect(record.contentType).toBe('application/x-protobuf');
        expect(record.attributes).toMatchObject({
          'gateway.audit.hash': entry.hash,
          'gateway.audit.action': entry.action,
          'gateway.audit.actor.kind': entry.actor.type,
          'gateway.audit.actor.id': entry.actor.id ?? '',
          'gateway.audit.target.type': entry.target.type,
          'gateway.audit.target.id': entry.target.id,
          'gateway.audit.request_id': entry.request_id ?? '',
          'gateway.audit.account_id': entry.account_id ?? '',
        });
        expect(record.body).toEqual(expect.stringContaining(entry.action));
        expect(record).toMatchObject({ service: 'gateway-audit-test', scope: 'inference-gateway.audit', eventName: 'gateway.audit.entry', severityText: 'INFO' });
      }
    }
    // The member change as the collector got it: who, what and the request it came with.
    const added = recordsOf('auth').find((record) => record.attributes['gateway.audit.target.id'] === member.body.id)!;
    expect(added.attributes).toMatchObject({ 'gateway.audit.action': 'member.add', 'gateway.audit.actor.kind': 'provisioning_key', 'gateway.audit.account_id': account.accountId });
    expect(String(added.attributes['gateway.audit.request_id'])).not.toBe('');
    expect(recordsOf('auth').some((record) => record.attributes['gateway.audit.target.id'] === key.id)).toBe(true);
  });

  it('sends JSON when asked (OTEL_EXPORTER_OTLP_LOGS_PROTOCOL=http/json)', async () => {
    await startExport('http/json');
    const account = await harness.newAccount('exported-json', '1');
    const created = (await chainOf('auth')).find((entry) => entry.action === 'account.create' && entry.target.id === account.accountId)!;
    await exporting!.flush();
    await eventually(async () => {
      const record = recordsOf('auth').find((candidate) => candidate.attributes['gateway.audit.seq'] === created.seq);
      expect(record?.contentType).toBe('application/json');
      expect(record?.attributes['gateway.audit.hash']).toBe(created.hash);
    });
  });
});
