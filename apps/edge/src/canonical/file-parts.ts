import { ErrorReason, GatewayError, errors, type CallerSignal, type PromiseClient } from '@gateway/platform';
import type { ChatMessage, ContentPart, FilePart, MediaServiceClient } from '@gateway/proto';
import { EdgeError, edgeErrors } from '../errors.js';
import type { CatalogModel } from '../catalog-cache.js';
import { MAX_INLINE_FILE_BYTES } from './inline-data.js';

/*
 * File blocks (spec §4.8): `file_data` (base64) or `file_url` work on every model. A model that reads
 * files natively gets the bytes (a URL is fetched by the media service, whose guards stop SSRF); any
 * other model gets the file's text instead — a PDF's extracted text, a text file's contents. This
 * runs in the edge, after admission, and only for requests that carry files: the routing hot path
 * never pays for it, and the media service stays the only component that opens caller-given URLs.
 */

/** Most file blocks in one request: each may cost a fetch and an extraction. */
export const MAX_FILE_PARTS = 16;
/** Bytes of all files one request forwards (fetched ones included): the router hop has a 48 MiB message bound. */
export const MAX_TOTAL_FILE_BYTES = 32 * 1024 * 1024;
/** Characters of file text one request may add to its prompt (4 M ≈ 1 M tokens, above any context window). */
export const MAX_TOTAL_FILE_TEXT_CHARACTERS = 4_000_000;

const FETCH_DEADLINE_MS = 30_000;
const EXTRACT_DEADLINE_MS = 60_000;

/** Media types read as UTF-8 text when the model has no file input. */
const TEXT_MEDIA_TYPES = /^(text\/[\w.+-]+|application\/(json|xml|x-ndjson|csv|yaml|x-yaml|javascript|markdown))$/;

export interface FilePartContext {
  media: PromiseClient<MediaServiceClient> | undefined;
  requestId: string;
  signal: CallerSignal;
  /**
   * The client's field path (errors name it) of a file part by its canonical message and part index:
   * the block itself, its URL, or the file it holds. Default: the chat-completions spelling.
   */
  pathOf?: FilePathOf;
}

export type FilePathOf = (messageIndex: number, partIndex: number, what: 'block' | 'url' | 'file') => string;

const chatPath: FilePathOf = (messageIndex, partIndex, what) =>
  `body.messages.${messageIndex}.content.${partIndex}${what === 'url' ? '.file.file_url' : what === 'file' ? '.file' : ''}`;

function hasFileParts(messages: readonly ChatMessage[]): boolean {
  return messages.some((message) => message.content.some((part) => part.part?.$case === 'file'));
}

function isPdf(data: Uint8Array): boolean {
  return Buffer.from(data.subarray(0, 1024)).indexOf('%PDF-') >= 0;
}

function tooLarge(path: string, message: string): EdgeError {
  const error = edgeErrors.payloadTooLarge(MAX_INLINE_FILE_BYTES);
  error.apiError.message = `${path}: ${message}`;
  error.apiError.param = path;
  return error;
}

/** Media's verdicts about the caller's file, with the field path in front; our own failures stay 500s. */
function inCallerTerms(error: unknown, path: string): unknown {
  if (!(error instanceof GatewayError)) return error;
  if (error.reason === ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE) return tooLarge(path, error.message);
  if (error.reason === ErrorReason.ERROR_REASON_INVALID_REQUEST) return edgeErrors.invalidRequest(`${path}: ${error.message}`, path);
  return error;
}

function requireMedia(context: FilePartContext): PromiseClient<MediaServiceClient> {
  if (!context.media) throw errors.internal('the edge has no media service address; file blocks cannot be read');
  return context.media;
}

