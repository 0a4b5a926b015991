import { echoed } from './echoed-value.js';
import { edgeErrors, type EdgeError } from './errors.js';

/**
 * A control character (U+0000–U+001F, U+007F) written into the URL, as itself or percent-encoded. No id,
 * cursor, filter or path of the gateway contains one, and Postgres refuses a NUL in text: checked once
 * for every route the express app serves, before any handler can pass the value to SQL or gRPC (issue 35
 * item 7: such values were 500s). The raw URL is scanned first, so an ordinary request pays one regex test.
 */
const ENCODED_CONTROL = /%(?:[01][0-9a-f]|7f)|[\u0000-\u001f\u007f]/i;
const CONTROL = /[\u0000-\u001f\u007f]/;

/** The 400 for the first path segment or query parameter with a control character in it; undefined when there is none. */
export function controlCharacterRefusal(url: string): EdgeError | undefined {
  if (!ENCODED_CONTROL.test(url)) return undefined;
  const queryAt = url.indexOf('?');
  const path = queryAt < 0 ? url : url.slice(0, queryAt);
  if (ENCODED_CONTROL.test(path)) return edgeErrors.invalidRequest('path: a path segment contains a control character.', 'path');
  for (const pair of url.slice(queryAt + 1).split('&')) {
    const equals = pair.indexOf('=');
    const name = decoded(equals < 0 ? pair : pair.slice(0, equals));
    const value = equals < 0 ? '' : decoded(pair.slice(equals + 1));
    if (CONTROL.test(name) || CONTROL.test(value)) {
      const param = `query.${echoed(name.replace(/[\u0000-\u001f\u007f]/g, '?'))}`;
      return edgeErrors.invalidRequest(`${param}: contains a control character.`, param);
    }
  }
  // A `%0` the decoder did not take as an escape (e.g. `%0g`): nothing control in what the routes read.
  return undefined;
}

function decoded(text: string): string {
  try {
    return decodeURIComponent(text.replace(/\+/g, ' '));
  } catch {
    return text;
  }
}
