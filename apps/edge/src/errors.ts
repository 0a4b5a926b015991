import { ErrorReason, GatewayError, GrpcStatus } from '@gateway/platform';
import { MAX_ERROR_MESSAGE_CHARACTERS, echoed } from './echoed-value.js';

/**
 * THE error table of the gateway (DESIGN §1, CONVENTIONS 6): every failure a client can see is
 * resolved here, once, from a service's (gRPC status, reason) or an edge-local condition, into an
 * HTTP status and a dialect-independent description; `renderErrorBody` then shapes it per dialect.
 */

/** A failure resolved to what the client sees, before the dialect's envelope is applied. */
export interface ApiError {
  status: number;
  /** Chat-completions (OpenAI style) error type. */
  type: string;
  message: string;
  code?: string;
  param?: string;
  /** Sent as the Retry-After header (429, 503). */
  retryAfterSeconds?: number;
}

/** Errors the edge raises itself (no service involved): already resolved, carried as an exception. */
export class EdgeError extends Error {
  override name = 'EdgeError';
  constructor(readonly apiError: ApiError) {
    super(apiError.message);
  }
}

/** 413 or 431: a part of the request over its byte bound (`subject` names the part, with its verb). */
const overBytes = (status: 413 | 431, subject: string, maxBytes: number, code: string) =>
  new EdgeError({ status, type: 'invalid_request_error', message: `${subject} larger than ${maxBytes} bytes.`, code });

