/*
 * Every value a client sent that an error message quotes back (model names, ids, header values, paths,
 * field names) goes through `echoed`: a caller can send up to 32 MiB in one field, and an answer that
 * repeats it whole costs us the bytes twice and floods logs and dashboards that keep error texts.
 */

/** Characters of one client value an error message may quote; the rest is replaced by a note of its length. */
export const MAX_ECHOED_CHARACTERS = 256;
/**
 * Bound on a whole error message and its param, whatever built it: a service's or a provider's words may
 * quote the caller too (`Upstream returned an error: ...`). Our own messages stay well under it.
 */
export const MAX_ERROR_MESSAGE_CHARACTERS = 1_024;

/** `value` itself when short; else its first `maxCharacters` characters, an ellipsis and its full length. */
export function echoed(value: string, maxCharacters: number = MAX_ECHOED_CHARACTERS): string {
  if (value.length <= maxCharacters) return value;
  // Never cut between the two halves of a surrogate pair: a lone half is not text.
  const code = value.charCodeAt(maxCharacters - 1);
  const end = code >= 0xd800 && code <= 0xdbff ? maxCharacters - 1 : maxCharacters;
  return `${value.slice(0, end)}… (${value.length} characters)`;
}
