import { createHash, randomBytes } from 'node:crypto';
import { errors, ErrorReason, GatewayError, GrpcStatus, isAccountRole, isRole, newId, strongerAccountRole, type AccountRole } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import type { CreateSessionRequest, CreateSessionResponse, VerifySessionResponse } from '@gateway/proto';
import type { AuthDatabase } from './schema.js';

/*
 * Sign-in sessions (docs/governance.md "Sign-in and roles"). Stored here rather than as signed cookies:
 * logout and a revoked person must stop at once on every edge replica, which a self-contained signed
 * token cannot do without a revocation list that every replica shares anyway; the account routes that
 * read a session are rare (never the inference hot path), so one Postgres read per call is cheap.
 */

export const SESSION_TTL_MIN_SECONDS = 60;
export const SESSION_TTL_MAX_SECONDS = 12 * 60 * 60;
/** Live sessions one person (issuer + subject) may hold; past it their oldest is revoked. */
export const SESSIONS_PER_SUBJECT_MAX = 20;
/** Expired rows removed per CreateSession, so the table stays bounded without a sweeper of its own. */
const EXPIRED_SWEEP_BATCH = 100;
/** Ended sessions are kept this long (to answer "revoked" rather than "unknown" in logs), then removed. */
const ENDED_RETENTION_MS = 24 * 60 * 60 * 1000;
const TOKEN_PREFIX = 'gw-sess-';
/** 32 random bytes in base64url after the prefix. */
const TOKEN_PATTERN = /^gw-sess-[A-Za-z0-9_-]{43}$/;
const ISSUER_MAX_LENGTH = 1000;
const SUBJECT_MAX_LENGTH = 255;
const DISPLAY_NAME_MAX_LENGTH = 200;
const ACCOUNT_ID_MAX_LENGTH = 100;

const invalidSession = () => new GatewayError(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_FORBIDDEN, 'Invalid or expired session.', { code: 'invalid_session' });

export const tokenHash = (token: string) => createHash('sha256').update(token).digest('hex');

export function isWellFormedSessionToken(token: string): boolean {
  return TOKEN_PATTERN.test(token);
}

export class SessionStore {
  constructor(
    private readonly db: Kysely<AuthDatabase>,
    private readonly now: () => number = Date.now,
  ) {}

