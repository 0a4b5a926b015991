import { createHash, type Hash } from 'node:crypto';
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';

/*
 * The HTTP side of Idempotency-Key (idempotency.ts): what identifies a body, the answer as it went out
 * (status, headers, bytes — a stream's events are its bytes), and that answer sent again.
 */

/**
 * The digest of a request body for "same key, same body": the route's endpoint and the body's value
 * with object keys in sorted order, so the JSON's spacing and key order do not count, and bytes (a
 * multipart upload's files, as the route read them) by their content, not the upload's framing (each
 * client picks its own multipart boundary).
 */
export function bodyDigest(endpoint: string, value: unknown, headers: Readonly<Record<string, string>> = {}): string {
  const hash = createHash('sha256');
  hash.update(endpoint);
  hash.update('\0');
  feed(hash, value);
  // The request headers that change the answer (`anthropic-beta`, the routing strategy) count as the
  // body does; a request without them digests as before.
  const named = Object.keys(headers).filter((name) => headers[name] !== '').sort();
  if (named.length > 0) {
    hash.update('\0h');
    for (const name of named) feed(hash, [name, headers[name]]);
  }
  return hash.digest('base64url');
}

function feed(hash: Hash, value: unknown): void {
  if (value === null || value === undefined) {
    hash.update('n');
  } else if (typeof value === 'string') {
    hash.update(`s${Buffer.byteLength(value)}:`);
    hash.update(value);
  } else if (typeof value === 'number' || typeof value === 'bigint') {
    hash.update(`d${String(value)};`);
  } else if (typeof value === 'boolean') {
    hash.update(value ? 't' : 'f');
  } else if (value instanceof Uint8Array) {
    hash.update(`b${value.byteLength}:`);
    hash.update(value);
  } else if (Array.isArray(value)) {
    hash.update(`a${value.length}[`);
    for (const item of value) feed(hash, item);
    hash.update(']');
  } else if (typeof value === 'object') {
    const record = value as Record<string, unknown>;
    const keys = Object.keys(record).filter((key) => record[key] !== undefined).sort();
    hash.update(`o${keys.length}{`);
    for (const key of keys) {
      feed(hash, key);
      feed(hash, record[key]);
    }
    hash.update('}');
  } else {
    hash.update('?');
  }
}

/** An answer as it was sent: what a duplicate request gets back. */
export interface StoredAnswer {
  status: number;
  headers: [string, string][];
  body: Uint8Array;
}

/** Headers of the connection or of this very response, never repeated from a stored one. */
const UNSTORED_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'date', 'x-request-id']);

/** Marks an answer sent again from the store (the name Stripe uses). */
export const REPLAYED_HEADER = 'idempotent-replayed';

/**
 * Records what one response sends — its status and headers when they go out, and its bytes up to
 * `maxBytes` — by wrapping that response object's `writeHead`, `write` and `end` (only responses of
 * requests with an Idempotency-Key are wrapped). Past `maxBytes` it keeps only the count.
 */
export class AnswerCapture {
  status = 0;
  headers: [string, string][] = [];
  bytes = 0;
  private chunks: Buffer[] = [];

  constructor(response: ServerResponse, readonly maxBytes: number) {
    const capture = this;
    const writeHead = response.writeHead;
    const write = response.write;
    const end = response.end;
    // Node's implicit header (a first write or end without writeHead) goes through `this.writeHead` too.
    response.writeHead = function (this: ServerResponse, ...args: unknown[]) {
      capture.head(this, args);
      return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args);
    } as ServerResponse['writeHead'];
    response.write = function (this: ServerResponse, ...args: unknown[]) {
      capture.chunk(args[0], args[1]);
      return (write as (...a: unknown[]) => boolean).apply(this, args);
    } as ServerResponse['write'];
    response.end = function (this: ServerResponse, ...args: unknown[]) {
      if (typeof args[0] !== 'function') capture.chunk(args[0], args[1]);
      return (end as (...a: unknown[]) => ServerResponse).apply(this, args);
    } as ServerResponse['end'];
  }

  /** Over `maxBytes`: the answer was not kept whole. */
  get overflowed(): boolean {
    return this.bytes > this.maxBytes;
  }

  /** The answer as sent (only whole when not `overflowed`). */
  answer(): StoredAnswer {
    return { status: this.status, headers: this.headers, body: Buffer.concat(this.chunks) };
  }

  private head(response: ServerResponse, args: unknown[]): void {
    if (this.status !== 0) return;
    this.status = Number(args[0]);
    const given = typeof args[1] === 'string' ? args[2] : args[1];
    const merged: OutgoingHttpHeaders = { ...response.getHeaders() };
    if (Array.isArray(given)) {
      for (let index = 0; index + 1 < given.length; index += 2) merged[String(given[index]).toLowerCase()] = String(given[index + 1]);
    } else if (given && typeof given === 'object') {
      for (const [name, value] of Object.entries(given as OutgoingHttpHeaders)) merged[name.toLowerCase()] = value;
    }
    for (const [name, value] of Object.entries(merged)) {
      if (value === undefined || UNSTORED_HEADERS.has(name)) continue;
      if (Array.isArray(value)) for (const item of value) this.headers.push([name, String(item)]);
      else this.headers.push([name, String(value)]);
    }
  }

  private chunk(data: unknown, encoding: unknown): void {
    if (data === undefined || data === null) return;
    let buffer: Buffer;
    if (typeof data === 'string') buffer = Buffer.from(data, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8');
    else if (data instanceof Uint8Array) buffer = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    else return;
    this.bytes += buffer.byteLength;
    if (this.bytes > this.maxBytes) this.chunks = [];
    else this.chunks.push(buffer);
  }
}

/** Sends a stored answer again: its status, headers and bytes (a stream's events all at once), marked as replayed. */
export function replayAnswer(response: ServerResponse, answer: StoredAnswer): void {
  const headers: [string, string][] = [...answer.headers, [REPLAYED_HEADER, 'true']];
  response.writeHead(answer.status, headers.flat());
  response.end(answer.body);
}
