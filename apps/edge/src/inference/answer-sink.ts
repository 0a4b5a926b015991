import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { drained, sendJson } from '../http.js';
import { streamStarted } from '../observability/request-tracker.js';

/**
 * Where one answer of the chat dialects goes: the HTTP response of a route (HttpAnswer), or one turn of
 * a responses WebSocket (dialects/responses/responses-websocket.ts). The chat steps write through
 * nothing else; the pipeline itself only hears when the exchange is over.
 */
export interface AnswerSink {
  /** Runs `listener` once when the exchange is over, whichever way it ended (HTTP: the response's close). */
  onClose(listener: () => void): void;
  /** The stream is committed: the status and headers, where the transport has them. */
  commit(headers: Record<string, string>): void;
  /** Part of the stream; a promise while the client's buffer is full (or until it left). */
  write(text: string): Promise<void> | void;
  /** The stream's last text, ending the answer. */
  end(text: string): void;
  /** A whole (not streamed) answer. */
  json(body: unknown, headers: Record<string, string>): void;
}

/**
 * The answer of an HTTP route: SSE on the response (its socket corked per turn), or JSON. The endpoint
 * families write their own bodies (audio, text, JSON) on `response`.
 */
export class HttpAnswer implements AnswerSink {
  constructor(readonly response: ServerResponse) {}

  onClose(listener: () => void): void {
    this.response.once('close', listener);
  }

  commit(headers: Record<string, string>): void {
    this.response.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      ...headers,
    });
    streamStarted(this.response);
  }

  write(text: string): Promise<void> | void {
    return write(this.response, text);
  }

  end(text: string): void {
    this.response.end(text);
  }

  json(body: unknown, headers: Record<string, string>): void {
    sendJson(this.response, 200, body, headers);
  }
}

/**
 * Honours back-pressure from a slow client; a client that left releases the wait too. Writes of one
 * turn (the deltas of one batch from the router) leave in one syscall: the connection's socket is
 * corked at the first and uncorked once the turn's microtasks ran. The socket, never the response:
 * from Node 22 a corked ServerResponse holds chunked writes in a buffer of its own that end() does not
 * flush first (the chunked terminator left ahead of them, so a stream ending in the same turn lost its
 * last deltas and terminal event, issue 24), and its uncork() sends each held piece in a write(2) of
 * its own. Through the socket every byte, end() included, leaves in order from one buffer on any Node.
 */
function write(response: ServerResponse, text: string): Promise<void> | void {
  if (text === '') return;
  const socket = response.socket;
  if (socket && socket.writableCorked === 0) {
    socket.cork();
    process.nextTick(uncork, socket);
  }
  if (response.write(text)) return;
  return drained(response);
}

function uncork(socket: Socket): void {
  socket.uncork();
}
