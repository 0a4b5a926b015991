import { describe, expect, it } from 'vitest';
import { encodeBedrockEvent, encodeBedrockException } from '@gateway/testing';
import { ProviderError } from '../provider-adapter.js';
import { readEventStream, type EventStreamFrame } from './bedrock-eventstream.js';

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
