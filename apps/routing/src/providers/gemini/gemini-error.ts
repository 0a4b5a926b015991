import { ProviderError } from '../provider-adapter.js';
import { gatewayParameterName } from '../unsupported-parameter.js';
import { geminiErrorSchema } from './gemini-api-types.js';

/** Longest provider message we carry to the caller: error pages can be megabytes of HTML. */
const MAX_MESSAGE_LENGTH = 1_000;

/** ErrorInfo reasons of a 400 that are about our credentials, not the caller's request. */
const CREDENTIAL_REASONS = new Set(['API_KEY_INVALID', 'API_KEY_EXPIRED', 'API_KEY_SERVICE_BLOCKED', 'ACCESS_TOKEN_EXPIRED', 'CONSUMER_INVALID']);
/**
 * google.rpc status names that mean our key, project or model, whatever HTTP status came with them.
 * FAILED_PRECONDITION comes with a 400 for account conditions ("User location is not supported for the
 * API use.", a free tier not available in the region without billing): another provider may serve it.
 */
const ACCOUNT_STATUSES = new Set(['UNAUTHENTICATED', 'PERMISSION_DENIED', 'NOT_FOUND', 'FAILED_PRECONDITION']);
/** Status names that mean "try elsewhere". */
const OUTAGE_STATUSES = new Set(['RESOURCE_EXHAUSTED', 'UNAVAILABLE', 'INTERNAL', 'DEADLINE_EXCEEDED']);

interface ExtractedError {
  message: string;
  status: string;
  reasons: string[];
}

function extract(bodyText: string): ExtractedError {
  try {
    // Vertex sometimes answers a one-element array of the same object.
    let json: unknown = JSON.parse(bodyText);
    if (Array.isArray(json)) json = json[0];
    const parsed = geminiErrorSchema.safeParse(json);
    if (parsed.success) {
      const error = parsed.data.error;
      return {
        message: error.message ?? '',
        status: error.status ?? '',
        reasons: (error.details ?? []).map((detail) => detail.reason ?? '').filter((reason) => reason !== ''),
      };
    }
  } catch {
    // not JSON (a proxy's page): the raw text
  }
  return { message: bodyText.trim(), status: '', reasons: [] };
}

/**
 * The JSON decoder's refusal of a field it does not know, at the top level or in generationConfig
 * (`Invalid JSON payload received. Unknown name "topK" at 'generation_config': Cannot find field.`).
 * The same words about a path inside contents or tools are about the conversation, not a parameter.
 */
const UNKNOWN_FIELD = /Unknown name "([A-Za-z_][A-Za-z0-9_]*)"(?: at '(?:generation_config|generationConfig)(?:\.(?:thinking_config|thinkingConfig))?')?: Cannot find field/;
/** Parameters a model refuses in words (`Penalty is not enabled for models/…`, `Logprobs is not enabled for …`). */
const NOT_ENABLED = /^(Presence penalty|Frequency penalty|Penalty|Thinking|Logprobs) is not (?:enabled|supported) for/i;

/** The parameter a 400 refuses, in the gateway's vocabulary; '' when the refusal is about something else. */
export function geminiUnsupportedParameter(message: string): string {
  const unknown = UNKNOWN_FIELD.exec(message)?.[1];
  // Only when it is the message's one complaint: several unknown names are a malformed request, not one parameter.
  if (unknown !== undefined && message.indexOf('Unknown name', message.indexOf('Unknown name') + 1) < 0) return gatewayParameterName(unknown);
  const words = NOT_ENABLED.exec(message)?.[1]?.toLowerCase();
  if (words === 'presence penalty' || words === 'penalty') return 'presence_penalty';
  if (words === 'frequency penalty') return 'frequency_penalty';
  if (words === 'thinking') return 'reasoning_effort';
  // A model without logprobs: the request goes again without them (and their ranking), named.
  if (words === 'logprobs') return 'logprobs';
  return '';
}

/**
 * An HTTP error answer of the Gemini API as a ProviderError: 408/429/5xx fail over (overloaded);
 * 401/403/404 are our key, project or model name (misconfigured); a 400 is the API's verdict on the
 * request (rejected, in its words) except a 400 whose ErrorInfo reason says the key is invalid
 * (`API_KEY_INVALID`: Google answers a wrong key with 400, not 401), which is misconfigured.
 */
export function geminiHttpError(status: number, bodyText: string): ProviderError {
  const { message: raw, status: rpcStatus, reasons } = extract(bodyText);
  const message = (raw || `HTTP ${status}`).slice(0, MAX_MESSAGE_LENGTH);
  if (status === 408 || status === 429 || status >= 500) return new ProviderError('overloaded', message, status);
  if (status === 401 || status === 403 || status === 404) return new ProviderError('misconfigured', message, status);
  if (reasons.some((reason) => CREDENTIAL_REASONS.has(reason)) || ACCOUNT_STATUSES.has(rpcStatus)) {
    return new ProviderError('misconfigured', message, status);
  }
  if (OUTAGE_STATUSES.has(rpcStatus)) return new ProviderError('overloaded', message, status);
  if (status === 400) {
    const unsupportedParameter = geminiUnsupportedParameter(raw);
    return new ProviderError('rejected', message, status, { unsupportedParameter });
  }
  if (status >= 400) return new ProviderError('rejected', message, status);
  return new ProviderError('connection', `unexpected status ${status}: ${message}`, status);
}

/** An error object inside a 200 stream (`data: {"error": {...}}`): mapped by its own code. */
export function geminiStreamError(bodyText: string): ProviderError {
  const { status } = extract(bodyText);
  let code = 500;
  try {
    const value = (JSON.parse(bodyText) as { error?: { code?: unknown } }).error?.code;
    if (typeof value === 'number' && value >= 400) code = value;
  } catch {
    // keep 500
  }
  return geminiHttpError(code === 500 && status === 'INVALID_ARGUMENT' ? 400 : code, bodyText);
}
