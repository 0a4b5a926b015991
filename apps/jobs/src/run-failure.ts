import { ErrorReason, GatewayError, GrpcStatus } from '@gateway/platform';

/**
 * How a failed run of lower-priority work ends (a batch line's error-file line, a background response's
 * `error`), decided once for both runners from the failure's ErrorReason: the HTTP status and code the
 * client reads, the OpenAI error `type`, and whether another attempt may succeed. The rows follow the
 * edge's error table (apps/edge/src/errors.ts), so a line or a background run fails as the same request
 * sent interactively would: every refusal for money is a 402 and is never retried; only our own or the
 * upstreams' failures are 5xx.
 *
 * Both wires carry an OpenAI error object: a batch line's `response.body.error` ({message, type, param,
 * code}) and a background response's stored failure (rendered by the edge as the Response's `error` and
 * its stream's `error` event): one naming serves both.
 */
export interface RunFailure {
  status: number;
  type: string;
  code: string;
  message: string;
  /** Another attempt may succeed (a service or every upstream unreachable, a rate window, usage not recorded). */
  transient: boolean;
}

interface Row {
  status: number;
  type: string;
  /** The code when the error names none (a service's own code wins, as on the edge). */
  code: string;
  transient?: boolean;
  /** The error's own code is not shown (a fixed code). */
  fixedCode?: boolean;
}

const INVALID = 'invalid_request_error';
const QUOTA = 'insufficient_quota';

/** A reason not in the table (UNSPECIFIED, INTERNAL) or a failure that is no GatewayError: ours. */
const SERVER_ROW: Row = { status: 500, type: 'api_error', code: 'server_error', transient: true, fixedCode: true };
/** One of our services unreachable or not answering in time (a transport failure without a typed reason). */
const DEPENDENCY_DOWN_ROW: Row = { status: 503, type: 'service_unavailable', code: 'service_unavailable', transient: true, fixedCode: true };

const TABLE: ReadonlyMap<ErrorReason, Row> = new Map<ErrorReason, Row>([
  [ErrorReason.ERROR_REASON_INVALID_REQUEST, { status: 400, type: INVALID, code: 'invalid_request' }],
  [ErrorReason.ERROR_REASON_MODEL_NOT_FOUND, { status: 400, type: INVALID, code: 'model_not_found' }],
  [ErrorReason.ERROR_REASON_UNSUPPORTED_MODALITY, { status: 400, type: INVALID, code: 'unsupported_modality' }],
  [ErrorReason.ERROR_REASON_UPSTREAM_REJECTED, { status: 400, type: INVALID, code: 'invalid_request' }],
  [ErrorReason.ERROR_REASON_CONTENT_MODERATION, { status: 400, type: INVALID, code: 'content_moderation' }],
  [ErrorReason.ERROR_REASON_TOOL_OUTPUT_UNMATCHED, { status: 400, type: INVALID, code: 'tool_output_unmatched' }],
  [ErrorReason.ERROR_REASON_FILE_ID_UNSUPPORTED, { status: 400, type: INVALID, code: 'file_id_unsupported' }],
  [ErrorReason.ERROR_REASON_INVALID_API_KEY, { status: 401, type: 'invalid_api_key', code: 'invalid_api_key', fixedCode: true }],
  [ErrorReason.ERROR_REASON_INVALID_PROVISIONING_KEY, { status: 401, type: INVALID, code: 'invalid_provisioning_key', fixedCode: true }],
  // Money: the account, the key's limit or a budget's hard stop (docs/governance.md). Never retried.
  [ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA, { status: 402, type: QUOTA, code: 'insufficient_quota', fixedCode: true }],
  [ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED, { status: 402, type: QUOTA, code: 'key_limit_exceeded', fixedCode: true }],
  [ErrorReason.ERROR_REASON_BUDGET_EXCEEDED, { status: 402, type: QUOTA, code: 'budget_exceeded', fixedCode: true }],
  [ErrorReason.ERROR_REASON_FORBIDDEN, { status: 403, type: 'permission_error', code: 'forbidden' }],
  [ErrorReason.ERROR_REASON_NOT_FOUND, { status: 404, type: 'not_found_error', code: 'not_found' }],
  [ErrorReason.ERROR_REASON_CONFLICT, { status: 409, type: INVALID, code: 'conflict' }],
  [ErrorReason.ERROR_REASON_MODEL_GONE, { status: 410, type: INVALID, code: 'model_gone', fixedCode: true }],
  [ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE, { status: 413, type: INVALID, code: 'payload_too_large' }],
  // Routing withheld the answer because its usage could not be stored (nothing charged): another attempt may record it.
  [ErrorReason.ERROR_REASON_USAGE_NOT_RECORDED, { status: 422, type: 'api_error', code: 'usage_not_recorded', transient: true, fixedCode: true }],
  [ErrorReason.ERROR_REASON_RATE_LIMITED, { status: 429, type: 'rate_limit_exceeded', code: 'rate_limit_exceeded', transient: true, fixedCode: true }],
  [ErrorReason.ERROR_REASON_NO_UPSTREAM, { status: 503, type: 'service_unavailable', code: 'no_upstream', transient: true, fixedCode: true }],
]);

const SERVER_MESSAGE = 'The gateway failed to process the request.';

/** The row of a failure: its reason's, else a transport failure of our services (503) or ours (500). */
function rowOf(error: unknown): Row {
  if (!(error instanceof GatewayError)) return SERVER_ROW;
  const row = TABLE.get(error.reason);
  if (row) return row;
  return error.status === GrpcStatus.UNAVAILABLE || error.status === GrpcStatus.DEADLINE_EXCEEDED ? DEPENDENCY_DOWN_ROW : SERVER_ROW;
}

/** How a run that failed with `error` ends, and whether it is worth another attempt. */
export function runFailure(error: unknown): RunFailure {
  const row = rowOf(error);
  const gateway = error instanceof GatewayError ? error : undefined;
  return {
    status: row.status,
    type: row.type,
    code: (!row.fixedCode && gateway?.code) || row.code,
    message: gateway?.message || SERVER_MESSAGE,
    transient: row.transient ?? false,
  };
}

/** A refusal for money (402): the run is not retried and nothing was charged. */
export function isMoneyRefusal(failure: Pick<RunFailure, 'status'>): boolean {
  return failure.status === 402;
}
