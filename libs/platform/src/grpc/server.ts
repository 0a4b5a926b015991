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
import type { Registry } from 'prom-client';
import type { DependencyCheck } from '../health.js';
import { gauge } from '../metrics/registry.js';
import { GatewayError, errors } from './errors.js';
import { addReflection } from './reflection.js';
import { CredentialCheck, credentialInterceptor, type InternalCredentials } from './internal-auth.js';
import { traceImplementation } from './server-tracing.js';
import { tracingEnabled } from '../telemetry.js';

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
  /**
   * Starts draining: every service reports NOT_SERVING from now on (dependency checks stop), while
   * calls are still answered. `stop` drains first too; services call this before their own
   * clean-up (settlement in hand, exchanges) so health says so while that runs.
   */
  drain(): void;
  stop(graceMs?: number): Promise<void>;
}

export interface GrpcServerOptions {
  address: string;
  services: readonly GrpcServiceBinding[];
  logger: Logger;
  /**
   * What the services cannot serve without (Postgres, NATS): checked every `healthCheckIntervalMs`;
   * while any check fails, gRPC health answers NOT_SERVING for every service and for ''.
   */
  dependencies?: readonly DependencyCheck[];
  /** Default 5 s. */
  healthCheckIntervalMs?: number;
  /** Bound of one check. Default 2 s. */
  healthCheckTimeoutMs?: number;
  /** Where `gateway_dependency_up` is reported (labels: server, dependency). */
  metrics?: Registry;
  /**
   * Internal authentication: every call to the services (not health or reflection) must carry one of
   * these credentials; admin RPCs need an admin one. Unset: calls are not checked (in-process tests).
   */
  credentials?: InternalCredentials;
  /**
   * Connections older than this get a GOAWAY (grpc-js `max_connection_age_ms`), so clients resolve
   * again and reach servers added since; calls on it get `maxConnectionAgeGraceMs` (default 30 min) to
   * finish. Unset: connections live as long as their clients keep them.
   */
  maxConnectionAgeMs?: number;
  maxConnectionAgeGraceMs?: number;
  /**
   * Largest request message the server reads (grpc-js `max_receive_message_length`, checked on the
   * message's length prefix before it is buffered; past it: RESOURCE_EXHAUSTED). Each service sets
   * what its largest legitimate request needs (docs/endpoints.md "Embeddings, moderations, images and audio").
   * Default 4 MiB (grpc's own default).
   */
  maxReceiveMessageBytes?: number;
}

export const DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024;

/**
 * Starts a gRPC server with the standard health service (grpc.health.v1) and server reflection
 * (grpc.reflection.v1 and v1alpha, so grpcurl can list and call it). Health answers SERVING while
 * every dependency check passes, NOT_SERVING while one fails and from the moment the server drains.
 */
export async function startGrpcServer(options: GrpcServerOptions): Promise<RunningGrpcServer> {
  const check = options.credentials ? new CredentialCheck(options.credentials) : undefined;
  const checkedPaths = new Set(options.services.flatMap((service) => Object.values(service.definition).map((method) => method.path)));
  const server = new Server({
    'grpc.max_receive_message_length': options.maxReceiveMessageBytes ?? DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
    'grpc.max_send_message_length': 48 * 1024 * 1024,
    'grpc.keepalive_permit_without_calls': 1,
    ...(options.maxConnectionAgeMs
      ? { 'grpc.max_connection_age_ms': options.maxConnectionAgeMs, 'grpc.max_connection_age_grace_ms': options.maxConnectionAgeGraceMs ?? 30 * 60_000 }
      : {}),
    // The credential is checked on the metadata, before the request message is read (internal-auth.ts).
    ...(check ? { interceptors: [credentialInterceptor(checkedPaths, check, options.logger)] } : {}),
  });
  const serviceNames = ['', ...options.services.map((service) => service.name)];
  const statusMap: ServingStatusMap = {};
  for (const name of serviceNames) statusMap[name] = 'SERVING';
  for (const service of options.services) {
    server.addService(service.definition, tracingEnabled() ? traceImplementation(service.definition, service.implementation) : service.implementation);
  }
  const health = new HealthImplementation(statusMap);
  health.addToServer(server);
  addReflection(server, options.services.map((service) => service.name));

  const dependencies = options.dependencies ?? [];
  const serverLabel = options.services[0]?.name ?? 'grpc';
  const dependencyUp = options.metrics
    ? gauge(options.metrics, {
        name: 'gateway_dependency_up',
        help: 'Whether the dependency answered its last health check (1) or not (0).',
        labelNames: ['server', 'dependency'] as const,
      })
    : undefined;
  let serving = true;
  let draining = false;
  const setServing = (next: boolean) => {
    if (next === serving) return;
    serving = next;
    for (const name of serviceNames) health.setStatus(name, next ? 'SERVING' : 'NOT_SERVING');
  };
  const timeoutMs = options.healthCheckTimeoutMs ?? 2_000;
  let failing = new Set<string>();
  const runChecks = async () => {
    const results = await Promise.all(dependencies.map(async (dependency) => {
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([
          dependency.check(),
          new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs); }),
        ]);
        return { name: dependency.name, error: undefined };
      } catch (error) {
        return { name: dependency.name, error: error instanceof Error ? error.message : String(error) };
      } finally {
        clearTimeout(timer);
      }
    }));
    if (draining) return;
    const nowFailing = new Set(results.filter((result) => result.error !== undefined).map((result) => result.name));
    for (const result of results) dependencyUp?.set({ server: serverLabel, dependency: result.name }, result.error === undefined ? 1 : 0);
    for (const result of results) {
      if (result.error !== undefined && !failing.has(result.name)) {
        options.logger.warn({ dependency: result.name, reason: result.error }, 'dependency unreachable; health NOT_SERVING');
      } else if (result.error === undefined && failing.has(result.name)) {
        options.logger.info({ dependency: result.name }, 'dependency reachable again');
      }
    }
    failing = nowFailing;
    setServing(nowFailing.size === 0);
  };
  // The first answer already reflects the dependencies; a failing one does not stop the start (it may come back).
  if (dependencies.length > 0) await runChecks();
  let checking: Promise<void> | undefined;
  const checkTimer = dependencies.length > 0
    ? setInterval(() => { checking ??= runChecks().finally(() => { checking = undefined; }); }, options.healthCheckIntervalMs ?? 5_000)
    : undefined;
  checkTimer?.unref();

  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(options.address, ServerCredentials.createInsecure(), (error, boundPort) =>
      error ? reject(error) : resolve(boundPort),
    );
  }).catch(async (error: unknown) => {
    clearInterval(checkTimer);
    for (const dependency of dependencies) await dependency.close?.();
    throw error;
  });
  const host = options.address.slice(0, options.address.lastIndexOf(':'));
  const address = `${host}:${port}`;
  options.logger.info({ address, services: options.services.map((service) => service.name) }, 'gRPC server listening');
  const drain = () => {
    if (draining) return;
    draining = true;
    clearInterval(checkTimer);
    setServing(false);
  };
  return {
    address,
    port,
    health,
    drain,
    stop: async (graceMs = 5_000) => {
      drain();
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => { server.forceShutdown(); resolve(); }, graceMs);
        timer.unref();
        server.tryShutdown(() => { clearTimeout(timer); resolve(); });
      });
      await checking;
      for (const dependency of dependencies) await dependency.close?.();
    },
  };
}

export { status };
