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

/**
 * Property check against the format itself (WHATWG "server-sent events", as far as providers use it):
 * random events are written in every framing the reader accepts (LF or CRLF line ends, a space after
 * the colon or not, comments and other fields between lines, events without data), the bytes are cut
 * at random places, and the reader must give back exactly the events with data, in order.
 */
describe('readServerSentEvents on random framings of known events', () => {
  it('reads back the events written, whatever the framing and wherever the reads are cut', async () => {
    // A seeded generator: the same cases on every run.
    let seed = 39;
    const random = (below: number) => {
      // xorshift32, in 32-bit integers.
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) % below;
    };
    const pick = <T>(choices: readonly T[]): T => choices[random(choices.length)]!;
    // Field values: anything but CR and LF (a line end inside a value would start a new line).
    const valueParts = ['a', 'é', '{"a":1}', ' ', ':', 'data:', 'event: y', '[DONE]', '\u2028'];
    const value = () => Array.from({ length: random(4) }, () => pick(valueParts)).join('');
    const lineEnd = () => pick(['\n', '\r\n']);
    // A field line; without the optional space, a value that starts with a space would lose it: keep the space then.
    const field = (name: string, text: string) => `${name}:${text.startsWith(' ') || random(2) === 0 ? ' ' : ''}${text}${lineEnd()}`;
    const noise = () => pick([`: keep-alive${lineEnd()}`, `id: 7${lineEnd()}`, `retry: 100${lineEnd()}`, '']);
    for (let round = 0; round < 2_000; round++) {
      const expected: ServerSentEvent[] = [];
      let text = '';
      const count = random(5);
      for (let index = 0; index < count; index++) {
        const name = random(2) === 0 ? '' : pick(['message_start', 'ping', 'error', 'x']);
        const data = Array.from({ length: random(4) }, value);
        let lines = [...data.map((line) => field('data', line)), noise()];
        if (name !== '' || random(4) === 0) lines.splice(random(lines.length + 1), 0, field('event', name));
        if (random(3) === 0) lines = [noise(), ...lines];
        text += lines.join('');
        // The last event may end with the body instead of a blank line.
        if (index < count - 1 || random(2) === 0) text += lineEnd();
        if (data.length > 0) expected.push({ event: name, data: data.join('\n') });
      }
      const bytes = Buffer.from(text);
      const cuts = [...new Set(Array.from({ length: random(4) }, () => random(bytes.length + 1)))].sort((a, b) => a - b);
      const reads = [0, ...cuts, bytes.length].slice(1).map((end, index, ends) => bytes.subarray(index === 0 ? 0 : ends[index - 1], end));
      async function* body() {
        for (const read of reads) yield read;
      }
      expect(await readAll(body()), JSON.stringify(text)).toEqual(expected);
    }
  });
});
