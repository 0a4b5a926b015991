import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAccountStack, type Account, type AccountStack } from './account-harness.js';

// Issue 35 item 7: every path and query parameter of every route is checked before it reaches SQL or
// gRPC. A NUL (or any control character) in an id, a cursor or a key_id filter, and a cursor whose
// numbers are out of the database's range, were 500s (Postgres refused them after the gateway passed
// them on); each is a 400 invalid_request_error in the route's envelope, and nothing moves.

const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64url');

describe('hostile ids, cursors and filters (400, never 500)', () => {
  let harness: AccountStack;
  let account: Account;
  let apiKey: string;
  let keyId: string;
  let admin: { bearer: string };

  beforeAll(async () => {
    harness = await startAccountStack({ internalAuth: true });
    admin = { bearer: harness.internalTokens!.admin };
    account = await harness.newAccount('hostile-ids', '1');
    const key = await harness.createKey(account, { name: 'hostile', credit_limit: null });
    apiKey = key.key;
    keyId = key.id;
    const chat = await harness.chat(apiKey);
    expect(chat.status, chat.text).toBe(200);
  }, 120_000);

  afterAll(async () => {
    await harness?.stop();
  });

  const prov = () => ({ bearer: account.provisioningKey });

  it('a control character in a path segment or query value is a 400 naming where it was', async () => {
    const cases: Array<[method: string, path: string, options: { bearer: string; body?: unknown }]> = [
      ['GET', '/v1/generation?id=gen%00x', prov()],
      ['GET', '/v1/generation?id=abc%0Adef', { bearer: apiKey }],
      ['GET', '/v1/account/generations?cursor=%00', prov()],
      ['GET', '/v1/account/generations?key_id=k%00', prov()],
      ['GET', '/v1/account/activity?key_id=k%00', prov()],
      ['GET', `/v1/account/keys/${keyId}%00`, prov()],
      ['PATCH', `/v1/account/keys/${keyId}%00`, { ...prov(), body: { name: 'x' } }],
      ['DELETE', `/v1/account/keys/${keyId}%00`, prov()],
      ['GET', '/v1/account/keys?cursor=%7F', prov()],
      ['GET', '/v1/admin/accounts?cursor=%00', admin],
      ['POST', `/v1/admin/accounts/${account.accountId}%00/credits`, { ...admin, body: { amount: '1' } }],
      ['GET', '/v1/models/chat%00small', { bearer: apiKey }],
      ['GET', '/v1/images/files/img%00x', { bearer: apiKey }],
      ['GET', '/v1/startups/acme%00/icon.svg', { bearer: apiKey }],
    ];
    for (const [method, path, options] of cases) {
      const answer = await harness.call(method, path, options);
      expect(answer.status, `${method} ${path}: ${answer.text}`).toBe(400);
      expect(answer.body.error.type, `${method} ${path}`).toBe('invalid_request_error');
      expect(answer.body.error.message, `${method} ${path}`).toMatch(/control character/);
    }
    // Nothing moved: the account still has its balance less the one chat, and its key still works.
    const again = await harness.chat(apiKey);
    expect(again.status, again.text).toBe(200);
  });

  it('a key name with a control character is a 400 on create and rename', async () => {
    const created = await harness.call('POST', '/v1/account/keys', { ...prov(), body: { name: 'a\u0000b', credit_limit: null } });
    expect(created.status, created.text).toBe(400);
    expect(created.body.error.param).toBe('body.name');
    const renamed = await harness.call('PATCH', `/v1/account/keys/${keyId}`, { ...prov(), body: { name: 'line\nbreak' } });
    expect(renamed.status, renamed.text).toBe(400);
    expect(renamed.body.error.param).toBe('body.name');
  });

  it('a cursor the service made in form but out of range is a 400, not a database error', async () => {
    const cursors: Array<[path: string, cursor: string, options: { bearer: string }]> = [
      // Generation cursors: microseconds past what timestamptz holds, or a request id with a NUL inside.
      ['/v1/account/generations', b64('g1:999999999999999999:req_x'), prov()],
      ['/v1/account/generations', b64('g1:-999999999999999999:req_x'), prov()],
      ['/v1/account/generations', b64('g1:1:req\u0000x'), prov()],
      // Key list cursor: a sequence past bigint.
      ['/v1/account/keys', b64('v1:9999999999999999999'), prov()],
      // Account cursor: an id with a NUL inside.
      ['/v1/admin/accounts', b64('a1:acc\u0000x'), admin],
    ];
    for (const [path, cursor, options] of cursors) {
      const answer = await harness.call('GET', `${path}?cursor=${cursor}`, options);
      expect(answer.status, `${path} ${cursor}: ${answer.text}`).toBe(400);
      expect(answer.body.error.type).toBe('invalid_request_error');
    }
  });
});
