import { createHash } from 'node:crypto';
import type { Metadata } from '@grpc/grpc-js';
import { errors } from '../grpc/errors.js';

/*
 * The audit log's hash chain (docs/governance.md). Pure code, shared by the services that append
 * entries (libs/platform/db audit-log.ts) and by whoever verifies a chain (gatewayctl audit verify),
 * so both compute the same bytes.
 *
 * An entry's hash is sha-256 over its canonical encoding: a JSON array of a version tag and every
 * recorded field in a fixed order, the previous entry's hash last. JSON.stringify of an array of
 * strings is deterministic (no key order to agree on), and before/after are stored as the exact JSON
 * text that was hashed (not jsonb, which would reorder keys), so a row read back re-hashes to the same
 * value unless a byte of it changed.
 */

export const AUDIT_GENESIS_HASH = '0'.repeat(64);
const ENCODING_VERSION = 'gateway-audit-v1';

/** `user`: a person signed in with the identity provider (id: `issuer#subject`). */
export const AUDIT_ACTOR_KINDS = ['provisioning_key', 'admin_token', 'user', 'gatewayctl', 'service', 'unknown'] as const;
export type AuditActorKind = (typeof AUDIT_ACTOR_KINDS)[number];

/** Who made a change and from where, as the service learned it from its trusted caller. */
export interface AuditActor {
  kind: AuditActorKind;
  /** A provisioning key id, an admin token fingerprint, a signed-in person, a service name; never a secret. */
  id: string;
  /** The caller's address as the edge saw it; '' when the change did not come through the edge. */
  sourceAddress: string;
}

/** Every field an entry's hash covers. */
export interface AuditRecord {
  chain: string;
  seq: bigint;
  occurredAtMs: bigint;
  actorKind: string;
  actorId: string;
  accountId: string;
  action: string;
  targetType: string;
  targetId: string;
  beforeJson: string;
  afterJson: string;
  requestId: string;
  sourceAddress: string;
  prevHash: string;
}

export function canonicalAuditEncoding(record: AuditRecord): string {
  return JSON.stringify([
    ENCODING_VERSION,
    record.chain,
    record.seq.toString(),
    record.occurredAtMs.toString(),
    record.actorKind,
    record.actorId,
    record.accountId,
    record.action,
    record.targetType,
    record.targetId,
    record.beforeJson,
    record.afterJson,
    record.requestId,
    record.sourceAddress,
    record.prevHash,
  ]);
}

export function auditEntryHash(record: AuditRecord): string {
  return createHash('sha256').update(canonicalAuditEncoding(record)).digest('hex');
}

/** The first entry of a chain that does not hold, and why. */
export interface AuditChainBreak {
  chain: string;
  /** The seq of the first bad entry (for a missing entry: the seq that should have come). */
  seq: bigint;
  reason: string;
}

/**
 * Walks a chain's entries in seq order, from seq 1 or from a known good entry. Feed pages in order;
 * `finish` checks the recorded head against the last entry seen (a deleted newest entry).
 */
export class AuditChainVerifier {
  private expectedSeq = 1n;
  private previousHash = AUDIT_GENESIS_HASH;
  private broken: AuditChainBreak | undefined;
  entriesChecked = 0;

  constructor(readonly chain: string) {}

  get firstBreak(): AuditChainBreak | undefined {
    return this.broken;
  }

  /** Checks one entry (with the hash stored beside it); false once the chain is broken. */
  add(record: AuditRecord & { hash: string }): boolean {
    if (this.broken) return false;
    const fail = (seq: bigint, reason: string) => {
      this.broken = { chain: this.chain, seq, reason };
      return false;
    };
    if (record.chain !== this.chain) return fail(record.seq, `entry belongs to chain "${record.chain}"`);
    if (record.seq !== this.expectedSeq) {
      return record.seq > this.expectedSeq
        ? fail(this.expectedSeq, `entry missing (the next entry present is seq ${record.seq})`)
        : fail(record.seq, `seq out of order (expected ${this.expectedSeq})`);
    }
    if (record.prevHash !== this.previousHash) return fail(record.seq, `prev_hash does not match the hash of seq ${record.seq - 1n} (that entry or this link was altered)`);
    if (auditEntryHash(record) !== record.hash) return fail(record.seq, 'hash does not match the entry\'s contents (altered)');
    this.previousHash = record.hash;
    this.expectedSeq += 1n;
    this.entriesChecked += 1;
    return true;
  }

