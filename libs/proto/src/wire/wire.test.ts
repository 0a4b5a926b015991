import { describe, expect, it } from 'vitest';
import { UsageEvent, UsageEventBatch } from '../index.js';
import { encodeRepeatedBytes } from './length-delimited.js';
import { asBuffer, reusedWriterEncoder } from './reused-writer.js';

const event = (requestId: string, outputTokens: number) =>
  UsageEvent.fromPartial({ requestId, accountId: 'acc', modelId: 'acme/chat', usage: { inputTokens: 3, outputTokens } });

describe('wire helpers', () => {
  it('gathers messages encoded already into a repeated field that decodes as the message', () => {
    const encode = reusedWriterEncoder(UsageEvent);
    // Messages of every size class: a length past 127 needs a two-byte varint.
    const events = [event('a', 1), event('b'.repeat(200), 2), event('c'.repeat(20_000), 3)];
    const bytes = encodeRepeatedBytes(2, events.map((each) => encode(each).slice()), { field: 1, bytes: Buffer.from('batch-1') });
    const decoded = UsageEventBatch.decode(bytes);
    expect(decoded.batchId).toBe('batch-1');
    expect(decoded.events.map((each) => [each.requestId.length, each.usage?.outputTokens])).toEqual([[1, 1], [200, 2], [20_000, 3]]);
    expect(UsageEventBatch.decode(encodeRepeatedBytes(2, [])).events).toEqual([]);
  });

  it('reuses one writer, and a failed encode does not leak into the next', () => {
    const encode = reusedWriterEncoder(UsageEvent);
    const first = encode(event('first', 5)).slice();
    expect(UsageEvent.decode(first).requestId).toBe('first');
    expect(() => encode({ ...event('bad', 1), occurredAtMs: 2n ** 70n })).toThrow();
    const after = encode(event('after', 6));
    expect(UsageEvent.decode(after)).toMatchObject({ requestId: 'after', usage: { outputTokens: 6 } });
    const view = asBuffer(after);
    expect(Buffer.isBuffer(view) && view.buffer === after.buffer && view.byteLength === after.byteLength).toBe(true);
  });
});
