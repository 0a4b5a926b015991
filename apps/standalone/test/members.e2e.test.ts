import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { browserJson, signIn, signedIn, startSignInStack, type SignInStack } from './sign-in-harness.js';

// Members of an account (docs/governance.md "Members") on a whole stack with internal authentication and a
// real OpenID provider in-process: invitations by email bound at first sign-in, members by issuer and
// subject beside the groups (the stronger role wins), sessions ended at once when a member is lowered or
// removed, who may change whom, the last owner, another account's members, and the audit entries.

describe('account members (e2e)', () => {
  let stack: SignInStack;
  beforeAll(async () => {
    stack = await startSignInStack();
    // People the groups map to nothing: only a membership lets them in.
    stack.issuer.addPerson({ id: 'newbie', email: 'Newbie@Example.com', groups: [] });
    stack.issuer.addPerson({ id: 'unverified', email: 'unverified@example.com', groups: [], emailVerified: false });
    stack.issuer.addPerson({ id: 'owner2', email: 'owner2@example.com', groups: [] });
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
  });

  const asOwner = (method: string, path: string, body?: unknown) =>
    stack.harness.call(method, path, { bearer: stack.acme.provisioningKey, ...(body === undefined ? {} : { body }) });
  const membersOf = async () => (await asOwner('GET', '/v1/account/members')).body.data as Array<Record<string, any>>;
  const auditActions = async () => ((await asOwner('GET', '/v1/account/audit?limit=100')).body.data as Array<Record<string, any>>);

  it('invites by email; the first sign-in with that verified email joins with the role, audited as the person', async () => {
    const invited = await asOwner('POST', '/v1/account/members', { email: 'newbie@example.com', role: 'admin' });
    expect(invited.status, invited.text).toBe(201);
    expect(invited.body).toMatchObject({ object: 'account.member', role: 'admin', email: 'newbie@example.com', subject: null, status: 'invited', joined_at: null });

    const { session } = await signedIn(stack, 'newbie' as never);
    expect(session).toMatchObject({ account_id: stack.acme.accountId, role: 'admin', subject: 'newbie' });
    const joined = (await membersOf()).find((member) => member.id === invited.body.id)!;
    expect(joined).toMatchObject({ status: 'active', issuer: stack.issuer.issuer, subject: 'newbie' });
    expect(typeof joined.joined_at).toBe('number');

    const entries = await auditActions();
    const add = entries.find((entry) => entry.action === 'member.add' && entry.target.id === invited.body.id)!;
    expect(add.actor).toEqual({ type: 'provisioning_key', id: expect.stringMatching(/^pkey_/) });
    expect(add.before).toBeNull();
    expect(add.after).toEqual({ role: 'admin', email: 'newbie@example.com', issuer: null, subject: null });
    const join = entries.find((entry) => entry.action === 'member.join' && entry.target.id === invited.body.id)!;
    expect(join.actor).toEqual({ type: 'user', id: `${stack.issuer.issuer}#newbie` });
    expect(join.after).toMatchObject({ subject: 'newbie' });
  });

  it('binds no invitation to an email the provider did not verify', async () => {
    expect((await asOwner('POST', '/v1/account/members', { email: 'unverified@example.com', role: 'owner' })).status).toBe(201);
    const attempt = await signIn(stack, 'unverified');
    expect(attempt.callback.status, attempt.callback.text).toBe(403);
    expect(JSON.parse(attempt.callback.text).error.code).toBe('no_membership');
    expect((await membersOf()).find((member) => member.email === 'unverified@example.com')!.status).toBe('invited');
  });

  it('gives a person whom groups and a membership both reach the stronger role', async () => {
    // bob's groups make him a viewer of acme; a membership as billing is stronger.
    const added = await asOwner('POST', '/v1/account/members', { issuer: stack.issuer.issuer, subject: 'bob', role: 'billing' });
    expect(added.status, added.text).toBe(201);
    expect((await signedIn(stack, 'bob')).session.role).toBe('billing');
    // alice's groups make her owner; a weaker membership does not lower her.
    expect((await asOwner('POST', '/v1/account/members', { issuer: stack.issuer.issuer, subject: 'alice', role: 'viewer' })).status).toBe(201);
    expect((await signedIn(stack, 'alice')).session.role).toBe('owner');
    // A membership of acme gives nothing in beta.
    const elsewhere = await signIn(stack, 'newbie', { account: stack.beta.accountId });
    expect(elsewhere.callback.status, elsewhere.callback.text).toBe(403);
  });

  it('ends the member\'s live sessions at once when the role is lowered, and when the member is removed', async () => {
    const member = (await membersOf()).find((each) => each.subject === 'newbie')!;
    const live = await signedIn(stack, 'newbie' as never);
    expect((await browserJson(stack, live.browser, 'GET', '/v1/account/members')).status).toBe(200);

    const lowered = await asOwner('PATCH', `/v1/account/members/${member.id}`, { role: 'viewer' });
    expect(lowered.status, lowered.text).toBe(200);
    expect(lowered.body).toMatchObject({ role: 'viewer' });
    expect(lowered.body.sessions_revoked).toBeGreaterThanOrEqual(1);
    const ended = await browserJson(stack, live.browser, 'GET', '/v1/account/balance');
    expect(ended.status, ended.text).toBe(401);
    expect(ended.body.error.code).toBe('invalid_session');
    const again = await signedIn(stack, 'newbie' as never);
    expect(again.session.role).toBe('viewer');
    // A viewer reads no members (roles.ts).
    expect((await browserJson(stack, again.browser, 'GET', '/v1/account/members')).status).toBe(403);

    const removed = await asOwner('DELETE', `/v1/account/members/${member.id}`);
    expect(removed.status, removed.text).toBe(200);
    expect(removed.body).toMatchObject({ id: member.id, deleted: true, sessions_revoked: 1 });
    expect((await browserJson(stack, again.browser, 'GET', '/v1/account/balance')).status).toBe(401);
    const refused = await signIn(stack, 'newbie');
    expect(refused.callback.status, refused.callback.text).toBe(403);

    const entries = await auditActions();
    const update = entries.find((entry) => entry.action === 'member.update' && entry.target.id === member.id)!;
    expect(update.before.role).toBe('admin');
    expect(update.after).toMatchObject({ role: 'viewer' });
    const removal = entries.find((entry) => entry.action === 'member.remove' && entry.target.id === member.id)!;
    expect(removal.before).toMatchObject({ role: 'viewer', subject: 'newbie' });
  });

  it('lets an admin manage members but never grant owner nor touch an owner; keeps the last owner (409)', async () => {
    const owner = await asOwner('POST', '/v1/account/members', { email: 'owner2@example.com', role: 'owner' });
    expect(owner.status, owner.text).toBe(201);
    const admin = await signedIn(stack, 'erin');
    const grant = await browserJson(stack, admin.browser, 'POST', '/v1/account/members', { body: { email: 'x@example.com', role: 'owner' }, csrf: admin.csrf });
    expect(grant.status, grant.text).toBe(403);
    expect(grant.body.error).toMatchObject({ type: 'permission_error', code: 'role_forbidden' });
    const demote = await browserJson(stack, admin.browser, 'PATCH', `/v1/account/members/${owner.body.id}`, { body: { role: 'viewer' }, csrf: admin.csrf });
    expect(demote.status, demote.text).toBe(403);
    const remove = await browserJson(stack, admin.browser, 'DELETE', `/v1/account/members/${owner.body.id}`, { csrf: admin.csrf });
    expect(remove.status, remove.text).toBe(403);
    const byAdmin = await browserJson(stack, admin.browser, 'POST', '/v1/account/members', { body: { email: 'helper@example.com', role: 'admin' }, csrf: admin.csrf });
    expect(byAdmin.status, byAdmin.text).toBe(201);

    // owner2 is acme's only owner member (unverified@ was invited as owner too: remove that first).
    const unverified = (await membersOf()).find((member) => member.email === 'unverified@example.com')!;
    expect((await asOwner('DELETE', `/v1/account/members/${unverified.id}`)).status).toBe(200);
    for (const attempt of [asOwner('PATCH', `/v1/account/members/${owner.body.id}`, { role: 'admin' }), asOwner('DELETE', `/v1/account/members/${owner.body.id}`)]) {
      const answer = await attempt;
      expect(answer.status, answer.text).toBe(409);
      expect(answer.body.error).toMatchObject({ type: 'invalid_request_error', code: 'last_owner' });
    }
    expect((await membersOf()).find((member) => member.id === owner.body.id)!.role).toBe('owner');
    // An owner signed in by membership may hand the role on.
    const owner2 = await signedIn(stack, 'owner2' as never);
    expect(owner2.session.role).toBe('owner');
    const promote = await browserJson(stack, owner2.browser, 'PATCH', `/v1/account/members/${byAdmin.body.id}`, { body: { role: 'owner' }, csrf: owner2.csrf });
    expect(promote.status, promote.text).toBe(200);
    expect((await asOwner('PATCH', `/v1/account/members/${owner.body.id}`, { role: 'admin' })).status).toBe(200);
  });

  it('answers another account\'s member as unknown (404) and changes nothing', async () => {
    const mine = (await membersOf())[0]!;
    const asBeta = (method: string, body?: unknown) =>
      stack.harness.call(method, `/v1/account/members/${mine.id}`, { bearer: stack.beta.provisioningKey, ...(body === undefined ? {} : { body }) });
    for (const answer of [await asBeta('PATCH', { role: 'viewer' }), await asBeta('DELETE')]) {
      expect(answer.status, answer.text).toBe(404);
      expect(answer.body.error.type).toBe('not_found_error');
    }
    expect((await stack.harness.call('GET', '/v1/account/members', { bearer: stack.beta.provisioningKey })).body.data).toEqual([]);
    expect((await membersOf()).find((member) => member.id === mine.id)).toEqual(mine);
  });

  it('refuses bad input in the spec\'s envelope, naming the field', async () => {
    const cases: Array<[unknown, string]> = [
      [{ email: 'a@example.com' }, 'body.role'],
      [{ email: 'a@example.com', role: 'root' }, 'body.role'],
      [{ role: 'viewer' }, 'body.email'],
      [{ email: 'a@example.com', issuer: 'https://x', subject: 's', role: 'viewer' }, 'body.email'],
      [{ issuer: 'https://x', role: 'viewer' }, 'body.subject'],
      [{ email: 'a@example.com', role: 'viewer', extra: 1 }, 'body.extra'],
      [{ email: 'not-an-address', role: 'viewer' }, 'body.email'],
      [[1], 'body'],
    ];
    for (const [body, param] of cases) {
      const answer = await asOwner('POST', '/v1/account/members', body);
      expect(answer.status, `${JSON.stringify(body)} ${answer.text}`).toBe(400);
      expect(answer.body.error).toMatchObject({ type: 'invalid_request_error', param });
    }
    const taken = await asOwner('POST', '/v1/account/members', { issuer: stack.issuer.issuer, subject: 'bob', role: 'viewer' });
    expect(taken.status, taken.text).toBe(409);
    expect(taken.body.error.code).toBe('member_exists');
    expect((await asOwner('PATCH', '/v1/account/members/mem_nope', { role: 'viewer' })).status).toBe(404);
    expect((await asOwner('PATCH', `/v1/account/members/${'x'.repeat(101)}`, { role: 'viewer' })).status).toBe(404);
  });
});
