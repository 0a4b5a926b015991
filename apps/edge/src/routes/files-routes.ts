import type { Request, Response } from 'express';
import busboy from 'busboy';
import { z } from 'zod';
import type { FileObject, JobsServiceClient } from '@gateway/proto';
import type { PromiseClient } from '@gateway/platform';
import type { EdgeContext } from '../context.js';
import { edgeErrors } from '../errors.js';
import { ClientGoneError, sendJson, watchBodyArrival } from '../http.js';
import { jobsOf, verifyCallerKey } from './caller.js';
import { requestIdOf } from '../request-id.js';
import { abandonParser, multipartTypeRefusal } from '../endpoints/multipart.js';
import { parseWith } from '../account/account-schemas.js';
import { FILE_ID_PATTERN, type FilesRouteOptions } from './files-options.js';

/**
 * The OpenAI Files API (docs/jobs.md): POST /v1/files (multipart: `file`, `purpose`, optional
 * `expires_after[anchor]` / `expires_after[seconds]`), GET /v1/files, GET /v1/files/{id},
 * GET /v1/files/{id}/content, DELETE /v1/files/{id}. An API key names the account; the jobs service looks
 * every file up with that account, so another account's id answers 404 like an unknown one. The upload is
 * streamed: each 1 MiB the form delivers goes to the jobs service (AppendUpload) before more is read, so
 * the edge holds at most one chunk of a file, whatever its size.
 */

const CALL_DEADLINE_MS = 15_000;
/** What one AppendUpload carries (the jobs service's chunk bound). */
const CHUNK_BYTES = 1024 * 1024;
/** Form fields besides the file: purpose, expires_after[anchor], expires_after[seconds], and slack. */
const MAX_FIELDS = 8;
const MAX_FIELD_BYTES = 1024;
/** Multipart framing around the file part (boundaries, part headers, the small fields). */
const FORM_OVERHEAD_BYTES = 64 * 1024;



const listQuery = z.strictObject({
  purpose: z.enum(['batch', 'user_data', 'batch_output']).optional(),
  limit: z.coerce.number().int().min(1).max(10_000).optional(),
  after: z.string().max(100).optional(),
  order: z.enum(['asc', 'desc']).optional(),
});

async function accountOf(context: EdgeContext, request: Request, response: Response): Promise<string> {
  return (await verifyCallerKey(context, request, response)).accountId;
}

/** A path id that cannot be a file id is answered as an unknown file, before any call. */
function fileIdOf(request: Request): string {
  const id = request.params.fileId;
  if (typeof id !== 'string' || !FILE_ID_PATTERN.test(id)) throw edgeErrors.notFound('No such file.');
  return id;
}

export function renderFile(file: FileObject): Record<string, unknown> {
  return {
    id: file.id,
    object: 'file',
    bytes: Number(file.bytes),
    created_at: Number(file.createdAt),
    expires_at: file.expiresAt === 0n ? null : Number(file.expiresAt),
    filename: file.filename,
    purpose: file.purpose,
    status: file.status,
    status_details: null,
  };
}

export function uploadFileHandler(context: EdgeContext, options: FilesRouteOptions) {
  return async (request: Request, response: Response): Promise<void> => {
    const jobs = jobsOf(context, request);
    const accountId = await accountOf(context, request, response);
    const file = await streamUpload(context, jobs, request, response, accountId, options);
    sendJson(response, 200, renderFile(file));
  };
}

export function listFilesHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const jobs = jobsOf(context, request);
    const accountId = await accountOf(context, request, response);
    const query = parseWith(listQuery, 'query', request.query);
    const page = await jobs.listFiles(
      { accountId, purpose: query.purpose ?? '', limit: query.limit ?? 0, after: query.after ?? '', order: query.order ?? '' },
      { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS },
    );
    const data = page.files.map(renderFile);
    sendJson(response, 200, {
      object: 'list',
      data,
      first_id: page.files[0]?.id ?? null,
      last_id: page.files.at(-1)?.id ?? null,
      has_more: page.hasMore,
    });
  };
}

/** What every /v1/files/{id} route asks first: the jobs service, the caller's account, the file id its path names. */
async function fileCall(context: EdgeContext, request: Request, response: Response) {
  const jobs = jobsOf(context, request);
  const accountId = await accountOf(context, request, response);
  const fileId = fileIdOf(request);
  return { jobs, accountId, fileId, settings: { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS } };
}

export function getFileHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { jobs, accountId, fileId, settings } = await fileCall(context, request, response);
    const answer = await jobs.getFile({ accountId, fileId }, settings);
    sendJson(response, 200, renderFile(answer.file!));
  };
}