/** Client values quoted in these messages go through `echoed` (src/echoed-value.ts): never repeated whole. */
export const edgeErrors = {
  invalidRequest: (message: string, param?: string, code?: string) =>
    new EdgeError({ status: 400, type: 'invalid_request_error', message, ...(param ? { param } : {}), ...(code ? { code } : {}) }),
  invalidJson: (detail: string) =>
    new EdgeError({ status: 400, type: 'invalid_request_error', message: `body: request body is not valid JSON (${echoed(detail)}).`, code: 'invalid_json' }),
  /** `param`: the field named (src/json-depth.ts), already cut to a bounded length. */
  nestingTooDeep: (param: string, maxDepth: number) =>
    new EdgeError({
      status: 400,
      type: 'invalid_request_error',
      message: `${param}: nesting deeper than ${maxDepth} levels (objects and arrays in a request body nest at most ${maxDepth} levels deep).`,
      code: 'nesting_too_deep',
      param,
    }),
  payloadTooLarge: (maxBytes: number) => overBytes(413, 'Request body is', maxBytes, 'payload_too_large'),
  requestTimeout: (message: string) =>
    new EdgeError({ status: 408, type: 'invalid_request_error', message, code: 'request_timeout' }),
  missingApiKey: () =>
    new EdgeError({
      status: 401,
      type: 'invalid_api_key',
      message: 'Missing API key: send `Authorization: Bearer <API_KEY>` or `x-api-key: <API_KEY>`.',
      code: 'invalid_api_key',
    }),
  missingProvisioningKey: () =>
    new EdgeError({
      status: 401,
      type: 'invalid_request_error',
      message: 'Missing provisioning key: send `Authorization: Bearer <PROVISIONING_KEY>`.',
      code: 'invalid_provisioning_key',
    }),
  routeNotFound: (method: string, path: string) =>
    new EdgeError({ status: 404, type: 'invalid_request_error', message: `Unknown route: ${echoed(method)} ${echoed(path)}.`, code: 'unknown_url' }),
  modelNotFound: (model: string) =>
    new EdgeError({
      status: 400,
      type: 'invalid_request_error',
      message: `The model \`${echoed(model)}\` does not exist.`,
      code: 'model_not_found',
      param: 'body.model',
    }),
  modelListingNotFound: (model: string) =>
    new EdgeError({ status: 404, type: 'invalid_request_error', message: `The model \`${echoed(model)}\` does not exist.`, code: 'model_not_found' }),
  /**
   * Spec §7's 403 "account may not use the model": the account's tier is not among the model's. Resolved
   * through the FORBIDDEN row below, so this 403 and a service's FORBIDDEN share one status and type.
   */
  modelNotAvailableForTier: (model: string, tier: string, availableTiers: readonly string[]) =>
    new EdgeError(
      toApiError(
        new GatewayError(
          GrpcStatus.PERMISSION_DENIED,
          ErrorReason.ERROR_REASON_FORBIDDEN,
          `Your account's tier \`${echoed(tier)}\` may not use model \`${echoed(model)}\` (available to: ${availableTiers.join(', ')}).`,
          { code: 'model_not_available_for_tier', param: 'body.model' },
        ),
      ),
    ),
  modelGone: (model: string) =>
    new EdgeError({ status: 410, type: 'invalid_request_error', message: `The model \`${echoed(model)}\` is deprecated and no longer served.`, code: 'model_gone' }),
  notFound: (message: string) => new EdgeError({ status: 404, type: 'not_found_error', message, code: 'not_found' }),
  /** A stored response unknown to the caller's account (another account's, deleted, expired): OpenAI's 404 for it. */
  responseNotFound: (id: string) =>
    new EdgeError({ status: 404, type: 'invalid_request_error', message: `Response with id '${echoed(id)}' not found.`, code: 'not_found' }),
  /** Stored responses of this account waiting to be written are over their bound (dialects/responses/stored-responses.ts). */
  storedResponsesBacklog: (retryAfterSeconds: number) =>
    new EdgeError({
      status: 429,
      type: 'rate_limit_exceeded',
      code: 'stored_responses_backlog',
      message: `This account's responses waiting to be stored are over their bound; retry after ${retryAfterSeconds} second${retryAfterSeconds === 1 ? '' : 's'}, or send \`store: false\`.`,
      retryAfterSeconds,
    }),
  /** The account's background responses queued or running are at their bound (jobs service, docs/stored-responses.md). */
  backgroundResponsesLimit: (message: string, retryAfterSeconds: number) =>
    new EdgeError({ status: 429, type: 'rate_limit_exceeded', code: 'background_responses_limit', message, retryAfterSeconds }),
  /** Load shedding (observability/overload.ts): refused before the body was read, so nothing was charged. */
  /** A responses WebSocket upgrade by a key that cannot pay (spec §7: 402 insufficient_quota). */
  cannotPay: (code: 'insufficient_quota' | 'key_limit_exceeded', message: string) => new EdgeError({ status: 402, type: 'insufficient_quota', code, message }),
  /** A responses WebSocket upgrade past the open sockets one key (or its account) may hold on this edge. */
  tooManyWebSockets: (scope: 'key' | 'account', max: number) =>
    new EdgeError({
      status: 429,
      type: 'rate_limit_exceeded',
      code: 'websocket_limit_reached',
      message: `This ${scope === 'key' ? 'API key' : 'account'} already has ${max} responses WebSockets open (the most allowed); close one before opening another.`,
      retryAfterSeconds: 1,
    }),
  overloaded: (retryAfterSeconds: number) =>
    new EdgeError({
      status: 503,
      type: 'service_unavailable',
      code: 'overloaded',
      message: `The gateway is overloaded; retry after ${retryAfterSeconds} second${retryAfterSeconds === 1 ? '' : 's'}.`,
      retryAfterSeconds,
    }),
  /*
   * What node:http's parser refuses before any route sees the request (src/client-error.ts): the
   * header block over the server's limit, bytes that are not HTTP, headers that did not arrive in time.
   */
  headersTooLarge: (maxBytes: number) => overBytes(431, 'Request headers are', maxBytes, 'request_header_fields_too_large'),
  malformedHttp: (parserCode: string) =>
    new EdgeError({
      status: 400,
      type: 'invalid_request_error',
      message: `Malformed HTTP request${parserCode ? ` (${echoed(parserCode, 64)})` : ''}.`,
      code: 'malformed_request',
    }),
  chunkExtensionsTooLarge: () =>
    new EdgeError({ status: 413, type: 'invalid_request_error', message: 'Chunk extensions of the request body are too large.', code: 'payload_too_large' }),
};

interface TableRow {
  status: number;
  type: string;
  /** Default client-facing code when the service set none. */
  code?: string;
  /** Fixed message (the spec prescribes it, or the service's words must not leak). */
  message?: (error: GatewayError) => string;
  retryAfter?: boolean;
}

const INTERNAL_ROW: TableRow = { status: 500, type: 'api_error', message: () => 'The gateway failed to process the request.' };

/**
 * One of our own services could not be reached or did not answer in time (a transport UNAVAILABLE or
 * DEADLINE_EXCEEDED without a typed reason: a replica restarting, a ledger outage). The dependency is
 * down, not the request wrong: 503 with Retry-After (spec §7), and the transport's words stay in logs.
 */
const DEPENDENCY_DOWN_ROW: TableRow = {
  status: 503,
  type: 'service_unavailable',
  code: 'service_unavailable',
  retryAfter: true,
  message: () => 'The gateway cannot reach one of its services right now; retry shortly.',
};

const UPSTREAM_PREFIX = 'Upstream returned an error:';

const retryAfterSecondsOf = (error: GatewayError) => Math.max(1, error.retryAfterSeconds || 1);

