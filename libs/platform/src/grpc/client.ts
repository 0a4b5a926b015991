import {
  connectivityState,
  credentials,
  Metadata,
  status,
  type CallOptions,
  type Client,
  type ClientOptions,
  type ClientDuplexStream,
  type ClientReadableStream,
  type ClientUnaryCall,
  type ServiceDefinition,
  type ServiceError,
  type ChannelCredentials,
} from '@grpc/grpc-js';
import { idempotencyLevels } from '@gateway/proto';
import type { CallerSignal } from '../cancellation.js';
import { fromServiceError, neverSent } from './errors.js';
import { CREDENTIAL_METADATA } from './internal-auth.js';
import { AUDIT_ACTOR_METADATA, AUDIT_SOURCE_METADATA } from '../audit/audit-chain.js';
import { endRpcSpan, injectIntoMetadata, SpanKind, startRpcSpan, tracingEnabled } from '../telemetry.js';

export interface CallSettings {
  /** Whole-call deadline including retries. Default: the client's `defaultDeadlineMs`. */
  deadlineMs?: number;
  /** Sent as `x-request-id` metadata so logs line up across services. */
  requestId?: string;
  /** Aborting cancels the call (the server sees CANCELLED). An AbortSignal or a `Cancellation`. */
  signal?: CallerSignal;
  /**
   * Internal credential for this call instead of the client's (`x-gateway-credential`): the edge's
   * admin routes forward the operator's own token this way rather than hold an admin token.
   */
  credential?: string;
  /**
   * Who asks for a change, recorded in the changing service's audit log (x-gateway-actor,
   * x-gateway-source-address). Set by the edge from the credential it verified, by gatewayctl as itself.
   */
  actor?: { kind: string; id: string; sourceAddress?: string };
}

type UnaryCallback<Response> = (error: ServiceError | null, response: Response) => void;

// Streams first: a server-streaming method's overloads would otherwise match the unary shape.
type Promised<Method> = Method extends (request: infer Request, metadata?: Metadata, options?: Partial<CallOptions>) => ClientReadableStream<infer Response>
  ? (request: Request, settings?: CallSettings) => AsyncIterable<Response>
  : Method extends (
        request: infer Request,
        metadata: Metadata,
        options: Partial<CallOptions>,
        callback: UnaryCallback<infer Response>,
      ) => ClientUnaryCall
    ? (request: Request, settings?: CallSettings) => Promise<Response>
    : never;

/** A ts-proto grpc-js client with promise-returning unary methods and async-iterable streams. */
export type PromiseClient<GeneratedClient> = {
  [Name in Exclude<keyof GeneratedClient, keyof Client>]: Promised<GeneratedClient[Name]>;
} & { close(): void; raw: GeneratedClient; /** The internal credential its calls carry (for calls made on `raw`). */ credential: string | undefined };

type ClientConstructor<GeneratedClient> = new (
  address: string,
  channelCredentials: ChannelCredentials,
  options?: Partial<ClientOptions>,
) => GeneratedClient;

export interface ClientSettings {
  defaultDeadlineMs?: number;
  /** Attempts for calls the proto marks NO_SIDE_EFFECTS or IDEMPOTENT (others are never retried). */
  maxAttempts?: number;
  /** Internal credential sent with every call (`x-gateway-credential`); unset: none. */
  credential?: string;
  /** Spread every call over all the servers the target names (grpc-js round_robin); default: pick one. */
  roundRobin?: boolean;
}

/**
 * Channel options every internal client (and the health client, so they share a connection) uses.
 * Reconnect backoff: grpc-js's default grows from 1 s by 1.6× up to 2 minutes, so a service back after an
 * outage of a few seconds went on failing for seconds more (calls fail fast while the channel waits out its
 * backoff). Inside a cluster a connection attempt is cheap: retry within 100 ms, at most every second.
 */
export const CHANNEL_OPTIONS: Readonly<Partial<ClientOptions>> = {
  'grpc.keepalive_time_ms': 30_000,
  'grpc.max_receive_message_length': 48 * 1024 * 1024,
  'grpc.max_send_message_length': 48 * 1024 * 1024,
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 1_000,
};

