import { edgeErrors, type EdgeError } from '../errors.js';

/** Spec §8: a single inline file (or audio clip, image, document) may carry at most 20 MiB. */
export const MAX_INLINE_FILE_BYTES = 20 * 1024 * 1024;

const DATA_URL = /^data:([^;,]*)(;[^,]*)?,/;

const BASE64 = /^[A-Za-z0-9+/_-]*={0,2}$/;

/**
 * Base64 or a base64 data: URL, bounded by its DECODED size (spec §8: a file of exactly 20 MiB passes):
 * padding and line breaks (MIME base64) carry no bytes, so they are not counted. `path` is the
 * client's field path, named by errors.
 */
export function decodeInline(text: string, path: string): { bytes: Buffer; mediaType: string } {
  let mediaType = '';
  let payload = text;
  const match = DATA_URL.exec(text);
  if (match) {
    mediaType = match[1] ?? '';
    payload = text.slice(match[0].length);
  }
  const compact = /\s/.test(payload) ? payload.replace(/\s+/g, '') : payload;
  if (decodedLength(compact) > MAX_INLINE_FILE_BYTES) throw inlineTooLarge(path);
  if (!BASE64.test(compact)) throw edgeErrors.invalidRequest(`${path}: not valid base64.`, path);
  return { bytes: Buffer.from(compact, 'base64'), mediaType };
}

/** Bytes that base64 text without whitespace decodes to (padded or not). */
export function decodedLength(base64: string): number {
  let characters = base64.length;
  if (base64.charCodeAt(characters - 1) === 0x3d) characters--;
  if (base64.charCodeAt(characters - 1) === 0x3d) characters--;
  return Math.floor((characters * 3) / 4);
}

/** Plain text carried inline (a messages text document): bounded by its UTF-8 size like any inline file. */
export function inlineText(text: string, path: string): Buffer {
  if (text.length > MAX_INLINE_FILE_BYTES) throw inlineTooLarge(path);
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length > MAX_INLINE_FILE_BYTES) throw inlineTooLarge(path);
  return bytes;
}

export function inlineTooLarge(path: string): EdgeError {
  const error = edgeErrors.payloadTooLarge(MAX_INLINE_FILE_BYTES);
  error.apiError.message = `${path}: inline file is larger than ${MAX_INLINE_FILE_BYTES} bytes.`;
  error.apiError.param = path;
  return error;
}
