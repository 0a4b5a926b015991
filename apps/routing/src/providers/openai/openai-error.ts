import { ProviderError } from '../provider-adapter.js';
import { gatewayParameterName } from '../unsupported-parameter.js';
import { openaiErrorSchema } from './openai-api-types.js';

/** Longest provider message we carry to the caller: provider error pages can be megabytes of HTML. */
const MAX_MESSAGE_LENGTH = 1_000;

const CONTENT_FILTER_CODES = new Set(['content_filter', 'content_policy_violation', 'content_moderation']);

/**
 * Codes OpenAI gives a refusal of one parameter AS SUCH (with `param` naming it): the model takes no such
 * field, whatever its value. `unsupported_value` ("Unsupported value: 'reasoning_effort' does not support
 * 'minimal' …", "'temperature' does not support 1.9 …"), `invalid_value` and the range codes refuse one
 * VALUE: another request's value may be fine, so they are never learned (issue 35 item 2) and reach the
 * caller as the provider's 400.
 */
const PARAMETER_CODES = new Set(['unsupported_parameter', 'unknown_parameter']);
/** The same refusals in words, for servers that leave `param` or `code` null (older OpenAI answers, Azure, compatibles). */
const PARAMETER_MESSAGES = [/^Unrecognized request argument supplied: ([A-Za-z0-9_.]+)\s*$/, /^Unsupported parameter: '([A-Za-z0-9_.]+)'/];

function extractMessage(bodyText: string): { message: string; code: string; param: string } {
  try {
    const parsed = openaiErrorSchema.safeParse(JSON.parse(bodyText));
    if (parsed.success) {
      const { error } = parsed.data;
      return { message: error.message ?? '', code: String(error.code ?? error.type ?? ''), param: error.param ?? '' };
    }
  } catch {
    // not JSON: fall through to the raw text
  }
  return { message: bodyText.trim(), code: '', param: '' };
}

/** The parameter a 400 refuses, in the gateway's vocabulary; '' when the refusal is about something else. */
export function openAIUnsupportedParameter(message: string, code: string, param: string): string {
  if (param !== '' && PARAMETER_CODES.has(code)) return gatewayParameterName(param);
  for (const pattern of PARAMETER_MESSAGES) {
    const named = pattern.exec(message)?.[1];
    if (named !== undefined && (param === '' || param === named)) return gatewayParameterName(named);
  }
  return '';
}

/** Maps an HTTP error answer of an OpenAI-compatible server onto a ProviderError. */
export function openAIHttpError(status: number, bodyText: string): ProviderError {
  const { message: rawMessage, code, param } = extractMessage(bodyText);
  const message = (rawMessage || `HTTP ${status}`).slice(0, MAX_MESSAGE_LENGTH);
  if (CONTENT_FILTER_CODES.has(code)) return new ProviderError('content_filter', message, status);
  if (status === 408 || status === 429 || status >= 500) return new ProviderError('overloaded', message, status);
  // Our key or our model name is wrong: another provider may well serve the request.
  if (status === 401 || status === 403 || status === 404) return new ProviderError('misconfigured', message, status);
  if (status === 400 || status === 422) {
    const unsupportedParameter = openAIUnsupportedParameter(rawMessage, code, param);
    return new ProviderError('rejected', message, status, { unsupportedParameter });
  }
  if (status >= 400) return new ProviderError('rejected', message, status);
  return new ProviderError('connection', `unexpected status ${status}: ${message}`, status);
}

/** An `error` object inside a stream (OpenRouter and others send one instead of an HTTP status). */
export function openAIStreamError(error: { message?: string | null; code?: string | number | null; type?: string | null }): ProviderError {
  const code = String(error.code ?? error.type ?? '');
  const message = (error.message ?? 'error inside the stream').slice(0, MAX_MESSAGE_LENGTH);
  if (CONTENT_FILTER_CODES.has(code)) return new ProviderError('content_filter', message);
  const numeric = Number(error.code);
  if (Number.isInteger(numeric) && numeric >= 400 && numeric < 500 && numeric !== 408 && numeric !== 429) {
    return new ProviderError('rejected', message, numeric);
  }
  return new ProviderError('overloaded', message, Number.isInteger(numeric) ? numeric : 0);
}
