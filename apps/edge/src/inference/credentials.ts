import type { IncomingMessage } from 'node:http';
import { ErrorReason, GatewayError, GrpcStatus } from '@gateway/platform';

/**
 * The credential a request presents (spec §5): `Authorization: Bearer <key>` first, then
 * `x-api-key`. `undefined` when none is presented; an empty string when one is presented but
 * malformed (e.g. `Authorization: Basic ...`), which is refused without asking Auth.
 */
export function presentedApiKey(request: IncomingMessage): string | undefined {
  const bearer = bearerToken(request);
  if (bearer !== undefined) return bearer;
  const header = request.headers['x-api-key'];
  return typeof header === 'string' ? header.trim() : undefined;
}

/** Provisioning keys travel only as `Authorization: Bearer` (spec §5). */
export function presentedProvisioningKey(request: IncomingMessage): string | undefined {
  return bearerToken(request);
}

function bearerToken(request: IncomingMessage): string | undefined {
  const header = request.headers.authorization;
  if (header === undefined) return undefined;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match ? (match[1] as string) : '';
}

export const malformedApiKey = () =>
  new GatewayError(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY, 'Invalid API key.');

export const malformedProvisioningKey = () =>
  new GatewayError(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_PROVISIONING_KEY, 'Invalid provisioning key.');
