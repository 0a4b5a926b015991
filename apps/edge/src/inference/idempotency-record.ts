import type { StoredAnswer } from './idempotency-capture.js';

/**
 * One Idempotency-Key's record in the key-value bucket (idempotency.ts), by state: `running` (a request
 * holds the key's claim until `until`, ms since the epoch, unless it renews it), `released` (the first
 * request kept nothing; the next one runs), `done` (the answer to send again), `too-large` (the answer
 * was over the bound: duplicates are refused). `body` is the digest of the body the key is bound to.
 */
export type IdempotencyRecord =
  | { state: 'running'; body: string; until: number }
  | { state: 'released'; body: string }
  | { state: 'done'; body: string; answer: StoredAnswer }
  | { state: 'too-large'; body: string; bytes: number };

interface RecordHead {
  v: 1;
  state: IdempotencyRecord['state'];
  body: string;
  until?: number;
  status?: number;
  headers?: [string, string][];
  bytes?: number;
}

/** Layout: the head's length (4 bytes, big-endian), the head as JSON, then the answer's bytes as they went out. */
export function encodeRecord(record: IdempotencyRecord): Uint8Array {
  const head: RecordHead = { v: 1, state: record.state, body: record.body };
  if (record.state === 'running') head.until = record.until;
  if (record.state === 'too-large') head.bytes = record.bytes;
  if (record.state === 'done') {
    head.status = record.answer.status;
    head.headers = record.answer.headers;
  }
  const headBytes = Buffer.from(JSON.stringify(head));
  const length = Buffer.alloc(4);
  length.writeUInt32BE(headBytes.byteLength);
  return Buffer.concat([length, headBytes, record.state === 'done' ? record.answer.body : Buffer.alloc(0)]);
}

/** The record in `value`; undefined when it is not one (another version's, or damaged): such a key is free to take over. */
export function decodeRecord(value: Uint8Array): IdempotencyRecord | undefined {
  try {
    const buffer = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
    const headLength = buffer.readUInt32BE(0);
    if (4 + headLength > buffer.byteLength) return undefined;
    const head = JSON.parse(buffer.subarray(4, 4 + headLength).toString('utf8')) as RecordHead;
    if (head.v !== 1 || typeof head.body !== 'string') return undefined;
    switch (head.state) {
      case 'running':
        return typeof head.until === 'number' ? { state: 'running', body: head.body, until: head.until } : undefined;
      case 'released':
        return { state: 'released', body: head.body };
      case 'too-large':
        return { state: 'too-large', body: head.body, bytes: head.bytes ?? 0 };
      case 'done':
        if (typeof head.status !== 'number' || !Array.isArray(head.headers)) return undefined;
        return { state: 'done', body: head.body, answer: { status: head.status, headers: head.headers, body: buffer.subarray(4 + headLength) } };
      default:
        return undefined;
    }
  } catch {
    return undefined;
  }
}
