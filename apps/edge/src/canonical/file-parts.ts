import { ErrorReason, GatewayError, errors, type CallerSignal, type PromiseClient } from '@gateway/platform';
import type { ChatMessage, ContentPart, FilePart, JobsServiceClient, MediaServiceClient } from '@gateway/proto';
import { EdgeError, edgeErrors } from '../errors.js';
import { echoed } from '../echoed-value.js';
import type { CatalogModel } from '../catalog-cache.js';
import { MAX_INLINE_FILE_BYTES } from './inline-data.js';
import { FILE_ID_PATTERN } from '../routes/files-options.js';

/*
 * File blocks (spec §4.8): `file_data` (base64), `file_url` or `file_id` work on every model. A model that reads
 * files natively gets the bytes (a URL is fetched by the media service, whose guards stop SSRF); any
 * other model gets the file's text instead — a PDF's extracted text, a text file's contents. This
 * runs in the edge, after admission, and only for requests that carry files: the routing hot path
 * never pays for it, and the media service stays the only component that opens caller-given URLs.
 * A file id (Files API, purpose `user_data`) is read from the jobs service with the caller's account,
 * so another account's id is unknown here as on GET /v1/files/{id}; its bytes then go on exactly as
 * if the caller had sent them as `file_data`.
 */

/** Most file blocks in one request: each may cost a fetch and an extraction. */
export const MAX_FILE_PARTS = 16;
/** Bytes of all files one request forwards (fetched ones included): the router hop has a 48 MiB message bound. */
export const MAX_TOTAL_FILE_BYTES = 32 * 1024 * 1024;
/** Characters of file text one request may add to its prompt (4 M ≈ 1 M tokens, above any context window). */
export const MAX_TOTAL_FILE_TEXT_CHARACTERS = 4_000_000;

const FETCH_DEADLINE_MS = 30_000;
/** One jobs-service call while a stored file is read (a page is at most 1 MiB). */
const STORED_FILE_DEADLINE_MS = 15_000;
/** What one ReadFileContent returns at most (the jobs service's page bound). */
const STORED_FILE_PAGE_BYTES = 1024 * 1024;
/**
 * Purposes whose files may be a request's input: OpenAI's `user_data` and `assistants` (openai-node's
 * FilePurpose). A `batch` file is a batch's input lines, never a prompt's file.
 */
const INPUT_FILE_PURPOSES: ReadonlySet<string> = new Set(['user_data', 'assistants']);
/** A stored file's media type by its name's extension; PDFs are also known by their bytes. */
const MEDIA_TYPE_BY_EXTENSION: ReadonlyMap<string, string> = new Map([
  ['pdf', 'application/pdf'],
  ['txt', 'text/plain'],
  ['text', 'text/plain'],
  ['log', 'text/plain'],
  ['md', 'text/markdown'],
  ['markdown', 'text/markdown'],
  ['csv', 'text/csv'],
  ['tsv', 'text/tab-separated-values'],
  ['html', 'text/html'],
  ['htm', 'text/html'],
  ['json', 'application/json'],
  ['jsonl', 'application/x-ndjson'],
  ['xml', 'application/xml'],
  ['yaml', 'application/yaml'],
  ['yml', 'application/yaml'],
  ['js', 'application/javascript'],
]);
const EXTRACT_DEADLINE_MS = 60_000;

/** Media types read as UTF-8 text when the model has no file input. */
const TEXT_MEDIA_TYPES = /^(text\/[\w.+-]+|application\/(json|xml|x-ndjson|csv|yaml|x-yaml|javascript|markdown))$/;

export interface FilePartContext {
  media: PromiseClient<MediaServiceClient> | undefined;
  requestId: string;
  signal: CallerSignal;
  /** Present when the edge was given a jobs address: file ids are read through it. */
  jobs: PromiseClient<JobsServiceClient> | undefined;
  /** The caller's account: only its own files can be read. */
  accountId: string;
  /**
   * The client's field path (errors name it) of a file part by its canonical message and part index:
   * the block itself, its URL, or the file it holds. Default: the chat-completions spelling.
   */
  pathOf?: FilePathOf;
}

export type FilePathOf = (messageIndex: number, partIndex: number, what: 'block' | 'url' | 'id' | 'file') => string;

const chatPath: FilePathOf = (messageIndex, partIndex, what) =>
  `body.messages.${messageIndex}.content.${partIndex}${what === 'url' ? '.file.file_url' : what === 'id' ? '.file.file_id' : what === 'file' ? '.file' : ''}`;

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

/** Unknown, deleted, expired and another account's file alike: the jobs service's NOT_FOUND, said in the caller's terms. */
function noSuchFile(fileId: string, path: string): EdgeError {
  return new EdgeError({ status: 404, type: 'invalid_request_error', message: `${path}: no such file: '${echoed(fileId)}'.`, param: path, code: 'file_not_found' });
}

