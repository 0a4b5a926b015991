import type { Request, Response } from 'express';
import { z } from 'zod';
import { encodeAuditCursor } from '@gateway/platform';
import type { AuditEntry, ListAuthAuditEntriesResponse as ListAuditEntriesResponse } from '@gateway/proto';
import { parseWith, queryCursor, queryInteger } from '../account/account-schemas.js';
import type { EdgeContext } from '../context.js';
import { edgeErrors } from '../errors.js';
import { sendJson } from '../http.js';
import { requestIdOf } from '../request-id.js';
import { accountFor } from './account-routes.js';
import { adminRoute } from './admin-routes.js';

/*
 * The audit log over HTTP (docs/governance.md): GET /v1/account/audit (the account's own entries, from
 * every chain, newest first) and GET /v1/admin/audit (one chain as stored, with hashes and its head,
 * for operators). Auth and the ledger each keep a chain; the account view merges their pages.
 */

const CALL_DEADLINE_MS = 5_000;
export const AUDIT_LIST_LIMIT_MAX = 100;
export const AUDIT_LIST_LIMIT_DEFAULT = 50;
export const ADMIN_AUDIT_LIMIT_MAX = 1_000;
/** The edge's merged cursor holds one service cursor (≤ 64 characters) per chain. */
const MERGED_CURSOR_MAX_LENGTH = 400;
const ACCOUNT_ID_MAX_LENGTH = 100;

const CHAINS = ['auth', 'ledger'] as const;
type ChainName = (typeof CHAINS)[number];
/** Per chain: its service cursor ('' = from the newest), or null once it has nothing older. */
type MergedCursor = Record<ChainName, string | null>;

const mergedCursorShape = z.strictObject({
  auth: z.string().max(64).nullable(),
  ledger: z.string().max(64).nullable(),
});

function decodeMergedCursor(cursor: string | undefined): MergedCursor {
  if (cursor === undefined || cursor === '') return { auth: '', ledger: '' };
  const invalid = () => edgeErrors.invalidRequest('query.cursor: is not valid', 'query.cursor');
  if (!/^[A-Za-z0-9_-]+$/.test(cursor)) throw invalid();
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString());
  } catch {
    throw invalid();
  }
  const result = mergedCursorShape.safeParse(parsed);
  if (!result.success) throw invalid();
  return result.data;
}

const encodeMergedCursor = (cursor: MergedCursor) => Buffer.from(JSON.stringify(cursor)).toString('base64url');

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** An entry as the HTTP routes show it. */
export function auditRecord(entry: AuditEntry) {
  return {
    object: 'audit_entry',
    id: `${entry.chain}-${entry.seq}`,
    chain: entry.chain,
    seq: Number(entry.seq),
    created_at: Number(entry.occurredAtMs / 1000n),
    occurred_at: new Date(Number(entry.occurredAtMs)).toISOString(),
    actor: { type: entry.actorKind, id: entry.actorId === '' ? null : entry.actorId },
    action: entry.action,
    target: { type: entry.targetType, id: entry.targetId },
    account_id: entry.accountId === '' ? null : entry.accountId,
    before: parseJson(entry.beforeJson),
    after: parseJson(entry.afterJson),
    request_id: entry.requestId === '' ? null : entry.requestId,
    source_address: entry.sourceAddress === '' ? null : entry.sourceAddress,
    prev_hash: entry.prevHash,
    hash: entry.hash,
  };
}

const accountAuditQuery = z.object({
  limit: queryInteger(1, AUDIT_LIST_LIMIT_MAX).optional(),
  cursor: queryCursor(MERGED_CURSOR_MAX_LENGTH).optional(),
});

/**
 * GET /v1/account/audit?limit=1..100 (default 50)&cursor=: the caller's account's entries from every
 * chain, newest first. Each service is asked for this account only (the account id comes from the
 * provisioning key, never from the query), so no page can hold another account's entry. The pages are
 * merged by time, always taking the newest head of either chain, so what is taken from a chain is a
 * prefix of its page and its cursor (the last seq taken) skips nothing.
 */