/** The file's bytes: inline as sent, or fetched through the media service's guarded fetcher. */
async function bytesOf(file: FilePart, urlPath: string, context: FilePartContext): Promise<{ data: Buffer; mediaType: string }> {
  if (file.data.length > 0) return { data: Buffer.from(file.data.buffer, file.data.byteOffset, file.data.length), mediaType: file.mediaType };
  const media = requireMedia(context);
  try {
    const fetched = await media.fetchUrl(
      { url: file.url, maxBytes: MAX_INLINE_FILE_BYTES, timeoutMs: 0 },
      { requestId: context.requestId, deadlineMs: FETCH_DEADLINE_MS, signal: context.signal },
    );
    return { data: Buffer.from(fetched.data.buffer, fetched.data.byteOffset, fetched.data.length), mediaType: fetched.contentType };
  } catch (error) {
    throw inCallerTerms(error, urlPath);
  }
}

async function textOf(data: Buffer, mediaType: string, filePath: string, model: CatalogModel, context: FilePartContext): Promise<string> {
  if (isPdf(data)) {
    try {
      const extracted = await requireMedia(context).extractPdfText(
        { pdf: data, maxPages: 0 },
        { requestId: context.requestId, deadlineMs: EXTRACT_DEADLINE_MS, signal: context.signal },
      );
      return extracted.text;
    } catch (error) {
      throw inCallerTerms(error, filePath);
    }
  }
  const type = mediaType.split(';')[0]!.trim().toLowerCase();
  if (TEXT_MEDIA_TYPES.test(type)) return Buffer.from(data).toString('utf8');
  throw edgeErrors.invalidRequest(
    `${filePath}: the model \`${model.id}\` reads no files, and only PDF and text files can be given to it as text${type ? ` (this one is ${type})` : ''}.`,
    filePath,
    'unsupported_modality',
  );
}

function asText(file: FilePart, text: string, cacheControl: ContentPart['cacheControl']): ContentPart {
  const name = file.filename ? ` name=${JSON.stringify(file.filename)}` : '';
  const note = file.context ? `\n${file.context}` : '';
  const part: ContentPart = { part: { $case: 'text', value: `<file${name}>${note}\n${text}\n</file>` } };
  if (cacheControl) part.cacheControl = cacheControl;
  return part;
}

/**
 * Replaces each file block by what the model can read: the bytes (URLs fetched) for a model with
 * `file` input, the file's text for any other. No-op (and no media call) for requests without files.
 */
export async function resolveFileParts(messages: ChatMessage[], model: CatalogModel, context: FilePartContext): Promise<void> {
  if (!hasFileParts(messages)) return;
  const native = model.inputModalities.has('file');
  let files = 0;
  let totalBytes = 0;
  let totalText = 0;
  for (const [messageIndex, message] of messages.entries()) {
    for (const [partIndex, part] of message.content.entries()) {
      if (part.part?.$case !== 'file') continue;
      const pathOf = context.pathOf ?? chatPath;
      const path = pathOf(messageIndex, partIndex, 'block');
      if (++files > MAX_FILE_PARTS) throw edgeErrors.invalidRequest(`${path}: at most ${MAX_FILE_PARTS} files per request.`, path);
      const file = part.part.value;
      const { data, mediaType } = await bytesOf(file, pathOf(messageIndex, partIndex, 'url'), context);
      if (native) {
        totalBytes += data.length;
        if (totalBytes > MAX_TOTAL_FILE_BYTES) throw tooLarge(path, `the files of this request hold more than ${MAX_TOTAL_FILE_BYTES} bytes.`);
        const type = mediaType.split(';')[0]!.trim().toLowerCase();
        const resolved: ContentPart = {
          part: { $case: 'file', value: { filename: file.filename, data, url: '', mediaType: isPdf(data) ? 'application/pdf' : type || 'application/octet-stream', context: file.context } },
        };
        if (part.cacheControl) resolved.cacheControl = part.cacheControl;
        message.content[partIndex] = resolved;
        continue;
      }
      const text = await textOf(data, mediaType, pathOf(messageIndex, partIndex, 'file'), model, context);
      totalText += text.length;
      if (totalText > MAX_TOTAL_FILE_TEXT_CHARACTERS) {
        throw tooLarge(path, `the files of this request hold more than ${MAX_TOTAL_FILE_TEXT_CHARACTERS} characters of text.`);
      }
      message.content[partIndex] = asText(file, text, part.cacheControl);
    }
  }
}
