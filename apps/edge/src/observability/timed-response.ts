import { ServerResponse, type IncomingMessage } from 'node:http';

/**
 * The edge's ServerResponse (createServer's `ServerResponse` option): remembers when its status line
 * and headers were written, the time to first byte. For a stream that is its first content (the
 * pipeline commits the stream's headers with it); for a JSON answer, headers and body go together.
 */
export class TimedResponse extends ServerResponse {
  /** performance.now() when the headers were written; 0 before. */
  headersAt = 0;

  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- node passes (request, options); the typings list only the request
  constructor(...args: any[]) {
    super(...(args as [IncomingMessage]));
    // An own property, not a method override: express replaces the prototype of every response it
    // handles (its `app.response`), which would drop an override; own properties survive that.
    (this as { writeHead: unknown }).writeHead = timedWriteHead;
  }
}

const originalWriteHead = ServerResponse.prototype.writeHead;

// Every path to the wire goes through writeHead: explicit calls, and end()/write() through node's
// implicit header (`_implicitHeader` calls `this.writeHead`).
function timedWriteHead(this: TimedResponse, ...args: Parameters<ServerResponse['writeHead']>): ServerResponse {
  if (this.headersAt === 0) this.headersAt = performance.now();
  return originalWriteHead.apply(this, args);
}

/** When the response's headers went out, or undefined when they did not (or it is not a TimedResponse). */
export function headersWrittenAt(response: ServerResponse): number | undefined {
  const at = (response as Partial<TimedResponse>).headersAt;
  return at === undefined || at === 0 ? undefined : at;
}
