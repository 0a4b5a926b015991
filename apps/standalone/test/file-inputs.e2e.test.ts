import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI, { APIError, toFile } from 'openai';
import { minimalPdf, startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { catalogYaml } from './catalog-yaml.js';
import { startStackOnCatalog, type StackOnCatalog } from './configured-stack.js';
import { openAiAccount } from './background-harness.js';

// File ids as request inputs (issue 41): a file uploaded with purpose `user_data` through the Files API,
// sent by `file_id` in chat completions (`file`) and responses (`input_file`), reaches the provider exactly
// as the same file sent as `file_data` does. Another account's, an unknown and a deleted id are 404s and
// a `batch` file a 400, each before any provider call.

const READER = 'testco/file-ids';
const NOTES = Buffer.from('The launch code word is PERIWINKLE.\n');
const PDF = minimalPdf(['Quarterly numbers: up 12 percent.']);

function catalog(upstream: FakeUpstream): string {
  return catalogYaml({
    providers: [{ id: 'upstream-one', kind: 'openai', url: upstream.url, keyEnv: 'FILE_IDS_KEY' }],
    models: [
      {
        id: READER,
        inputModalities: ['text', 'file'],
        contextWindow: 100_000,
        maxOutputTokens: 100,
        supportedParameters: ['max_completion_tokens'],
        offers: [{ provider: 'upstream-one', upstreamModel: 'reader-upstream', endpoints: ['chat.completions', 'responses'] }],
      },
    ],
  });
}

async function refusal(promise: Promise<unknown>): Promise<{ status: number; code: string | undefined; param: string | undefined; message: string }> {
  const caught = await promise.then(() => undefined, (error: unknown) => error);
  expect(caught).toBeInstanceOf(APIError);
  const error = caught as APIError;
  const body = error.error as { code?: string; param?: string; message: string };
  return { status: error.status!, code: body.code, param: body.param ?? undefined, message: body.message };
}

const dataUrl = (type: string, data: Buffer) => `data:${type};base64,${data.toString('base64')}`;

describe('file ids as inputs, end to end', () => {
  let upstream: FakeUpstream;
  let base: StackOnCatalog;
  let owner: OpenAI;
  let stranger: OpenAI;
  let notesId: string;
  let pdfId: string;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    base = await startStackOnCatalog('file_inputs', catalog(upstream), {
      keyHashSecret: 'file-ids-e2e-secret-0123456789abcdef',
      providerSecrets: { FILE_IDS_KEY: 'sk-file-ids' },
    });
    owner = (await openAiAccount(base.stack, 'file-ids-owner', '10')).client;
    stranger = (await openAiAccount(base.stack, 'file-ids-stranger', '10')).client;
    notesId = (await owner.files.create({ file: await toFile(NOTES, 'notes.txt'), purpose: 'user_data' })).id;
    pdfId = (await owner.files.create({ file: await toFile(PDF, 'report.pdf'), purpose: 'user_data' })).id;
  }, 120_000);

  afterAll(async () => {
    await base?.stop();
    await upstream?.close();
  });

  beforeEach(() => upstream.reset());

  /** The provider's request body for one call (the fake records each). */
  async function sentFor(call: () => Promise<unknown>): Promise<any> {
    upstream.reset();
    await call();
    expect(upstream.requests).toHaveLength(1);
    return upstream.requests[0]!.body;
  }

  it('chat completions: a file by file_id reaches the provider exactly as by file_data (text and PDF)', async () => {
    for (const [fileId, filename, type, data] of [[notesId, 'notes.txt', 'text/plain', NOTES], [pdfId, 'report.pdf', 'application/pdf', PDF]] as const) {
      const ask = (file: Record<string, string>) => () =>
        owner.chat.completions.create({ model: READER, messages: [{ role: 'user', content: [{ type: 'text', text: 'Read it.' }, { type: 'file', file }] }] });
      const byData = await sentFor(ask({ filename, file_data: dataUrl(type, data) }));
      const byId = await sentFor(ask({ file_id: fileId }));
      expect(byId.messages).toEqual(byData.messages);
      expect(byId.messages[0].content[1]).toEqual({ type: 'file', file: { filename, file_data: dataUrl(type, data) } });
      expect(JSON.stringify(byId)).not.toContain(fileId);
    }
  }, 60_000);

  it('responses: an input_file by file_id reaches the provider exactly as by file_data', async () => {
    for (const [fileId, filename, type, data] of [[notesId, 'notes.txt', 'text/plain', NOTES], [pdfId, 'report.pdf', 'application/pdf', PDF]] as const) {
      const ask = (file: Record<string, string>) => () =>
        owner.responses.create({ model: READER, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Read it.' }, { type: 'input_file', ...file }] }] });
      const byData = await sentFor(ask({ filename, file_data: dataUrl(type, data) }));
      const byId = await sentFor(ask({ file_id: fileId }));
      expect(byId.messages).toEqual(byData.messages);
      expect(JSON.stringify(byId)).toContain(data.toString('base64'));
      expect(JSON.stringify(byId)).not.toContain(fileId);
    }
  }, 60_000);

  it("another account's id is a 404 like an unknown one, in both dialects, and no byte reaches a provider", async () => {
    const chat = (client: OpenAI, fileId: string) => client.chat.completions.create({ model: READER, messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: fileId } }] }] });
    const responses = (client: OpenAI, fileId: string) => client.responses.create({ model: READER, input: [{ role: 'user', content: [{ type: 'input_file', file_id: fileId }] }] });
    const strangersChat = await refusal(chat(stranger, notesId));
    expect(strangersChat).toMatchObject({ status: 404, code: 'file_not_found', param: 'body.messages.0.content.0.file.file_id' });
    const unknownChat = await refusal(chat(stranger, 'file-doesnotexist0000'));
    expect({ ...unknownChat, message: '' }).toEqual({ ...strangersChat, message: '' });
    const strangersResponse = await refusal(responses(stranger, pdfId));
    expect(strangersResponse).toMatchObject({ status: 404, code: 'file_not_found', param: 'body.input.0.content.0.file_id' });
    expect((await refusal(responses(owner, 'file-doesnotexist0000'))).status).toBe(404);
    expect(upstream.requests).toHaveLength(0);
  }, 60_000);

  it('a deleted file is a 404 and a batch file a 400, before any provider call', async () => {
    const gone = (await owner.files.create({ file: await toFile(NOTES, 'gone.txt'), purpose: 'user_data' })).id;
    await owner.files.delete(gone);
    const deleted = await refusal(owner.chat.completions.create({ model: READER, messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: gone } }] }] }));
    expect([deleted.status, deleted.code]).toEqual([404, 'file_not_found']);
    const line = `${JSON.stringify({ custom_id: 'r0', method: 'POST', url: '/v1/chat/completions', body: { model: READER, messages: [] } })}\n`;
    const batchId = (await owner.files.create({ file: await toFile(Buffer.from(line), 'in.jsonl'), purpose: 'batch' })).id;
    const batch = await refusal(owner.responses.create({ model: READER, input: [{ role: 'user', content: [{ type: 'input_file', file_id: batchId }] }] }));
    expect(batch).toMatchObject({ status: 400, code: 'invalid_file_purpose', param: 'body.input.0.content.0.file_id' });
    expect(batch.message).not.toContain('custom_id');
    expect(upstream.requests).toHaveLength(0);
  }, 60_000);
});
