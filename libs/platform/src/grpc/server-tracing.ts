import type { sendUnaryData, ServerUnaryCall, ServiceDefinition, UntypedServiceImplementation } from '@grpc/grpc-js';
import { contextFromMetadata, endRpcSpan, otelContext, otelTrace, SpanKind, startRpcSpan } from '../telemetry.js';

type AnyCall = ServerUnaryCall<unknown, unknown> & {
  once(event: string, listener: (...args: unknown[]) => void): unknown;
};
type AnyHandler = (call: AnyCall, callback?: sendUnaryData<unknown>) => void;

/**
 * The implementation with a server span per call, the child of the caller's span (traceparent
 * metadata), active while the handler runs so the handler's own calls and spans join the trace.
 * Client-streaming and bidirectional methods are left alone: Router.Exchange is one long call that
 * many requests share, and makes a span per exchange itself.
 */
export function traceImplementation(definition: ServiceDefinition, implementation: UntypedServiceImplementation): UntypedServiceImplementation {
  const traced: UntypedServiceImplementation = {};
  for (const [name, method] of Object.entries(definition)) {
    const handler = implementation[name] as AnyHandler | undefined;
    if (!handler) continue;
    if (method.requestStream) {
      traced[name] = handler as UntypedServiceImplementation[string];
      continue;
    }
    const wrapped: AnyHandler = method.responseStream
      ? (call) => {
          const parent = contextFromMetadata(call.metadata);
          const span = startRpcSpan(method.path, SpanKind.SERVER, parent);
          let ended = false;
          const end = (error?: unknown) => {
            if (ended) return;
            ended = true;
            endRpcSpan(span, error);
          };
          call.once('finish', () => end());
          call.once('error', (error) => end(error ?? new Error('stream failed')));
          call.once('cancelled', () => end({ code: 1, message: 'cancelled' }));
          otelContext.with(otelTrace.setSpan(parent, span), () => handler(call));
        }
      : (call, callback) => {
          const parent = contextFromMetadata(call.metadata);
          const span = startRpcSpan(method.path, SpanKind.SERVER, parent);
          otelContext.with(otelTrace.setSpan(parent, span), () =>
            handler(call, (error, ...rest) => {
              endRpcSpan(span, error ?? undefined);
              (callback as (...args: unknown[]) => void)(error, ...rest);
            }),
          );
        };
    traced[name] = wrapped as UntypedServiceImplementation[string];
  }
  return traced;
}
