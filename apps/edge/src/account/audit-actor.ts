import type { Request } from 'express';
import { tokenFingerprint, type AuditActorKind } from '@gateway/platform';

/*
 * Who the edge says asks for a change (the audit log's actor, docs/governance.md): the credential it
 * verified and the peer address of the connection. Sent to the changing service as call metadata.
 */

export function auditActor(request: Request, kind: AuditActorKind, id: string): { kind: string; id: string; sourceAddress: string } {
  // The socket's peer, not X-Forwarded-For: a header is the client's to write.
  return { kind, id, sourceAddress: request.socket.remoteAddress ?? '' };
}

/** The admin token's actor: a fingerprint that tells tokens apart and reveals nothing of them. */
export function adminActor(request: Request, token: string) {
  return auditActor(request, 'admin_token', tokenFingerprint(token));
}
