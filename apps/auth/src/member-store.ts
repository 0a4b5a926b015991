import {
  ACCOUNT_ROLES, errors, ErrorReason, GatewayError, GrpcStatus, isAccountRole, newId, UNATTRIBUTED_AUDIT, type AccountRole, type AuditCallContext,
} from '@gateway/platform';
import { appendAudit, auditedTransaction, sql, type Kysely } from '@gateway/platform/db';
import type {
  AddMemberRequest, Member, Membership, RemoveMemberRequest, ResolveMembershipsRequest, UpdateMemberRequest,
} from '@gateway/proto';
import type { Selectable, Transaction } from 'kysely';
import { AUTH_AUDIT_CHAIN } from './auth-store.js';
import type { AuthDatabase, MembersTable } from './schema.js';
import { requireId } from './validation.js';

/*
 * Members of an account (docs/governance.md "Members"). A member is a person named by the identity
 * provider's issuer and subject, or an invitation by email that the person's first sign-in with that
 * email (verified by the provider) binds to their issuer and subject. Every change is an audit entry of
 * the auth chain in the change's transaction.
 *
 * Concurrency: every change locks the account row first, so the "last owner" rule holds under concurrent
 * changes. Removing a member or lowering their role revokes their live sessions of the account in the
 * same transaction, after the member row was changed: a session being opened meanwhile holds the member
 * row (FOR SHARE, SessionStore.createSession) until it commits, so the revocation either sees that
 * session or the session's transaction sees the change.
 */

/** Members (and invitations) one account may hold. */
export const MEMBERS_PER_ACCOUNT_MAX = 1_000;
/** Accounts one person's sign-in looks at (and invitations it binds at once). */
export const MEMBERSHIPS_PER_PERSON_MAX = 200;
const EMAIL_MAX_LENGTH = 320;
const ISSUER_MAX_LENGTH = 1000;
const SUBJECT_MAX_LENGTH = 255;
/** One @, something either side, no spaces or controls: the provider is what vouches for the address. */
const EMAIL_PATTERN = /^[^\s@\u0000-\u001f\u007f]+@[^\s@\u0000-\u001f\u007f]+$/;

const memberNotFound = () => errors.notFound('No such member.');
const forbidden = (message: string) => new GatewayError(GrpcStatus.PERMISSION_DENIED, ErrorReason.ERROR_REASON_FORBIDDEN, message, { code: 'role_forbidden' });
const lastOwner = () =>
  new GatewayError(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_CONFLICT, 'This is the account\'s last owner: make another member owner first.', { code: 'last_owner' });

type MemberRow = Selectable<MembersTable>;

function toMember(row: MemberRow): Member {
  return {
    id: row.id,
    accountId: row.account_id,
    role: row.role,
    issuer: row.issuer ?? '',
    subject: row.subject ?? '',
    email: row.email ?? '',
    createdAtMs: BigInt(row.created_at.getTime()),
    updatedAtMs: BigInt(row.updated_at.getTime()),
    joinedAtMs: row.joined_at === null ? 0n : BigInt(row.joined_at.getTime()),
  };
}

/** What an audit entry records of a member. */
function audited(row: MemberRow | undefined) {
  if (!row) return null;
  return { role: row.role, email: row.email, issuer: row.issuer, subject: row.subject };
}

export function normaliseEmail(value: string): string {
  const email = value.trim().toLowerCase();
  if (email.length < 3 || email.length > EMAIL_MAX_LENGTH || !EMAIL_PATTERN.test(email)) {
    throw errors.invalidRequest(`email must be an email address of at most ${EMAIL_MAX_LENGTH} characters`, 'email');
  }
  return email;
}

function requireRole(value: string, param = 'role'): AccountRole {
  if (!isAccountRole(value)) throw errors.invalidRequest(`${param} must be one of owner, admin, billing, viewer`, param);
  return value;
}

function requireIdentity(issuer: string, subject: string): void {
  if (issuer === '' || issuer.length > ISSUER_MAX_LENGTH || issuer.includes('\u0000')) throw errors.invalidRequest(`issuer must be 1..${ISSUER_MAX_LENGTH} characters`, 'issuer');
  if (subject === '' || subject.length > SUBJECT_MAX_LENGTH || subject.includes('\u0000')) throw errors.invalidRequest(`subject must be 1..${SUBJECT_MAX_LENGTH} characters`, 'subject');
}

/** Only owners and admins change members (roles.ts members.write); the edge names the role it verified. */
function actorRoleOf(value: string): 'owner' | 'admin' {
  if (value !== 'owner' && value !== 'admin') throw forbidden('Only an owner or an admin changes members.');
  return value;
}

export class MemberStore {
  constructor(private readonly db: Kysely<AuthDatabase>) {}

