import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenFingerprint } from '@gateway/platform';
import { exampleConfigPath, startAccountStack, type Account, type AccountStack } from './account-harness.js';

// The audit log (docs/governance.md) on a whole stack with internal authentication, as deployed: changes
// made through the edge (provisioning key, admin token) and through gatewayctl each write one entry in the
// changing service's chain, in the change's transaction; an account reads only its own entries; a row
// changed or deleted in Postgres makes `gatewayctl audit verify` fail naming it.

interface AuditJson {
  id: string;
  chain: 'auth' | 'ledger';
  seq: number;
  created_at: number;
  actor: { type: string; id: string | null };
  action: string;
  target: { type: string; id: string };
  account_id: string | null;
  before: any;
  after: any;
  request_id: string | null;
  source_address: string | null;
  prev_hash: string;
  hash: string;
}

describe('audit log', () => {
  let harness: AccountStack;
  let admin: { bearer: string };
  let account: Account;
  let other: Account;
  let client: pg.Client;

  beforeAll(async () => {
    harness = await startAccountStack({ internalAuth: true });
    admin = { bearer: harness.internalTokens!.admin };
    account = await harness.newAccount('audited', '2');
    other = await harness.newAccount('audited-other', '1');
    client = new pg.Client({ connectionString: harness.database.url });
    await client.connect();
  }, 120_000);

  afterAll(async () => {
    await client?.end();
    await harness?.stop();
  });

  /** Every entry the account's provisioning key can read, newest first, walked page by page. */
  async function auditOf(who: Account, pageSize = 100): Promise<AuditJson[]> {
    const entries: AuditJson[] = [];
    let cursor: string | null = '';
    for (let pages = 0; cursor !== null; pages++) {
      expect(pages).toBeLessThan(100);
      const page = await harness.call('GET', `/v1/account/audit?limit=${pageSize}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { bearer: who.provisioningKey });
      expect(page.status, page.text).toBe(200);
      expect(page.body.data.length).toBeLessThanOrEqual(pageSize);
      entries.push(...(page.body.data as AuditJson[]));
      cursor = page.body.next_cursor as string | null;
      expect(page.body.has_more).toBe(cursor !== null);
    }
    return entries;
  }

  const verify = () => harness.ctl('audit', 'verify', '--json');

  it('records gatewayctl\'s account creation and top-up, each once, as gatewayctl\'s', async () => {
    const entries = await auditOf(account);
    expect(entries.map((entry) => `${entry.chain}:${entry.action}`).sort()).toEqual(['auth:account.create', 'ledger:credits.top_up']);
    const created = entries.find((entry) => entry.action === 'account.create')!;
    expect(created).toMatchObject({
      actor: { type: 'gatewayctl' }, target: { type: 'account', id: account.accountId }, account_id: account.accountId,
      before: null, after: { name: 'audited', tier: 'free' }, source_address: null,
    });
    const topUp = entries.find((entry) => entry.action === 'credits.top_up')!;
    expect(topUp).toMatchObject({ actor: { type: 'gatewayctl' }, before: { balance: '0' }, after: { balance: '2', credits: '2' } });
  });

  it('records each key change made with the provisioning key: actor, before/after, request id, source address', async () => {
    const before = await auditOf(account);
    const created = await harness.createKey(account, { name: 'audited-key', credit_limit: 5 });
    const patch = await harness.call('PATCH', `/v1/account/keys/${created.id}`, { bearer: account.provisioningKey, body: { credit_limit: '7.5', limit_reset: 'daily' } });
    expect(patch.status, patch.text).toBe(200);
    const disable = await harness.call('PATCH', `/v1/account/keys/${created.id}`, { bearer: account.provisioningKey, body: { disabled: true } });
    expect(disable.status, disable.text).toBe(200);
    const removed = await harness.call('DELETE', `/v1/account/keys/${created.id}`, { bearer: account.provisioningKey });
    expect(removed.status, removed.text).toBe(200);
    // A refused change (the key is gone) writes nothing.
    const again = await harness.call('DELETE', `/v1/account/keys/${created.id}`, { bearer: account.provisioningKey });
    expect(again.status).toBe(404);

    const after = await auditOf(account);
    const added = after.slice(0, after.length - before.length);
    expect(added.map((entry) => entry.action)).toEqual(['api_key.delete', 'api_key.update', 'api_key.update', 'api_key.create']);
    const provisioningKeyId = added[0]!.actor.id;
    expect(provisioningKeyId).toMatch(/^pkey_/);
    for (const entry of added) {
      expect(entry).toMatchObject({ chain: 'auth', actor: { type: 'provisioning_key', id: provisioningKeyId }, target: { type: 'api_key', id: created.id }, account_id: account.accountId });
      expect(entry.source_address).toMatch(/127\.0\.0\.1|::1/);
      // No secret and no hash of one in a record.
      expect(JSON.stringify(entry)).not.toContain(created.key);
      expect(JSON.stringify(entry)).not.toContain('key_hash');
    }
    const [deleted, disabled, limited, createdEntry] = added;
    expect(createdEntry!.before).toBeNull();
    expect(createdEntry!.after).toMatchObject({ name: 'audited-key', credit_limit: '5', disabled: false, limit_reset: null });
    expect(limited!.before).toMatchObject({ credit_limit: '5', limit_reset: null });
    expect(limited!.after).toMatchObject({ credit_limit: '7.5', limit_reset: 'daily' });
    expect(limited!.request_id).toBe(patch.headers.get('x-request-id'));
    expect(disabled!.before.disabled).toBe(false);
    expect(disabled!.after.disabled).toBe(true);
    expect(disabled!.request_id).toBe(disable.headers.get('x-request-id'));
    expect(deleted!.before).toMatchObject({ disabled: true, credit_limit: '7.5' });
    expect(deleted!.after).toBeNull();
    expect(deleted!.request_id).toBe(removed.headers.get('x-request-id'));
  });

  it('records an admin top-up through the edge under the admin token\'s fingerprint, never the token', async () => {
    const answer = await harness.call('POST', `/v1/admin/accounts/${account.accountId}/credits`, { ...admin, body: { amount: '0.5', idempotency_key: `audit-${account.accountId}` } });
    expect(answer.status, answer.text).toBe(200);
    // The same key again adds nothing and records nothing.
    expect((await harness.call('POST', `/v1/admin/accounts/${account.accountId}/credits`, { ...admin, body: { amount: '0.5', idempotency_key: `audit-${account.accountId}` } })).status).toBe(200);
    const topUps = (await auditOf(account)).filter((entry) => entry.action === 'credits.top_up');
    expect(topUps).toHaveLength(2);
    expect(topUps[0]).toMatchObject({
      chain: 'ledger', actor: { type: 'admin_token', id: tokenFingerprint(admin.bearer) }, before: { balance: '2' }, after: { balance: '2.5', credits: '0.5' },
      request_id: answer.headers.get('x-request-id'),
    });
    expect(JSON.stringify(topUps[0])).not.toContain(admin.bearer);
  });

  it('shows an account only its own entries, whatever the query names, and pages without loss', async () => {
    await harness.createKey(other, { name: 'other-key', credit_limit: null });
    const mine = await auditOf(account);
    const theirs = await auditOf(other);
    expect(mine.every((entry) => entry.account_id === account.accountId)).toBe(true);
    expect(theirs.every((entry) => entry.account_id === other.accountId)).toBe(true);
    expect(theirs.map((entry) => entry.action).sort()).toEqual(['account.create', 'api_key.create', 'credits.top_up']);
    // Naming the other account in the query changes nothing: the account comes from the key.
    const probing = await harness.call('GET', `/v1/account/audit?account_id=${account.accountId}`, { bearer: other.provisioningKey });
    expect(probing.status).toBe(200);
    expect(probing.body.data.map((entry: AuditJson) => entry.id).sort()).toEqual(theirs.map((entry) => entry.id).sort());
    // An API key is not a provisioning key; no key is a 401.
    const apiKey = (await harness.createKey(other, { name: 'probe', credit_limit: null })).key;
    expect((await harness.call('GET', '/v1/account/audit', { bearer: apiKey })).status).toBe(401);
    expect((await harness.call('GET', '/v1/account/audit')).status).toBe(401);
    // Pages of one and two merge the two chains into the same newest-first list.
    expect((await auditOf(account, 1)).map((entry) => entry.id)).toEqual(mine.map((entry) => entry.id));
    expect((await auditOf(account, 2)).map((entry) => entry.id)).toEqual(mine.map((entry) => entry.id));
    for (const query of ['limit=0', 'limit=101', 'limit=x', 'cursor=%%%', 'cursor=eyJhdXRoIjoxfQ', `cursor=${'a'.repeat(500)}`]) {
      const refused = await harness.call('GET', `/v1/account/audit?${query}`, { bearer: account.provisioningKey });
      expect(refused.status, `${query}: ${refused.text}`).toBe(400);
      expect(refused.body.error.type).toBe('invalid_request_error');
    }
  });

  it('keeps each chain valid under concurrent changes, and the admin view shows it with its head', async () => {
    const creates = Array.from({ length: 12 }, (_, index) => harness.call('POST', '/v1/account/keys', { bearer: account.provisioningKey, body: { name: `parallel-${index}`, credit_limit: null } }));
    const topUps = Array.from({ length: 8 }, () => harness.call('POST', `/v1/admin/accounts/${other.accountId}/credits`, { ...admin, body: { amount: '0.01' } }));
    for (const answer of await Promise.all([...creates, ...topUps])) expect([200, 201], answer.text).toContain(answer.status);
    const verified = await verify();
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);
    const report = JSON.parse(verified.stdout) as { ok: boolean; chains: Array<{ chain: string; entries_checked: number; first_bad: unknown }> };
    expect(report.ok).toBe(true);
    const auth = await harness.call('GET', '/v1/admin/audit?chain=auth', admin);
    expect(auth.status, auth.text).toBe(200);
    const seqs = (auth.body.data as AuditJson[]).map((entry) => entry.seq);
    expect(seqs).toEqual(seqs.map((_, index) => index + 1));
    expect(auth.body.head.seq).toBe(seqs.length);
    expect(report.chains.find((chain) => chain.chain === 'auth')!.entries_checked).toBe(seqs.length);
    const ledger = await harness.call('GET', `/v1/admin/audit?chain=ledger&account_id=${other.accountId}`, admin);
    expect((ledger.body.data as AuditJson[]).filter((entry) => entry.action === 'credits.top_up')).toHaveLength(9);
    expect((ledger.body.data as AuditJson[]).every((entry) => entry.account_id === other.accountId)).toBe(true);
    // The admin view is the operator's: a provisioning key is refused.
    expect((await harness.call('GET', '/v1/admin/audit?chain=auth', { bearer: account.provisioningKey })).status).toBe(401);
    expect((await harness.call('GET', '/v1/admin/audit?chain=nope', admin)).status).toBe(400);
  });

  it('records a catalog load that changes the catalog in force, and none for a load that changes nothing', async () => {
    const chain = async () => (await harness.call('GET', '/v1/admin/audit?chain=catalog', admin)).body as { data: AuditJson[]; head: { seq: number } };
    const before = await chain();
    // The load at start from GATEWAY_CONFIG is the catalog service's own.
    expect(before.data[0]).toMatchObject({ seq: 1, action: 'catalog.load', actor: { type: 'service', id: 'catalog' }, account_id: null, before: null });
    const same = await harness.ctl('catalog', 'load', exampleConfigPath, '--json');
    expect(same.code, same.stderr).toBe(0);
    expect((await chain()).head.seq).toBe(before.head.seq);
    const directory = mkdtempSync(join(tmpdir(), 'audit-catalog-'));
    const changedPath = join(directory, 'gateway.yaml');
    // The startups' icons are read relative to the file: point them at the example's.
    const document = readFileSync(exampleConfigPath, 'utf8').replaceAll('icon_svg: startups/', `icon_svg: ${join(dirname(exampleConfigPath), 'startups')}/`);
    writeFileSync(changedPath, document.replace('display_name: Acme AI', 'display_name: Acme AI (audited)'));
    const changed = await harness.ctl('catalog', 'load', changedPath, '--json');
    rmSync(directory, { recursive: true, force: true });
    expect(changed.code, changed.stderr).toBe(0);
    const after = await chain();
    expect(after.head.seq).toBe(before.head.seq + 1);
    const entry = after.data[after.data.length - 1]!;
    expect(entry).toMatchObject({ action: 'catalog.load', actor: { type: 'gatewayctl' }, target: { type: 'catalog' }, after: { source: changedPath } });
    expect(entry.before.version).not.toBe(entry.after.version);
    // Catalog entries belong to no account: no account reads them.
    expect((await auditOf(account)).some((item) => item.chain === ('catalog' as never))).toBe(false);
  });

  it('refuses UPDATE and DELETE of an entry; one changed or deleted behind the trigger fails verify, naming it', async () => {
    await expect(client.query('update auth.audit_log set action = $1 where seq = 2', ['api_key.nothing'])).rejects.toThrow(/append-only/);
    await expect(client.query('delete from ledger.audit_log where seq = 1')).rejects.toThrow(/append-only/);

    // Someone with the schema owner's rights drops the guard and edits an entry.
    await client.query('alter table auth.audit_log disable trigger audit_log_no_change');
    const original = (await client.query<{ after_json: string }>('select after_json from auth.audit_log where seq = 3')).rows[0]!.after_json;
    await client.query(`update auth.audit_log set after_json = '{"name":"forged"}' where seq = 3`);
    const altered = await verify();
    expect(altered.code).toBe(1);
    const report = JSON.parse(altered.stdout) as { ok: boolean; chains: Array<{ chain: string; first_bad: { seq: string; reason: string } | null }> };
    expect(report.ok).toBe(false);
    expect(report.chains.find((chain) => chain.chain === 'auth')!.first_bad).toMatchObject({ seq: '3', reason: expect.stringMatching(/altered/) });
    expect(report.chains.find((chain) => chain.chain === 'ledger')!.first_bad).toBeNull();
    const text = await harness.ctl('audit', 'verify');
    expect(text.code).toBe(1);
    expect(text.stdout).toMatch(/auth: BROKEN at seq 3/);
    await client.query('update auth.audit_log set after_json = $1 where seq = 3', [original]);
    expect((await verify()).code).toBe(0);

    // A deleted entry in the middle, and then the newest entry deleted: each is named.
    await client.query('alter table ledger.audit_log disable trigger audit_log_no_change');
    await client.query('delete from ledger.audit_log where seq = 2');
    const gap = JSON.parse((await verify()).stdout) as typeof report;
    expect(gap.chains.find((chain) => chain.chain === 'ledger')!.first_bad).toMatchObject({ seq: '2', reason: expect.stringMatching(/missing/) });
    const authHead = Number((await client.query<{ seq: string }>('select seq from auth.audit_head')).rows[0]!.seq);
    await client.query('delete from auth.audit_log where seq = $1', [authHead]);
    const tail = JSON.parse((await verify()).stdout) as typeof report;
    expect(tail.chains.find((chain) => chain.chain === 'auth')!.first_bad).toMatchObject({ seq: String(authHead), reason: expect.stringMatching(/missing/) });
  });
});
