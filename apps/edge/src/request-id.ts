import type { ServerResponse } from 'node:http';

/* The ids a request carries, kept on its response object (set by app.ts, read by every layer). */

const REQUEST_ID = Symbol('gateway.requestId');
const CLIENT_REQUEST_ID = Symbol('gateway.clientRequestId');
type Tagged = ServerResponse & { [REQUEST_ID]?: string; [CLIENT_REQUEST_ID]?: string };

/**
 * Set first thing for every request (app.ts), on the express path and the direct inference path alike.
 * `requestId` is the gateway's own id (the key of the request's money); `clientRequestId` the caller's
 * correlation id, kept for logs only.
 */
export function setRequestId(response: ServerResponse, requestId: string, clientRequestId?: string): void {
  (response as Tagged)[REQUEST_ID] = requestId;
  if (clientRequestId !== undefined) (response as Tagged)[CLIENT_REQUEST_ID] = clientRequestId;
}

/** The gateway's id of the request: unique per request, whatever the caller sent. */
export function requestIdOf(response: ServerResponse): string {
  return (response as Tagged)[REQUEST_ID] ?? '';
}

/** The caller's `x-request-id`, when it sent an acceptable one. */
export function clientRequestIdOf(response: ServerResponse): string | undefined {
  return (response as Tagged)[CLIENT_REQUEST_ID];
}