  async listMembers(accountId: string): Promise<Member[]> {
    requireId(accountId, 'account_id');
    const account = await this.db.selectFrom('accounts').select('id').where('id', '=', accountId).executeTakeFirst();
    if (!account) throw errors.notFound('No such account.');
    const rows = await this.db.selectFrom('members').selectAll().where('account_id', '=', accountId).orderBy('created_at').orderBy('id').limit(MEMBERS_PER_ACCOUNT_MAX).execute();
    return rows.map(toMember);
  }

  async addMember(request: AddMemberRequest, audit: AuditCallContext = UNATTRIBUTED_AUDIT): Promise<Member> {
    requireId(request.accountId, 'account_id');
    const role = requireRole(request.role);
    const actorRole = actorRoleOf(request.actorRole);
    const byEmail = request.email !== '';
    const byIdentity = request.issuer !== '' || request.subject !== '';
    if (byEmail === byIdentity) throw errors.invalidRequest('name the person by email, or by issuer and subject (not both)', byEmail ? 'email' : 'subject');
    const email = byEmail ? normaliseEmail(request.email) : null;
    if (byIdentity) requireIdentity(request.issuer, request.subject);
    if (role === 'owner' && actorRole !== 'owner') throw forbidden('Only an owner grants the owner role.');
    return auditedTransaction(this.db, async (trx) => {
      await lockAccount(trx, request.accountId);
      const count = await trx.selectFrom('members').select((eb) => eb.fn.countAll<string>().as('count')).where('account_id', '=', request.accountId).executeTakeFirstOrThrow();
      if (Number(count.count) >= MEMBERS_PER_ACCOUNT_MAX) {
        throw errors.invalidRequest(`an account holds at most ${MEMBERS_PER_ACCOUNT_MAX} members`, '', 'members_limit');
      }
      const inserted = await trx
        .insertInto('members')
        .values({
          id: newId('mem'),
          account_id: request.accountId,
          role,
          issuer: byIdentity ? request.issuer : null,
          subject: byIdentity ? request.subject : null,
          email,
          joined_at: null,
        })
        .onConflict((conflict) => conflict.doNothing())
        .returningAll()
        .executeTakeFirst();
      if (!inserted) {
        throw new GatewayError(GrpcStatus.ALREADY_EXISTS, ErrorReason.ERROR_REASON_CONFLICT, 'This person is already a member of the account.', { code: 'member_exists' });
      }
      await appendAudit(trx, AUTH_AUDIT_CHAIN, {
        ...audit, accountId: request.accountId, action: 'member.add', targetType: 'member', targetId: inserted.id, before: null, after: audited(inserted),
      });
      return toMember(inserted);
    });
  }

  async updateMember(request: UpdateMemberRequest, audit: AuditCallContext = UNATTRIBUTED_AUDIT): Promise<{ member: Member; sessionsRevoked: number }> {
    requireId(request.accountId, 'account_id');
    if (request.memberId === '' || request.memberId.length > 100) throw memberNotFound();
    const role = requireRole(request.role);
    const actorRole = actorRoleOf(request.actorRole);
    return auditedTransaction(this.db, async (trx) => {
      await lockAccount(trx, request.accountId);
      const before = await findMember(trx, request.accountId, request.memberId);
      if ((before.role === 'owner' || role === 'owner') && actorRole !== 'owner' && before.role !== role) {
        throw forbidden('Only an owner grants the owner role or changes an owner\'s.');
      }
      if (before.role === role) return { member: toMember(before), sessionsRevoked: 0 };
      if (before.role === 'owner') await refuseLastOwner(trx, request.accountId);
      const after = await trx
        .updateTable('members')
        .set({ role, updated_at: sql<Date>`now()` })
        .where('id', '=', before.id)
        .returningAll()
        .executeTakeFirstOrThrow();
      // A lower role ends the person's sessions of this account now; a higher one applies at their next sign-in.
      const lowered = ACCOUNT_ROLES.indexOf(role) > ACCOUNT_ROLES.indexOf(before.role as AccountRole);
      const sessionsRevoked = lowered ? await revokeSessions(trx, after) : 0;
      await appendAudit(trx, AUTH_AUDIT_CHAIN, {
        ...audit, accountId: request.accountId, action: 'member.update', targetType: 'member', targetId: after.id,
        before: audited(before), after: { ...audited(after), sessions_revoked: sessionsRevoked },
      });
      return { member: toMember(after), sessionsRevoked };
    });
  }

