import { ProviderError } from '../provider-adapter.js';
import { openaiErrorSchema } from './openai-api-types.js';

/** Longest provider message we carry to the caller: provider error pages can be megabytes of HTML. */
const MAX_MESSAGE_LENGTH = 1_000;

const CONTENT_FILTER_CODES = new Set(['content_filter', 'content_policy_violation', 'content_moderation']);

function extractMessage(bodyText: string): { message: string; code: string } {
  try {
    const parsed = openaiErrorSchema.safeParse(JSON.parse(bodyText));
    if (parsed.success) {
      return { message: parsed.data.error.message ?? '', code: String(parsed.data.error.code ?? parsed.data.error.type ?? '') };
    }
  } catch {
    // not JSON: fall through to the raw text
  }
  return { message: bodyText.trim(), code: '' };
}

/** Maps an HTTP error answer of an OpenAI-compatible server onto a ProviderError. */
export function openAIHttpError(status: number, bodyText: string): ProviderError {
  const { message: rawMessage, code } = extractMessage(bodyText);
  const message = (rawMessage || `HTTP ${status}`).slice(0, MAX_MESSAGE_LENGTH);
  if (CONTENT_FILTER_CODES.has(code)) return new ProviderError('content_filter', message, status);
  if (status === 408 || status === 429 || status >= 500) return new ProviderError('overloaded', message, status);
  // Our key or our model name is wrong: another provider may well serve the request.
  if (status === 401 || status === 403 || status === 404) return new ProviderError('misconfigured', message, status);
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
