import { describe, expect, it } from 'vitest';
import { encodeBedrockEvent, encodeBedrockException } from '@gateway/testing';
import { ProviderError } from '../provider-adapter.js';
import { EventStreamCodec, Int64, type MessageHeaders } from '@smithy/eventstream-codec';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import { EventStreamDecoder, readEventStream, type EventStreamFrame } from './bedrock-eventstream.js';

async function readAll(chunks: Buffer[]): Promise<EventStreamFrame[]> {
  async function* body() {
    for (const chunk of chunks) yield chunk;
  }
  const frames: EventStreamFrame[] = [];
  for await (const frame of readEventStream(body())) frames.push(frame);
  return frames;
}

async function failure(chunks: Buffer[]): Promise<ProviderError> {
  const error = await readAll(chunks).then(() => undefined, (caught: unknown) => caught);
  expect(error).toBeInstanceOf(ProviderError);
  return error as ProviderError;
}

describe('readEventStream', () => {
  it('yields whole frames however the bytes are split, with their type, name and payload', async () => {
    const bytes = Buffer.concat([
      encodeBedrockEvent('messageStart', { role: 'assistant' }, 0),
      encodeBedrockEvent('contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'héllo' } }, 1),
      encodeBedrockException('throttlingException', 'slow down'),
    ]);
    const expected = [
      { messageType: 'event', name: 'messageStart' },
      { messageType: 'event', name: 'contentBlockDelta' },
      { messageType: 'exception', name: 'throttlingException' },
    ];
    for (const size of [1, 7, 64, bytes.length]) {
      const chunks: Buffer[] = [];
      for (let start = 0; start < bytes.length; start += size) chunks.push(bytes.subarray(start, start + size));
      const frames = await readAll(chunks);
      expect(frames.map(({ messageType, name }) => ({ messageType, name }))).toEqual(expected);
      expect(JSON.parse(frames[1]!.payload)).toMatchObject({ contentBlockIndex: 0, delta: { text: 'héllo' }, p: expect.any(String) });
      expect(JSON.parse(frames[2]!.payload)).toEqual({ message: 'slow down' });
    }
  });

  it('refuses a corrupted frame (CRC), an absurd length and a body that ends inside a frame', async () => {
    const frame = Buffer.from(encodeBedrockEvent('messageStop', { stopReason: 'end_turn' }));
    const corrupted = Buffer.from(frame);
    corrupted[corrupted.length - 6] = corrupted[corrupted.length - 6]! ^ 0xff;
    expect((await failure([corrupted])).kind).toBe('connection');
    const huge = Buffer.alloc(16);
    huge.writeUInt32BE(64 * 1024 * 1024, 0);
    expect((await failure([huge])).providerMessage).toMatch(/bytes/);
    expect((await failure([frame.subarray(0, frame.length - 3)])).providerMessage).toMatch(/inside an eventstream message/);
  });
});

describe('EventStreamDecoder', () => {
  const codec = new EventStreamCodec(toUtf8, fromUtf8);
  const message = (headers: MessageHeaders, body: string) => Buffer.from(codec.encode({ headers, body: fromUtf8(body) }));

  it('reads every header type as the smithy codec does, and error frames by their code and message', async () => {
    const withAllTypes = message(
      {
        ':message-type': { type: 'string', value: 'event' },
        yes: { type: 'boolean', value: true },
        no: { type: 'boolean', value: false },
        b: { type: 'byte', value: 7 },
        s: { type: 'short', value: 300 },
        i: { type: 'integer', value: 70000 },
        l: { type: 'long', value: Int64.fromNumber(5) },
        raw: { type: 'binary', value: new Uint8Array([1, 2, 3]) },
        when: { type: 'timestamp', value: new Date(0) },
        id: { type: 'uuid', value: '4d9a4b2e-0c8f-4a8e-9d1f-7a6b5c4d3e2f' },
        ':content-type': { type: 'string', value: 'application/json' },
        ':event-type': { type: 'string', value: 'messageStop' },
      },
      '{"stopReason":"end_turn","é":"ü"}',
    );
    const error = message({ ':message-type': { type: 'string', value: 'error' }, ':error-code': { type: 'string', value: 'InternalFailure' }, ':error-message': { type: 'string', value: 'boom' } }, '');
    const bare = message({ ':message-type': { type: 'string', value: 'error' }, ':error-code': { type: 'string', value: 'X' } }, 'body text');
    expect(await readAll([withAllTypes, error, bare])).toEqual([
      { messageType: 'event', name: 'messageStop', payload: '{"stopReason":"end_turn","é":"ü"}' },
      { messageType: 'error', name: 'InternalFailure', payload: 'boom' },
      { messageType: 'error', name: 'X', payload: 'body text' },
    ]);
    expect(codec.decode(withAllTypes).headers[':event-type']).toEqual({ type: 'string', value: 'messageStop' });
  });

  it('refuses a corrupted prelude, as the codec does, and reads a frame at a time', async () => {
    const frame = Buffer.from(encodeBedrockEvent('messageStop', { stopReason: 'end_turn' }));
    const badPrelude = Buffer.from(frame);
    badPrelude[9] = badPrelude[9]! ^ 0xff;
    expect((await failure([badPrelude])).providerMessage).toMatch(/prelude checksum/);
    expect(() => codec.decode(badPrelude)).toThrow();
    const decoder = new EventStreamDecoder();
    decoder.push(frame);
    expect(decoder.next()?.name).toBe('messageStop');
    expect(decoder.next()).toBeUndefined();
    decoder.end();
  });
});
