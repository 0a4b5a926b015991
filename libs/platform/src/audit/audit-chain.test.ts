import { Metadata } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import {
  AUDIT_GENESIS_HASH, AuditChainVerifier, auditActorFromMetadata, auditEntryHash, decodeAuditCursor, encodeAuditCursor, type AuditRecord,
} from './audit-chain.js';

function chainOf(length: number): Array<AuditRecord & { hash: string }> {
  const entries: Array<AuditRecord & { hash: string }> = [];
  let previous = AUDIT_GENESIS_HASH;
  for (let seq = 1n; seq <= BigInt(length); seq++) {
    const record: AuditRecord = {
      chain: 'auth', seq, occurredAtMs: 1_767_225_600_000n + seq, actorKind: 'provisioning_key', actorId: 'pkey_1', accountId: 'acc_1',
      action: 'api_key.update', targetType: 'api_key', targetId: `key_${seq}`, beforeJson: '{"disabled":false}', afterJson: '{"disabled":true}',
      requestId: `req_${seq}`, sourceAddress: '127.0.0.1', prevHash: previous,
    };
    const hash = auditEntryHash(record);
    entries.push({ ...record, hash });
    previous = hash;
  }
  return entries;
}

function verify(entries: Array<AuditRecord & { hash: string }>, head = entries[entries.length - 1]) {
  const verifier = new AuditChainVerifier('auth');
  for (const entry of entries) verifier.add(entry);
  return verifier.finish(head?.seq ?? 0n, head?.hash ?? AUDIT_GENESIS_HASH);
}

describe('audit chain', () => {
  it('accepts an intact chain and an empty one', () => {
    expect(verify(chainOf(5))).toBeUndefined();
    expect(verify([])).toBeUndefined();
  });

  it('names the entry whose field changed, whichever field it is', () => {
    const fields = ['occurredAtMs', 'actorKind', 'actorId', 'accountId', 'action', 'targetType', 'targetId', 'beforeJson', 'afterJson', 'requestId', 'sourceAddress'] as const;
    for (const field of fields) {
      const entries = chainOf(5);
      const entry = entries[2]!;
      (entry as unknown as Record<string, unknown>)[field] = typeof entry[field] === 'bigint' ? (entry[field] as bigint) + 1n : `${entry[field] as string}x`;
      expect(verify(entries), field).toMatchObject({ seq: 3n, reason: expect.stringMatching(/altered/) });
    }
  });

  it('names the next entry when an entry was rewritten with a fresh hash, and a gap or a cut head', () => {
    const rehashed = chainOf(5);
    rehashed[1] = { ...rehashed[1]!, afterJson: '{"forged":true}' };
    rehashed[1]!.hash = auditEntryHash(rehashed[1]!);
    expect(verify(rehashed)).toMatchObject({ seq: 3n, reason: expect.stringMatching(/prev_hash/) });

    const gap = chainOf(5);
    gap.splice(1, 1);
    expect(verify(gap)).toMatchObject({ seq: 2n, reason: expect.stringMatching(/missing/) });

    const entries = chainOf(5);
    const head = entries[4]!;
    expect(verify(entries.slice(0, 4), head)).toMatchObject({ seq: 5n, reason: expect.stringMatching(/missing/) });
  });

  it('reads an actor claim only when it is one of the kinds, printable and short', () => {
    const metadata = (actor: string, source = '10.0.0.1') => {
      const value = new Metadata();
      value.set('x-gateway-actor', actor);
      value.set('x-gateway-source-address', source);
      return value;
    };
    expect(auditActorFromMetadata(metadata('provisioning_key:pkey_1'), 'service')).toEqual({ kind: 'provisioning_key', id: 'pkey_1', sourceAddress: '10.0.0.1' });
    expect(auditActorFromMetadata(metadata('root:me'), 'admin')).toEqual({ kind: 'admin_token', id: '', sourceAddress: '10.0.0.1' });
    expect(auditActorFromMetadata(metadata(`gatewayctl:${'x'.repeat(300)}`), undefined)).toMatchObject({ kind: 'unknown', id: '' });
    expect(auditActorFromMetadata(new Metadata(), 'service')).toEqual({ kind: 'unknown', id: '', sourceAddress: '' });
  });

  it('round-trips its cursors and refuses others', () => {
    expect(decodeAuditCursor(encodeAuditCursor(42n))).toBe(42n);
    expect(decodeAuditCursor('')).toBeUndefined();
    for (const bad of ['!!', Buffer.from('audit1.0').toString('base64url'), Buffer.from('audit1.-1').toString('base64url'), Buffer.from('other.5').toString('base64url')]) {
      expect(() => decodeAuditCursor(bad)).toThrow(/cursor/);
    }
  });
});
