import { describe, expect, it } from 'vitest';
import { ErrorReason, GatewayError, GrpcStatus, fromServiceError } from '@gateway/platform';
import { edgeErrors, renderErrorBody, toApiError } from './errors.js';

const error = (status: GrpcStatus, reason: ErrorReason, message = 'service words', options = {}) =>
  new GatewayError(status, reason, message, options);

describe('error table (gRPC status + reason -> HTTP)', () => {
  const rows: Array<[string, GatewayError, number, string, string | undefined]> = [
    ['invalid request', error(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST), 400, 'invalid_request_error', undefined],
    ['model not found', error(GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_MODEL_NOT_FOUND), 400, 'invalid_request_error', 'model_not_found'],
    ['unsupported modality', error(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_UNSUPPORTED_MODALITY), 400, 'invalid_request_error', 'unsupported_modality'],
    ['upstream rejected', error(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_UPSTREAM_REJECTED), 400, 'invalid_request_error', undefined],
    ['content moderation', error(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_CONTENT_MODERATION), 400, 'invalid_request_error', 'content_moderation'],
    ['tool output unmatched', error(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_TOOL_OUTPUT_UNMATCHED), 400, 'invalid_request_error', 'tool_output_unmatched'],
    ['file id unsupported', error(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_FILE_ID_UNSUPPORTED), 400, 'invalid_request_error', 'file_id_unsupported'],
    ['invalid api key', error(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY), 401, 'invalid_api_key', 'invalid_api_key'],
    ['invalid provisioning key', error(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_PROVISIONING_KEY), 401, 'invalid_request_error', 'invalid_provisioning_key'],
    ['insufficient quota', error(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA), 402, 'insufficient_quota', 'insufficient_quota'],
    ['key limit', error(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED), 402, 'insufficient_quota', 'key_limit_exceeded'],
    ['forbidden', error(GrpcStatus.PERMISSION_DENIED, ErrorReason.ERROR_REASON_FORBIDDEN), 403, 'permission_error', undefined],
    ['not found', error(GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND), 404, 'not_found_error', 'not_found'],
    ['model gone', error(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_MODEL_GONE), 410, 'invalid_request_error', 'model_gone'],
    ['payload too large', error(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE), 413, 'invalid_request_error', 'payload_too_large'],
    ['usage not recorded', error(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_USAGE_NOT_RECORDED), 422, 'api_error', 'usage_not_recorded'],
    ['rate limited', error(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_RATE_LIMITED, 'x', { retryAfterSeconds: 7 }), 429, 'rate_limit_exceeded', 'rate_limit_exceeded'],
    ['no upstream', error(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'x', { retryAfterSeconds: 3 }), 503, 'service_unavailable', 'no_upstream'],
    ['internal', error(GrpcStatus.INTERNAL, ErrorReason.ERROR_REASON_INTERNAL), 500, 'api_error', undefined],
    ['unspecified reason', error(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_UNSPECIFIED), 500, 'api_error', undefined],
  ];

  it.each(rows)('%s', (_name, gatewayError, status, type, code) => {
    const apiError = toApiError(gatewayError);
    expect(apiError.status).toBe(status);
    expect(apiError.type).toBe(type);
    expect(apiError.code).toBe(code);
  });

  it('keeps a service-set code and param on client errors', () => {
    const apiError = toApiError(
      error(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST, 'body.messages.2.content: bad', {
        code: 'custom_code',
        param: 'body.messages.2.content',
      }),
    );
    expect(apiError).toMatchObject({ status: 400, code: 'custom_code', param: 'body.messages.2.content', message: 'body.messages.2.content: bad' });
  });

  it('429 carries Retry-After seconds and the spec message', () => {
    const apiError = toApiError(error(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_RATE_LIMITED, 'ledger words', { retryAfterSeconds: 12 }));
    expect(apiError.retryAfterSeconds).toBe(12);
    expect(apiError.message).toBe('Rate limit reached. Please try again in 12s.');
  });

  it('503 says "No upstream available." and always has a Retry-After', () => {
    const apiError = toApiError(error(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'acme-cloud: ECONNRESET'));
    expect(apiError.message).toBe('No upstream available.');
    expect(apiError.retryAfterSeconds).toBeGreaterThanOrEqual(1);
  });

  it('prefixes a provider refusal and fixes the moderation message', () => {
    expect(toApiError(error(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_UPSTREAM_REJECTED, 'context too long')).message).toBe(
      'Upstream returned an error: context too long',
    );
    expect(
      toApiError(error(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_UPSTREAM_REJECTED, 'Upstream returned an error: x')).message,
    ).toBe('Upstream returned an error: x');
    expect(toApiError(error(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_CONTENT_MODERATION, 'flagged')).message).toBe(
      'Request rejected by upstream content moderation.',
    );
  });

  it('our own service unreachable or too slow (UNAVAILABLE / DEADLINE_EXCEEDED without detail) is 503 with Retry-After, never 500 or 502, and hides the transport text', () => {
    const grpcFailure = fromServiceError(
      Object.assign(new Error('14 UNAVAILABLE: No connection established'), {
        code: GrpcStatus.UNAVAILABLE,
        details: 'No connection established. Last error: connect ECONNREFUSED 127.0.0.1:50054',
        metadata: { get: () => [] },
      }),
    );
    const apiError = toApiError(grpcFailure);
    expect(apiError).toMatchObject({ status: 503, type: 'service_unavailable', code: 'service_unavailable', retryAfterSeconds: 1 });
    expect(apiError.message).not.toContain('ECONNREFUSED');
    const late = toApiError(error(GrpcStatus.DEADLINE_EXCEEDED, ErrorReason.ERROR_REASON_INTERNAL, 'no answer from the router within 600000 ms', { code: 'x', param: 'y' }));
    expect(late).toEqual({ status: 503, type: 'service_unavailable', code: 'service_unavailable', message: apiError.message, retryAfterSeconds: 1 });
    // A service's own INTERNAL (a bug, not an outage) stays a 500 without Retry-After.
    expect(toApiError(error(GrpcStatus.INTERNAL, ErrorReason.ERROR_REASON_INTERNAL, 'boom'))).toEqual({ status: 500, type: 'api_error', message: 'The gateway failed to process the request.' });
    // The messages dialect's envelope for it.
    expect(renderErrorBody(apiError, 'messages', 'req_1')).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } });
  });

  it('a plain exception is a 500', () => {
    expect(toApiError(new TypeError('x is undefined'))).toMatchObject({ status: 500, type: 'api_error' });
  });

  it("a model the account's tier may not use is the FORBIDDEN row's 403, with its own code, in both dialects", () => {
    const apiError = toApiError(edgeErrors.modelNotAvailableForTier('acme/top', 'tier-1', ['tier-3', 'tier-4']));
    const forbidden = toApiError(error(GrpcStatus.PERMISSION_DENIED, ErrorReason.ERROR_REASON_FORBIDDEN));
    expect(apiError).toEqual({
      status: forbidden.status,
      type: forbidden.type,
      message: "Your account's tier `tier-1` may not use model `acme/top` (available to: tier-3, tier-4).",
      code: 'model_not_available_for_tier',
      param: 'body.model',
    });
    expect(apiError.status).toBe(403);
    expect(renderErrorBody(apiError, 'chat')).toEqual({
      error: {
        type: 'permission_error',
        message: "Your account's tier `tier-1` may not use model `acme/top` (available to: tier-3, tier-4).",
        code: 'model_not_available_for_tier',
        param: 'body.model',
      },
    });
    expect(renderErrorBody(apiError, 'messages')).toMatchObject({ type: 'error', error: { type: 'permission_error' } });
  });

  it('edge-local errors pass through unchanged', () => {
    expect(toApiError(edgeErrors.payloadTooLarge(10))).toEqual({
      status: 413,
      type: 'invalid_request_error',
      message: 'Request body is larger than 10 bytes.',
      code: 'payload_too_large',
    });
    expect(toApiError(edgeErrors.headersTooLarge(16384))).toEqual({
      status: 431,
      type: 'invalid_request_error',
      message: 'Request headers are larger than 16384 bytes.',
      code: 'request_header_fields_too_large',
    });
    expect(toApiError(edgeErrors.requestTimeout('stalled'))).toMatchObject({ status: 408 });
    expect(toApiError(edgeErrors.missingApiKey())).toMatchObject({ status: 401, type: 'invalid_api_key' });
  });
});

describe('dialect envelopes', () => {
  it('chat dialect: {error:{type, message, code?, param?}}', () => {
    const body = renderErrorBody(
      toApiError(error(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY, 'Invalid API key.')),
      'chat',
    );
    expect(body).toEqual({ error: { type: 'invalid_api_key', message: 'Invalid API key.', code: 'invalid_api_key' } });
    const noCode = renderErrorBody({ status: 403, type: 'permission_error', message: 'no' }, 'chat');
    expect(noCode).toEqual({ error: { type: 'permission_error', message: 'no' } });
  });

  it('messages dialect: {type:"error", error:{type, message}} typed by status', () => {
    const cases: Array<[number, string]> = [
      [401, 'authentication_error'],
      [402, 'billing_error'],
      [404, 'not_found_error'],
      [429, 'rate_limit_error'],
      [400, 'invalid_request_error'],
    ];
    for (const [status, type] of cases) {
      expect(renderErrorBody({ status, type: 'whatever', message: 'm' }, 'messages')).toEqual({ type: 'error', error: { type, message: 'm' } });
    }
  });
});
