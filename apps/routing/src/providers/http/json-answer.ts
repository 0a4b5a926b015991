import { ProviderError } from '../provider-adapter.js';

/** What a check of an answer gives: zod's `safeParse` result, or a hand check's of the same shape. */
export type CheckedAnswer<T> = { success: true; data: T } | { success: false; error: { message: string } };

/**
 * Text a provider sent (a whole answer, one stream event) read as JSON; text that is not JSON is a broken
 * answer (ProviderError `connection`: the router fails over). `what` names it in the error ("answer").
 */
export function providerJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new ProviderError('connection', `${what} is not JSON`);
  }
}

/**
 * A whole answer's text (or one stream chunk's, `what` naming it) read as JSON and checked by `check`. An
 * answer that is not JSON, or not of the provider's format, is a broken answer (ProviderError `connection`:
 * the router fails over).
 */
export function parseJsonAnswer<T>(text: string, check: (json: unknown) => CheckedAnswer<T>, what = 'answer'): T {
  const checked = check(providerJson(text, what));
  if (!checked.success) throw new ProviderError('connection', `malformed ${what}: ${checked.error.message.slice(0, 300)}`);
  return checked.data;
}
