import { ProviderError } from '../provider-adapter.js';
import { bedrockErrorSchema } from './bedrock-api-types.js';

/** Longest provider message we carry to the caller: error pages can be megabytes of HTML. */
const MAX_MESSAGE_LENGTH = 1_000;

/**
 * The error's type, lower-cased without its namespace: the `x-amzn-errortype` header
 * (`ValidationException:http://internal.amazon.com/coral/...`), else the body's `__type`
 * (`com.amazon.coral.validate#ValidationException`), else an eventstream frame's `:exception-type`
 * (`throttlingException`).
 */
export function bedrockErrorType(raw: string | undefined): string {
  if (!raw) return '';
  const withoutUri = raw.split(':')[0]!;
  const name = withoutUri.includes('#') ? withoutUri.slice(withoutUri.lastIndexOf('#') + 1) : withoutUri;
  return name.toLowerCase();
}

/** Verdicts on the request itself (shown to the caller). */
const REQUEST_ERRORS = new Set(['validationexception']);
/** Our credentials, permissions or model id: another provider may serve the request. */
const ACCOUNT_ERRORS = new Set([
  'accessdeniedexception',
  'unrecognizedclientexception',
  'invalidsignatureexception',
  'expiredtokenexception',
  'incompletesignatureexception',
  'missingauthenticationtokenexception',
  'resourcenotfoundexception',
]);
/** The service or model is busy, failing or not there yet: fail over. */
const OUTAGE_ERRORS = new Set([
  'throttlingexception',
  'servicequotaexceededexception',
  'serviceunavailableexception',
  'modelnotreadyexception',
  'internalserverexception',
  'modelerrorexception',
  'modeltimeoutexception',
  'modelstreamerrorexception',
]);

function classify(status: number, type: string, message: string): ProviderError {
  if (OUTAGE_ERRORS.has(type)) return new ProviderError('overloaded', message, status);
  if (ACCOUNT_ERRORS.has(type)) return new ProviderError('misconfigured', message, status);
  if (REQUEST_ERRORS.has(type)) return new ProviderError('rejected', message, status || 400);
  if (status === 408 || status === 424 || status === 429 || status >= 500) return new ProviderError('overloaded', message, status);
  if (status === 401 || status === 403 || status === 404) return new ProviderError('misconfigured', message, status);
  if (status >= 400) return new ProviderError('rejected', message, status);
  return new ProviderError('overloaded', message, status);
}

function messageOf(bodyText: string): string {
  try {
    const parsed = bedrockErrorSchema.safeParse(JSON.parse(bodyText));
    if (parsed.success) return parsed.data.message ?? parsed.data.Message ?? '';
  } catch {
    // not JSON (a proxy's page): the raw text
  }
  return bodyText.trim();
}

/**
 * An HTTP error answer of Converse / ConverseStream as a ProviderError: ValidationException (400) is
 * Bedrock's verdict on the request, in its words; AccessDenied / UnrecognizedClient / signature and
 * token errors (403) and ResourceNotFound (404) are our configuration; Throttling (429), ServiceQuota,
 * ModelNotReady, ModelTimeout (408), ModelError (424), InternalServer (500) and ServiceUnavailable (503)
 * fail over.
 */
export function bedrockHttpError(status: number, bodyText: string, errorTypeHeader?: string): ProviderError {
  let type = bedrockErrorType(errorTypeHeader);
  if (!type) {
    try {
      const body = JSON.parse(bodyText) as { __type?: unknown };
      if (typeof body?.__type === 'string') type = bedrockErrorType(body.__type);
    } catch {
      // no type in a non-JSON body
    }
  }
  const message = (messageOf(bodyText) || `HTTP ${status}${type ? ` ${type}` : ''}`).slice(0, MAX_MESSAGE_LENGTH);
  return classify(status, type, message);
}

/** An exception frame inside a ConverseStream answer (`:message-type exception`): the status was 200. */
export function bedrockStreamException(exceptionType: string, payloadText: string): ProviderError {
  const type = bedrockErrorType(exceptionType);
  const message = (messageOf(payloadText) || exceptionType || 'exception inside the stream').slice(0, MAX_MESSAGE_LENGTH);
  return classify(0, type, message);
}
