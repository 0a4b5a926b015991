import { createWriteStream, rmSync, type WriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import busboy from 'busboy';
import { edgeErrors } from '../errors.js';
import { ClientGoneError, watchBodyArrival, type BodyLimits } from '../http.js';
import type { UploadArea } from './upload-spool.js';

/** Bounds of one multipart upload, besides the body limits (total size, arrival time). */
export interface MultipartBounds {
  /** Most file parts. */
  files: number;
  /** Most non-file fields. */
  fields: number;
  /** Largest non-file field, bytes. */
  fieldBytes: number;
  /** Largest file part, bytes (spec §8: a single inline file is at most 20 MiB). */
  fileBytes: number;
}

export const DEFAULT_MULTIPART_BOUNDS: MultipartBounds = { files: 16, fields: 32, fieldBytes: 256 * 1024, fileBytes: 20 * 1024 * 1024 };

/** A file part, spooled to disk as it arrived (upload-spool.ts); its bytes are read with MultipartBody.load. */
export interface MultipartFile {
  field: string;
  filename: string;
  mediaType: string;
  /** Bytes. */
  size: number;
  /** The spool file; removed when the request's answer is over. */
  path: string;
}

export interface MultipartBody {
  /** Field name to its values in arrival order. */
  fields: Map<string, string[]>;
  files: MultipartFile[];
  /**
   * The bytes of `files`, in order, read once the upload memory budget has room for all of them (waits,
   * then 503 `overloaded`); the room is held until the request's answer is over.
   */
  load(files: readonly MultipartFile[]): Promise<Buffer[]>;
}

/** Where a request's files are spooled, and the response whose end removes them and frees their memory. */
export interface RequestUploads {
  area: UploadArea;
  response: ServerResponse;
}

/**
 * Reads a multipart/form-data body through busboy with every bound decided while the bytes arrive: the
 * total (413 as soon as it is passed, never after buffering it), each file (413), each field and the part
 * counts (400), a stall or a slow whole body (408). A missing or malformed boundary, a wrong content type
 * or a truncated upload is a 400, never a 500. File parts go to spool files as they arrive (with the
 * socket's back-pressure), so an upload in progress holds no more than busboy's buffers in memory.
 */
export function readMultipart(
  request: IncomingMessage,
  limits: BodyLimits,
  bounds: MultipartBounds,
  uploads: RequestUploads,
): Promise<MultipartBody> {
  const typeRefusal = multipartTypeRefusal(request);
  if (typeRefusal) return Promise.reject(typeRefusal);
  const declared = request.headers['content-length'];
  if (declared !== undefined && Number(declared) > limits.maxBytes) return Promise.reject(edgeErrors.payloadTooLarge(limits.maxBytes));
  let parser: busboy.Busboy;
  try {
    parser = busboy({
      headers: request.headers,
      limits: { files: bounds.files, fields: bounds.fields, fieldSize: bounds.fieldBytes, fileSize: bounds.fileBytes, parts: bounds.files + bounds.fields },
    });
  } catch (error) {
    return Promise.reject(edgeErrors.invalidRequest(`body: malformed multipart header (${error instanceof Error ? error.message : 'unreadable'}).`, 'body'));
  }
  let directory: string;
  try {
    directory = uploads.area.spoolDirectory();
  } catch (error) {
    return Promise.reject(error);
  }
  const { response } = uploads;
  const spooled: string[] = [];
  const writers: WriteStream[] = [];
  const removeAll = () => {
    for (const writer of writers) writer.destroy();
    for (const path of spooled.splice(0)) rmSync(path, { force: true });
  };
  const answered = new AbortController();
  response.once('close', () => {
    answered.abort();
    removeAll();
  });
  const load = async (files: readonly MultipartFile[]): Promise<Buffer[]> => {
    if (answered.signal.aborted) throw new ClientGoneError('client left before its upload was read');
    let release: () => void;
    try {
      release = await uploads.area.reserve(files.reduce((sum, file) => sum + file.size, 0), answered.signal);
    } catch (error) {
      if (answered.signal.aborted) throw new ClientGoneError('client left while its upload waited for memory');
      throw error;
    }
    if (answered.signal.aborted) {
      release();
      throw new ClientGoneError('client left while its upload waited for memory');
    }
    response.once('close', release);
    try {
      return await Promise.all(files.map((file) => readFile(file.path)));
    } catch (error) {
      release();
      throw error;
    }
  };
  return new Promise<MultipartBody>((resolve, reject) => {
    const body: MultipartBody = { fields: new Map(), files: [], load };
    const written: Promise<void>[] = [];
    let settled = false;
    const finish = (error: Error | undefined) => {
      if (settled) return;
      settled = true;
      stopWatching();
      if (error) {
        abandonParser(request, parser);
        removeAll();
        reject(error);
      } else {
        // Every spool file complete on disk before the body is handed on.
        Promise.all(written).then(() => resolve(body), (writeError: unknown) => {
          removeAll();
          reject(writeError);
        });
      }
    };
    // The bytes go to the parser (piped below); the watch only counts them.
    const stopWatching = watchBodyArrival(request, limits, finish);

    parser.on('field', (name, value, info) => {
      if (info.valueTruncated) {
        finish(edgeErrors.invalidRequest(`body.${name}: longer than ${bounds.fieldBytes} bytes.`, `body.${name}`));
        return;
      }
      const values = body.fields.get(name) ?? [];
      values.push(value);
      body.fields.set(name, values);
    });
    parser.on('file', (name, stream, info) => {
      const path = join(directory, randomUUID());
      spooled.push(path);
      const writer = createWriteStream(path, { flags: 'wx', mode: 0o600 });
      writers.push(writer);
      let size = 0;
      stream.on('data', (chunk: Buffer) => {
        size += chunk.length;
      });
      written.push(new Promise<void>((resolveWrite, rejectWrite) => {
        writer.once('finish', () => resolveWrite());
        writer.once('error', (error) => {
          finish(new Error(`upload spool write failed: ${error.message}`));
          rejectWrite(error);
        });
      }));
      // A failed write is answered above; a rejection nobody awaits must not become unhandled.
      written[written.length - 1]!.catch(() => undefined);
      stream.pipe(writer);
      stream.on('limit', () => {
        const error = edgeErrors.payloadTooLarge(bounds.fileBytes);
        finish(Object.assign(error, { message: `body.${name}: the file is larger than ${bounds.fileBytes} bytes.` }));
      });
      // busboy destroys the open file's stream when the form ends mid-file: without a listener that error
      // would be uncaught. The parser reports the same truncation; either way the answer is a 400.
      stream.on('error', (error: Error) => finish(edgeErrors.invalidRequest(`body: malformed multipart upload (${error.message}).`, 'body')));
      stream.on('end', () => {
        if (!settled) body.files.push({ field: name, filename: info.filename ?? '', mediaType: info.mimeType ?? '', size, path });
      });
    });
    const tooMany = (what: string, bound: number) => () => finish(edgeErrors.invalidRequest(`body: more than ${bound} ${what} in the upload.`, 'body'));
    parser.on('filesLimit', tooMany('files', bounds.files));
    parser.on('fieldsLimit', tooMany('fields', bounds.fields));
    parser.on('partsLimit', tooMany('parts', bounds.files + bounds.fields));
    parser.on('error', (error: Error) => {
      if (!request.complete && request.destroyed) finish(new ClientGoneError('client closed the connection while sending the body'));
      else finish(edgeErrors.invalidRequest(`body: malformed multipart upload (${error.message}).`, 'body'));
    });
    parser.on('close', () => finish(undefined));
    request.pipe(parser);
  });
}

/**
 * The refusal of a request that is not multipart/form-data with a boundary (a 400 before any of its body is
 * read), or undefined: the one check of every multipart endpoint, the Files upload's stream included.
 */
export function multipartTypeRefusal(request: IncomingMessage): Error | undefined {
  const contentType = request.headers['content-type'] ?? '';
  if (/^multipart\/form-data\s*;/i.test(contentType) && /boundary=/i.test(contentType)) return undefined;
  return edgeErrors.invalidRequest('body: expected Content-Type multipart/form-data with a boundary.', 'body');
}

/** The one value of a text field; a repeated field is a 400. */
/**
 * Stops reading a form that failed: the request no longer feeds the parser (the rest of its body is not
 * read), and the parser's later events, errors included, go nowhere.
 */
export function abandonParser(request: IncomingMessage, parser: busboy.Busboy): void {
  request.unpipe(parser);
  request.pause();
  parser.removeAllListeners();
  parser.on('error', () => undefined);
}

export function singleField(body: MultipartBody, name: string): string | undefined {
  const values = body.fields.get(name);
  if (!values || values.length === 0) return undefined;
  if (values.length > 1) throw edgeErrors.invalidRequest(`body.${name}: given ${values.length} times; send it once.`, `body.${name}`);
  return values[0];
}