export function accountAuditHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const account = await accountFor(context, request, response, 'audit.read');
    const query = parseWith(accountAuditQuery, 'query', request.query);
    const limit = query.limit ?? AUDIT_LIST_LIMIT_DEFAULT;
    const state = decodeMergedCursor(query.cursor);
    const options = { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS };
    const ask = (chain: ChainName): Promise<ListAuditEntriesResponse> => {
      const cursor = state[chain];
      if (cursor === null) return Promise.resolve({ entries: [], nextCursor: '' });
      const page = { accountId: account.accountId, limit, cursor };
      return chain === 'auth' ? context.auth.listAuthAuditEntries(page, options) : context.ledger.listLedgerAuditEntries(page, options);
    };
    const [authPage, ledgerPage] = await Promise.all([ask('auth'), ask('ledger')]);
    const pages: Record<ChainName, ListAuditEntriesResponse> = { auth: authPage, ledger: ledgerPage };
    const taken: Record<ChainName, number> = { auth: 0, ledger: 0 };
    const merged: AuditEntry[] = [];
    while (merged.length < limit) {
      const authHead = pages.auth.entries[taken.auth];
      const ledgerHead = pages.ledger.entries[taken.ledger];
      if (!authHead && !ledgerHead) break;
      const chain: ChainName = !ledgerHead || (authHead && authHead.occurredAtMs >= ledgerHead.occurredAtMs) ? 'auth' : 'ledger';
      merged.push(pages[chain].entries[taken[chain]]!);
      taken[chain] += 1;
    }
    const next: MergedCursor = { auth: state.auth, ledger: state.ledger };
    for (const chain of CHAINS) {
      const page = pages[chain];
      if (state[chain] === null) continue;
      if (taken[chain] === page.entries.length && page.nextCursor === '') next[chain] = null;
      else if (taken[chain] > 0) next[chain] = encodeAuditCursor(page.entries[taken[chain] - 1]!.seq);
    }
    const hasMore = next.auth !== null || next.ledger !== null;
    sendJson(response, 200, {
      object: 'list',
      data: merged.map(auditRecord),
      has_more: hasMore,
      next_cursor: hasMore ? encodeMergedCursor(next) : null,
    });
  };
}

/** The admin view also reads the catalog's chain (its entries belong to no account). */
const ADMIN_CHAINS = ['auth', 'ledger', 'catalog'] as const;

const adminAuditQuery = z.object({
  chain: z.enum(ADMIN_CHAINS, { error: `must be one of ${ADMIN_CHAINS.join(', ')}` }),
  after_seq: z.string({ error: 'must be given once' }).regex(/^\d{1,18}$/, { error: 'must be a non-negative integer' }).optional(),
  limit: queryInteger(1, ADMIN_AUDIT_LIMIT_MAX).optional(),
  account_id: z.string({ error: 'must be given once' }).min(1, { error: 'must not be empty' }).max(ACCOUNT_ID_MAX_LENGTH, { error: `must be at most ${ACCOUNT_ID_MAX_LENGTH} characters` }).optional(),
});

/**
 * GET /v1/admin/audit?chain=auth|ledger|catalog&after_seq=&limit=1..1000&account_id=: one chain as stored,
 * oldest first, with its head; the admin token is the credential of Auth's/the ledger's ReadAuditChain.
 */
export function adminAuditHandler(context: EdgeContext) {
  return adminRoute(context, 'GET /v1/admin/audit', 'admin.audit.read', async (request, response, token) => {
    const query = parseWith(adminAuditQuery, 'query', request.query);
    const ask = { afterSeq: BigInt(query.after_seq ?? '0'), limit: query.limit ?? ADMIN_AUDIT_LIMIT_MAX, accountId: query.account_id ?? '' };
    const options = { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS, credential: token };
    const page = query.chain === 'auth' ? await context.auth.readAuthAuditChain(ask, options)
      : query.chain === 'ledger' ? await context.ledger.readLedgerAuditChain(ask, options)
      : await context.catalog.readCatalogAuditChain(ask, options);
    const last = page.entries[page.entries.length - 1];
    sendJson(response, 200, {
      object: 'list',
      chain: query.chain,
      data: page.entries.map(auditRecord),
      head: { seq: Number(page.headSeq), hash: page.headHash },
      next_after_seq: last && page.entries.length === ask.limit ? Number(last.seq) : null,
    });
    return { chain: query.chain, rows: page.entries.length };
  });
}
