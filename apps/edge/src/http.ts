import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { requestIdOf } from './request-id.js';
import { echoed } from './echoed-value.js';
import { edgeErrors, renderErrorBody, toApiError, type Dialect } from './errors.js';
import { MAX_JSON_DEPTH, fieldOfDeepPath, offsetBeyondDepth, pathAtOffset, type FreeFormField } from './json-depth.js';
import { countBodyBytes } from './observability/overload.js';

export const API_VERSION = '2026-03-31';

/** Spec §8: request body bound and arrival limits. */
export interface BodyLimits {
  maxBytes: number;
  /** The whole body must arrive within this time (spec: 15 minutes). */
  totalTimeoutMs: number;
  /** No byte for this long is a stall (spec: 60 seconds). */
  stallTimeoutMs: number;
}

export const DEFAULT_BODY_LIMITS: BodyLimits = {
  maxBytes: 32 * 1024 * 1024,
  totalTimeoutMs: 15 * 60_000,
  stallTimeoutMs: 60_000,
};

/** The client went away while we were reading or answering; nobody is left to answer. */
export class ClientGoneError extends Error {
  override name = 'ClientGoneError';
}

/**
 * The client left after admission but before its request was handed to the Router (while its files were read,
 * its audio converted): no upstream can have had it, so the pipeline releases the hold instead of counting it spent.
 */
export class ClientGoneBeforeRouterError extends ClientGoneError {
  override name = 'ClientGoneBeforeRouterError';
}

/**
 * Watches a request body arrive under its limits: all of it within `totalTimeoutMs`, no pause longer
 * than `stallTimeoutMs`, at most `maxBytes`, the overload bound's byte count (countBodyBytes), the
 * client staying until it is complete. `fail` gets the first limit broken; `accept` each chunk within
 * them. The function returned ends the watch (timers and listeners): the reader calls it once, when it
 * settles either way. Shared by readBody and the multipart reader.
 */
export function watchBodyArrival(request: IncomingMessage, limits: BodyLimits, fail: (error: Error) => void, accept?: (chunk: Buffer) => void): () => void {
  let received = 0;
  const totalTimer = setTimeout(
    () => fail(edgeErrors.requestTimeout(`Request body did not arrive within ${Math.round(limits.totalTimeoutMs / 1000)} seconds.`)),
    limits.totalTimeoutMs,
  );
  const stallTimer = setTimeout(
    () => fail(edgeErrors.requestTimeout(`Request body stalled for ${Math.round(limits.stallTimeoutMs / 1000)} seconds.`)),
    limits.stallTimeoutMs,
  );
  const onData = (chunk: Buffer) => {
    received += chunk.length;
    if (received > limits.maxBytes) {
      fail(edgeErrors.payloadTooLarge(limits.maxBytes));
      return;
    }
    const shed = countBodyBytes(request, chunk.length);
    if (shed) {
      fail(shed);
      return;
    }
    accept?.(chunk);
    stallTimer.refresh();
  };
  const onError = (error: Error) => fail(new ClientGoneError(error.message));
  const onClose = () => {
    if (!request.complete) fail(new ClientGoneError('client closed the connection while sending the body'));
  };
  request.on('data', onData);
  request.on('error', onError);
  request.on('close', onClose);
  return () => {
    clearTimeout(totalTimer);
    clearTimeout(stallTimer);
    request.off('data', onData);
    request.off('error', onError);
    request.off('close', onClose);
  };
}

/**
 * Reads the body without ever holding more than `maxBytes`: the declared content-length is checked
 * before a byte is read, and bytes are counted as they arrive (chunked bodies declare nothing).
 */
export function readBody(request: IncomingMessage, limits: BodyLimits): Promise<Buffer> {
  const declared = request.headers['content-length'];
  if (declared !== undefined && Number(declared) > limits.maxBytes) {
    return Promise.reject(edgeErrors.payloadTooLarge(limits.maxBytes));
  }
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let settled = false;
    const finish = (error: Error | undefined, body?: Buffer) => {
      if (settled) return;
      settled = true;
      stopWatching();
      request.off('end', onEnd);
      if (error) {
        // Stop pulling bytes we will not use; what is still in flight is discarded after the answer.
        request.pause();
        reject(error);
      } else {
        resolve(body as Buffer);
      }
    };
    const stopWatching = watchBodyArrival(request, limits, finish, (chunk) => chunks.push(chunk));
    function onEnd() {
      finish(undefined, chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks));
    }
    request.on('end', onEnd);
  });
}