// Only "the server never saw it or could not take it": RESOURCE_EXHAUSTED is a verdict (rate limit), not a fault.
const RETRYABLE = new Set([status.UNAVAILABLE]);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Wraps a generated client. Unary calls get a deadline, the request id, and — only for RPCs the
 * proto declares idempotent — jittered retries on UNAVAILABLE inside the caller's deadline; any other
 * RPC is sent a second time only when the first attempt never left (neverSent).
 * Every rejection is a GatewayError.
 */
export function createClient<GeneratedClient extends Client>(
  Constructor: ClientConstructor<GeneratedClient>,
  definition: ServiceDefinition,
  address: string,
  settings: ClientSettings = {},
): PromiseClient<GeneratedClient> {
  const raw = new Constructor(address, credentials.createInsecure(), {
    ...CHANNEL_OPTIONS,
    ...(settings.roundRobin ? { 'grpc.service_config': JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] }) } : {}),
  });
  const defaultDeadlineMs = settings.defaultDeadlineMs ?? 10_000;
  const maxAttempts = settings.maxAttempts ?? 3;
  const credential = settings.credential;
  const wrapped: Record<string, unknown> = { close: () => raw.close(), raw, credential };
  for (const [name, method] of Object.entries(definition)) {
    const camel = name.charAt(0).toLowerCase() + name.slice(1);
    const fn = (raw as unknown as Record<string, (...args: unknown[]) => unknown>)[camel]?.bind(raw);
    if (!fn) continue;
    const level = idempotencyLevels[method.path.slice(1)] ?? 'IDEMPOTENCY_UNKNOWN';
    const attempts = level === 'IDEMPOTENCY_UNKNOWN' ? 1 : maxAttempts;
    if (method.responseStream) {
      wrapped[camel] = (request: unknown, call: CallSettings = {}) =>
        streamCall(fn, request, call, call.deadlineMs ?? 0, credential, method.path);
    } else {
      wrapped[camel] = async (request: unknown, call: CallSettings = {}) => {
        const deadline = Date.now() + (call.deadlineMs ?? defaultDeadlineMs);
        for (let attempt = 1; ; attempt++) {
          try {
            return await unaryCall(fn, request, call, deadline, credential, method.path);
          } catch (error) {
            const code = (error as ServiceError).code;
            // Any RPC, idempotent or not, is sent again once when it never left (no connection to start on):
            // a round-robin channel has by then dropped the address that refused, and the server saw nothing.
            if (attempt === 1 && attempts === 1 && neverSent(error) && !call.signal?.aborted && Date.now() < deadline) continue;
            const backoffMs = Math.min(1_000, 25 * 2 ** attempt) * (0.5 + Math.random() / 2);
            if (attempt >= attempts || !RETRYABLE.has(code) || Date.now() + backoffMs >= deadline || call.signal?.aborted) {
              throw fromServiceError(error);
            }
            await sleep(backoffMs);
          }
        }
      };
    }
  }
  return wrapped as PromiseClient<GeneratedClient>;
}

function metadataFor(call: CallSettings, clientCredential: string | undefined): Metadata {
  const metadata = new Metadata();
  if (call.requestId) metadata.set('x-request-id', call.requestId);
  const credential = call.credential ?? clientCredential;
  if (credential) metadata.set(CREDENTIAL_METADATA, credential);
  if (call.actor) {
    metadata.set(AUDIT_ACTOR_METADATA, `${call.actor.kind}:${call.actor.id}`);
    if (call.actor.sourceAddress) metadata.set(AUDIT_SOURCE_METADATA, call.actor.sourceAddress);
  }
  return metadata;
}

/**
 * Starts a call without the stack trace grpc-js captures for every call (`new Error()` in its client,
 * kept to decorate a failure's stack): ~20 µs of the edge's CPU per request on the hot path, and our
 * failures become GatewayErrors (fromServiceError) that carry their own stack from where we rethrow.
 */
