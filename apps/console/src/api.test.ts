import { webcrypto } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { adminApi, api, jobsApi, newIdempotencyKey } from './api.js';
import { adminToken, apiKey, identitySession, mayDo, provisioningKey } from './session.js';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('idempotency keys for top-ups', () => {
  afterEach(() => { vi.unstubAllGlobals(); });

  it('are random UUIDs, a new one per call', () => {
    const first = newIdempotencyKey();
    expect(first).toMatch(UUID_V4);
    expect(newIdempotencyKey()).not.toBe(first);
  });

  it('take the same shape from getRandomValues where randomUUID is missing (a page not in a secure context)', () => {
    vi.stubGlobal('crypto', { getRandomValues: <T extends Uint8Array>(array: T) => webcrypto.getRandomValues(array) });
    const keys = new Set(Array.from({ length: 50 }, () => newIdempotencyKey()));
    expect(keys.size).toBe(50);
    for (const key of keys) expect(key).toMatch(UUID_V4);
  });
});

describe('the API calls of the budgets, audit, files, batches, webhooks and members views, against a real HTTP server', () => {
  interface Seen { method: string; url: string; authorization?: string; csrf?: string; body: string }
  const seen: Seen[] = [];
  /** What the server answers for a request (status and JSON body), by "METHOD path". */
  const answers = new Map<string, { status: number; body: unknown }>();
  const LARGE_BYTES = 1024 * 1024;
  let server: Server;
  let base = '';
  const realFetch = globalThis.fetch;

  beforeAll(async () => {
    server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        seen.push({
          method: request.method!, url: request.url!, authorization: request.headers.authorization,
          csrf: request.headers['x-csrf-token'] as string | undefined, body: Buffer.concat(chunks).toString(),
        });
        const path = request.url!.replace(/\?.*$/, '');
        if (path === '/v1/files/file-large/content') {
          response.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(LARGE_BYTES) });
          response.end(Buffer.alloc(LARGE_BYTES, 'x'));
          return;
        }
        if (path === '/v1/files/file-small/content') {
          response.writeHead(200, { 'content-type': 'application/octet-stream' });
          response.end('{"custom_id":"a"}\n');
          return;
        }
        const answer = answers.get(`${request.method} ${path}`) ?? { status: 404, body: { error: { message: 'No such file.' } } };
        response.writeHead(answer.status, { 'content-type': 'application/json' });
        response.end(JSON.stringify(answer.body));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));
  // The console's paths are relative to its origin: here, the test server's.
  beforeEach(() => {
    seen.length = 0;
    answers.clear();
    vi.stubGlobal('fetch', (input: string, init?: RequestInit) => realFetch(new URL(input, base), init));
  });
  afterEach(() => {
    vi.unstubAllGlobals();
    provisioningKey.signOut();
    apiKey.signOut();
    adminToken.signOut();
  });

  it('set, list and delete budgets of the account and of a key with the provisioning key, the key id kept inside its path segment', async () => {
    provisioningKey.signIn('gw-prov-test', false);
    answers.set('PUT /v1/account/budgets/account', { status: 200, body: { scope: 'account', limit: '5' } });
    answers.set('PUT /v1/account/budgets/keys/key%2F..%2F1', { status: 200, body: { scope: 'key', limit: '1' } });
    answers.set('DELETE /v1/account/budgets/keys/key_1', { status: 200, body: { deleted: true } });
    answers.set('GET /v1/account/budgets', { status: 200, body: { object: 'list', data: [], alerts: [] } });
    const body = { period: 'daily' as const, limit: '5', thresholds: [50, 100], hard_stop: true };
    expect(await api.setBudget(undefined, body)).toEqual({ scope: 'account', limit: '5' });
    expect(await api.setBudget('key/../1', { ...body, limit: '1' })).toEqual({ scope: 'key', limit: '1' });
    expect(await api.deleteBudget('key_1')).toEqual({ deleted: true });
    expect(await api.budgets()).toEqual({ object: 'list', data: [], alerts: [] });
    expect(seen.map(({ method, url }) => `${method} ${url}`)).toEqual([
      'PUT /v1/account/budgets/account', 'PUT /v1/account/budgets/keys/key%2F..%2F1', 'DELETE /v1/account/budgets/keys/key_1', 'GET /v1/account/budgets',
    ]);
    expect(JSON.parse(seen[0]!.body)).toEqual(body);
    expect(seen.every((request) => request.authorization === 'Bearer gw-prov-test' && request.csrf === undefined)).toBe(true);
  });

  it('page the account audit log by cursor and the operator audit log by chain, after_seq and account', async () => {
    provisioningKey.signIn('gw-prov-test', false);
    adminToken.signIn('admin-secret', false);
    answers.set('GET /v1/account/audit', { status: 200, body: { data: [], has_more: false, next_cursor: null } });
    answers.set('GET /v1/admin/audit', { status: 200, body: { chain: 'ledger', data: [], head: { seq: 0, hash: '' }, next_after_seq: null } });
    await api.audit(25);
    await api.audit(25, 'eyJhdXRoIjoiIn0');
    await adminApi.audit('ledger', 50);
    await adminApi.audit('catalog', 10, 40, 'acc 1');
    expect(seen.map(({ url, authorization }) => `${url} ${authorization}`)).toEqual([
      '/v1/account/audit?limit=25 Bearer gw-prov-test',
      '/v1/account/audit?limit=25&cursor=eyJhdXRoIjoiIn0 Bearer gw-prov-test',
      '/v1/admin/audit?chain=ledger&limit=50 Bearer admin-secret',
      '/v1/admin/audit?chain=catalog&limit=10&after_seq=40&account_id=acc+1 Bearer admin-secret',
    ]);
  });

  it('list files and batches and cancel a batch with the API key, never the provisioning key', async () => {
    provisioningKey.signIn('gw-prov-test', false);
    apiKey.signIn('gw-api-test', false);
    answers.set('GET /v1/files', { status: 200, body: { data: [], has_more: false } });
    answers.set('GET /v1/batches', { status: 200, body: { data: [], has_more: true } });
    answers.set('POST /v1/batches/batch_1/cancel', { status: 200, body: { id: 'batch_1', status: 'cancelling' } });
    await jobsApi.files(20);
    await jobsApi.files(20, 'file-abc');
    expect(await jobsApi.batches(5, 'batch_0')).toEqual({ data: [], has_more: true });
    expect(await jobsApi.cancelBatch('batch_1')).toEqual({ id: 'batch_1', status: 'cancelling' });
    expect(seen.map(({ method, url }) => `${method} ${url}`)).toEqual([
      'GET /v1/files?limit=20', 'GET /v1/files?limit=20&after=file-abc', 'GET /v1/batches?limit=5&after=batch_0', 'POST /v1/batches/batch_1/cancel',
    ]);
    expect(seen.every((request) => request.authorization === 'Bearer gw-api-test')).toBe(true);
  });

  it('read at most the asked bytes of a file, say when it was cut, and show the API\'s refusal in words', async () => {
    apiKey.signIn('gw-api-test', false);
    const large = await jobsApi.fileContent('file-large', 1000);
    expect(large).toEqual({ text: 'x'.repeat(1000), truncated: true, bytes: LARGE_BYTES });
    expect(await jobsApi.fileContent('file-small', 1000)).toEqual({ text: '{"custom_id":"a"}\n', truncated: false, bytes: 18 });
    await expect(jobsApi.fileContent('file-gone', 1000)).rejects.toThrow('No such file.');
    expect(seen.map(({ url }) => url)).toEqual(['/v1/files/file-large/content', '/v1/files/file-small/content', '/v1/files/file-gone/content']);
  });

  it('list, create, enable and delete webhook endpoints, page their deliveries, redeliver a dead one and rotate a secret, ids kept inside their path segments', async () => {
    provisioningKey.signIn('gw-prov-test', false);
    const endpoint = { id: 'whe_1', url: 'https://hooks.example.com/x', event_types: ['credits.topped_up'], enabled: true, created_at: 1, updated_at: 1 };
    answers.set('GET /v1/account/webhooks', { status: 200, body: { object: 'list', data: [endpoint] } });
    answers.set('POST /v1/account/webhooks', { status: 201, body: { ...endpoint, secret: 'whsec_abc' } });
    answers.set('PATCH /v1/account/webhooks/whe_1', { status: 200, body: { ...endpoint, enabled: false } });
    answers.set('DELETE /v1/account/webhooks/whe%2F..%2F1', { status: 200, body: { id: 'whe/../1', deleted: true } });
    answers.set('GET /v1/account/webhooks/whe_1/deliveries', { status: 200, body: { object: 'list', data: [], has_more: false, next_cursor: null } });
    answers.set('POST /v1/account/webhooks/whe_1/deliveries/whd%3F1/redeliver', { status: 202, body: { id: 'whd?1', state: 'pending' } });
    answers.set('POST /v1/account/webhooks/whe%2F1/rotate-secret', { status: 200, body: { ...endpoint, secret: 'whsec_new', previous_secret_expires_at: 2 } });
    expect((await api.webhooks()).data).toEqual([endpoint]);
    expect((await api.createWebhook({ url: endpoint.url, event_types: ['credits.topped_up'] })).secret).toBe('whsec_abc');
    expect((await api.updateWebhook('whe_1', { enabled: false })).enabled).toBe(false);
    expect(await api.deleteWebhook('whe/../1')).toEqual({ id: 'whe/../1', deleted: true });
    await api.webhookDeliveries('whe_1', 20);
    await api.webhookDeliveries('whe_1', 20, 'cursor/2');
    expect(await api.redeliverWebhook('whe_1', 'whd?1')).toEqual({ id: 'whd?1', state: 'pending' });
    expect(await api.rotateWebhookSecret('whe/1')).toMatchObject({ secret: 'whsec_new', previous_secret_expires_at: 2 });
    expect(seen.map(({ method, url }) => `${method} ${url}`)).toEqual([
      'GET /v1/account/webhooks', 'POST /v1/account/webhooks', 'PATCH /v1/account/webhooks/whe_1', 'DELETE /v1/account/webhooks/whe%2F..%2F1',
      'GET /v1/account/webhooks/whe_1/deliveries?limit=20', 'GET /v1/account/webhooks/whe_1/deliveries?limit=20&cursor=cursor%2F2',
      'POST /v1/account/webhooks/whe_1/deliveries/whd%3F1/redeliver', 'POST /v1/account/webhooks/whe%2F1/rotate-secret',
    ]);
    expect(JSON.parse(seen[1]!.body)).toEqual({ url: endpoint.url, event_types: ['credits.topped_up'] });
    expect(JSON.parse(seen[2]!.body)).toEqual({ enabled: false });
    expect(seen[6]!.body).toBe('');
    expect(seen.every((request) => request.authorization === 'Bearer gw-prov-test')).toBe(true);
  });

  it('refuse a redelivery of a delivery that is not dead in the route\'s words', async () => {
    provisioningKey.signIn('gw-prov-test', false);
    answers.set('POST /v1/account/webhooks/whe_1/deliveries/whd_1/redeliver', {
      status: 400, body: { error: { type: 'invalid_request_error', code: 'delivery_not_dead', message: 'Only a dead-lettered delivery is redelivered.' } },
    });
    await expect(api.redeliverWebhook('whe_1', 'whd_1')).rejects.toThrow('Only a dead-lettered delivery is redelivered.');
  });

  it('list, invite, change and remove members; the auth service\'s refusals (last owner, owner granted by an admin) come back in its words', async () => {
    provisioningKey.signIn('gw-prov-test', false);
    const member = { id: 'mem_1', role: 'admin', email: 'dana@example.com', issuer: null, subject: null, status: 'invited', created_at: 5, updated_at: 5, joined_at: null };
    answers.set('GET /v1/account/members', { status: 200, body: { object: 'list', data: [member] } });
    answers.set('POST /v1/account/members', { status: 201, body: member });
    answers.set('PATCH /v1/account/members/mem_1', { status: 200, body: { ...member, role: 'viewer', sessions_revoked: 2 } });
    answers.set('DELETE /v1/account/members/mem%2F2', { status: 200, body: { id: 'mem/2', deleted: true, sessions_revoked: 0 } });
    answers.set('PATCH /v1/account/members/mem_owner', {
      status: 409, body: { error: { type: 'invalid_request_error', code: 'last_owner', message: 'This is the account\'s last owner: make another member owner first.' } },
    });
    expect((await api.members()).data).toEqual([member]);
    expect(await api.inviteMember('dana@example.com', 'admin')).toEqual(member);
    expect(await api.updateMember('mem_1', 'viewer')).toMatchObject({ role: 'viewer', sessions_revoked: 2 });
    expect(await api.removeMember('mem/2')).toMatchObject({ deleted: true, sessions_revoked: 0 });
    await expect(api.updateMember('mem_owner', 'viewer')).rejects.toThrow('This is the account\'s last owner: make another member owner first.');
    expect(seen.map(({ method, url }) => `${method} ${url}`)).toEqual([
      'GET /v1/account/members', 'POST /v1/account/members', 'PATCH /v1/account/members/mem_1', 'DELETE /v1/account/members/mem%2F2', 'PATCH /v1/account/members/mem_owner',
    ]);
    expect(JSON.parse(seen[1]!.body)).toEqual({ email: 'dana@example.com', role: 'admin' });
    expect(JSON.parse(seen[2]!.body)).toEqual({ role: 'viewer' });

    // A signed-in admin: no bearer, the CSRF token on the write, and the owner role refused in the auth service's words.
    provisioningKey.signOut();
    answers.set('GET /v1/auth/session', { status: 200, body: { account_id: 'acc_1', role: 'admin', display_name: 'Ad', actions: ['members.read', 'members.write'], csrf_token: 'csrf-2', expires_at: 0 } });
    answers.set('POST /v1/account/members', { status: 403, body: { error: { type: 'permission_error', code: 'role_forbidden', message: 'Only an owner grants the owner role.' } } });
    await identitySession.load();
    expect(mayDo('members.write')).toBe(true);
    expect(mayDo('webhooks.read')).toBe(false);
    await expect(api.inviteMember('eve@example.com', 'owner')).rejects.toThrow('Only an owner grants the owner role.');
    expect(seen.at(-1)).toMatchObject({ method: 'POST', url: '/v1/account/members', authorization: undefined, csrf: 'csrf-2' });
    await identitySession.signOut();
  });

  it('a signed-in person writes with the CSRF token and no bearer, sees the role table\'s actions, and gets a 403 refusal in its own words', async () => {
    answers.set('GET /v1/auth/session', { status: 200, body: { account_id: 'acc_1', role: 'viewer', display_name: 'Vi', actions: ['budgets.read', 'keys.read'], csrf_token: 'csrf-1', expires_at: 0 } });
    answers.set('PUT /v1/account/budgets/account', { status: 403, body: { error: { type: 'permission_error', code: 'role_forbidden', message: 'The viewer role may not take budgets.write.' } } });
    answers.set('GET /v1/account/budgets', { status: 200, body: { data: [], alerts: [] } });
    await identitySession.load();
    expect(mayDo('budgets.read')).toBe(true);
    expect(mayDo('budgets.write')).toBe(false);
    expect(mayDo('audit.read')).toBe(false);
    await api.budgets();
    await expect(api.setBudget(undefined, { period: 'monthly', limit: '1', thresholds: [], hard_stop: false })).rejects.toThrow('The viewer role may not take budgets.write.');
    const [, read, write] = seen;
    expect(read).toMatchObject({ method: 'GET', authorization: undefined, csrf: undefined });
    expect(write).toMatchObject({ method: 'PUT', authorization: undefined, csrf: 'csrf-1' });
    await identitySession.signOut();
  });
});