export function deleteFileHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { jobs, accountId, fileId, settings } = await fileCall(context, request, response);
    const deleted = await jobs.deleteFile({ accountId, fileId }, settings);
    sendJson(response, 200, { id: deleted.fileId, object: 'file', deleted: deleted.deleted });
  };
}

/**
 * The file's bytes, page by page (1 MiB per ReadFileContent), each written before the next is asked for
 * (the socket's back-pressure bounds what the edge holds). The first page decides the status: an unknown
 * file is a 404 before any byte is sent.
 */
export function fileContentHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const { jobs, accountId, fileId, settings } = await fileCall(context, request, response);
    let page = await jobs.readFileContent({ accountId, fileId, offset: 0n, maxBytes: CHUNK_BYTES }, settings);
    const total = page.totalBytes;
    response.statusCode = 200;
    response.setHeader('content-type', 'application/octet-stream');
    response.setHeader('content-length', String(total));
    response.setHeader('content-disposition', `attachment; filename="${page.filename.replace(/["\\\r\n]/g, '_')}"`);
    let sent = 0n;
    for (;;) {
      if (page.data.length > 0) {
        sent += BigInt(page.data.length);
        if (!response.write(page.data)) await new Promise<void>((resolve, reject) => {
          const onClose = () => reject(new ClientGoneError('client left during a file download'));
          response.once('drain', () => { response.off('close', onClose); resolve(); });
          response.once('close', onClose);
        });
      }
      if (sent >= total || page.data.length === 0) break;
      // A file deleted mid-download ends the answer short (the length header tells the client so).
      page = await jobs.readFileContent({ accountId, fileId, offset: sent, maxBytes: CHUNK_BYTES }, settings).catch(() => ({ data: Buffer.alloc(0), totalBytes: total, filename: '' }));
    }
    if (sent !== total) response.destroy();
    else response.end();
  };
}

/**
 * Reads the multipart form with busboy and streams its `file` part to the jobs service. Bounds decided
 * while the bytes arrive: one file, a few small fields, the file size (413 once passed), the body's
 * arrival time (408). Any failure aborts the upload at the jobs service, so nothing half-stored stays.
 */
