import { STATUS_CODES, maxHeaderSize } from 'node:http';
import type { Duplex } from 'node:stream';
import { newRequestId } from '@gateway/platform';
import { edgeErrors, renderErrorBody, toApiError, type EdgeError } from './errors.js';
import { API_VERSION } from './http.js';

/*
 * What node:http refuses before any route sees a request — a header block over its limit, bytes that
 * are not HTTP, headers that do not arrive in time — it answers itself, by default with a bare status
 * line: no JSON envelope, no x-request-id. Listening to the server's `clientError` event replaces that
 * answer; this writes the gateway's own (spec §7 envelope, a fresh request id, the API version) and
 * closes the connection, which is all HTTP allows after a parse error.
 */

/** How long a refused connection may keep sending before it is cut (its unread rest is read meanwhile). */
const LINGER_BOUND_MS = 5_000;

/** Sockets already answered: the parser reports every later chunk of a broken connection again. */
const answered = new WeakSet<Duplex>();

interface ParserError extends Error {
  code?: string;
}

/** What the client is told for a parser error (node's own mapping, in the gateway's error table). */
export function clientErrorFor(error: ParserError, headersTimeoutMs: number): EdgeError {
  switch (error.code) {
    case 'HPE_HEADER_OVERFLOW':
      return edgeErrors.headersTooLarge(maxHeaderSize);
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return edgeErrors.chunkExtensionsTooLarge();
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return edgeErrors.requestTimeout(`Request headers did not arrive within ${Math.round(headersTimeoutMs / 1000)} seconds.`);
    default:
      return edgeErrors.malformedHttp(error.code ?? '');
  }
}

/** The whole HTTP/1.1 answer: status line, headers every gateway answer carries, the JSON envelope. */
export function clientErrorResponse(error: EdgeError, requestId: string): string {
  const apiError = toApiError(error);
  const body = JSON.stringify(renderErrorBody(apiError, 'chat'));
  return (
    `HTTP/1.1 ${apiError.status} ${STATUS_CODES[apiError.status] ?? 'Error'}\r\n` +
    'content-type: application/json; charset=utf-8\r\n' +
    `content-length: ${Buffer.byteLength(body)}\r\n` +
    `x-request-id: ${requestId}\r\n` +
    `x-gateway-request-id: ${requestId}\r\n` +
    `x-gateway-api-version: ${API_VERSION}\r\n` +
    'connection: close\r\n\r\n' +
    body
  );
}

/**
 * The server's `clientError` listener. Writes only to a socket that can still take it and that carries
 * no answer already begun (a response whose headers went out would be corrupted, as node's own handler
 * also guards); otherwise, or when the client is gone (ECONNRESET), the socket is just destroyed.
 * After answering, the connection is half-closed and what the client still sends is read and dropped
 * until it closes or LINGER_BOUND_MS pass: closing with unread input makes the kernel send a reset,
 * which can destroy the answer before the client reads it.
 */
export function answerClientError(error: ParserError, socket: Duplex, headersTimeoutMs: number): void {
  if (answered.has(socket)) return;
  const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
  if (error.code === 'ECONNRESET' || !socket.writable || socket.writableEnded || socket.destroyed || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  answered.add(socket);
  const lingerTimer = setTimeout(() => socket.destroy(), LINGER_BOUND_MS);
  lingerTimer.unref();
  socket.once('close', () => clearTimeout(lingerTimer));
  socket.once('end', () => socket.destroy());
  // Node's own listener is gone once this one exists; a socket error must not become an uncaught one.
  socket.on('error', () => socket.destroy());
  socket.end(clientErrorResponse(clientErrorFor(error, headersTimeoutMs), newRequestId()));
  socket.resume();
}
