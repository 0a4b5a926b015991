import type { Request, Response } from 'express';
import { z } from 'zod';
import { ACCOUNT_ROLES, GatewayError, GrpcStatus } from '@gateway/platform';
import type { Member } from '@gateway/proto';
import { parseWith } from '../account/account-schemas.js';
import type { EdgeContext } from '../context.js';
import { edgeErrors } from '../errors.js';
import { sendJson } from '../http.js';
import { requestIdOf } from '../request-id.js';
import { accountFor, changeOptions, readAccountBody } from './account-routes.js';

/*
 * Members of an account over HTTP (docs/governance.md "Members"): the auth service keeps them and judges
 * who may change whom (an admin grants no owner and leaves owners be; the last owner stays), knowing the
 * role the edge verified for the caller. The account always comes from the caller's credential.
 *
 *   GET    /v1/account/members                 members.read
 *   POST   /v1/account/members                 members.write  {email | issuer+subject, role}
 *   PATCH  /v1/account/members/{member_id}     members.write  {role}
 *   DELETE /v1/account/members/{member_id}     members.write
 */

const CALL_DEADLINE_MS = 5_000;
const MEMBER_BODY_MAX_BYTES = 4 * 1024;
const MEMBER_ID_MAX_LENGTH = 100;

const role = z.enum(ACCOUNT_ROLES, { error: (issue) => (issue.input === undefined ? 'is required' : 'must be owner, admin, billing or viewer') });

export const addMemberBody = z
  .strictObject(
    {
      role,
      email: z
        .string({ error: 'must be a string' })
        .max(320, { error: 'must be at most 320 characters' })
        .regex(/^[^\s@]+@[^\s@]+$/, { error: 'must be an email address' })
        .optional(),
      issuer: z.string({ error: 'must be a string' }).min(1).max(1000).optional(),
      subject: z.string({ error: 'must be a string' }).min(1).max(255).optional(),
    },
    { error: 'must be a JSON object' },
  )
  .refine((body) => (body.email !== undefined) !== (body.issuer !== undefined || body.subject !== undefined), {
    error: 'name the person by email, or by issuer and subject (not both)',
    path: ['email'],
  })
  .refine((body) => body.email !== undefined || (body.issuer !== undefined && body.subject !== undefined), {
    error: 'issuer and subject go together',
    path: ['subject'],
  });

export const updateMemberBody = z.strictObject({ role }, { error: 'must be a JSON object' });

export function memberRecord(member: Member) {
  return {
    object: 'account.member',
    id: member.id,
    role: member.role,
    email: member.email === '' ? null : member.email,
    issuer: member.issuer === '' ? null : member.issuer,
    subject: member.subject === '' ? null : member.subject,
    // An email invitation is pending until the person's first sign-in with that (verified) email.
    status: member.subject === '' ? 'invited' : 'active',
    created_at: Number(member.createdAtMs / 1000n),
    updated_at: Number(member.updatedAtMs / 1000n),
    joined_at: member.joinedAtMs === 0n ? null : Number(member.joinedAtMs / 1000n),
  };
}

const options = (response: Response) => ({ requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS });
const memberNotFound = () => edgeErrors.notFound('No such member.');

function memberIdParam(request: Request): string {
  const memberId = (request.params as Record<string, string | undefined>).memberId ?? '';
  if (memberId === '' || memberId.length > MEMBER_ID_MAX_LENGTH) throw memberNotFound();
  return memberId;
}

/** Auth's NOT_FOUND for a member id is this edge's 404 (another account's member reads as none). */
async function orNotFound<T>(call: Promise<T>): Promise<T> {
  try {
    return await call;
  } catch (error) {
    if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) throw memberNotFound();
    throw error;
  }
}

/** GET /v1/account/members: every member and pending invitation of the caller's account (at most 1,000). */
export function listMembersHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'members.read');
    const listed = await context.auth.listMembers({ accountId: account.accountId }, options(response));
    sendJson(response, 200, { object: 'list', data: listed.members.map(memberRecord) });
  };
}

/** POST /v1/account/members: invites by email, or adds a person by the identity provider's issuer and subject. 201. */
export function addMemberHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'members.write');
    const body = parseWith(addMemberBody, 'body', await readAccountBody(context, request, MEMBER_BODY_MAX_BYTES));
    const added = await context.auth.addMember(
      { accountId: account.accountId, role: body.role, email: body.email ?? '', issuer: body.issuer ?? '', subject: body.subject ?? '', actorRole: account.role },
      changeOptions(request, response, account),
    );
    if (!added.member) throw new Error('Auth answered AddMember without a member');
    sendJson(response, 201, memberRecord(added.member));
  };
}

/** PATCH /v1/account/members/{member_id}: changes the role; a lowered role ends the member's sessions at once. */
export function updateMemberHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'members.write');
    const memberId = memberIdParam(request);
    const body = parseWith(updateMemberBody, 'body', await readAccountBody(context, request, MEMBER_BODY_MAX_BYTES));
    const updated = await orNotFound(
      context.auth.updateMember({ accountId: account.accountId, memberId, role: body.role, actorRole: account.role }, changeOptions(request, response, account)),
    );
    if (!updated.member) throw new Error('Auth answered UpdateMember without a member');
    sendJson(response, 200, { ...memberRecord(updated.member), sessions_revoked: updated.sessionsRevoked });
  };
}

/** DELETE /v1/account/members/{member_id}: the member's sessions of this account end in the same change. */
export function removeMemberHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'members.write');
    const memberId = memberIdParam(request);
    const removed = await orNotFound(
      context.auth.removeMember({ accountId: account.accountId, memberId, actorRole: account.role }, changeOptions(request, response, account)),
    );
    sendJson(response, 200, { id: memberId, object: 'account.member', deleted: true, sessions_revoked: removed.sessionsRevoked });
  };
}