function streamUpload(
  context: EdgeContext,
  jobs: PromiseClient<JobsServiceClient>,
  request: Request,
  response: Response,
  accountId: string,
  options: FilesRouteOptions,
): Promise<FileObject> {
  const typeRefusal = multipartTypeRefusal(request);
  if (typeRefusal) return Promise.reject(typeRefusal);
  const bodyLimit = options.maxFileBytes + FORM_OVERHEAD_BYTES;
  const declared = request.headers['content-length'];
  if (declared !== undefined && Number(declared) > bodyLimit) return Promise.reject(edgeErrors.payloadTooLarge(options.maxFileBytes));
  let parser: busboy.Busboy;
  try {
    parser = busboy({
      headers: request.headers,
      limits: { files: 1, fields: MAX_FIELDS, fieldSize: MAX_FIELD_BYTES, fileSize: options.maxFileBytes, parts: 1 + MAX_FIELDS },
    });
  } catch (error) {
    return Promise.reject(edgeErrors.invalidRequest(`body: malformed multipart header (${error instanceof Error ? error.message : 'unreadable'}).`, 'body'));
  }
  const settings = { requestId: requestIdOf(response), deadlineMs: CALL_DEADLINE_MS };
  const fields = new Map<string, string>();
  let fileId: string | undefined;
  let fileSeen = false;
  let fileDone: Promise<number> | undefined;

  // A failure can come while BeginUpload is still in flight: the upload is aborted once its id is known.
  let failed = false;
  let aborted = false;
  const abortIfBegun = (): Promise<void> => {
    if (!failed || fileId === undefined || aborted) return Promise.resolve();
    aborted = true;
    return jobs.abortUpload({ accountId, fileId }, settings).then(
      () => undefined,
      (abortError: unknown) => context.logger.warn({ err: abortError }, 'aborting an upload failed; the jobs sweeper discards it'),
    );
  };

  return new Promise<FileObject>((resolve, reject) => {
    let settled = false;
    const finish = (error: Error | undefined, file?: FileObject) => {
      if (settled) return;
      settled = true;
      stopWatching();
      if (error) {
        abandonParser(request, parser);
        failed = true;
        // Answered once the upload is gone (when it had begun), so a retry finds its slot free.
        void abortIfBegun().then(() => reject(error));
      } else {
        resolve(file!);
      }
    };
    const stopWatching = watchBodyArrival(request, { ...context.bodyLimits, maxBytes: bodyLimit }, finish);

    parser.on('field', (name, value, info) => {
      if (info.valueTruncated) return finish(edgeErrors.invalidRequest(`body.${name}: longer than ${MAX_FIELD_BYTES} bytes.`, name));
      if (fields.has(name)) return finish(edgeErrors.invalidRequest(`body.${name}: given more than once.`, name));
      fields.set(name, value);
      // A purpose sent before the file is checked before any byte is stored.
      if (name === 'purpose' && !['batch', 'user_data'].includes(value)) finish(invalidPurpose());
    });
    parser.on('file', (name, stream, info) => {
      if (name !== 'file' || fileSeen) {
        stream.resume();
        return finish(edgeErrors.invalidRequest(`body.${name}: the form carries one file, in the field \`file\`.`, name));
      }
      fileSeen = true;
      stream.on('limit', () => finish(Object.assign(edgeErrors.payloadTooLarge(options.maxFileBytes), { message: `body.file: the file is larger than ${options.maxFileBytes} bytes.` })));
      stream.on('error', (error: Error) => finish(edgeErrors.invalidRequest(`body: malformed multipart upload (${error.message}).`, 'body')));
      fileDone = sendChunks(stream, info.filename ?? '');
      fileDone.catch((error: unknown) => finish(error instanceof Error ? error : new Error(String(error))));
    });
    /** Starts the upload, then sends the file 1 MiB at a time, pausing the form while a chunk is in flight. */
    const sendChunks = async (stream: NodeJS.ReadableStream, filename: string): Promise<number> => {
      stream.pause();
      const begun = await jobs.beginUpload({ accountId, filename }, settings);
      fileId = begun.fileId;
      void abortIfBegun();
      let offset = 0;
      let pending: Buffer[] = [];
      let pendingBytes = 0;
      const flush = async () => {
        const data = Buffer.concat(pending, pendingBytes);
        pending = [];
        pendingBytes = 0;
        await jobs.appendUpload({ accountId, fileId: begun.fileId, offset: BigInt(offset), data }, settings);
        offset += data.length;
      };
      for await (const chunk of stream as AsyncIterable<Buffer>) {
        if (settled) break;
        let rest = chunk;
        while (rest.length > 0) {
          const room = CHUNK_BYTES - pendingBytes;
          pending.push(rest.subarray(0, room));
          pendingBytes += Math.min(room, rest.length);
          rest = rest.subarray(room);
          if (pendingBytes === CHUNK_BYTES) await flush();
        }
      }
      if (pendingBytes > 0 && !settled) await flush();
      return offset;
    };
    parser.on('filesLimit', () => finish(edgeErrors.invalidRequest('body: the form carries one file.', 'file')));
    parser.on('fieldsLimit', () => finish(edgeErrors.invalidRequest(`body: more than ${MAX_FIELDS} fields in the form.`, 'body')));
    parser.on('partsLimit', () => finish(edgeErrors.invalidRequest('body: too many parts in the form.', 'body')));
    parser.on('error', (error: Error) => {
      if (!request.complete && request.destroyed) finish(new ClientGoneError('client closed the connection while sending the body'));
      else finish(edgeErrors.invalidRequest(`body: malformed multipart upload (${error.message}).`, 'body'));
    });
    parser.on('close', () => {
      if (settled) return;
      void (async () => {
        if (!fileSeen || !fileDone) return finish(edgeErrors.invalidRequest('body.file: a file is required.', 'file'));
        const bytes = await fileDone;
        const purpose = fields.get('purpose');
        if (purpose === undefined) return finish(edgeErrors.invalidRequest('body.purpose: required (batch or user_data).', 'purpose'));
        if (!['batch', 'user_data'].includes(purpose)) return finish(invalidPurpose());
        const anchor = fields.get('expires_after[anchor]');
        const secondsText = fields.get('expires_after[seconds]');
        let expiresAfterSeconds = 0;
        if (anchor !== undefined || secondsText !== undefined) {
          if (anchor !== 'created_at') return finish(edgeErrors.invalidRequest('body.expires_after.anchor: expected created_at.', 'expires_after.anchor'));
          const seconds = Number(secondsText);
          if (secondsText === undefined || !/^\d{1,8}$/.test(secondsText) || seconds < 3_600 || seconds > 2_592_000) {
            return finish(edgeErrors.invalidRequest('body.expires_after.seconds: expected an integer from 3600 to 2592000.', 'expires_after.seconds'));
          }
          expiresAfterSeconds = seconds;
        }
        const completed = await jobs.completeUpload({ accountId, fileId: fileId!, bytes: BigInt(bytes), purpose, expiresAfterSeconds }, settings);
        finish(undefined, completed.file!);
      })().catch((error: unknown) => finish(error instanceof Error ? error : new Error(String(error))));
    });
    request.pipe(parser);
  });
}

function invalidPurpose() {
  return edgeErrors.invalidRequest("body.purpose: expected 'batch' or 'user_data'.", 'purpose');
}