/** reason -> row. A reason missing here (UNSPECIFIED, INTERNAL, transport failures) is a 500. */
const TABLE: ReadonlyMap<ErrorReason, TableRow> = new Map<ErrorReason, TableRow>([
  [ErrorReason.ERROR_REASON_INVALID_REQUEST, { status: 400, type: 'invalid_request_error' }],
  [ErrorReason.ERROR_REASON_MODEL_NOT_FOUND, { status: 400, type: 'invalid_request_error', code: 'model_not_found' }],
  [ErrorReason.ERROR_REASON_UNSUPPORTED_MODALITY, { status: 400, type: 'invalid_request_error', code: 'unsupported_modality' }],
  [
    ErrorReason.ERROR_REASON_UPSTREAM_REJECTED,
    {
      status: 400,
      type: 'invalid_request_error',
      message: (error) => (error.message.startsWith(UPSTREAM_PREFIX) ? error.message : `${UPSTREAM_PREFIX} ${error.message}`),
    },
  ],
  [
    ErrorReason.ERROR_REASON_CONTENT_MODERATION,
    { status: 400, type: 'invalid_request_error', code: 'content_moderation', message: () => 'Request rejected by upstream content moderation.' },
  ],
  [ErrorReason.ERROR_REASON_TOOL_OUTPUT_UNMATCHED, { status: 400, type: 'invalid_request_error', code: 'tool_output_unmatched' }],
  [ErrorReason.ERROR_REASON_FILE_ID_UNSUPPORTED, { status: 400, type: 'invalid_request_error', code: 'file_id_unsupported' }],
  [ErrorReason.ERROR_REASON_INVALID_API_KEY, { status: 401, type: 'invalid_api_key', code: 'invalid_api_key' }],
  // Spec §4.14: an invalid provisioning key draws type invalid_request_error.
  [ErrorReason.ERROR_REASON_INVALID_PROVISIONING_KEY, { status: 401, type: 'invalid_request_error', code: 'invalid_provisioning_key' }],
  [ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA, { status: 402, type: 'insufficient_quota', code: 'insufficient_quota' }],
  [ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED, { status: 402, type: 'insufficient_quota', code: 'key_limit_exceeded' }],
  [ErrorReason.ERROR_REASON_BUDGET_EXCEEDED, { status: 402, type: 'insufficient_quota', code: 'budget_exceeded' }],
  // Codes: model_not_available_for_tier (the account's tier may not use the model, edgeErrors above).
  [ErrorReason.ERROR_REASON_FORBIDDEN, { status: 403, type: 'permission_error' }],
  [ErrorReason.ERROR_REASON_NOT_FOUND, { status: 404, type: 'not_found_error', code: 'not_found' }],
  [ErrorReason.ERROR_REASON_MODEL_GONE, { status: 410, type: 'invalid_request_error', code: 'model_gone' }],
  [ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE, { status: 413, type: 'invalid_request_error', code: 'payload_too_large' }],
  [
    ErrorReason.ERROR_REASON_USAGE_NOT_RECORDED,
    {
      status: 422,
      type: 'api_error',
      code: 'usage_not_recorded',
      message: () => 'The usage of this request could not be metered, so the answer was withheld (not charged).',
    },
  ],
  [
    ErrorReason.ERROR_REASON_RATE_LIMITED,
    {
      status: 429,
      type: 'rate_limit_exceeded',
      code: 'rate_limit_exceeded',
      retryAfter: true,
      message: (error) => `Rate limit reached. Please try again in ${retryAfterSecondsOf(error)}s.`,
    },
  ],
  [
    ErrorReason.ERROR_REASON_NO_UPSTREAM,
    { status: 503, type: 'service_unavailable', code: 'no_upstream', retryAfter: true, message: () => 'No upstream available.' },
  ],
  // Idempotency-key reuse with a different body (account routes): the caller's mistake, not ours.
  [ErrorReason.ERROR_REASON_CONFLICT, { status: 409, type: 'invalid_request_error', code: 'conflict' }],
]);

/**
 * Resolves any failure to what the client sees. A GatewayError's reason decides; a transport failure of
 * our own services (UNAVAILABLE, DEADLINE_EXCEEDED — no typed detail) is a 503 with Retry-After; a
 * reason the table does not know or a plain exception is our failure: 500, never 502, and the
 * service's words stay in logs.
 */
export function toApiError(error: unknown): ApiError {
  if (error instanceof EdgeError) return error.apiError;
  if (!(error instanceof GatewayError)) return rowToApiError(INTERNAL_ROW, undefined);
  const row = TABLE.get(error.reason);
  // A reason only means what it says with the status services pair it with; an UNAVAILABLE from
  // grpc-js itself carries no typed reason (INTERNAL): a dependency that is down.
  if (!row) {
    const down = error.status === GrpcStatus.UNAVAILABLE || error.status === GrpcStatus.DEADLINE_EXCEEDED;
    return rowToApiError(down ? DEPENDENCY_DOWN_ROW : INTERNAL_ROW, error);
  }
  return rowToApiError(row, error);
}

