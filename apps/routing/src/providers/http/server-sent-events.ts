import { ProviderError } from '../provider-adapter.js';

/** Longest single SSE event we buffer while waiting for its blank line. */
const MAX_SSE_EVENT_BYTES = 8 * 1024 * 1024;

/** One event of a text/event-stream body. */
export interface ServerSentEvent {
  /** The `event:` name; empty when the event has none (OpenAI-compatible servers send none). */
  event: string;
  /** The `data:` payload (multi-line data joined by newlines). */
  data: string;
}

/**
 * Yields each SSE event that carries data, with its `event:` name (Anthropic routes by it); comments
 * and events without data are skipped. A body that ends mid-event yields what it has.
 */
export async function* readServerSentEvents(body: AsyncIterable<Buffer | string>): AsyncGenerator<ServerSentEvent> {
  const reader = new ServerSentEventReader();
  for await (const chunk of body) {
    reader.push(chunk);
    for (let event = reader.next(); event !== undefined; event = reader.next()) yield event;
  }
  const rest = reader.end();
  if (rest !== undefined) yield rest;
}

/**
 * The SSE reader without an async generator of its own, for a stream's hot loop (one generator less
 * between a socket read and the relayed delta): `push` each chunk read, then take its events with
 * `next()` until undefined; `end()` once the body ended gives the event it ended in the middle of, if any.
 * readServerSentEvents is this reader in a generator.
 */
export class ServerSentEventReader {
  private readonly decoder = new TextDecoder();
  private buffer = '';
  /** Where the next event of `buffer` starts. */
  private from = 0;

  push(chunk: Buffer | string): void {
    // What is left of the previous read is cut once per read (not a copy of the rest per event).
    const rest = this.from > 0 ? this.buffer.slice(this.from) : this.buffer;
    this.from = 0;
    this.buffer = rest + (typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true }));
  }

  /** The next whole event with data of what was pushed; undefined when none is whole yet. */
  next(): ServerSentEvent | undefined {
    for (;;) {
      const separator = findSeparator(this.buffer, this.from);
      if (separator < 0) {
        if (this.buffer.length - this.from > MAX_SSE_EVENT_BYTES) throw new ProviderError('connection', 'stream event too large');
        return undefined;
      }
      const block = this.buffer.slice(this.from, separator);
      this.from = separatorEnd(this.buffer, separator);
      const event = parseEvent(block);
      if (event !== undefined) return event;
    }
  }

  /** The body ended: the event it ended in the middle of, if that one has data. */
  end(): ServerSentEvent | undefined {
    const rest = this.buffer.slice(this.from);
    this.buffer = '';
    this.from = 0;
    return parseEvent(rest);
  }
}

/**
 * Where the first blank line (`\r?\n\r?\n`, the event separator) at or after `from` starts, -1 if none:
 * the match that regular expression finds in `text.slice(from)` (without it or the slice: this runs per
 * relayed event), the earliest `\n` followed by `\n` or `\r\n`, taken with a `\r` before it.
 */
function findSeparator(text: string, from: number): number {
  for (let index = text.indexOf('\n', from); index >= 0; index = text.indexOf('\n', index + 1)) {
    const next = text.charCodeAt(index + 1);
    if (next !== 10 && !(next === 13 && text.charCodeAt(index + 2) === 10)) continue;
    return index > from && text.charCodeAt(index - 1) === 13 ? index - 1 : index;
  }
  return -1;
}

/** The end of the separator findSeparator found at `start` (`\r?\n\r?\n` matched from there). */
function separatorEnd(text: string, start: number): number {
  let index = text.charCodeAt(start) === 13 ? start + 1 : start;
  index += 1;
  if (text.charCodeAt(index) === 13) index += 1;
  return index + 1;
}

function parseEvent(block: string): ServerSentEvent | undefined {
  // The usual event is one `data:` line.
  if (block.indexOf('\n') < 0) {
    if (!block.startsWith('data:')) return undefined;
    return { event: '', data: block.charCodeAt(5) === 32 ? block.slice(6) : block.slice(5) };
  }
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
  // Built with both fields at once: one shape for every event.
  return data === undefined ? undefined : { event: name, data };
}
