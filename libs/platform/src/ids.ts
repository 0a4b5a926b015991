import { randomBytes, randomUUID } from 'node:crypto';

/** A caller-supplied x-request-id is echoed (and logged) when it is short and printable. */
const acceptableRequestId = /^[A-Za-z0-9._:-]{8,128}$/;

export function isAcceptableRequestId(candidate: string): boolean {
  return acceptableRequestId.test(candidate);
}

export function newRequestId(): string {
  return `req_${randomUUID().replaceAll('-', '')}`;
}

/** Random identifier with a type prefix, e.g. `acc_3f9a…`. */
export function newId(prefix: string, bytes = 12): string {
  return `${prefix}_${randomBytes(bytes).toString('hex')}`;
}
