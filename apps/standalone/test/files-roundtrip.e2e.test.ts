import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI, { toFile } from 'openai';
import pg from 'pg';
import { eventually, startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { oneModelCatalog } from './chat-e2e-harness.js';
import { ctlJson, startStackOnCatalog, type StackOnCatalog } from './configured-stack.js';

// The Files API through the whole stack (edge → jobs service → Postgres), driven by the real `openai`
// client as an application would: create (multipart, streamed in 1 MiB chunks), retrieve, list (the SDK's
// own cursor pagination), content, delete; another account's ids answer 404 exactly like unknown ones;
// the size and count bounds answer 4xx in the OpenAI envelope; hostile forms are 400s, never 500s.

const MAX_FILE_BYTES = 3 * 1024 * 1024;

describe('Files API with the openai SDK', () => {
  let upstream: FakeUpstream;
  let base: StackOnCatalog;
  let url: string;
  let owner: OpenAI;
  let ownerKey: string;
  let stranger: OpenAI;

  async function client(name: string): Promise<{ client: OpenAI; apiKey: string }> {
    const created = await ctlJson(base.stack, 'accounts', 'create', '--name', name, '--credits', '10', '--tier', 'tier-1', '--json');
    const apiKey = (await ctlJson(base.stack, 'keys', 'create', created.account_id!, '--name', `${name}-key`, '--json')).api_key!;
    return { apiKey, client: new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 60_000 }) };
  }

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    base = await startStackOnCatalog('files', oneModelCatalog({
      model: 'testco/files', provider: { kind: 'openai', url: upstream.url, keyEnv: 'FILES_KEY' }, upstreamModel: 'files-upstream',
      supportedParameters: ['temperature'], endpoints: ['chat.completions'],
    }), {
      keyHashSecret: 'files-e2e-secret-0123456789abcdef',
      providerSecrets: { FILES_KEY: 'sk-files' },
      jobs: { fileLimits: { maxFileBytes: MAX_FILE_BYTES, maxFilesPerAccount: 6, maxUploadsPerAccount: 4 } },
      edge: { files: { maxFileBytes: MAX_FILE_BYTES } },
    });
    url = base.stack.url;
    ({ client: owner, apiKey: ownerKey } = await client('files-owner'));
    ({ client: stranger } = await client('files-stranger'));
  }, 120_000);

  afterAll(async () => {
    await base?.stop();
    await upstream?.close();
  });

  it('creates, retrieves, lists, downloads and deletes a multi-megabyte file byte for byte', async () => {
    const data = randomBytes(2 * 1024 * 1024 + 4321);
    const created = await owner.files.create({ file: await toFile(data, 'payload.bin'), purpose: 'user_data', expires_after: { anchor: 'created_at', seconds: 7_200 } });
    expect(created).toMatchObject({ object: 'file', bytes: data.length, filename: 'payload.bin', purpose: 'user_data', status: 'processed' });
    expect(created.expires_at! - created.created_at).toBe(7_200);
    expect(await owner.files.retrieve(created.id)).toEqual(created);
    const content = await owner.files.content(created.id);
    expect(content.headers.get('content-type')).toBe('application/octet-stream');
    expect(Buffer.from(await content.arrayBuffer()).equals(data)).toBe(true);
    expect(await owner.files.delete(created.id)).toEqual({ id: created.id, object: 'file', deleted: true });
    await expect(owner.files.retrieve(created.id)).rejects.toMatchObject({ status: 404 });
    await expect(owner.files.content(created.id)).rejects.toMatchObject({ status: 404 });
  });

  it('lists newest first and pages with the SDK cursor; purpose filters; JSONL for batch keeps its lines', async () => {
    const ids: string[] = [];
    for (let index = 0; index < 3; index++) {
      const line = `${JSON.stringify({ custom_id: `r${index}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'testco/files', messages: [] } })}\n`;
      ids.push((await owner.files.create({ file: await toFile(Buffer.from(line), `in-${index}.jsonl`), purpose: 'batch' })).id);
    }
    const seen: string[] = [];
    // The SDK follows `has_more` with `after` = the last id of each page.
    for await (const file of owner.files.list({ limit: 2 })) seen.push(file.id);
    expect(seen.slice(0, 3)).toEqual([...ids].reverse());
    const batchOnly = await owner.files.list({ purpose: 'batch', order: 'asc' });
    expect(batchOnly.data.map((file) => file.id)).toEqual(ids);
    expect((await owner.files.list({ purpose: 'user_data' })).data.every((file) => file.purpose === 'user_data')).toBe(true);
    const text = await (await owner.files.content(ids[1]!)).text();
    expect(JSON.parse(text.trim())).toMatchObject({ custom_id: 'r1' });
    for (const id of ids) await owner.files.delete(id);
  });

  it("another account's file is a 404 everywhere, and its listing never shows it", async () => {
    const mine = await owner.files.create({ file: await toFile(Buffer.from('{"secret":true}\n'), 'mine.jsonl'), purpose: 'batch' });
    await expect(stranger.files.retrieve(mine.id)).rejects.toMatchObject({ status: 404 });
    await expect(stranger.files.content(mine.id)).rejects.toMatchObject({ status: 404 });
    await expect(stranger.files.delete(mine.id)).rejects.toMatchObject({ status: 404 });
    // A cursor naming another account's file is refused, not followed.
    await expect(stranger.files.list({ after: mine.id })).rejects.toMatchObject({ status: 400 });
    expect((await stranger.files.list()).data).toEqual([]);
    // Unknown and malformed ids: the same 404.
    for (const id of ['file-000000000000000000000000', 'file-nope', 'not-a-file', '%27%20or%201%3D1']) {
      await expect(stranger.files.retrieve(id)).rejects.toMatchObject({ status: 404 });
    }
    expect((await owner.files.retrieve(mine.id)).bytes).toBe(16);
    await owner.files.delete(mine.id);
  });

  it('a file over the size bound is a 413 while it arrives, and leaves nothing behind', async () => {
    const error = await owner.files.create({ file: await toFile(Buffer.alloc(MAX_FILE_BYTES + 1, 0x61), 'big.bin'), purpose: 'user_data' }).catch((caught: unknown) => caught);
    expect(error).toMatchObject({ status: 413, type: 'invalid_request_error' });
    expect((await owner.files.list()).data.filter((file) => file.filename === 'big.bin')).toEqual([]);
  });

  it('bad forms are 400s in the OpenAI envelope: no file, no purpose, bad purpose, bad expiry, two files, not multipart, no key', async () => {
    const post = (body: FormData | string, headers: Record<string, string> = {}) =>
      fetch(`${url}/v1/files`, { method: 'POST', body, headers: { authorization: `Bearer ${ownerKey}`, ...headers } });
    const form = (fields: Record<string, string>, files: { name: string; data: string }[] = [{ name: 'file', data: '{}\n' }]) => {
      const body = new FormData();
      for (const [name, value] of Object.entries(fields)) body.append(name, value);
      for (const file of files) body.append(file.name, new Blob([file.data]), 'x.jsonl');
      return body;
    };
    const cases: { body: FormData | string; headers?: Record<string, string>; status: number; param?: string }[] = [
      { body: form({ purpose: 'batch' }, []), status: 400, param: 'file' },
      { body: form({}), status: 400, param: 'purpose' },
      { body: form({ purpose: 'fine-tune' }), status: 400, param: 'purpose' },
      { body: form({ purpose: 'batch', 'expires_after[anchor]': 'created_at', 'expires_after[seconds]': '10' }), status: 400, param: 'expires_after.seconds' },
      { body: form({ purpose: 'batch', 'expires_after[anchor]': 'last_active_at', 'expires_after[seconds]': '3600' }), status: 400, param: 'expires_after.anchor' },
      { body: form({ purpose: 'batch' }, [{ name: 'file', data: 'a' }, { name: 'file', data: 'b' }]), status: 400 },
      { body: form({ purpose: 'batch' }, [{ name: 'other', data: 'a' }]), status: 400 },
      { body: form({ purpose: 'batch' }, [{ name: 'file', data: '' }]), status: 400 },
      { body: '{"purpose":"batch"}', headers: { 'content-type': 'application/json' }, status: 400 },
      { body: '--x\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nabc', headers: { 'content-type': 'multipart/form-data; boundary=x' }, status: 400 },
    ];
    for (const [index, testCase] of cases.entries()) {
      const response = await post(testCase.body, testCase.headers);
      const body = (await response.json()) as { error: { type: string; param?: string } };
      expect(response.status, `case ${index}: ${JSON.stringify(body)}`).toBe(testCase.status);
      expect(body.error.type, `case ${index}`).toBe('invalid_request_error');
      if (testCase.param) expect(body.error.param, `case ${index}`).toBe(testCase.param);
    }
    const anonymous = await fetch(`${url}/v1/files`, { method: 'GET' });
    expect(anonymous.status).toBe(401);
    // None of those left a file or an upload in progress behind.
    expect((await owner.files.list()).data).toEqual([]);
    const db = new pg.Client({ connectionString: base.database.url });
    await db.connect();
    try {
      await eventually(async () => expect((await db.query(`select count(*)::int as n from jobs.files where status = 'uploading'`)).rows[0].n).toBe(0), 5_000);
    } finally {
      await db.end();
    }
  });

  it('bounds the files an account keeps; deleting one makes room; other accounts are unaffected', async () => {
    const ids: string[] = [];
    for (let index = 0; index < 6; index++) ids.push((await owner.files.create({ file: await toFile(Buffer.from('{}\n'), `n${index}.jsonl`), purpose: 'batch' })).id);
    const refused = await owner.files.create({ file: await toFile(Buffer.from('{}\n'), 'one-more.jsonl'), purpose: 'batch' }).catch((caught: unknown) => caught);
    expect(refused).toMatchObject({ status: 400, code: 'files_limit_exceeded' });
    expect((await stranger.files.create({ file: await toFile(Buffer.from('{}\n'), 'theirs.jsonl'), purpose: 'batch' })).status).toBe('processed');
    await owner.files.delete(ids[0]!);
    expect((await owner.files.create({ file: await toFile(Buffer.from('{}\n'), 'room.jsonl'), purpose: 'batch' })).status).toBe('processed');
  });
});
