import { describe, expect, it } from 'vitest';
import { ProviderError } from '../provider-adapter.js';
import { readServerSentEvents, type ServerSentEvent } from './server-sent-events.js';

async function readAll(body: AsyncIterable<Buffer | string>): Promise<ServerSentEvent[]> {
  const events: ServerSentEvent[] = [];
  for await (const event of readServerSentEvents(body)) events.push(event);
  return events;
}

describe('readServerSentEvents', () => {
  it('joins events split across reads and CRLF framing, skipping comments', async () => {
    async function* body() {
      yield Buffer.from(': keep-alive\r\n\r\ndata: {"a"');
      yield Buffer.from(':1}\r\n\r\ndata: [DO');
      yield Buffer.from('NE]\n\n');
    }
    expect(await readAll(body())).toEqual([{ event: '', data: '{"a":1}' }, { event: '', data: '[DONE]' }]);
  });

  it('reads Gemini framing: every event ends in CRLF CRLF, the separator split across reads at each byte', async () => {
    const wire = 'data: {"n":1}\r\n\r\ndata: {"n":2}\r\n\r\n';
    const first = wire.indexOf('\r\n\r\n');
    for (let cut = first; cut <= first + 4; cut++) {
      async function* body() {
        yield Buffer.from(wire.slice(0, cut));
        yield Buffer.from(wire.slice(cut));
      }
      expect(await readAll(body())).toEqual([{ event: '', data: '{"n":1}' }, { event: '', data: '{"n":2}' }]);
    }
  });

  it('names each event by its event: line, joins multi-line data and skips events without data', async () => {
    async function* body() {
      yield 'event: message_start\ndata: {"type":"message_start"}\n\nevent: ping\n\n';
      yield 'event:content_block_delta\ndata:{"x":\ndata: 1}\n\n';
      // A multi-byte character split between two reads decodes whole.
      const bytes = Buffer.from('event: error\ndata: "é"\n\n');
      yield bytes.subarray(0, 21);
      yield bytes.subarray(21);
      yield 'event: message_stop\ndata: {}';
    }
    expect(await readAll(body())).toEqual([
      { event: 'message_start', data: '{"type":"message_start"}' },
      { event: 'content_block_delta', data: '{"x":\n1}' },
      { event: 'error', data: '"é"' },
      { event: 'message_stop', data: '{}' },
    ]);
  });

  it('refuses an event that never ends (bounded buffer)', async () => {
    async function* body() {
      const piece = `data: ${'x'.repeat(1024 * 1024)}`;
      for (let index = 0; index < 10; index++) yield index === 0 ? piece : 'x'.repeat(1024 * 1024);
    }
    const error = await readAll(body()).then(() => undefined, (caught: unknown) => caught);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).kind).toBe('connection');
  });
});