  /** The recorded head must be the last entry walked: otherwise entries after it were deleted. */
  finish(headSeq: bigint, headHash: string): AuditChainBreak | undefined {
    if (this.broken) return this.broken;
    const lastSeq = this.expectedSeq - 1n;
    if (headSeq > lastSeq) this.broken = { chain: this.chain, seq: lastSeq + 1n, reason: `entry missing (the head names seq ${headSeq})` };
    else if (headSeq < lastSeq) this.broken = { chain: this.chain, seq: headSeq + 1n, reason: 'entry past the recorded head (appended without the head)' };
    else if (headHash !== this.previousHash) this.broken = { chain: this.chain, seq: lastSeq, reason: 'the recorded head hash differs from the newest entry\'s hash' };
    return this.broken;
  }
}

/* Actor metadata: set by trusted internal callers (the edge, gatewayctl), read by the changing service. */

export const AUDIT_ACTOR_METADATA = 'x-gateway-actor';
export const AUDIT_SOURCE_METADATA = 'x-gateway-source-address';
const ACTOR_ID_MAX_LENGTH = 200;
const SOURCE_ADDRESS_MAX_LENGTH = 100;
const PRINTABLE = /^[\x20-\x7e]*$/;

/** `kind:id` as metadata. */
export function encodeAuditActor(actor: Pick<AuditActor, 'kind' | 'id'>): string {
  return `${actor.kind}:${actor.id}`;
}

/** An opaque, stable name for a token (sha-256 prefix): tells two admin tokens apart without revealing either. */
export function tokenFingerprint(token: string): string {
  return `sha256:${createHash('sha256').update(token).digest('hex').slice(0, 16)}`;
}

/**
 * The actor of a call from its metadata. `credentialKind` is what the credential check recognised:
 * an admin credential with no (or a malformed) actor claim is recorded as `admin_token`, anything
 * else unclaimed as `unknown`; a claim that is not one of the kinds, too long or unprintable is
 * ignored rather than stored.
 */
export function auditActorFromMetadata(metadata: Metadata, credentialKind: 'admin' | 'service' | undefined): AuditActor {
  const claimed = metadata.get(AUDIT_ACTOR_METADATA)[0];
  const source = metadata.get(AUDIT_SOURCE_METADATA)[0];
  const sourceAddress = typeof source === 'string' && source.length <= SOURCE_ADDRESS_MAX_LENGTH && PRINTABLE.test(source) ? source : '';
  if (typeof claimed === 'string' && claimed.length <= ACTOR_ID_MAX_LENGTH && PRINTABLE.test(claimed)) {
    const colon = claimed.indexOf(':');
    const kind = colon < 0 ? claimed : claimed.slice(0, colon);
    const id = colon < 0 ? '' : claimed.slice(colon + 1);
    if ((AUDIT_ACTOR_KINDS as readonly string[]).includes(kind)) return { kind: kind as AuditActorKind, id, sourceAddress };
  }
  return { kind: credentialKind === 'admin' ? 'admin_token' : 'unknown', id: '', sourceAddress };
}

/** What a changing service needs to know about the call that asks for the change. */
export interface AuditCallContext {
  actor: AuditActor;
  requestId: string;
}

const REQUEST_ID_MAX_LENGTH = 200;

/** The actor and request id of a gRPC call (x-gateway-actor, x-gateway-source-address, x-request-id). */
export function auditCallContext(metadata: Metadata, credentialKind?: 'admin' | 'service'): AuditCallContext {
  const requestId = metadata.get('x-request-id')[0];
  return {
    actor: auditActorFromMetadata(metadata, credentialKind),
    requestId: typeof requestId === 'string' && requestId.length <= REQUEST_ID_MAX_LENGTH && PRINTABLE.test(requestId) ? requestId : '',
  };
}

/** A change made by the service itself or in a test: no caller to name. */
export const UNATTRIBUTED_AUDIT: AuditCallContext = { actor: { kind: 'unknown', id: '', sourceAddress: '' }, requestId: '' };

/* Page cursors of ListAuditEntries: a chain's seq, opaque to callers (the edge builds them for its merged pages). */

const CURSOR_PREFIX = 'audit1.';

/** The cursor of the page after the entry at `seq` (newest first: entries with a smaller seq). */
export function encodeAuditCursor(seq: bigint): string {
  return Buffer.from(`${CURSOR_PREFIX}${seq}`).toString('base64url');
}

export function decodeAuditCursor(cursor: string): bigint | undefined {
  if (cursor === '') return undefined;
  const bad = () => errors.invalidRequest('cursor is not one this service issued', 'cursor');
  if (cursor.length > 64 || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw bad();
  const text = Buffer.from(cursor, 'base64url').toString();
  if (!text.startsWith(CURSOR_PREFIX) || !/^[1-9][0-9]{0,18}$/.test(text.slice(CURSOR_PREFIX.length))) throw bad();
  return BigInt(text.slice(CURSOR_PREFIX.length));
}

