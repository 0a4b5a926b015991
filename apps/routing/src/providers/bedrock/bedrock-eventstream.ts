import { EventStreamCodec, type Message } from '@smithy/eventstream-codec';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import { ProviderError } from '../provider-adapter.js';

/** Largest single eventstream message we accept (the format's own limit is 16 MiB). */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
/** Prelude: total length (4 bytes), headers length (4), prelude CRC (4); the message CRC closes it (4). */
const MINIMUM_MESSAGE_BYTES = 16;

/** One codec per process: it holds no per-stream state for `decode`. */
const codec = new EventStreamCodec(toUtf8, fromUtf8);

/** A decoded frame: its `:message-type`, `:event-type` / `:exception-type` and the payload as text. */
export interface EventStreamFrame {
  messageType: string;
  /** `:event-type` of an event, `:exception-type` of an exception, `:error-code` of an error. */
  name: string;
  payload: string;
}

function headerString(message: Message, name: string): string {
  const header = message.headers[name];
  return header && header.type === 'string' ? header.value : '';
}

function frameOf(message: Message): EventStreamFrame {
  const messageType = headerString(message, ':message-type');
  const name =
    messageType === 'exception' ? headerString(message, ':exception-type')
      : messageType === 'error' ? headerString(message, ':error-code')
        : headerString(message, ':event-type');
  const payload = messageType === 'error' ? headerString(message, ':error-message') || toUtf8(message.body) : toUtf8(message.body);
  return { messageType, name, payload };
}

/**
 * The frames of an `application/vnd.amazon.eventstream` body as they complete. Chunks are gathered until
 * a whole message (its length is the first four bytes) is there; the smithy codec then checks both CRCs
 * and parses the headers. A body that ends inside a message is a cut stream (ProviderError connection).
 */
export async function* readEventStream(body: AsyncIterable<Buffer>): AsyncGenerator<EventStreamFrame> {
  let buffer: Buffer = Buffer.alloc(0);
  for await (const chunk of body) {
    buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk]);
    while (buffer.length >= 4) {
      const total = buffer.readUInt32BE(0);
      if (total < MINIMUM_MESSAGE_BYTES || total > MAX_MESSAGE_BYTES) throw new ProviderError('connection', `eventstream message of ${total} bytes`);
      if (buffer.length < total) break;
      let message: Message;
      try {
        message = codec.decode(buffer.subarray(0, total));
      } catch (error) {
        throw new ProviderError('connection', `malformed eventstream message: ${(error as Error).message}`, 0, { cause: error });
      }
      buffer = buffer.subarray(total);
      yield frameOf(message);
    }
  }
  if (buffer.length > 0) throw new ProviderError('connection', 'stream ended inside an eventstream message');
}
