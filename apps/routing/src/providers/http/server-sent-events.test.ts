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

/** The reader as it was before it scanned for separators by hand (regular expressions, a slice per event): the reference. */
async function* referenceReader(body: AsyncIterable<Buffer | string>): AsyncGenerator<ServerSentEvent> {
  const decoder = new TextDecoder();
  let buffer = '';
  const parse = (block: string): ServerSentEvent | undefined => {
    let name = '';
    let data: string | undefined;
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('data:')) {
        const value = line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5);
        data = data === undefined ? value : `${data}\n${value}`;
      } else if (line.startsWith('event:')) {
        name = line.charCodeAt(6) === 32 ? line.slice(7) : line.slice(6);
      }
    }
    return data === undefined ? undefined : { event: name, data };
  };
  for await (const chunk of body) {
    buffer += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
    for (;;) {
      const match = /\r?\n\r?\n/.exec(buffer);
      if (!match) break;
      const block = buffer.slice(0, match.index);
      buffer = buffer.slice(match.index + match[0].length);
      const event = parse(block);
      if (event !== undefined) yield event;
    }
  }
  const rest = parse(buffer);
  if (rest !== undefined) yield rest;
}

describe('readServerSentEvents against the regular-expression reader', () => {
  it('reads the same events from random texts of SSE pieces cut at random places', async () => {
    // A seeded generator: the same cases on every run.
    let seed = 39;
    const random = (below: number) => {
      // xorshift32, in 32-bit integers.
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) % below;
    };
    const pieces = ['data:', 'data: ', 'event: x', 'event:', ': c', 'x', '{"a":1}', '\n', '\r', '\r\n', '\n\n', '\r\n\r\n', '\n\r\n', '\r\r', ' ', 'é'];
    for (let round = 0; round < 2_000; round++) {
      const text = Array.from({ length: 1 + random(24) }, () => pieces[random(pieces.length)]).join('');
      const bytes = Buffer.from(text);
      const cuts = [...new Set(Array.from({ length: random(4) }, () => random(bytes.length + 1)))].sort((a, b) => a - b);
      const reads = [0, ...cuts, bytes.length].slice(1).map((end, index, ends) => bytes.subarray(index === 0 ? 0 : ends[index - 1], end));
      async function* body() {
        for (const read of reads) yield read;
      }
      const expected: ServerSentEvent[] = [];
      for await (const event of referenceReader(body())) expected.push(event);
      expect(await readAll(body()), JSON.stringify(text)).toEqual(expected);
    }
  });
});
