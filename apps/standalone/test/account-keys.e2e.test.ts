import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthServiceClient, AuthServiceService, ErrorReason, LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { createClient, formatCredits, GatewayError, GrpcStatus, parseCredits } from '@gateway/platform';
import { eventually } from '@gateway/testing';
import { decimalField, exampleTokenCostPico, startAccountStack, type Account, type AccountStack, type KeyJson } from './account-harness.js';

// The key API of spec §4.15/§4.16 through the real edge, Auth and Ledger: CRUD, pagination, object-level
// authorisation at the edge and on gRPC, the key credit limit at admission, activity, and concurrent writes.

describe('account keys over HTTP', () => {
  let harness: AccountStack;
  let owner: Account;
  let intruder: Account;

  const balance = async (account: Account) => {
    const answer = await harness.call('GET', '/v1/account/balance', { bearer: account.provisioningKey });
    expect(answer.status).toBe(200);
    return answer.body.balance as string;
  };
  const getKey = (account: Account, keyId: string) => harness.call('GET', `/v1/account/keys/${keyId}`, { bearer: account.provisioningKey });
  const patchKey = (account: Account, keyId: string, body: unknown) =>
    harness.call('PATCH', `/v1/account/keys/${keyId}`, { bearer: account.provisioningKey, body });
  const deleteKey = (account: Account, keyId: string) => harness.call('DELETE', `/v1/account/keys/${keyId}`, { bearer: account.provisioningKey });
  const listKeys = (account: Account, query: string) => harness.call('GET', `/v1/account/keys${query}`, { bearer: account.provisioningKey });

  beforeAll(async () => {
    harness = await startAccountStack();
    [owner, intruder] = await Promise.all([harness.newAccount('owner', '10'), harness.newAccount('intruder', '10')]);
  }, 120_000);

  afterAll(async () => {
    await harness?.stop();
  });

  it('creates a key (201, plaintext once), and the key works at once', async () => {
    const before = Math.floor(Date.now() / 1000);
    const created = await harness.createKey(owner, { name: 'ci', credit_limit: 5.5, default_routing_strategy: 'latency' });
    expect(created).toMatchObject({ name: 'ci', disabled: false, credit_limit: 5.5, usage: 0, limit_remaining: 5.5, default_routing_strategy: 'latency' });
    expect(created.key).toMatch(/^gw-api-/);
    expect(created.id).toMatch(/^key_/);
    // The label is a recognisable prefix, never the secret.
    const secret = created.key.split('-')[2]!;
    expect(created.key.startsWith(created.label.split('...')[0]!)).toBe(true);
    expect(created.label).not.toContain(secret);
    expect(created.created_at).toBeGreaterThanOrEqual(before - 1);
    expect(created.created_at).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000));
    expect(Number.isInteger(created.created_at)).toBe(true);

    const chat = await harness.chat(created.key);
    expect(chat.status, chat.text).toBe(200);
    expect(chat.headers.get('x-gateway-routing-strategy')).toBe('latency');

    const fetched = await getKey(owner, created.id);
    expect(fetched.status).toBe(200);
    expect(fetched.body).not.toHaveProperty('key');
    // The chat's charge may or may not be settled yet: whatever the key has spent, all of it is today's,
    // this week's and this month's (the windows never show more or less than the lifetime usage here).
    for (const window of ['usage_daily', 'usage_weekly', 'usage_monthly']) expect(fetched.body[window], window).toBe(fetched.body.usage);
    const settled = { usage: 0, limit_remaining: 0, usage_daily: 0, usage_weekly: 0, usage_monthly: 0 };
    expect({ ...fetched.body, ...settled }).toEqual({ ...created, key: undefined, ...settled });
    // The plaintext is shown once: no other answer carries it.
    expect(fetched.text).not.toContain(secret);
    expect((await listKeys(owner, '')).text).not.toContain(secret);
  });

  it('refuses missing or invalid fields with 400 naming the field', async () => {
    const cases: Array<[unknown, string]> = [
      [{ credit_limit: 1 }, 'body.name'],
      [{ name: 'x' }, 'body.credit_limit'],
      [{ name: 'x', credit_limit: -1 }, 'body.credit_limit'],
      [{ name: 'x', credit_limit: 'lots' }, 'body.credit_limit'],
      [{ name: 'x', credit_limit: 1, default_routing_strategy: 'cheapest' }, 'body.default_routing_strategy'],
      [{ name: '', credit_limit: 1 }, 'body.name'],
    ];
    for (const [body, param] of cases) {
      const answer = await harness.call('POST', '/v1/account/keys', { bearer: owner.provisioningKey, body });
      expect(answer.status, JSON.stringify(body)).toBe(400);
      expect(answer.body.error.type).toBe('invalid_request_error');
      expect(answer.body.error.param).toBe(param);
      expect(answer.body.error.message).toMatch(new RegExp(`^${param.replaceAll('.', '\\.')}: `));
    }
    const notJson = await harness.call('POST', '/v1/account/keys', { bearer: owner.provisioningKey, body: '{"name":' });
    expect(notJson.status).toBe(400);
    expect(notJson.body.error.type).toBe('invalid_request_error');

    const key = await harness.createKey(owner, { name: 'to-patch', credit_limit: null });
    expect(key.credit_limit).toBeNull();
    const badPatch = await patchKey(owner, key.id, { default_routing_strategy: 'fastest' });
    expect(badPatch.status).toBe(400);
    expect(badPatch.body.error.param).toBe('body.default_routing_strategy');
    const badDisabled = await patchKey(owner, key.id, { disabled: 'yes' });
    expect(badDisabled.body.error.param).toBe('body.disabled');
    // The failed updates changed nothing.
    expect((await getKey(owner, key.id)).body).toMatchObject({ default_routing_strategy: null, disabled: false });
  });

  it('updates name, disabled, credit_limit and default_routing_strategy; disabling stops the key at once', async () => {
    const key = await harness.createKey(owner, { name: 'before', credit_limit: 1 });
    expect((await harness.chat(key.key)).status).toBe(200);

    const renamed = await patchKey(owner, key.id, { name: 'after', credit_limit: '2.000000000001', default_routing_strategy: 'reliability' });
    expect(renamed.status, renamed.text).toBe(200);
    expect(renamed.body).toMatchObject({ id: key.id, name: 'after', default_routing_strategy: 'reliability', disabled: false });
    // Every digit of the limit survives the JSON number.
    expect(renamed.text).toContain('"credit_limit":2.000000000001');
    expect(renamed.body.updated_at).toBeGreaterThanOrEqual(key.updated_at);

    const disabled = await patchKey(owner, key.id, { disabled: true });
    expect(disabled.body.disabled).toBe(true);
    const refused = await harness.chat(key.key);
    expect(refused.status).toBe(401);
    expect(refused.body.error.type).toBe('invalid_api_key');
    // Still visible to its owner, with include_disabled.
    expect((await getKey(owner, key.id)).body.disabled).toBe(true);
    expect((await listKeys(owner, '')).body.data.map((entry: KeyJson) => entry.id)).not.toContain(key.id);
    expect((await listKeys(owner, '?include_disabled=true')).body.data.map((entry: KeyJson) => entry.id)).toContain(key.id);

    const enabled = await patchKey(owner, key.id, { disabled: false, credit_limit: null, default_routing_strategy: null });
    expect(enabled.body).toMatchObject({ disabled: false, credit_limit: null, limit_remaining: null, default_routing_strategy: null });
    const again = await harness.chat(key.key);
    expect(again.status).toBe(200);
    expect(again.headers.get('x-gateway-routing-strategy')).toBe('balanced');
  });

  it('deletes permanently: {deleted:true}, then 404 everywhere and 401 on inference', async () => {
    const key = await harness.createKey(owner, { name: 'doomed', credit_limit: 1 });
    expect((await harness.chat(key.key)).status).toBe(200);
    const deleted = await deleteKey(owner, key.id);
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ deleted: true });
    for (const answer of [await getKey(owner, key.id), await patchKey(owner, key.id, { name: 'zombie' }), await deleteKey(owner, key.id)]) {
      expect(answer.status).toBe(404);
      expect(answer.body.error.type).toBe('not_found_error');
    }
    expect((await harness.chat(key.key)).status).toBe(401);
    expect((await listKeys(owner, '?include_disabled=true')).body.data.map((entry: KeyJson) => entry.id)).not.toContain(key.id);
  });

  it('pages the list newest first with a cursor or an offset', async () => {
    const account = await harness.newAccount('pager', '1');
    const created: string[] = [];
    for (let index = 0; index < 7; index++) created.push((await harness.createKey(account, { name: `page-${index}`, credit_limit: index })).id);
    const newestFirst = [...created].reverse();

    const seen: string[] = [];
    let cursor: string | null = '';
    let pages = 0;
    while (cursor !== null) {
      const answer = await listKeys(account, `?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      expect(answer.status, answer.text).toBe(200);
      expect(answer.body.object).toBe('list');
      expect(answer.body.data.length).toBeLessThanOrEqual(3);
      expect(answer.body.has_more).toBe(answer.body.next_cursor !== null);
      seen.push(...answer.body.data.map((entry: KeyJson) => entry.id));
      cursor = answer.body.next_cursor;
      pages++;
    }
    expect(pages).toBe(3);
    expect(seen).toEqual(newestFirst);

    for (const [offset, limit] of [[0, 3], [3, 3], [2, 4], [6, 10], [7, 1], [100, 5]] as const) {
      const answer = await listKeys(account, `?offset=${offset}&limit=${limit}`);
      expect(answer.status).toBe(200);
      expect(answer.body.data.map((entry: KeyJson) => entry.id), `offset ${offset} limit ${limit}`).toEqual(newestFirst.slice(offset, offset + limit));
      expect(answer.body.has_more).toBe(offset + limit < newestFirst.length);
      if (answer.body.next_cursor) {
        // The cursor after an offset page continues exactly where it ended.
        const next = await listKeys(account, `?limit=${limit}&cursor=${encodeURIComponent(answer.body.next_cursor)}`);
        expect(next.body.data.map((entry: KeyJson) => entry.id)).toEqual(newestFirst.slice(offset + limit, offset + 2 * limit));
      }
    }
    const everything = await listKeys(account, '');
    expect(everything.body.data.map((entry: KeyJson) => entry.id)).toEqual(newestFirst);
    expect(everything.body.data.map((entry: KeyJson) => entry.credit_limit)).toEqual([6, 5, 4, 3, 2, 1, 0]);

    for (const query of ['?limit=0', '?limit=101', '?offset=-1', '?offset=1&cursor=abc', '?cursor=not-a-cursor', '?include_disabled=maybe']) {
      const answer = await listKeys(account, query);
      expect(answer.status, query).toBe(400);
      expect(answer.body.error.type).toBe('invalid_request_error');
    }
  });

  it("answers 404 for another account's key on every {key_id} route, at the edge and on gRPC, and leaves it untouched", async () => {
    const key = await harness.createKey(owner, { name: 'owner-private-name', credit_limit: 3 });
    const paid = await harness.chat(key.key);
    expect(paid.status).toBe(200);
    // The key's usage: this one answer at chat-small's catalog prices.
    const paidCost = exampleTokenCostPico('chat-small', {
      input: paid.body.usage.prompt_tokens, cached: paid.body.usage.prompt_tokens_details?.cached_tokens ?? 0, output: paid.body.usage.completion_tokens,
    });
    expect(paidCost).toBeGreaterThan(0n);
    const unknown = await getKey(intruder, 'key_doesnotexist');
    expect(unknown.status).toBe(404);

    const attempts = [
      await getKey(intruder, key.id),
      await patchKey(intruder, key.id, { name: 'stolen' }),
      await patchKey(intruder, key.id, { disabled: true }),
      await patchKey(intruder, key.id, { credit_limit: 1000 }),
      await deleteKey(intruder, key.id),
    ];
    for (const answer of attempts) {
      expect(answer.status).toBe(404);
      expect(answer.body.error.type).toBe('not_found_error');
      // Indistinguishable from a key that does not exist.
      expect(answer.body.error.message).toBe(unknown.body.error.message);
      expect(answer.text).not.toContain('owner-private-name');
      expect(answer.text).not.toContain(owner.accountId);
    }
    const intruderList = await listKeys(intruder, '?include_disabled=true');
    expect(intruderList.body.data.map((entry: KeyJson) => entry.id)).not.toContain(key.id);
    // The activity filter is scoped by account too: another account's key id matches nothing.
    const foreignActivity = await harness.call('GET', `/v1/account/activity?days=1&key_id=${key.id}`, { bearer: intruder.provisioningKey });
    expect(foreignActivity.status).toBe(200);
    expect(foreignActivity.body.data).toEqual([]);

    const auth = createClient(AuthServiceClient, AuthServiceService, harness.stack.addresses.auth);
    const ledger = createClient(LedgerServiceClient, LedgerServiceService, harness.stack.addresses.ledger);
    try {
      const grpcAttempts: Array<() => Promise<unknown>> = [
        () => auth.getApiKey({ accountId: intruder.accountId, keyId: key.id }),
        () => auth.updateApiKey({ accountId: intruder.accountId, keyId: key.id, disabled: true, clearCreditLimit: false }),
        () => auth.updateApiKey({ accountId: intruder.accountId, keyId: key.id, name: 'stolen', clearCreditLimit: true }),
        () => auth.deleteApiKey({ accountId: intruder.accountId, keyId: key.id }),
      ];
      for (const attempt of grpcAttempts) {
        const error = await attempt().then(
          () => undefined,
          (caught: unknown) => caught,
        );
        expect(error).toBeInstanceOf(GatewayError);
        expect((error as GatewayError).status).toBe(GrpcStatus.NOT_FOUND);
        expect((error as GatewayError).reason).toBe(ErrorReason.ERROR_REASON_NOT_FOUND);
      }
      // The ledger answers usage per account: the owner's spend is not readable through another account.
      await eventually(async () => expect(parseCredits(decimalField((await getKey(owner, key.id)).text, 'usage'))).toBe(paidCost), 10_000);
      const foreignUsage = await ledger.getKeyUsage({ accountId: intruder.accountId, keyIds: [key.id] });
      expect(foreignUsage.usage).toEqual([{ keyId: key.id, credits: '0', creditsDaily: '0', creditsWeekly: '0', creditsMonthly: '0' }]);
    } finally {
      auth.close();
      ledger.close();
    }

    const after = await getKey(owner, key.id);
    expect(after.body).toMatchObject({ name: 'owner-private-name', disabled: false, credit_limit: 3 });
    expect((await harness.chat(key.key)).status).toBe(200);
  });

  it('refuses admission with 402 once usage plus the reservation would exceed credit_limit; raising it works at once', async () => {
    const account = await harness.newAccount('limited', '10');
    // 0.05 is exactly one reservation: the first request fits, and after it spent anything the next does not.
    const key = await harness.createKey(account, { name: 'capped', credit_limit: 0.05 });
    expect((await harness.chat(key.key)).status).toBe(200);
    const settled = await eventually(async () => {
      const record = await getKey(account, key.id);
      expect(record.body.usage).toBeGreaterThan(0);
      return record.text;
    }, 10_000);
    // usage is exactly what the account was charged, and the remainder exactly the limit minus it.
    const usage = decimalField(settled, 'usage');
    expect(formatCredits(parseCredits('10') - parseCredits(await balance(account)))).toBe(usage);
    expect(decimalField(settled, 'limit_remaining')).toBe(formatCredits(parseCredits('0.05') - parseCredits(usage)));

    const refused = await harness.chat(key.key);
    expect(refused.status, refused.text).toBe(402);
    expect(refused.body.error.type).toBe('insufficient_quota');
    expect(refused.body.error.code).toBe('key_limit_exceeded');

    const tooSmall = await harness.createKey(account, { name: 'tiny', credit_limit: 0.04 });
    expect((await harness.chat(tooSmall.key)).status).toBe(402);

    // The edge's cached verification carried the old limit; the update's KeysChanged drops it.
    expect((await patchKey(account, key.id, { credit_limit: 1 })).status).toBe(200);
    expect((await harness.chat(key.key)).status).toBe(200);
  });

  it('reports activity per day and model from the charges, filtered by key, days bounded to 1..30', async () => {
    const account = await harness.newAccount('active', '10');
    const first = await harness.createKey(account, { name: 'first', credit_limit: null });
    const second = await harness.createKey(account, { name: 'second', credit_limit: null });
    for (const apiKey of [first.key, first.key, second.key]) expect((await harness.chat(apiKey)).status).toBe(200);
    await eventually(async () => expect(await balance(account)).not.toBe('10'), 10_000);

    const activity = await eventually(async () => {
      const answer = await harness.call('GET', '/v1/account/activity?days=7', { bearer: account.provisioningKey });
      expect(answer.status).toBe(200);
      expect(answer.body.data[0]?.requests).toBe(3);
      return answer.body;
    }, 10_000);
    expect(activity).toMatchObject({ object: 'list', days: 7, key_id: null });
    expect(activity.data).toHaveLength(1);
    const [entry] = activity.data;
    expect(entry.date).toBe(new Date().toISOString().slice(0, 10));
    expect(entry.model).toBe('acme/chat-small');
    expect(entry.prompt_tokens).toBeGreaterThan(0);
    expect(entry.completion_tokens).toBeGreaterThan(0);
    expect(entry.total_tokens).toBe(entry.prompt_tokens + entry.completion_tokens);
    // Exactly what the balance lost.
    expect(formatCredits(parseCredits('10') - parseCredits(entry.credits))).toBe(await balance(account));

    const filtered = await harness.call('GET', `/v1/account/activity?days=1&key_id=${second.id}`, { bearer: account.provisioningKey });
    expect(filtered.body.key_id).toBe(second.id);
    expect(filtered.body.data.map((row: { requests: number }) => row.requests)).toEqual([1]);
    expect(filtered.body.data[0].credits).toBe(decimalField((await getKey(account, second.id)).text, 'usage'));

    expect((await harness.call('GET', '/v1/account/activity', { bearer: account.provisioningKey })).body.days).toBe(30);
    for (const days of ['0', '31', 'abc', '-3', '2.5']) {
      const answer = await harness.call('GET', `/v1/account/activity?days=${days}`, { bearer: account.provisioningKey });
      expect(answer.status, days).toBe(400);
      expect(answer.body.error.type).toBe('invalid_request_error');
      expect(answer.body.error.param).toBe('query.days');
    }
  });

  it('leaves a consistent record under concurrent PATCH and DELETE of one key', async () => {
    const account = await harness.newAccount('racer', '1');
    for (let round = 0; round < 10; round++) {
      // Updates of different fields at once: every one lands (no lost update).
      const key = await harness.createKey(account, { name: `race-${round}`, credit_limit: 1 });
      const updates = await Promise.all([
        patchKey(account, key.id, { name: `renamed-${round}` }),
        patchKey(account, key.id, { credit_limit: round + 2 }),
        patchKey(account, key.id, { default_routing_strategy: 'throughput' }),
        patchKey(account, key.id, { disabled: true }),
      ]);
      expect(updates.map((answer) => answer.status)).toEqual([200, 200, 200, 200]);
      expect((await getKey(account, key.id)).body).toMatchObject({
        name: `renamed-${round}`,
        credit_limit: round + 2,
        default_routing_strategy: 'throughput',
        disabled: true,
      });

      // Updates racing a delete: the delete wins exactly once, an update either landed before it or is a 404,
      // and afterwards the key is gone everywhere (an update never revives it).
      const victim = await harness.createKey(account, { name: `victim-${round}`, credit_limit: 1 });
      expect((await harness.chat(victim.key)).status).toBe(200);
      const racing = await Promise.all([
        patchKey(account, victim.id, { name: 'late' }),
        deleteKey(account, victim.id),
        patchKey(account, victim.id, { disabled: false, credit_limit: 9 }),
        deleteKey(account, victim.id),
        patchKey(account, victim.id, { name: 'later' }),
      ]);
      const deletes = [racing[1]!, racing[3]!].map((answer) => answer.status).sort();
      expect(deletes).toEqual([200, 404]);
      for (const answer of [racing[0]!, racing[2]!, racing[4]!]) expect([200, 404]).toContain(answer.status);
      expect((await getKey(account, victim.id)).status).toBe(404);
      expect((await listKeys(account, '?include_disabled=true')).body.data.map((entry: KeyJson) => entry.id)).not.toContain(victim.id);
      expect((await harness.chat(victim.key)).status).toBe(401);
    }
  });
});