function rowToApiError(row: TableRow, error: GatewayError | undefined): ApiError {
  const message = row.message ? row.message(error as GatewayError) : error?.message || 'Request failed.';
  const apiError: ApiError = { status: row.status, type: row.type, message };
  // Our own failures keep the service's code and param to themselves.
  const own = row === INTERNAL_ROW || row === DEPENDENCY_DOWN_ROW;
  const code = (error && !own && error.code) || row.code;
  if (code) apiError.code = code;
  if (error?.param && !own) apiError.param = error.param;
  if (row.retryAfter && error) apiError.retryAfterSeconds = retryAfterSecondsOf(error);
  return apiError;
}

/**
 * Error envelopes per dialect. `chat` is the OpenAI-style envelope of spec §7 (also used by the
 * catalog and account routes). `messages` is the messages dialect (POST /v1/messages and
 * /v1/messages/count_tokens): `{type:'error', error:{type, message}, request_id}` with the type
 * chosen by status (spec §7), as Anthropic's SDK maps them to its error classes.
 */
export type Dialect = 'chat' | 'messages';

const MESSAGES_TYPE_BY_STATUS: Readonly<Record<number, string>> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  408: 'timeout_error',
  409: 'invalid_request_error',
  410: 'not_found_error',
  413: 'request_too_large',
  431: 'invalid_request_error',
  422: 'invalid_request_error',
  429: 'rate_limit_error',
  500: 'api_error',
  503: 'overloaded_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};

/** The messages dialect's error type of a status (also its stream's `error` event). */
export function messagesErrorType(status: number): string {
  return MESSAGES_TYPE_BY_STATUS[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
}

/**
 * The message as sent: bounded whatever produced it. Edge messages cut each client value they quote;
 * this also bounds a service's or a provider's words, which may quote the caller too.
 */
export function boundedMessage(apiError: ApiError): string {
  return echoed(apiError.message, MAX_ERROR_MESSAGE_CHARACTERS);
}

/** The param as sent: a field path, which may hold a client's key names. */
export function boundedParam(apiError: ApiError): string | undefined {
  return apiError.param === undefined ? undefined : echoed(apiError.param);
}

/** `requestId`: the gateway's id of the request, which the messages envelope carries as `request_id`. */
export function renderErrorBody(apiError: ApiError, dialect: Dialect, requestId?: string): unknown {
  const message = boundedMessage(apiError);
  if (dialect === 'messages') {
    const body: { type: 'error'; error: { type: string; message: string }; request_id?: string } = {
      type: 'error',
      error: { type: messagesErrorType(apiError.status), message },
    };
    if (requestId) body.request_id = requestId;
    return body;
  }
  const body: { type: string; message: string; code?: string; param?: string } = { type: apiError.type, message };
  if (apiError.code) body.code = apiError.code;
  const param = boundedParam(apiError);
  if (param) body.param = param;
  return { error: body };
}

/** The Idempotency-Key header (inference/idempotency.ts) and its refusals. */
export const IDEMPOTENCY_HEADER = 'idempotency-key';

export const idempotencyErrors = {
  invalidKey: (detail: string) =>
    new EdgeError({
      status: 400,
      type: 'invalid_request_error',
      message: `header.${IDEMPOTENCY_HEADER}: ${detail}`,
      code: 'invalid_idempotency_key',
      param: `header.${IDEMPOTENCY_HEADER}`,
    }),
  reused: () =>
    new EdgeError({
      status: 422,
      type: 'invalid_request_error',
      message: 'This Idempotency-Key was already used with a different request body or route in the last 24 hours; send a new key for a new request.',
      code: 'idempotency_key_reused',
      param: `header.${IDEMPOTENCY_HEADER}`,
    }),
  inProgress: () =>
    new EdgeError({
      status: 409,
      type: 'invalid_request_error',
      message: 'The first request with this Idempotency-Key is still being answered; retry with the same key later to get its answer.',
      code: 'idempotency_key_in_progress',
      retryAfterSeconds: 1,
    }),
  answerTooLarge: (bytes: number, maxBytes: number) =>
    new EdgeError({
      status: 409,
      type: 'invalid_request_error',
      message: `The answer to the first request with this Idempotency-Key (${bytes} bytes) was larger than the ${maxBytes} bytes the gateway keeps, so it cannot be sent again; send a new key to make a new request.`,
      code: 'idempotency_answer_unavailable',
    }),
  unavailable: () =>
    new EdgeError({
      status: 503,
      type: 'service_unavailable',
      message: 'Requests with an Idempotency-Key cannot be served right now (the gateway cannot reach its idempotency store); retry shortly.',
      code: 'idempotency_unavailable',
      retryAfterSeconds: 1,
    }),
};
