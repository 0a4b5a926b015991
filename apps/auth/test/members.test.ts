import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GrpcStatus } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import type { CreateSessionRequest } from '@gateway/proto';
import { MEMBERS_PER_ACCOUNT_MAX } from '../src/index.js';
import { rejection, startAuthRig, type AuthRig } from './auth-rig.js';

// Members of an account in the auth service (a real gRPC server on a real Postgres): who may change
// whom, the last owner, email invitations bound at sign-in, sessions ended in the change's transaction,
// and an audit entry for every change.
describe('AuthService members', () => {
  let rig: AuthRig;
  let accountId: string;
  let otherAccountId: string;
  const ISSUER = 'https://idp.example';
  const owner = { actor: { kind: 'provisioning_key', id: 'pkey_test', sourceAddress: '10.0.0.9' } };

  const session = (overrides: Partial<CreateSessionRequest>): CreateSessionRequest => ({
    accountId, role: '', issuer: ISSUER, subject: 'nobody', displayName: 'x', ttlSeconds: 600, viaMembership: true, ...overrides,
  });
  const auditOf = async (action: string) =>
    (await sql<{ seq: string; actor_kind: string; actor_id: string; account_id: string; before_json: string; after_json: string; request_id: string; source_address: string }>`
      select * from audit_log where action = ${action} order by seq`.execute(rig.db)).rows;

  beforeAll(async () => {
    rig = await startAuthRig('members-test-secret-0123456789abcdefghijklmn');
    accountId = (await rig.auth.createAccount({ name: 'Members', tier: '', idempotencyKey: '' })).account!.id;
    otherAccountId = (await rig.auth.createAccount({ name: 'Other', tier: '', idempotencyKey: '' })).account!.id;
  });
  afterAll(async () => rig?.stop());

  it('adds members by identity and by email, lists them, and audits each addition with actor and request id', async () => {
    const added = await rig.auth.addMember(
      { accountId, role: 'owner', email: '', issuer: ISSUER, subject: 'alice', actorRole: 'owner' },
      { ...owner, requestId: 'req_add_alice' },
    );
    expect(added.member).toMatchObject({ accountId, role: 'owner', issuer: ISSUER, subject: 'alice', email: '', joinedAtMs: 0n });
    const invited = await rig.auth.addMember({ accountId, role: 'viewer', email: ' Bob@Example.COM ', issuer: '', subject: '', actorRole: 'owner' }, owner);
    expect(invited.member).toMatchObject({ email: 'bob@example.com', issuer: '', subject: '' });
    const listed = await rig.auth.listMembers({ accountId });
    expect(listed.members.map((member) => member.id)).toEqual([added.member!.id, invited.member!.id]);
    expect((await rig.auth.listMembers({ accountId: otherAccountId })).members).toEqual([]);

    const entries = await auditOf('member.add');
    expect(entries).toHaveLength(2);
    expect(entries[0]).toMatchObject({ actor_kind: 'provisioning_key', actor_id: 'pkey_test', account_id: accountId, request_id: 'req_add_alice', source_address: '10.0.0.9', before_json: 'null' });
    expect(JSON.parse(entries[0]!.after_json)).toEqual({ role: 'owner', email: null, issuer: ISSUER, subject: 'alice' });

    // The same person twice, or the same invited email: a conflict, nothing added.
    const twice = await rejection(rig.auth.addMember({ accountId, role: 'viewer', email: '', issuer: ISSUER, subject: 'alice', actorRole: 'owner' }, owner));
    expect([twice.status, twice.code]).toEqual([GrpcStatus.ALREADY_EXISTS, 'member_exists']);
    const again = await rejection(rig.auth.addMember({ accountId, role: 'viewer', email: 'bob@example.com', issuer: '', subject: '', actorRole: 'owner' }, owner));
    expect(again.code).toBe('member_exists');
    expect(await auditOf('member.add')).toHaveLength(2);
  });

  it('refuses bad input with the field named', async () => {
    const cases: Array<[Record<string, string>, string]> = [
      [{ role: 'root', email: 'c@example.com' }, 'role'],
      [{ role: 'viewer', email: 'not an email' }, 'email'],
      [{ role: 'viewer', email: 'c@example.com', issuer: ISSUER, subject: 'c' }, 'email'],
      [{ role: 'viewer' }, 'subject'],
      [{ role: 'viewer', issuer: ISSUER, subject: 'x'.repeat(256) }, 'subject'],
    ];
    for (const [fields, param] of cases) {
      const refused = await rejection(rig.auth.addMember({ accountId, email: '', issuer: '', subject: '', actorRole: 'owner', role: '', ...fields }, owner));
      expect([refused.status, refused.param], JSON.stringify(fields)).toEqual([GrpcStatus.INVALID_ARGUMENT, param]);
    }
    const noAccount = await rejection(rig.auth.addMember({ accountId: 'acc_missing', role: 'viewer', email: 'c@example.com', issuer: '', subject: '', actorRole: 'owner' }, owner));
    expect(noAccount.status).toBe(GrpcStatus.NOT_FOUND);
  });

  it('lets an admin change members but never grant owner nor touch an owner', async () => {
    const alice = (await rig.auth.listMembers({ accountId })).members.find((member) => member.subject === 'alice')!;
    const grant = await rejection(rig.auth.addMember({ accountId, role: 'owner', email: 'carol@example.com', issuer: '', subject: '', actorRole: 'admin' }, owner));
    expect([grant.status, grant.code]).toEqual([GrpcStatus.PERMISSION_DENIED, 'role_forbidden']);
    const demote = await rejection(rig.auth.updateMember({ accountId, memberId: alice.id, role: 'viewer', actorRole: 'admin' }, owner));
    expect(demote.status).toBe(GrpcStatus.PERMISSION_DENIED);
    const remove = await rejection(rig.auth.removeMember({ accountId, memberId: alice.id, actorRole: 'admin' }, owner));
    expect(remove.status).toBe(GrpcStatus.PERMISSION_DENIED);
    const viewerActor = await rejection(rig.auth.addMember({ accountId, role: 'viewer', email: 'carol@example.com', issuer: '', subject: '', actorRole: 'viewer' }, owner));
    expect(viewerActor.status).toBe(GrpcStatus.PERMISSION_DENIED);
    const carol = await rig.auth.addMember({ accountId, role: 'billing', email: 'carol@example.com', issuer: '', subject: '', actorRole: 'admin' }, owner);
    expect((await rig.auth.updateMember({ accountId, memberId: carol.member!.id, role: 'admin', actorRole: 'admin' }, owner)).member!.role).toBe('admin');
    expect((await rig.auth.listMembers({ accountId })).members.find((member) => member.subject === 'alice')!.role).toBe('owner');
  });

  it('never removes or demotes the last owner (409-class conflict), and does once another owner exists', async () => {
    const alice = (await rig.auth.listMembers({ accountId })).members.find((member) => member.subject === 'alice')!;
    for (const attempt of [
      rig.auth.updateMember({ accountId, memberId: alice.id, role: 'admin', actorRole: 'owner' }, owner),
      rig.auth.removeMember({ accountId, memberId: alice.id, actorRole: 'owner' }, owner),
    ]) {
      const refused = await rejection(attempt);
      expect([refused.status, refused.code]).toEqual([GrpcStatus.FAILED_PRECONDITION, 'last_owner']);
    }
    const dave = await rig.auth.addMember({ accountId, role: 'owner', email: '', issuer: ISSUER, subject: 'dave', actorRole: 'owner' }, owner);
    // Two owners demoting each other at once: one wins, the account keeps an owner.
    const both = await Promise.allSettled([
      rig.auth.updateMember({ accountId, memberId: alice.id, role: 'admin', actorRole: 'owner' }, owner),
      rig.auth.updateMember({ accountId, memberId: dave.member!.id, role: 'admin', actorRole: 'owner' }, owner),
    ]);
    expect(both.filter((outcome) => outcome.status === 'fulfilled')).toHaveLength(1);
    const owners = (await rig.auth.listMembers({ accountId })).members.filter((member) => member.role === 'owner');
    expect(owners).toHaveLength(1);
    // Put alice back as the owner for the tests below.
    if (owners[0]!.subject !== 'alice') {
      await rig.auth.updateMember({ accountId, memberId: alice.id, role: 'owner', actorRole: 'owner' }, owner);
    }
    await rig.auth.removeMember({ accountId, memberId: dave.member!.id, actorRole: 'owner' }, owner);
  });

  it('binds an email invitation at sign-in only when the provider verified the email, and audits the binding as the person', async () => {
    const unverified = await rig.auth.resolveMemberships({ issuer: ISSUER, subject: 'bob-sub', email: 'bob@example.com', emailVerified: false });
    expect(unverified.memberships).toEqual([]);
    const verified = await rig.auth.resolveMemberships({ issuer: ISSUER, subject: 'bob-sub', email: 'BOB@example.com', emailVerified: true }, { requestId: 'req_join' });
    expect(verified.memberships).toEqual([{ accountId, role: 'viewer' }]);
    // Bound for good: another person presenting the same email later binds nothing.
    expect((await rig.auth.resolveMemberships({ issuer: ISSUER, subject: 'mallory', email: 'bob@example.com', emailVerified: true })).memberships).toEqual([]);
    const bob = (await rig.auth.listMembers({ accountId })).members.find((member) => member.email === 'bob@example.com')!;
    expect(bob).toMatchObject({ issuer: ISSUER, subject: 'bob-sub' });
    expect(bob.joinedAtMs).toBeGreaterThan(0n);
    const joins = await auditOf('member.join');
    expect(joins).toHaveLength(1);
    expect(joins[0]).toMatchObject({ actor_kind: 'user', actor_id: `${ISSUER}#bob-sub`, request_id: 'req_join' });
    expect(JSON.parse(joins[0]!.before_json).subject).toBeNull();
    expect(JSON.parse(joins[0]!.after_json).subject).toBe('bob-sub');
  });

  it('opens a session with the membership\'s role (the stronger one beside the groups\'), and none without membership', async () => {
    const alone = await rig.auth.createSession(session({ subject: 'bob-sub' }));
    expect(alone.role).toBe('viewer');
    const withGroups = await rig.auth.createSession(session({ subject: 'bob-sub', role: 'billing' }));
    expect(withGroups.role).toBe('billing');
    const groupsWeaker = await rig.auth.createSession(session({ subject: 'alice', role: 'viewer' }));
    expect(groupsWeaker.role).toBe('owner');
    const none = await rejection(rig.auth.createSession(session({ subject: 'stranger' })));
    expect(none.status).toBe(GrpcStatus.NOT_FOUND);
    // A membership of one account opens nothing in another.
    expect((await rejection(rig.auth.createSession(session({ subject: 'bob-sub', accountId: otherAccountId })))).status).toBe(GrpcStatus.NOT_FOUND);
  });

  it('ends the member\'s live sessions of the account in the same change when lowered or removed, and audits before/after', async () => {
    const bob = (await rig.auth.listMembers({ accountId })).members.find((member) => member.subject === 'bob-sub')!;
    await rig.auth.updateMember({ accountId, memberId: bob.id, role: 'admin', actorRole: 'owner' }, owner);
    const live = await rig.auth.createSession(session({ subject: 'bob-sub' }));
    expect(live.role).toBe('admin');
    // Raising does not end sessions; lowering does.
    const lowered = await rig.auth.updateMember({ accountId, memberId: bob.id, role: 'viewer', actorRole: 'owner' }, owner);
    expect(lowered.sessionsRevoked).toBeGreaterThanOrEqual(1);
    expect((await rejection(rig.auth.verifySession({ sessionToken: live.sessionToken }))).status).toBe(GrpcStatus.UNAUTHENTICATED);
    const update = (await auditOf('member.update')).at(-1)!;
    expect(JSON.parse(update.before_json).role).toBe('admin');
    expect(JSON.parse(update.after_json)).toMatchObject({ role: 'viewer', sessions_revoked: lowered.sessionsRevoked });

    const again = await rig.auth.createSession(session({ subject: 'bob-sub' }));
    const removed = await rig.auth.removeMember({ accountId, memberId: bob.id, actorRole: 'owner' }, owner);
    expect(removed.sessionsRevoked).toBe(1);
    expect((await rejection(rig.auth.verifySession({ sessionToken: again.sessionToken }))).status).toBe(GrpcStatus.UNAUTHENTICATED);
    expect((await rejection(rig.auth.createSession(session({ subject: 'bob-sub' })))).status).toBe(GrpcStatus.NOT_FOUND);
    const removal = (await auditOf('member.remove')).at(-1)!;
    expect(JSON.parse(removal.before_json)).toMatchObject({ role: 'viewer', subject: 'bob-sub' });
    // Another account's member id is unknown here.
    const foreign = await rig.auth.addMember({ accountId: otherAccountId, role: 'viewer', email: 'x@example.com', issuer: '', subject: '', actorRole: 'owner' }, owner);
    expect((await rejection(rig.auth.removeMember({ accountId, memberId: foreign.member!.id, actorRole: 'owner' }, owner))).status).toBe(GrpcStatus.NOT_FOUND);
    expect((await rejection(rig.auth.updateMember({ accountId, memberId: foreign.member!.id, role: 'admin', actorRole: 'owner' }, owner))).status).toBe(GrpcStatus.NOT_FOUND);
  });

  it('bounds the members of an account', async () => {
    const bounded = (await rig.auth.createAccount({ name: 'Bounded', tier: '', idempotencyKey: '' })).account!.id;
    await sql`
      insert into auth.members (id, account_id, role, email)
      select 'mem_fill_' || n, ${bounded}, 'viewer', 'fill' || n || '@example.com' from generate_series(1, ${MEMBERS_PER_ACCOUNT_MAX}) as n`.execute(rig.db);
    const refused = await rejection(rig.auth.addMember({ accountId: bounded, role: 'viewer', email: 'one-more@example.com', issuer: '', subject: '', actorRole: 'owner' }, owner));
    expect([refused.status, refused.code]).toEqual([GrpcStatus.INVALID_ARGUMENT, 'members_limit']);
  });

  it('keeps the audit chain whole over all of it', async () => {
    const chain = await rig.auth.readAuthAuditChain({ afterSeq: 0n, limit: 1000, accountId: '' });
    const seqs = chain.entries.map((entry) => entry.seq);
    expect(seqs).toEqual(seqs.map((_, index) => BigInt(index + 1)));
    expect(chain.headSeq).toBe(BigInt(seqs.length));
  });
});
