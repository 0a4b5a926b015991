import type { ServerWritableStream } from '@grpc/grpc-js';
import { GatewayError, errors, type Logger } from '@gateway/platform';

/**
 * Server-streaming handler with the house error mapping. Local to routing because the platform's
 * `serverStream` ends failed streams with `call.destroy(status)`, which in grpc-js 1.14 destroys the
 * Writable before its `_final` can send the status: the client never learns the stream failed. grpc-js
 * sends a status for an emitted 'error' (it sets pendingStatus and ends the call), so that is used here.
 */
export function statusStream<Request, Response>(
  logger: Logger,
  method: string,
  handler: (request: Request, call: ServerWritableStream<Request, Response>) => AsyncIterable<Response>,
) {
  return (call: ServerWritableStream<Request, Response>) => {
    void (async () => {
      try {
        for await (const message of handler(call.request, call)) {
          if (call.cancelled) return;
          if (!call.write(message)) {
            await new Promise<void>((resolve) => {
              const done = () => { call.off('drain', done); call.off('cancelled', done); resolve(); };
              call.once('drain', done);
              call.once('cancelled', done);
            });
          }
        }
        call.end();
      } catch (error) {
        if (call.cancelled) return;
        let gatewayError: GatewayError;
        if (error instanceof GatewayError) gatewayError = error;
        else {
          logger.error({ err: error, method }, 'unexpected error in stream handler');
          gatewayError = errors.internal('internal error');
        }
        call.emit('error', Object.assign(new Error(gatewayError.message), gatewayError.toStatusObject()));
      }
    })();
  };
}
