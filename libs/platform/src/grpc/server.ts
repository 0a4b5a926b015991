import {
  Server,
  ServerCredentials,
  status,
  type sendUnaryData,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServiceDefinition,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { HealthImplementation, type ServingStatusMap } from 'grpc-health-check';
import type { Logger } from 'pino';
import { GatewayError, errors } from './errors.js';

/** Handler of a unary RPC: plain async domain call; errors thrown are GatewayErrors. */
export type UnaryHandler<Request, Response> = (request: Request, call: ServerUnaryCall<Request, Response>) => Promise<Response>;
/** Handler of a server-streaming RPC: yields messages; a throw ends the stream with that status. */
export type StreamHandler<Request, Response> = (
  request: Request,
  call: ServerWritableStream<Request, Response>,
) => AsyncIterable<Response>;

/** What a handler threw, as the GatewayError its caller sees: anything unexpected is logged and becomes INTERNAL. */
export function handlerError(error: unknown, logger: Logger, method: string): GatewayError {
  if (error instanceof GatewayError) return error;
  logger.error({ err: error, method }, 'unexpected error in handler');
  return errors.internal('internal error');
}

const toStatus = (error: unknown, logger: Logger, method: string) => handlerError(error, logger, method).toStatusObject();

/** Wraps a unary domain function as a grpc-js handler with the house error mapping. */
export function unary<Request, Response>(logger: Logger, method: string, handler: UnaryHandler<Request, Response>) {
  return (call: ServerUnaryCall<Request, Response>, callback: sendUnaryData<Response>) => {
    handler(call.request, call).then(
      (response) => callback(null, response),
      (error: unknown) => callback(toStatus(error, logger, method)),
    );
  };
}

/** Wraps an async generator as a server-streaming handler; honours back-pressure and cancellation. */
export function serverStream<Request, Response>(logger: Logger, method: string, handler: StreamHandler<Request, Response>) {
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
        // emit('error') sends the messages still queued and then the status; destroy() would drop
        // both and the client would see CANCELLED instead of the typed error.
        if (!call.cancelled) call.emit('error', toStatus(error, logger, method));
      }
    })();
  };
}

export interface GrpcServiceBinding {
  definition: ServiceDefinition;
  implementation: UntypedServiceImplementation;
  /** Fully qualified name for the health service, e.g. `gateway.v1.AuthService`. */
  name: string;
}

export interface RunningGrpcServer {
  /** host:port actually bound (port 0 resolved). */
  address: string;
  port: number;
  health: HealthImplementation;
  stop(graceMs?: number): Promise<void>;
}

/** Starts a gRPC server with the standard health service; every bound service reports SERVING. */
export async function startGrpcServer(options: {
  address: string;
  services: readonly GrpcServiceBinding[];
  logger: Logger;
}): Promise<RunningGrpcServer> {
  const server = new Server({
    // Bounded message size: the largest legitimate payload is a 32 MiB request body plus framing.
    'grpc.max_receive_message_length': 48 * 1024 * 1024,
    'grpc.max_send_message_length': 48 * 1024 * 1024,
    'grpc.keepalive_permit_without_calls': 1,
  });
  const statusMap: ServingStatusMap = { '': 'SERVING' };
  for (const service of options.services) {
    server.addService(service.definition, service.implementation);
    statusMap[service.name] = 'SERVING';
  }
  const health = new HealthImplementation(statusMap);
  health.addToServer(server);
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(options.address, ServerCredentials.createInsecure(), (error, boundPort) =>
      error ? reject(error) : resolve(boundPort),
    );
  });
  const host = options.address.slice(0, options.address.lastIndexOf(':'));
  const address = `${host}:${port}`;
  options.logger.info({ address, services: options.services.map((service) => service.name) }, 'gRPC server listening');
  return {
    address,
    port,
    health,
    stop: (graceMs = 5_000) =>
      new Promise<void>((resolve) => {
        for (const name of Object.keys(statusMap)) health.setStatus(name, 'NOT_SERVING');
        const timer = setTimeout(() => { server.forceShutdown(); resolve(); }, graceMs);
        timer.unref();
        server.tryShutdown(() => { clearTimeout(timer); resolve(); });
      }),
  };
}

export { status };