function withoutCallerStack<Result>(start: () => Result): Result {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return start();
  } finally {
    Error.stackTraceLimit = limit;
  }
}

function unaryCall(fn: (...args: unknown[]) => unknown, request: unknown, call: CallSettings, deadline: number, credential: string | undefined, path: string) {
  return new Promise((resolve, reject) => {
    const metadata = metadataFor(call, credential);
    // A client span per attempt, its context sent along (traceparent metadata) when tracing is on.
    const span = tracingEnabled() ? startRpcSpan(path, SpanKind.CLIENT) : undefined;
    if (span) injectIntoMetadata(span, metadata);
    const signal = call.signal;
    // Removed once the call ends: a caller's signal can outlive the call by far (the edge's lives with
    // the HTTP exchange), and the listener would keep the whole finished call reachable meanwhile.
    const cancel = () => pending.cancel();
    const pending = withoutCallerStack(() => fn(request, metadata, { deadline }, (error: ServiceError | null, response: unknown) => {
      signal?.removeEventListener('abort', cancel);
      if (span) endRpcSpan(span, error);
      if (error) reject(error);
      else resolve(response);
    }) as ClientUnaryCall);
    signal?.addEventListener('abort', cancel, { once: true });
    // A signal that fired before the call started fires no event: cancel at once.
    if (signal?.aborted) cancel();
  });
}

async function* streamCall(fn: (...args: unknown[]) => unknown, request: unknown, call: CallSettings, deadlineMs: number, credential: string | undefined, path: string) {
  const options: Partial<CallOptions> = deadlineMs > 0 ? { deadline: Date.now() + deadlineMs } : {};
  const metadata = metadataFor(call, credential);
  const span = tracingEnabled() ? startRpcSpan(path, SpanKind.CLIENT) : undefined;
  if (span) injectIntoMetadata(span, metadata);
  let failure: unknown;
  const stream = withoutCallerStack(() => fn(request, metadata, options) as ClientReadableStream<unknown>);
  const abort = () => stream.cancel();
  call.signal?.addEventListener('abort', abort, { once: true });
  try {
    for await (const message of stream) yield message;
  } catch (error) {
    failure = error;
    throw fromServiceError(error);
  } finally {
    if (span) endRpcSpan(span, failure);
    call.signal?.removeEventListener('abort', abort);
    // Leaving the loop early (consumer stopped reading) must not leave the server producing.
    stream.cancel();
  }
}

export type { ClientDuplexStream };

/**
 * Calls `onReady` once the client's channel is READY (at once when it is), asking it to connect
 * meanwhile: from IDLE that starts a connection, in TRANSIENT_FAILURE grpc-js retries on its own (at
 * most a second apart, CHANNEL_OPTIONS). Gives up silently once the channel is closed.
 */
export function whenChannelReady(client: Client, onReady: () => void): void {
  const channel = client.getChannel();
  const look = () => {
    const state = channel.getConnectivityState(true);
    if (state === connectivityState.READY) return onReady();
    if (state === connectivityState.SHUTDOWN) return;
    try {
      channel.watchConnectivityState(state, Date.now() + 60_000, look);
    } catch {
      // Closed meanwhile.
    }
  };
  look();
}

/**
 * Opens a bidirectional-streaming call that writes messages the caller has already encoded (so it
 * can judge their size first) and decodes what comes back. For long-lived multiplexed calls
 * (Router.Exchange): no deadline, no retries.
 */
export function openDuplexCall<Response>(
  client: Client,
  path: string,
  decode: (bytes: Uint8Array) => Response,
  credential?: string,
  headers: Readonly<Record<string, string>> = {},
): ClientDuplexStream<Uint8Array, Response> {
  const serialize = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const metadata = new Metadata();
  if (credential) metadata.set(CREDENTIAL_METADATA, credential);
  for (const [name, value] of Object.entries(headers)) metadata.set(name, value);
  return client.makeBidiStreamRequest(path, serialize, decode, metadata, {});
}
