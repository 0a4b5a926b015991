import { crc32 } from 'node:zlib';
import { ProviderError } from '../provider-adapter.js';

/** Largest single eventstream message we accept (the format's own limit is 16 MiB). */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
/** Prelude: total length (4 bytes), headers length (4), prelude CRC (4); the message CRC closes it (4). */
const PRELUDE_BYTES = 12;
const MINIMUM_MESSAGE_BYTES = 16;

/** Value sizes of the fixed-size header types (0 true, 1 false, 2 byte, 3 short, 4 int, 5 long, 8 timestamp, 9 uuid). */
const FIXED_VALUE_BYTES = [0, 0, 1, 2, 4, 8, -1, -1, 8, 16];
/** Header types with a 2-byte length before the value: 6 byte array, 7 string. */
const BYTES_TYPE = 6;
const STRING_TYPE = 7;

/** The header names we read, as bytes: matched in place, so no header name is ever decoded. */
const MESSAGE_TYPE = Buffer.from(':message-type', 'latin1');
const EVENT_TYPE = Buffer.from(':event-type', 'latin1');
const EXCEPTION_TYPE = Buffer.from(':exception-type', 'latin1');
const ERROR_CODE = Buffer.from(':error-code', 'latin1');
const ERROR_MESSAGE = Buffer.from(':error-message', 'latin1');
const EVENT = Buffer.from('event', 'latin1');

/** Whether `bytes` hold `expected` from `start` on (the caller knows the lengths are equal). */
function sameBytes(bytes: Buffer, start: number, expected: Buffer): boolean {
  for (let index = 0; index < expected.length; index++) if (bytes[start + index] !== expected[index]) return false;
  return true;
}

/** A decoded frame: its `:message-type`, `:event-type` / `:exception-type` and the payload as text. */
export interface EventStreamFrame {
  messageType: string;
  /** `:event-type` of an event, `:exception-type` of an exception, `:error-code` of an error. */
  name: string;
  payload: string;
}

function malformed(reason: string): ProviderError {
  return new ProviderError('connection', `malformed eventstream message: ${reason}`);
}

/**
 * One message (`total` bytes at `start` of `bytes`) as a frame: both CRCs checked (node:zlib's native
 * crc32), the headers walked in place (names matched as bytes) and only the values we read decoded, the payload
 * decoded straight from the message's bytes (no copy). Same checks as the smithy codec's `decode`.
 */
