import { Metadata, status, type ServiceError, type StatusObject } from '@grpc/grpc-js';
import { ErrorDetail, ErrorReason } from '@gateway/proto';

export { ErrorReason } from '@gateway/proto';
export { status as GrpcStatus } from '@grpc/grpc-js';

const DETAIL_KEY = 'gateway-error-bin';

export interface GatewayErrorOptions {
  code?: string;
  param?: string;
  retryAfterSeconds?: number;
  cause?: unknown;
}

/**
 * The only error a service throws on purpose (CONVENTIONS 6): a gRPC status plus a typed reason.
 * Anything else reaching a handler boundary becomes INTERNAL and is logged.
 */
export class GatewayError extends Error {
  override name = 'GatewayError';
  readonly code: string;
  readonly param: string;
  readonly retryAfterSeconds: number;

  constructor(
    readonly status: status,
    readonly reason: ErrorReason,
    message: string,
    options: GatewayErrorOptions = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = options.code ?? '';
    this.param = options.param ?? '';
    this.retryAfterSeconds = options.retryAfterSeconds ?? 0;
  }

  get detail(): ErrorDetail {
    return {
      reason: this.reason,
      message: this.message,
      code: this.code,
      param: this.param,
      retryAfterSeconds: this.retryAfterSeconds,
    };
  }

  toStatusObject(): StatusObject {
    const metadata = new Metadata();
    metadata.set(DETAIL_KEY, Buffer.from(ErrorDetail.encode(this.detail).finish()));
    return { code: this.status, details: this.message, metadata };
  }
}

/** Shorthands for the errors services raise most. */
export const errors = {
  invalidRequest: (message: string, param = '', code = '') =>
    new GatewayError(status.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST, message, { param, code }),
  notFound: (message: string) => new GatewayError(status.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND, message),
  conflict: (message: string) => new GatewayError(status.ALREADY_EXISTS, ErrorReason.ERROR_REASON_CONFLICT, message),
  internal: (message: string, cause?: unknown) =>
    new GatewayError(status.INTERNAL, ErrorReason.ERROR_REASON_INTERNAL, message, { cause }),
};

/** The GatewayError a status code and its detail stand for (a failure inside a multiplexed call, e.g. Router.Exchange). */
export function fromStatusDetail(code: status, detail: ErrorDetail | undefined, fallbackMessage = 'call failed'): GatewayError {
  if (!detail) return new GatewayError(code, ErrorReason.ERROR_REASON_INTERNAL, fallbackMessage);
  return new GatewayError(code, detail.reason, detail.message, { code: detail.code, param: detail.param, retryAfterSeconds: detail.retryAfterSeconds });
}

/**
 * grpc-js's words when a call found no connection to start on (its picker is in TRANSIENT_FAILURE: every
 * address refused or is unreachable): the request never left this process, so sending it to another
 * replica cannot do its work twice. Any other UNAVAILABLE (a connection dropped mid-call) may have reached.
 */
const NOT_SENT_PREFIX = 'No connection established';

/** The call failed before its request was sent anywhere (see NOT_SENT_PREFIX): safe to send elsewhere once. */
export function neverSent(error: unknown): boolean {
  if (error instanceof GatewayError) return error.status === status.UNAVAILABLE && error.message.startsWith(NOT_SENT_PREFIX);
  const serviceError = error as Partial<ServiceError> | undefined;
  return serviceError?.code === status.UNAVAILABLE && typeof serviceError.details === 'string' && serviceError.details.startsWith(NOT_SENT_PREFIX);
}

/** Turns whatever a gRPC call rejected with into a GatewayError, decoding the typed detail when present. */
export function fromServiceError(error: unknown): GatewayError {
  if (error instanceof GatewayError) return error;
  const serviceError = error as Partial<ServiceError>;
  if (typeof serviceError?.code !== 'number') {
    return errors.internal(error instanceof Error ? error.message : String(error), error);
  }
  const raw = serviceError.metadata?.get(DETAIL_KEY)[0];
  if (raw instanceof Buffer) {
    const detail = ErrorDetail.decode(raw);
    return new GatewayError(serviceError.code, detail.reason, detail.message, {
      code: detail.code,
      param: detail.param,
      retryAfterSeconds: detail.retryAfterSeconds,
      cause: error,
    });
  }
  const reason =
    serviceError.code === status.UNAVAILABLE || serviceError.code === status.DEADLINE_EXCEEDED
      ? ErrorReason.ERROR_REASON_INTERNAL
      : ErrorReason.ERROR_REASON_UNSPECIFIED;
  return new GatewayError(serviceError.code, reason, serviceError.details ?? 'gRPC call failed', { cause: error });
}