  async createSession(request: CreateSessionRequest): Promise<CreateSessionResponse> {
    // Through a membership the groups may give no role of their own (empty): the membership alone decides.
    const groupsGiveNone = request.viaMembership && request.role === '';
    if (!groupsGiveNone && !isRole(request.role)) throw errors.invalidRequest('role must be one of owner, admin, billing, viewer, operator', 'role');
    const operator = request.role === 'operator';
    if (operator && (request.accountId !== '' || request.viaMembership)) throw errors.invalidRequest('an operator session belongs to no account', 'account_id');
    if (!operator && ((!groupsGiveNone && !isAccountRole(request.role)) || request.accountId === '')) throw errors.invalidRequest('an account role needs an account_id', 'account_id');
    if (request.accountId.length > ACCOUNT_ID_MAX_LENGTH) throw errors.notFound('No such account.');
    if (request.issuer === '' || request.issuer.length > ISSUER_MAX_LENGTH) throw errors.invalidRequest(`issuer must be 1..${ISSUER_MAX_LENGTH} characters`, 'issuer');
    if (request.subject === '' || request.subject.length > SUBJECT_MAX_LENGTH) throw errors.invalidRequest(`subject must be 1..${SUBJECT_MAX_LENGTH} characters`, 'subject');
    if (request.ttlSeconds < SESSION_TTL_MIN_SECONDS || request.ttlSeconds > SESSION_TTL_MAX_SECONDS) {
      throw errors.invalidRequest(`ttl_seconds must be ${SESSION_TTL_MIN_SECONDS}..${SESSION_TTL_MAX_SECONDS}`, 'ttl_seconds');
    }
    // Postgres text holds no NUL; an identity with one is nobody's.
    if (request.issuer.includes('\u0000') || request.subject.includes('\u0000')) throw errors.invalidRequest('issuer and subject must not contain NUL', 'subject');
    // eslint-disable-next-line no-control-regex
    const displayName = request.displayName.replace(/[\u0000-\u001f\u007f]/g, '').slice(0, DISPLAY_NAME_MAX_LENGTH);
    const token = TOKEN_PREFIX + randomBytes(32).toString('base64url');
    const id = newId('sess');
    const nowMs = this.now();
    const expiresAt = new Date(nowMs + request.ttlSeconds * 1000);

    const role = await this.db.transaction().execute(async (trx) => {
      if (!operator) {
        const account = await trx.selectFrom('accounts').select('id').where('id', '=', request.accountId).executeTakeFirst();
        if (!account) throw errors.notFound('No such account.');
      }
      // One person's sessions are serialised (a transaction-scoped lock on their identity), so the
      // bound below holds under concurrent sign-ins.
      await sql`select pg_advisory_xact_lock(hashtext(${request.issuer + ' ' + request.subject}))`.execute(trx);
      let role = request.role;
      if (request.viaMembership) {
        // Read again here, holding the row until commit: a member removed or lowered after the edge
        // resolved the membership either is seen now or revokes this session when it commits.
        const member = await trx
          .selectFrom('members')
          .select('role')
          .where('account_id', '=', request.accountId)
          .where('issuer', '=', request.issuer)
          .where('subject', '=', request.subject)
          .forShare()
          .executeTakeFirst();
        if (member && isAccountRole(member.role)) role = groupsGiveNone ? member.role : strongerAccountRole(member.role, request.role as AccountRole);
        else if (groupsGiveNone) throw errors.notFound('No membership in this account.');
      }
      await trx
        .insertInto('sessions')
        .values({
          id,
          token_hash: tokenHash(token),
          account_id: operator ? null : request.accountId,
          role,
          issuer: request.issuer,
          subject: request.subject,
          display_name: displayName,
          expires_at: expiresAt,
          revoked_at: null,
        })
        .execute();
      // Past the bound, the person's oldest live sessions end.
      await sql`
        update auth.sessions set revoked_at = ${new Date(nowMs)}
        where id in (
          select id from auth.sessions
          where issuer = ${request.issuer} and subject = ${request.subject} and revoked_at is null
          order by created_at desc, id desc
          offset ${SESSIONS_PER_SUBJECT_MAX}
        )`.execute(trx);
      return role;
    });
    // Bounded housekeeping: long-ended rows go, a batch at a time.
    await sql`
      delete from auth.sessions where id in (
        select id from auth.sessions where expires_at < ${new Date(nowMs - ENDED_RETENTION_MS)} limit ${EXPIRED_SWEEP_BATCH}
      )`.execute(this.db);
    return { sessionToken: token, sessionId: id, expiresAtMs: BigInt(expiresAt.getTime()), role };
  }

  async verifySession(token: string): Promise<VerifySessionResponse> {
    if (!isWellFormedSessionToken(token)) throw invalidSession();
    const row = await this.db
      .selectFrom('sessions')
      .select(['id', 'account_id', 'role', 'issuer', 'subject', 'display_name', 'expires_at', 'revoked_at'])
      .where('token_hash', '=', tokenHash(token))
      .executeTakeFirst();
    if (!row || row.revoked_at !== null || row.expires_at.getTime() <= this.now()) throw invalidSession();
    return {
      sessionId: row.id,
      accountId: row.account_id ?? '',
      role: row.role,
      issuer: row.issuer,
      subject: row.subject,
      displayName: row.display_name,
      expiresAtMs: BigInt(row.expires_at.getTime()),
    };
  }

  async revokeSession(token: string): Promise<boolean> {
    if (!isWellFormedSessionToken(token)) return false;
    const result = await this.db
      .updateTable('sessions')
      .set({ revoked_at: new Date(this.now()) })
      .where('token_hash', '=', tokenHash(token))
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    return result.numUpdatedRows > 0n;
  }
}
