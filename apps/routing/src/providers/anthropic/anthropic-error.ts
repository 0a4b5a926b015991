import { ProviderError } from '../provider-adapter.js';
import { gatewayParameterName } from '../unsupported-parameter.js';
import { anthropicErrorSchema } from './anthropic-api-types.js';

/** Longest provider message we carry to the caller: provider error pages can be megabytes of HTML. */
const MAX_MESSAGE_LENGTH = 1_000;

function extractMessage(bodyText: string): { message: string; type: string } {
  try {
    const parsed = anthropicErrorSchema.safeParse(JSON.parse(bodyText));
    if (parsed.success) return { message: parsed.data.error.message ?? '', type: parsed.data.error.type ?? '' };
  } catch {
    // not JSON (a proxy's HTML page): fall through to the raw text
  }
  return { message: bodyText.trim(), type: '' };
}

/** Anthropic's validation of a field it does not know: `<field path>: Extra inputs are not permitted`. */
const EXTRA_INPUT = /^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?): Extra inputs are not permitted/;
/**
 * The parameter a 400 refuses AS SUCH, in the gateway's vocabulary; '' when the refusal is about
 * something else. Only "Extra inputs are not permitted" (the field does not exist for this model) is
 * such a refusal. A value out of range (`temperature: Input should be less than or equal to 1`) and a
 * combination (`temperature and top_p cannot both be specified`: top_p alone is fine) refuse this
 * request, not the parameter, so they are never learned (issue 35 item 2).
 */
export function anthropicUnsupportedParameter(message: string): string {
  const extra = EXTRA_INPUT.exec(message)?.[1];
  return extra !== undefined ? gatewayParameterName(extra) : '';
}

/**
 * Maps an HTTP error answer of the Messages API onto a ProviderError: 408/429/5xx/529 (overloaded)
 * fail over; 401/402/403/404 are our key, our account or our model name (another provider may serve
 * the request); 400/413/422 are Anthropic's verdict on the request, shown to the caller in its words.
 */
export function anthropicHttpError(status: number, bodyText: string): ProviderError {
  const { message: rawMessage, type } = extractMessage(bodyText);
  const message = (rawMessage || `HTTP ${status}`).slice(0, MAX_MESSAGE_LENGTH);
  if (status === 408 || status === 429 || status >= 500 || type === 'overloaded_error' || type === 'rate_limit_error') {
    return new ProviderError('overloaded', message, status);
  }
  if (status === 401 || status === 402 || status === 403 || status === 404) return new ProviderError('misconfigured', message, status);
  if (status === 400) {
    const unsupportedParameter = anthropicUnsupportedParameter(rawMessage);
    return new ProviderError('rejected', message, status, { unsupportedParameter });
  }
  if (status >= 400) return new ProviderError('rejected', message, status);
  return new ProviderError('connection', `unexpected status ${status}: ${message}`, status);
}

/** Error types of an `error` event mid-stream that are Anthropic's verdict on the request, not an outage. */
const REQUEST_ERROR_TYPES = new Set(['invalid_request_error', 'request_too_large']);
const ACCOUNT_ERROR_TYPES = new Set(['authentication_error', 'permission_error', 'not_found_error', 'billing_error']);

/** An `error` event inside a stream (the status was already 200): overloaded_error and api_error fail over. */
export function anthropicStreamError(error: { type?: string | null; message?: string | null }): ProviderError {
  const type = error.type ?? '';
  const message = (error.message || type || 'error inside the stream').slice(0, MAX_MESSAGE_LENGTH);
  if (REQUEST_ERROR_TYPES.has(type)) return new ProviderError('rejected', message);
  if (ACCOUNT_ERROR_TYPES.has(type)) return new ProviderError('misconfigured', message);
  return new ProviderError('overloaded', message);
}
