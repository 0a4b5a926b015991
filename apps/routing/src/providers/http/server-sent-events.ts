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
    for (;;) {
      const match = /\r?\n\r?\n/.exec(buffer);
      if (!match) break;
      const block = buffer.slice(0, match.index);
      buffer = buffer.slice(match.index + match[0].length);
      const event = parseEvent(block);
      if (event !== undefined) yield event;
    }
    if (buffer.length > MAX_SSE_EVENT_BYTES) throw new ProviderError('connection', 'stream event too large');
  }
  const rest = parseEvent(buffer);
  if (rest !== undefined) yield rest;
}

function parseEvent(block: string): ServerSentEvent | undefined {
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
