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
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of body) {
    buffer += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
    // Every whole event of the buffer, then what is left kept once (not a copy of the rest per event).
    let from = 0;
    for (;;) {
      const separator = findSeparator(buffer, from);
      if (separator < 0) break;
      const block = buffer.slice(from, separator);
      from = separatorEnd(buffer, separator);
      const event = parseEvent(block);
      if (event !== undefined) yield event;
    }
    if (from > 0) buffer = buffer.slice(from);
    if (buffer.length > MAX_SSE_EVENT_BYTES) throw new ProviderError('connection', 'stream event too large');
  }
  const rest = parseEvent(buffer);
  if (rest !== undefined) yield rest;
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
