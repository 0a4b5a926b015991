import { EventStreamCodec } from '@smithy/eventstream-codec';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';

/**
 * The bench upstream's Bedrock answers (Converse and ConverseStream), built once when the module loads:
 * the same exchange as the OpenAI wire's (one line of text, 9 tokens in, 7 out).
 *
 * Shapes as Bedrock sends them (checked against aws-sdk-js-v3's client-bedrock-runtime deserializers):
 * Converse answers `{ output: { message }, stopReason, usage, metrics }`; ConverseStream answers binary
 * `application/vnd.amazon.eventstream` frames, each with the headers `:event-type` (the member of the
 * ConverseStreamOutput union: messageStart, contentBlockDelta, contentBlockStop, messageStop, metadata),
 * `:content-type: application/json` and `:message-type: event`, its payload the event's JSON. Payloads
 * carry the `p` padding field Bedrock adds, and a text block has no contentBlockStart event.
 */

const codec = new EventStreamCodec(toUtf8, fromUtf8);

/** One event frame of a ConverseStream answer. */
export function bedrockEventFrame(eventType: string, payload: object): Uint8Array {
  return codec.encode({
    headers: {
      ':event-type': { type: 'string', value: eventType },
      ':content-type': { type: 'string', value: 'application/json' },
      ':message-type': { type: 'string', value: 'event' },
    },
    body: fromUtf8(JSON.stringify(payload)),
  });
}

/** Bedrock pads payloads with a run of letters and digits of varying length; fixed ones here. */
const PADDING = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
const pad = (length: number) => PADDING.slice(0, length);

const USAGE = { inputTokens: 9, outputTokens: 7, totalTokens: 16 };

/** The whole answer of `/model/{id}/converse`. */
export const bedrockJsonAnswer = Buffer.from(
  JSON.stringify({
    output: { message: { role: 'assistant', content: [{ text: 'Hello from the bench upstream.' }] } },
    stopReason: 'end_turn',
    usage: USAGE,
    metrics: { latencyMs: 10 },
  }),
);

const frames = (...parts: Uint8Array[]) => Buffer.concat(parts);

/** The first frames of `/model/{id}/converse-stream`, sent at once: the message start and the first text. */
export const bedrockFirstFrames = frames(
  bedrockEventFrame('messageStart', { p: pad(11), role: 'assistant' }),
  bedrockEventFrame('contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'Hello' }, p: pad(23) }),
);
/** The rest, sent after the bench's first-chunk gap: two more deltas, the block's and message's ends, usage. */
export const bedrockRestFrames = frames(
  bedrockEventFrame('contentBlockDelta', { contentBlockIndex: 0, delta: { text: ' from the' }, p: pad(17) }),
  bedrockEventFrame('contentBlockDelta', { contentBlockIndex: 0, delta: { text: ' bench upstream.' }, p: pad(9) }),
  bedrockEventFrame('contentBlockStop', { contentBlockIndex: 0, p: pad(31) }),
  bedrockEventFrame('messageStop', { p: pad(5), stopReason: 'end_turn' }),
  bedrockEventFrame('metadata', { metrics: { latencyMs: 10 }, p: pad(3), usage: USAGE }),
);

/** What Bedrock answers a request without a SigV4 Authorization header with (403). */
export const bedrockMissingSignature = Buffer.from(JSON.stringify({ message: 'Missing Authentication Token' }));
