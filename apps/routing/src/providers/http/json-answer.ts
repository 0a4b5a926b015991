import { ProviderError } from '../provider-adapter.js';

/** What a check of an answer gives: zod's `safeParse` result, or a hand check's of the same shape. */
export type CheckedAnswer<T> = { success: true; data: T } | { success: false; error: { message: string } };

/**
 * A whole answer's text read as JSON and checked by `check`. An answer that is not JSON, or not of the
 * provider's format, is a broken answer (ProviderError `connection`: the router fails over).
 */
export function parseJsonAnswer<T>(text: string, check: (json: unknown) => CheckedAnswer<T>): T {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ProviderError('connection', 'answer is not JSON');
  }
  const checked = check(json);
  if (!checked.success) throw new ProviderError('connection', `malformed answer: ${checked.error.message.slice(0, 300)}`);
  return checked.data;
}
