import { randomBytes, randomUUID } from 'node:crypto';

/** A caller-supplied x-request-id is honoured when it is short and printable; otherwise we mint one. */
const acceptableRequestId = /^[A-Za-z0-9._:-]{8,128}$/;

export function newRequestId(): string {
  return `req_${randomUUID().replaceAll('-', '')}`;
}

export function acceptRequestId(candidate: string | undefined): string {
  return candidate !== undefined && acceptableRequestId.test(candidate) ? candidate : newRequestId();
}

/** Random identifier with a type prefix, e.g. `acc_3f9a…`. */
export function newId(prefix: string, bytes = 12): string {
  return `${prefix}_${randomBytes(bytes).toString('hex')}`;
}