/**
 * The body parsed as JSON, nested at most MAX_JSON_DEPTH levels (checked on the text, before parsing:
 * src/json-depth.ts says why). A deeper body is a 400 naming the field: the free-form field of the
 * dialect the path runs through (`body.tools.0.function.parameters`), else its first two segments.
 */
export async function readJsonBody(request: IncomingMessage, limits: BodyLimits, freeFormFields: readonly FreeFormField[] = []): Promise<unknown> {
  const body = await readBody(request, limits);
  if (body.length === 0) throw edgeErrors.invalidJson('empty body');
  return parseJsonText(body.toString('utf8'), freeFormFields);
}

/** JSON text parsed as a body is (depth checked first, the same 400s): an HTTP body's, or a WebSocket message's. */
export function parseJsonText(text: string, freeFormFields: readonly FreeFormField[] = []): unknown {
  const tooDeep = offsetBeyondDepth(text, MAX_JSON_DEPTH);
  if (tooDeep >= 0) {
    const field = fieldOfDeepPath(pathAtOffset(text, tooDeep), freeFormFields);
    throw edgeErrors.nestingTooDeep(echoed(['body', ...field].join('.')), MAX_JSON_DEPTH);
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw edgeErrors.invalidJson(error instanceof Error ? error.message : 'parse failure');
  }
}

/** Resolves when a response whose buffer is full drained, or when its client left. */
export function drained(response: ServerResponse): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      response.off('drain', done);
      response.off('close', done);
      resolve();
    };
    response.on('drain', done);
    response.on('close', done);
  });
}

/** JSON answer over plain node APIs (res.json's extra work is not needed on the hot path). */
export function sendJson(response: ServerResponse, status: number, body: unknown, headers?: Record<string, string>): void {
  sendJsonText(response, status, JSON.stringify(body), headers);
}

export function sendJsonText(response: ServerResponse, status: number, text: string, headers?: Record<string, string>): void {
  response.statusCode = status;
  if (headers) for (const [name, value] of Object.entries(headers)) response.setHeader(name, value);
  response.setHeader('content-type', 'application/json; charset=utf-8');
  response.setHeader('content-length', Buffer.byteLength(text));
  response.end(text);
}

/**
 * Sends an error in the dialect's envelope. When the body was not read to its end (413, 408, a shed
 * 503) the answer says `Connection: close` and the connection ends after it: our side is closed (FIN)
 * as soon as the answer is written, and what the client still sends is read and discarded for at most
 * LINGER_MS before the socket is destroyed. Destroying it at once with unread input would make the
 * kernel send a reset, which can destroy our answer before the client reads it; keeping it open (as
 * keep-alive would) lets a client hold a socket with its body unread for as long as it likes.
 */
const LINGER_MS = 1_000;

export function sendError(request: IncomingMessage, response: ServerResponse, error: unknown, dialect: Dialect): void {
  if (response.headersSent) {
    response.destroy();
    return;
  }
  const apiError = toApiError(error);
  const headers: Record<string, string> = {};
  if (apiError.retryAfterSeconds !== undefined) headers['retry-after'] = String(apiError.retryAfterSeconds);
  if (!request.complete) closeAfterAnswer(request, response);
  sendJson(response, apiError.status, renderErrorBody(apiError, dialect, requestIdOf(response)), headers);
}

/** `Connection: close`, then FIN after the answer and a bounded linger reading the rest (see sendError). */
function closeAfterAnswer(request: IncomingMessage, response: ServerResponse): void {
  response.shouldKeepAlive = false;
  request.resume();
  const socket = request.socket as (Socket & { destroySoon?: () => void }) | null;
  if (!socket || socket.destroyed) return;
  // node:http ends a connection that is not kept alive with socket.destroySoon() once the answer is
  // written, which destroys the socket as soon as our FIN is flushed; this one lingers instead.
  socket.destroySoon = () => {
    const timer = setTimeout(() => socket.destroy(), LINGER_MS);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
    // The client closing its side ends the linger early.
    socket.once('end', () => socket.destroy());
    socket.end();
  };
}