function decodeMessage(bytes: Buffer, start: number, total: number): EventStreamFrame {
  const end = start + total;
  const headersLength = bytes.readUInt32BE(start + 4);
  if (crc32(bytes.subarray(start, start + 8)) !== bytes.readUInt32BE(start + 8)) throw malformed('prelude checksum mismatch');
  if (crc32(bytes.subarray(start, end - 4)) !== bytes.readUInt32BE(end - 4)) throw malformed('message checksum mismatch');
  const headersEnd = start + PRELUDE_BYTES + headersLength;
  if (headersEnd > end - 4) throw malformed('headers longer than the message');
  let messageType = '';
  let eventType = '';
  let exceptionType = '';
  let errorCode = '';
  let errorMessage = '';
  let at = start + PRELUDE_BYTES;
  while (at < headersEnd) {
    const nameLength = bytes[at]!;
    const nameStart = at + 1;
    at = nameStart + nameLength;
    if (at >= headersEnd) throw malformed('header cut short');
    const type = bytes[at++]!;
    if (type === STRING_TYPE || type === BYTES_TYPE) {
      if (at + 2 > headersEnd) throw malformed('header cut short');
      const valueLength = bytes.readUInt16BE(at);
      const valueStart = at + 2;
      at = valueStart + valueLength;
      if (at > headersEnd) throw malformed('header cut short');
      // The names we read all start with ':' and are 11 to 15 bytes long; anything else is skipped undecoded.
      if (type !== STRING_TYPE || bytes[nameStart] !== 0x3a || nameLength < 11 || nameLength > 15) continue;
      if (nameLength === MESSAGE_TYPE.length && sameBytes(bytes, nameStart, MESSAGE_TYPE)) {
        // Nearly every message is an event: its type is not decoded either.
        messageType = valueLength === EVENT.length && sameBytes(bytes, valueStart, EVENT) ? 'event' : bytes.toString('utf8', valueStart, at);
      } else if (nameLength === EVENT_TYPE.length && sameBytes(bytes, nameStart, EVENT_TYPE)) {
        eventType = bytes.toString('utf8', valueStart, at);
      } else if (nameLength === EXCEPTION_TYPE.length && sameBytes(bytes, nameStart, EXCEPTION_TYPE)) {
        exceptionType = bytes.toString('utf8', valueStart, at);
      } else if (nameLength === ERROR_CODE.length && sameBytes(bytes, nameStart, ERROR_CODE)) {
        errorCode = bytes.toString('utf8', valueStart, at);
      } else if (nameLength === ERROR_MESSAGE.length && sameBytes(bytes, nameStart, ERROR_MESSAGE)) {
        errorMessage = bytes.toString('utf8', valueStart, at);
      }
    } else {
      const size = type < FIXED_VALUE_BYTES.length ? FIXED_VALUE_BYTES[type]! : -1;
      if (size < 0) throw malformed(`unknown header type ${type}`);
      at += size;
      if (at > headersEnd) throw malformed('header cut short');
    }
  }
  const name = messageType === 'exception' ? exceptionType : messageType === 'error' ? errorCode : eventType;
  const payload = messageType === 'error' && errorMessage ? errorMessage : bytes.toString('utf8', headersEnd, end - 4);
  return { messageType, name, payload };
}

/**
 * Splits an `application/vnd.amazon.eventstream` body into frames as its chunks arrive: `push` a chunk,
 * then take frames with `next` until it answers undefined. A message split across chunks is kept (only
 * its bytes) until the rest arrives; one that fits in a chunk is decoded in place.
 */
export class EventStreamDecoder {
  private chunk: Buffer = Buffer.alloc(0);
  private offset = 0;

  push(chunk: Buffer): void {
    const rest = this.chunk.length - this.offset;
    if (rest === 0) {
      this.chunk = chunk;
    } else {
      // Rare (a message split across reads): only the unread tail is joined with the new chunk.
      this.chunk = Buffer.concat([this.chunk.subarray(this.offset), chunk]);
    }
    this.offset = 0;
  }

  /** The next whole frame of what was pushed, or undefined when more bytes are needed. */
  next(): EventStreamFrame | undefined {
    const bytes = this.chunk;
    const start = this.offset;
    const available = bytes.length - start;
    if (available < 4) return undefined;
    const total = bytes.readUInt32BE(start);
    if (total < MINIMUM_MESSAGE_BYTES || total > MAX_MESSAGE_BYTES) throw new ProviderError('connection', `eventstream message of ${total} bytes`);
    if (available < total) return undefined;
    this.offset = start + total;
    return decodeMessage(bytes, start, total);
  }

  /** The body ended: throws if it ended inside a message. */
  end(): void {
    if (this.chunk.length > this.offset) throw new ProviderError('connection', 'stream ended inside an eventstream message');
  }
}

/**
 * The frames of an `application/vnd.amazon.eventstream` body as they complete. A body that ends inside a
 * message is a cut stream, as is a corrupted one (ProviderError connection). The adapter drives an
 * EventStreamDecoder directly; this is the same reading as one generator.
 */
export async function* readEventStream(body: AsyncIterable<Buffer>): AsyncGenerator<EventStreamFrame> {
  const decoder = new EventStreamDecoder();
  for await (const chunk of body) {
    decoder.push(chunk);
    for (let frame = decoder.next(); frame; frame = decoder.next()) yield frame;
  }
  decoder.end();
}