/** The media type a stored file goes on with: a PDF's by its bytes, others by the name's extension. */
function storedMediaType(filename: string, data: Buffer): string {
  if (isPdf(data)) return 'application/pdf';
  const dot = filename.lastIndexOf('.');
  return dot < 0 ? '' : (MEDIA_TYPE_BY_EXTENSION.get(filename.slice(dot + 1).toLowerCase()) ?? '');
}

/**
 * A file of the caller's account (Files API), read page by page within the inline bound: its metadata
 * first, so a file of another purpose or over the bound is refused before any byte is read.
 */
async function storedFile(file: FilePart, idPath: string, context: FilePartContext): Promise<{ data: Buffer; mediaType: string; filename: string }> {
  const { jobs, accountId } = context;
  if (!jobs) {
    throw edgeErrors.invalidRequest(`${idPath}: files are not configured on this gateway (no Files API); send file_data or file_url.`, idPath, 'file_id_unsupported');
  }
  if (!FILE_ID_PATTERN.test(file.fileId)) throw noSuchFile(file.fileId, idPath);
  const call = { requestId: context.requestId, deadlineMs: STORED_FILE_DEADLINE_MS, signal: context.signal };
  try {
    const { file: stored } = await jobs.getFile({ accountId, fileId: file.fileId }, call);
    if (!stored) throw noSuchFile(file.fileId, idPath);
    if (!INPUT_FILE_PURPOSES.has(stored.purpose)) {
      throw edgeErrors.invalidRequest(
        `${idPath}: file '${stored.id}' has purpose \`${stored.purpose}\`; only files uploaded with purpose \`user_data\` can be given as input.`,
        idPath,
        'invalid_file_purpose',
      );
    }
    if (stored.bytes > BigInt(MAX_INLINE_FILE_BYTES)) {
      throw edgeErrors.invalidRequest(`${idPath}: file '${stored.id}' holds ${stored.bytes} bytes; an input file may hold at most ${MAX_INLINE_FILE_BYTES}.`, idPath, 'file_too_large');
    }
    const total = Number(stored.bytes);
    const data = Buffer.allocUnsafe(total);
    let offset = 0;
    while (offset < total) {
      const page = await jobs.readFileContent({ accountId, fileId: file.fileId, offset: BigInt(offset), maxBytes: STORED_FILE_PAGE_BYTES }, call);
      // A stored file never changes; a page that brings nothing (or more than is left) is the service's fault, not the caller's.
      if (page.data.length === 0 || page.data.length > total - offset) throw errors.internal(`file ${file.fileId}: the jobs service's pages disagree with its length`);
      data.set(page.data, offset);
      offset += page.data.length;
    }
    return { data, mediaType: storedMediaType(stored.filename, data), filename: file.filename || stored.filename };
  } catch (error) {
    if (error instanceof GatewayError && error.reason === ErrorReason.ERROR_REASON_NOT_FOUND) throw noSuchFile(file.fileId, idPath);
    throw error;
  }
}

/** The file's bytes: inline as sent, read from the caller's files, or fetched through the media service's guarded fetcher. */
async function bytesOf(file: FilePart, urlPath: string, idPath: string, context: FilePartContext): Promise<{ data: Buffer; mediaType: string; filename: string }> {
  if (file.data.length > 0) return { data: Buffer.from(file.data.buffer, file.data.byteOffset, file.data.length), mediaType: file.mediaType, filename: file.filename };
  if (file.fileId !== '') return storedFile(file, idPath, context);
  const media = requireMedia(context);
  try {
    const fetched = await media.fetchUrl(
      { url: file.url, maxBytes: MAX_INLINE_FILE_BYTES, timeoutMs: 0 },
      { requestId: context.requestId, deadlineMs: FETCH_DEADLINE_MS, signal: context.signal },
    );
    return { data: Buffer.from(fetched.data.buffer, fetched.data.byteOffset, fetched.data.length), mediaType: fetched.contentType, filename: file.filename };
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

function asText(filename: string, context: string, text: string, cacheControl: ContentPart['cacheControl']): ContentPart {
  const name = filename ? ` name=${JSON.stringify(filename)}` : '';
  const note = context ? `\n${context}` : '';
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
      const { data, mediaType, filename } = await bytesOf(file, pathOf(messageIndex, partIndex, 'url'), pathOf(messageIndex, partIndex, 'id'), context);
      if (native) {
        totalBytes += data.length;
        if (totalBytes > MAX_TOTAL_FILE_BYTES) throw tooLarge(path, `the files of this request hold more than ${MAX_TOTAL_FILE_BYTES} bytes.`);
        const type = mediaType.split(';')[0]!.trim().toLowerCase();
        const resolved: ContentPart = {
          part: { $case: 'file', value: { filename, data, url: '', mediaType: isPdf(data) ? 'application/pdf' : type || 'application/octet-stream', context: file.context, fileId: '' } },
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
      message.content[partIndex] = asText(filename, file.context, text, part.cacheControl);
    }
  }
}
