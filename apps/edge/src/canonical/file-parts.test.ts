import { describe, expect, it } from 'vitest';
import { Cancellation, errors, type PromiseClient } from '@gateway/platform';
import type { ChatMessage, FileObject, JobsServiceClient, Model } from '@gateway/proto';
import { minimalPdf } from '@gateway/testing';
import type { CatalogModel } from '../catalog-cache.js';
import { EdgeError, type ApiError } from '../errors.js';
import { resolveFileParts, type FilePartContext } from './file-parts.js';
import { MAX_INLINE_FILE_BYTES } from './inline-data.js';

// File ids (Files API) are read through the jobs service with the caller's account, in the one place
// every dialect's file parts are read; what the model receives is what `file_data` would have given it.

function catalogModel(inputs: string[]): CatalogModel {
  return {
    model: { id: 'm', reasoningEfforts: [] } as unknown as Model,
    id: 'm',
    paid: true,
    endpoints: new Set(['chat.completions']),
    supportedParameters: new Set(),
    inputModalities: new Set(inputs),
    extraParameters: new Set(),
    allowedTiers: null,
    availableTiers: ['tier-1'],
  };
}

interface Stored {
  account: string;
  file: FileObject;
  data: Buffer;
}

/** A jobs service holding `stored`: each account sees only its own files (NOT_FOUND otherwise, as the real one). */
function fakeJobs(stored: Stored[]): { jobs: PromiseClient<JobsServiceClient>; reads: string[] } {
  const reads: string[] = [];
  const find = (accountId: string, fileId: string) => {
    const found = stored.find((entry) => entry.account === accountId && entry.file.id === fileId);
    if (!found) throw errors.notFound('no such file');
    return found;
  };
  const jobs = {
    getFile: async ({ accountId, fileId }: { accountId: string; fileId: string }) => ({ file: find(accountId, fileId).file }),
    readFileContent: async ({ accountId, fileId, offset, maxBytes }: { accountId: string; fileId: string; offset: bigint; maxBytes: number }) => {
      const found = find(accountId, fileId);
      reads.push(fileId);
      const start = Number(offset);
      return { data: found.data.subarray(start, start + Math.min(maxBytes, 1024 * 1024)), totalBytes: BigInt(found.data.length), filename: found.file.filename };
    },
  } as unknown as PromiseClient<JobsServiceClient>;
  return { jobs, reads };
}

function fileObject(id: string, filename: string, purpose: string, bytes: number): FileObject {
  return { id, bytes: BigInt(bytes), createdAt: 0n, expiresAt: 0n, filename, purpose, status: 'processed' };
}

function byId(fileId: string, filename = ''): ChatMessage[] {
  return [{ role: 'user', content: [{ part: { $case: 'file', value: { filename, data: Buffer.alloc(0), url: '', mediaType: '', context: '', fileId } } }] } as unknown as ChatMessage];
}

function context(jobs: PromiseClient<JobsServiceClient> | undefined, accountId = 'acct-owner'): FilePartContext {
  return { media: undefined, requestId: 'r', signal: new Cancellation(), jobs, accountId };
}

async function refusal(promise: Promise<unknown>): Promise<ApiError> {
  const caught = await promise.then(() => undefined, (error: unknown) => error);
  expect(caught).toBeInstanceOf(EdgeError);
  return (caught as EdgeError).apiError;
}

const reader = catalogModel(['text', 'file']);
const textOnly = catalogModel(['text']);
const pdf = minimalPdf(['Quarterly numbers']);
// Over one jobs page, so the read is paged.
const notes = Buffer.from('The code word is PERIWINKLE.\n'.repeat(40_000));

const owned: Stored[] = [
  { account: 'acct-owner', file: fileObject('file-pdf', 'report.pdf', 'user_data', pdf.length), data: pdf },
  { account: 'acct-owner', file: fileObject('file-notes', 'notes.txt', 'user_data', notes.length), data: notes },
  { account: 'acct-owner', file: fileObject('file-batch', 'in.jsonl', 'batch', 10), data: Buffer.from('{"a":1}\n\n\n') },
  { account: 'acct-owner', file: fileObject('file-huge', 'huge.bin', 'user_data', MAX_INLINE_FILE_BYTES + 1), data: Buffer.alloc(0) },
];

describe('resolveFileParts: file ids', () => {
  it('a model that reads files gets the stored bytes with the file name and its media type (PDF by its bytes, text by its name)', async () => {
    const { jobs } = fakeJobs(owned);
    const pdfMessages = byId('file-pdf');
    await resolveFileParts(pdfMessages, reader, context(jobs));
    expect(pdfMessages[0]!.content[0]!.part).toEqual({ $case: 'file', value: { filename: 'report.pdf', data: pdf, url: '', mediaType: 'application/pdf', context: '', fileId: '' } });
    const textMessages = byId('file-notes', 'mine.txt');
    await resolveFileParts(textMessages, reader, context(jobs));
    const part = textMessages[0]!.content[0]!.part;
    expect(part?.$case === 'file' && part.value).toMatchObject({ filename: 'mine.txt', mediaType: 'text/plain', fileId: '' });
    expect(part?.$case === 'file' && Buffer.from(part.value.data).equals(notes)).toBe(true);
  });

  it("a model without file input gets a text file's contents", async () => {
    const messages = byId('file-notes');
    await resolveFileParts(messages, textOnly, context(fakeJobs(owned).jobs));
    const part = messages[0]!.content[0]!.part;
    expect(part?.$case).toBe('text');
    expect(part?.$case === 'text' && part.value.startsWith('<file name="notes.txt">\nThe code word is PERIWINKLE.')).toBe(true);
  });

  it("another account's, an unknown or a malformed id is a 404 naming the field, no byte read", async () => {
    const { jobs, reads } = fakeJobs(owned);
    for (const [id, account] of [['file-pdf', 'acct-stranger'], ['file-unknown', 'acct-owner'], ['not-a-file-id', 'acct-owner']] as const) {
      const refused = await refusal(resolveFileParts(byId(id), reader, context(jobs, account)));
      expect(refused).toMatchObject({ status: 404, type: 'invalid_request_error', code: 'file_not_found', param: 'body.messages.0.content.0.file.file_id' });
    }
    expect(reads).toEqual([]);
  });

  it('a batch file is a 400 and an oversized file a 400, both before any byte is read', async () => {
    const { jobs, reads } = fakeJobs(owned);
    expect(await refusal(resolveFileParts(byId('file-batch'), reader, context(jobs)))).toMatchObject({ status: 400, code: 'invalid_file_purpose' });
    expect(await refusal(resolveFileParts(byId('file-huge'), reader, context(jobs)))).toMatchObject({ status: 400, code: 'file_too_large' });
    expect(reads).toEqual([]);
  });

  it('without a jobs service a file id stays a 400 saying files are not configured', async () => {
    const refused = await refusal(resolveFileParts(byId('file-pdf'), reader, context(undefined)));
    expect(refused).toMatchObject({ status: 400, code: 'file_id_unsupported', param: 'body.messages.0.content.0.file.file_id' });
    expect(refused.message).toContain('files are not configured');
  });
});