  async removeMember(request: RemoveMemberRequest, audit: AuditCallContext = UNATTRIBUTED_AUDIT): Promise<{ sessionsRevoked: number }> {
    requireId(request.accountId, 'account_id');
    if (request.memberId === '' || request.memberId.length > 100) throw memberNotFound();
    const actorRole = actorRoleOf(request.actorRole);
    return auditedTransaction(this.db, async (trx) => {
      await lockAccount(trx, request.accountId);
      const before = await findMember(trx, request.accountId, request.memberId);
      if (before.role === 'owner' && actorRole !== 'owner') throw forbidden('Only an owner removes an owner.');
      if (before.role === 'owner') await refuseLastOwner(trx, request.accountId);
      await trx.deleteFrom('members').where('id', '=', before.id).execute();
      const sessionsRevoked = await revokeSessions(trx, before);
      await appendAudit(trx, AUTH_AUDIT_CHAIN, {
        ...audit, accountId: request.accountId, action: 'member.remove', targetType: 'member', targetId: before.id,
        before: audited(before), after: { sessions_revoked: sessionsRevoked },
      });
      return { sessionsRevoked };
    });
  }

  /**
   * At sign-in (the edge validated the ID token): binds the invitations of a verified email to the person
   * and answers their memberships. A binding is a member change (`member.join`), audited as the person's.
   */
  async resolveMemberships(request: ResolveMembershipsRequest, audit: AuditCallContext = UNATTRIBUTED_AUDIT): Promise<Membership[]> {
    requireIdentity(request.issuer, request.subject);
    let email: string | undefined;
    if (request.email !== '' && request.emailVerified) {
      try {
        email = normaliseEmail(request.email);
      } catch {
        email = undefined; // an address no invitation could hold binds nothing
      }
    }
    const actor = { ...audit.actor, kind: 'user' as const, id: `${request.issuer}#${request.subject}` };
    return auditedTransaction(this.db, async (trx) => {
      if (email !== undefined) {
        // Invitations of this email not yet bound, in accounts where the person is not a member already.
        const bound = await sql<MemberRow>`
          update auth.members as invited
             set issuer = ${request.issuer}, subject = ${request.subject}, joined_at = now(), updated_at = now()
           where invited.id in (
             select candidate.id from auth.members as candidate
              where candidate.email = ${email} and candidate.issuer is null
                and not exists (select 1 from auth.members as held
                                 where held.account_id = candidate.account_id and held.issuer = ${request.issuer} and held.subject = ${request.subject})
              order by candidate.created_at
              limit ${MEMBERSHIPS_PER_PERSON_MAX}
              for update)
          returning invited.*`.execute(trx);
        for (const row of bound.rows) {
          await appendAudit(trx, AUTH_AUDIT_CHAIN, {
            actor, requestId: audit.requestId, accountId: row.account_id, action: 'member.join', targetType: 'member', targetId: row.id,
            before: { ...audited(row), issuer: null, subject: null }, after: audited(row),
          });
        }
      }
      const rows = await trx
        .selectFrom('members')
        .select(['account_id', 'role'])
        .where('issuer', '=', request.issuer)
        .where('subject', '=', request.subject)
        .orderBy('account_id')
        .limit(MEMBERSHIPS_PER_PERSON_MAX)
        .execute();
      return rows.map((row) => ({ accountId: row.account_id, role: row.role }));
    });
  }
}

async function lockAccount(trx: Transaction<AuthDatabase>, accountId: string): Promise<void> {
  const account = await trx.selectFrom('accounts').select('id').where('id', '=', accountId).forUpdate().executeTakeFirst();
  if (!account) throw errors.notFound('No such account.');
}

async function findMember(trx: Transaction<AuthDatabase>, accountId: string, memberId: string): Promise<MemberRow> {
  const row = await trx.selectFrom('members').selectAll().where('id', '=', memberId).where('account_id', '=', accountId).forUpdate().executeTakeFirst();
  if (!row) throw memberNotFound();
  return row;
}

/** The account keeps at least one owner (called with the account locked, before an owner leaves the role). */
async function refuseLastOwner(trx: Transaction<AuthDatabase>, accountId: string): Promise<void> {
  const owners = await trx.selectFrom('members').select((eb) => eb.fn.countAll<string>().as('count')).where('account_id', '=', accountId).where('role', '=', 'owner').executeTakeFirstOrThrow();
  if (Number(owners.count) <= 1) throw lastOwner();
}

/** Ends the person's live sessions of this account (an unbound invitation has none). */
async function revokeSessions(trx: Transaction<AuthDatabase>, member: MemberRow): Promise<number> {
  if (member.issuer === null || member.subject === null) return 0;
  const result = await trx
    .updateTable('sessions')
    .set({ revoked_at: sql<Date>`now()` })
    .where('account_id', '=', member.account_id)
    .where('issuer', '=', member.issuer)
    .where('subject', '=', member.subject)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}
