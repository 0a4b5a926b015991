import { edgeErrors } from '../errors.js';

/** http(s) with a host, or a data: URL; every other scheme (file:, ftp:, gopher:, javascript:, …) is refused. */
const FETCHABLE = /^(?:https?:\/\/[^\s/?#]|data:)/i;

/**
 * A URL the client gives for an image or a file is read by a provider or by our media service: only
 * https, http and data URLs are accepted (issue 29: `file://` URLs were forwarded to the provider). A 400
 * naming the field; the URL itself is not echoed (it may be a 20 MiB data URL).
 */
export function requireFetchableUrl(url: string, path: string): string {
  if (!FETCHABLE.test(url) || (!/^data:/i.test(url) && !URL.canParse(url))) {
    throw edgeErrors.invalidRequest(`${path}: must be an https, http or data URL.`, path, 'invalid_url');
  }
  return url;
}
