import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI, { APIError, toFile } from 'openai';
import { parseCredits } from '@gateway/platform';
import { eventually, type FakeUpstream } from '@gateway/testing';
import { catalogYaml, tokenPricing } from './catalog-yaml.js';
import { startBackgroundStack, type BackgroundStack } from './background-harness.js';

// Background responses with files (docs/stored-responses.md): the edge reads a file block (a URL fetched
// through the media service, a text model given the file's text) before it hands the request to the jobs
// service, so the stored run carries what the provider reads. The stored request is bounded: over it, a 400
// before anything is stored or sent. A file id is read the same way (the caller's own files only).

const MODEL = 'testco/bg-files';
const READER = 'testco/bg-reader';
const PROMPT_TOKENS = 30;
const COMPLETION_TOKENS = 5;
const PRICE_IN = '0.000001';
const PRICE_OUT = '0.000002';
const COST = BigInt(PROMPT_TOKENS) * parseCredits(PRICE_IN) + BigInt(COMPLETION_TOKENS) * parseCredits(PRICE_OUT);
const NOTES = 'The launch code word is PERIWINKLE.';
/** Two of these are over the stored request's bound (16 MiB), each under a fetch's (20 MiB). */
const BIG = Buffer.alloc(9 * 1024 * 1024, 0x61);

function catalog(upstream: FakeUpstream): string {
  return catalogYaml({
    providers: [{ id: 'upstream-one', kind: 'openai', url: upstream.url, keyEnv: 'BGF_E2E_KEY' }],
    models: [
      {
        id: MODEL,
        contextWindow: 8000,
        maxOutputTokens: 100,
        supportedParameters: ['max_completion_tokens'],
        pricing: tokenPricing(PRICE_IN, PRICE_OUT),
        offers: [{ provider: 'upstream-one', upstreamModel: 'files-upstream', endpoints: ['chat.completions', 'responses'] }],
      },
      {
        // Free and with a window above the bound, so only the stored request's bound can refuse it.
        id: READER,
        inputModalities: ['text', 'file'],
        contextWindow: 40_000_000,
        maxOutputTokens: 100,
        supportedParameters: ['max_completion_tokens'],
        offers: [{ provider: 'upstream-one', upstreamModel: 'reader-upstream', endpoints: ['chat.completions', 'responses'] }],
      },
    ],
  });
}

async function refusal(promise: Promise<unknown>): Promise<APIError> {
  const caught = await promise.then(() => undefined, (error: unknown) => error);
  expect(caught).toBeInstanceOf(APIError);
  return caught as APIError;
}

describe('background responses with files, end to end', () => {
  let running: BackgroundStack;
  let upstream: FakeUpstream;
  let files: Server;
  let filesUrl: string;
  const fetched: string[] = [];
  let accountId: string;
  let client: OpenAI;
  let stranger: OpenAI;

  const balance = () => running.balance(accountId);
  const charges = () => running.charges(accountId, MODEL);

  beforeAll(async () => {
    // What a file_url points at: loopback, reachable only through this stack's test-only media switch.
    files = createServer((request, response) => {
      fetched.push(request.url ?? '');
      if (request.url === '/notes.txt') {
        response.writeHead(200, { 'content-type': 'text/plain' });
        response.end(NOTES);
      } else if (request.url?.startsWith('/big-')) {
        response.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(BIG.length) });
        response.end(BIG);
      } else {
        response.writeHead(404);
        response.end();
      }
    });
    await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
    filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
    running = await startBackgroundStack('background_files', 'bgf', catalog, {
      keyHashSecret: 'bgf-e2e-secret-bgf-e2e-secret-012345678',
      providerSecrets: { BGF_E2E_KEY: 'sk-bgf-e2e' },
      media: { allowLoopbackUrlsForTests: true },
      jobs: { batches: { runner: { pollIntervalMs: 100, leaseMs: 3_000, concurrency: 1 } } },
    });
    ({ upstream, accountId, client, stranger } = running);
  }, 120_000);

  afterAll(async () => {
    await running?.stop();
    files?.closeAllConnections();
    await new Promise((resolve) => files?.close(resolve));
  });

  beforeEach(() => {
    upstream.reset();
    fetched.length = 0;
  });

  it('a file_url is fetched by the edge before the hand-on: the provider reads its text, completed, charged once', async () => {
    upstream.setFallback({ text: 'Read it.', usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    const before = await balance();
    const chargesBefore = await charges();
    const created = await client.responses.create({
      model: MODEL,
      background: true,
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'What is the code word?' }, { type: 'input_file', filename: 'notes.txt', file_url: `${filesUrl}/notes.txt` }] }],
    });
    expect(created.status).toBe('queued');
    // Fetched once, by the edge, before `queued` was answered.
    expect(fetched).toEqual(['/notes.txt']);
    let done = created;
    await eventually(async () => {
      done = await client.responses.retrieve(created.id);
      expect(done.status).toBe('completed');
    }, 30_000, 100);
    expect(done.output_text).toBe('Read it.');
    expect(upstream.requests).toHaveLength(1);
    const sent = JSON.stringify(upstream.requests[0]!.body.messages);
    expect(sent).toContain(NOTES);
    expect(sent).not.toContain(filesUrl);
    expect(fetched).toEqual(['/notes.txt']);
    await eventually(async () => expect(await charges()).toBe(chargesBefore + 1), 15_000);
    await eventually(async () => expect(before - (await balance())).toBe(COST), 15_000);
  }, 60_000);

  it('over the stored request bound (files read) is a 400 in the envelope, before any provider call', async () => {
    const error = await refusal(client.responses.create({
      model: READER,
      background: true,
      input: [{ role: 'user', content: [
        { type: 'input_file', filename: 'a.bin', file_url: `${filesUrl}/big-a` },
        { type: 'input_file', filename: 'b.bin', file_url: `${filesUrl}/big-b` },
      ] }],
    }));
    expect(error.status).toBe(400);
    expect(error.error).toMatchObject({ type: 'invalid_request_error', code: 'request_too_large', param: 'body.input' });
    expect(error.message).toContain(String(16 * 1024 * 1024));
    expect(upstream.requests).toHaveLength(0);
  }, 60_000);

  it("a file id is read as on the interactive path: the caller's own file reaches the provider, another account's is a 404 on both paths", async () => {
    upstream.setFallback({ text: 'Read it.', usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });
    const uploaded = await client.files.create({ file: await toFile(Buffer.from(NOTES), 'notes.txt'), purpose: 'user_data' });
    const input = (fileId: string) => [{ role: 'user' as const, content: [{ type: 'input_file' as const, file_id: fileId }] }];
    const interactive = await refusal(stranger.responses.create({ model: MODEL, input: input(uploaded.id) }));
    const background = await refusal(stranger.responses.create({ model: MODEL, input: input(uploaded.id), background: true }));
    expect([background.status, background.error]).toEqual([interactive.status, interactive.error]);
    expect([interactive.status, (interactive.error as { code?: string }).code]).toEqual([404, 'file_not_found']);
    expect(upstream.requests).toHaveLength(0);
    // The owner's background response: the edge read the file before the hand-on, the run gives the model its text.
    const created = await client.responses.create({ model: MODEL, input: input(uploaded.id), background: true });
    expect(created.status).toBe('queued');
    await eventually(async () => expect((await client.responses.retrieve(created.id)).status).toBe('completed'), 30_000, 100);
    expect(upstream.requests).toHaveLength(1);
    const sent = JSON.stringify(upstream.requests[0]!.body.messages);
    expect(sent).toContain(NOTES);
    expect(sent).not.toContain(uploaded.id);
  }, 30_000);
});
