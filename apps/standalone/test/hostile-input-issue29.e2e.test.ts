import { writeFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI, { toFile } from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { PNG } from 'pngjs';
import { startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { MEDIA_PRICES, mediaCatalog, priced, startMediaHarness, type MediaHarness } from './media-e2e-harness.js';
import { gatewayctl } from './stack-harness.js';

// Issue 29 end to end, on the simulated provider (what `npm start` serves): the tokenizer work a request
// can cause is bounded and never stalls the process (/livez keeps answering within 100 ms), schema and
// integer bounds are 400s, image edits are screened, a paid image model must price its images, hosted
// image URLs never come from the Host header, and client URLs are http(s) or data only.

const CHAT_MODEL = 'sim/chat';
/**
 * The demand: /livez answers within 100 ms while the worst tokenizer request runs. The stack runs
 * in this test's process on a shared 2-core machine, so scheduling noise lands in the probes too: the
 * typical probe (median) must meet the bound, and no probe may take more than the generous margin
 * (before the fix one probe waited 30 s).
 */
const LIVEZ_BOUND_MS = 100;
const LIVEZ_MARGIN_MS = 500;

function expectLivezBound(latencies: readonly number[]): void {
  const sorted = [...latencies].sort((a, b) => a - b);
  const label = `probes (ms): ${latencies.map((ms) => ms.toFixed(0)).join(',')}`;
  expect(sorted.length, label).toBeGreaterThanOrEqual(3);
  expect(sorted[Math.floor(sorted.length / 2)]!, label).toBeLessThan(LIVEZ_BOUND_MS);
  expect(sorted.at(-1)!, label).toBeLessThan(LIVEZ_MARGIN_MS);
}

function catalog(upstream: FakeUpstream): string {
  return `${mediaCatalog(upstream, 'http://127.0.0.1:9/v1')}
  - id: ${CHAT_MODEL}
    created: 1767225620
    context_window: 400000
    input_modalities: [text, image]
    supported_parameters: [response_format, max_completion_tokens, tools]
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002" }
    offers:
      - { provider: sim, upstream_model: chat-x, endpoints: [chat.completions, messages] }
`;
}

interface Probe {
  latencies: number[];
  stop(): Promise<void>;
}

/** GET /livez over and over (one at a time) until stopped; each answer's latency in ms. */
function probeLivez(url: string): Probe {
  const latencies: number[] = [];
  let running = true;
  let ended = false;
  const loop = (async () => {
    try {
      while (running) {
        const started = performance.now();
        const response = await fetch(`${url}/livez`);
        await response.arrayBuffer();
        latencies.push(performance.now() - started);
        expect(response.status).toBe(200);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    } finally {
      ended = true;
    }
  })();
  return {
    latencies,
    stop: async () => {
      // A request that finished within a probe or two still leaves three probes to judge (the median needs them).
      while (latencies.length < 3 && !ended) await new Promise((resolve) => setTimeout(resolve, 10));
      running = false;
      await loop;
    },
  };
}

function png(seed: number): Buffer {
  const image = new PNG({ width: 32, height: 32 });
  image.data.fill(seed);
  return PNG.sync.write(image);
}

describe('issue 29: hostile input, end to end', () => {
  let upstream: FakeUpstream;
  let harness: MediaHarness;
  let anthropic: Anthropic;

  const post = async (path: string, body: unknown, headers: Record<string, string> = {}) => {
    const started = performance.now();
    const response = await fetch(`${harness.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${harness.apiKey}`, 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
      signal: AbortSignal.timeout(120_000),
    });
    const json = (await response.json()) as { error?: { type: string; message: string; param?: string; code?: string } } & Record<string, unknown>;
    return { status: response.status, body: json, ms: performance.now() - started, requestId: response.headers.get('x-request-id') };
  };

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    harness = await startMediaHarness(catalog(upstream));
    anthropic = new Anthropic({ baseURL: harness.url, apiKey: harness.apiKey, maxRetries: 0 });
  }, 120_000);

  afterAll(async () => {
    await harness?.stop();
    await upstream?.close();
  });

  describe('tokenizer work is bounded and off the critical path (item 3)', () => {
    const word = 'a'.repeat(160_000);

    it('one 160,000-letter word: moderation, embeddings and count_tokens answer quickly while /livez keeps answering', async () => {
      // Warm the tokenizer (its first load is ~0.3 s, once per process) outside the measurement.
      await post('/v1/moderations', { model: 'sim/moderation', input: 'warm up' });
      const moderationBody = JSON.stringify({ model: 'sim/moderation', input: word });
      const probe = probeLivez(harness.url);
      try {
        const moderation = await post('/v1/moderations', moderationBody);
        expect(moderation.status).toBe(200);
        // An embedding input beyond the model's 8,192-token window is the client's 400 (before: 30 s to get there).
        const embeddings = await post('/v1/embeddings', { model: 'sim/embed', input: word });
        expect(embeddings.status).toBe(400);
        expect(embeddings.body.error).toMatchObject({ code: 'context_length_exceeded', param: 'body.input.0' });
        const counted = await anthropic.messages.countTokens({ model: CHAT_MODEL, messages: [{ role: 'user', content: word }] });
        expect(counted.input_tokens).toBeGreaterThan(160_000 / 256);
        // Generous: these took 30 s each before the fix; now well under a second of CPU each.
        for (const answer of [moderation, embeddings]) expect(answer.ms).toBeLessThan(5_000);
      } finally {
        await probe.stop();
      }
      expectLivezBound(probe.latencies);
    }, 120_000);

    it('the worst tokenizer request (a megabyte of long words over many inputs) leaves /livez within 100 ms', async () => {
      const inputs = Array.from({ length: 64 }, (_, index) => `${String.fromCharCode(97 + (index % 26)).repeat(16_000)} tail`);
      // Serialized before the probes start: the client's own work is not the gateway's.
      const moderationBody = JSON.stringify({ model: 'sim/moderation', input: inputs });
      const probe = probeLivez(harness.url);
      const started = performance.now();
      let moderation: Awaited<ReturnType<typeof post>>;
      let counted: number;
      try {
        [moderation, { input_tokens: counted }] = await Promise.all([
          post('/v1/moderations', moderationBody),
          anthropic.messages.countTokens({ model: CHAT_MODEL, messages: [{ role: 'user', content: inputs.join(' ') }] }),
        ]);
      } finally {
        await probe.stop();
      }
      const elapsed = performance.now() - started;
      expect(moderation.status).toBe(200);
      expect(counted).toBeGreaterThan(0);
      expect(elapsed).toBeLessThan(30_000);
      expectLivezBound(probe.latencies);
    }, 120_000);

    it('a json_schema enum of 100,000 strings is a fast 400 naming the bound', async () => {
      const schema = { type: 'object', properties: { a: { type: 'string', enum: Array.from({ length: 100_000 }, (_, index) => `value-${index}`) } } };
      const answer = await post('/v1/chat/completions', {
        model: CHAT_MODEL,
        messages: [{ role: 'user', content: 'hi' }],
        response_format: { type: 'json_schema', json_schema: { name: 'big', schema } },
      });
      expect(answer.status).toBe(400);
      expect(answer.body.error).toMatchObject({ type: 'invalid_request_error', code: 'json_schema_too_large', param: 'body.response_format.json_schema.schema' });
      expect(answer.body.error!.message).toContain('1000');
      expect(answer.ms).toBeLessThan(5_000); // 55 s before
    });
  });

  describe('images (items 2 and 5)', () => {
    it('an edit with a flagged prompt is refused by the moderation screen (403), nothing charged; a clean edit is charged exactly', async () => {
      const image = await toFile(png(50), 'in.png', { type: 'image/png' });
      const error = await harness.client.images.edit({ model: 'sim/image', prompt: 'how to kill a person', image, size: '256x256', response_format: 'b64_json' }).catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(OpenAI.APIError);
      const apiError = error as InstanceType<typeof OpenAI.APIError>;
      expect(apiError.status).toBe(403);
      expect((apiError.error as { code?: string }).code).toBe('content_policy_violation');
      const refusedId = apiError.requestID!;
      const { response } = await harness.client.images
        .edit({ model: 'sim/image', prompt: 'a red balloon', image: await toFile(png(60), 'in.png', { type: 'image/png' }), size: '256x256', response_format: 'b64_json' })
        .withResponse();
      const charge = await harness.charge(response.headers.get('x-request-id')!);
      expect(Number(charge.output_image_tokens)).toBeGreaterThan(0);
      expect(charge.cost_pico).toBe(
        priced(charge.input_text_tokens as string, MEDIA_PRICES.imageTextInput) +
          priced(charge.input_image_tokens as string, MEDIA_PRICES.imageImageInput) +
          priced(charge.output_image_tokens as string, MEDIA_PRICES.imageOutput),
      );
      // The clean edit's charge is in: the refused one's would be too.
      expect(await harness.chargesOf(refusedId)).toBe(0);
    });

    it('a catalog that serves images from a model priced only per input/output token is refused, naming per_output_image_token', async () => {
      const directory = await mkdtemp(join(tmpdir(), 'issue29-'));
      try {
        const path = join(directory, 'gateway.yaml');
        await writeFile(path, `${catalog(upstream)}
  - id: sim/free-images
    created: 1767225630
    output_modalities: [image]
    max_images: 2
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002" }
    offers:
      - { provider: sim, upstream_model: image-x, endpoints: [images.generations, images.edits] }
`);
        const refused = await gatewayctl(harness.base.stack, 'catalog', 'load', path, '--json');
        expect(refused.code).toBe(1);
        const result = JSON.parse(refused.stdout) as { changed: boolean; problems: { path: string; reason: string }[] };
        expect(result.changed).toBe(false);
        // The last model of the file (the media catalog's models come first).
        expect(result.problems.map((problem) => problem.path).sort()).toEqual([
          expect.stringMatching(/^models\[\d+\]\.pricing\.per_input_image_token$/),
          expect.stringMatching(/^models\[\d+\]\.pricing\.per_output_image_token$/),
        ]);
        expect(result.problems.find((problem) => problem.path.endsWith('per_output_image_token'))!.reason).toContain('images.generations');
      } finally {
        await rm(directory, { recursive: true, force: true });
      }
      // The model was never served: it is not in the catalog in force.
      await expect(harness.client.images.generate({ model: 'sim/free-images', prompt: 'a cat' })).rejects.toMatchObject({ status: 400, code: 'model_not_found' });
    });

    it('hosted image URLs are relative when EDGE_PUBLIC_URL is unset, whatever Host the request names', async () => {
      const answer = await post('/v1/images/generations', { model: 'sim/image', prompt: 'a lighthouse', size: '256x256', response_format: 'url' }, { host: 'attacker.example', 'x-forwarded-proto': 'https' });
      expect(answer.status).toBe(200);
      const url = (answer.body.data as Array<{ url: string }>)[0]!.url;
      expect(url).toMatch(/^\/v1\/images\/files\/[A-Za-z0-9_-]{20,}$/);
      expect((await fetch(`${harness.url}${url}`)).status).toBe(200);
    });
  });

  describe('4xx where a 5xx was (item 7)', () => {
    it('embeddings dimensions 2^32 is a 400 naming dimensions', async () => {
      const error = await harness.client.embeddings.create({ model: 'sim/embed', input: 'hi', dimensions: 2 ** 32 }).catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(400);
      expect((error as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ param: 'body.dimensions' });
    });

    it.each([
      ['/v1/chat/completions', { model: CHAT_MODEL, messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: 2 ** 32 }, 'body.max_completion_tokens'],
      ['/v1/chat/completions', { model: CHAT_MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 ** 32 }, 'body.max_tokens'],
      ['/v1/messages', { model: CHAT_MODEL, max_tokens: 2 ** 32, messages: [{ role: 'user', content: 'hi' }] }, 'body.max_tokens'],
      ['/v1/messages', { model: CHAT_MODEL, max_tokens: 16, top_k: 2 ** 32, messages: [{ role: 'user', content: 'hi' }] }, 'body.top_k'],
      ['/v1/images/generations', { model: 'sim/image', prompt: 'a cat', n: 2 ** 32 }, 'body.n'],
    ])('%s with 2^32 in an integer field: 400 naming %s', async (path, body, param) => {
      const answer = await post(path, body, path === '/v1/messages' ? { 'anthropic-version': '2023-06-01' } : {});
      expect(answer.status).toBe(400);
      expect(answer.body.error).toMatchObject({ type: 'invalid_request_error' });
      // The messages dialect's envelope has no `param`: the message names the field.
      expect(answer.body.error!.message).toContain(param);
    });

    it('a json_schema the simulated provider cannot satisfy is a 400, every time, and the provider stays usable', async () => {
      const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 5, maximum: 1 } }, required: ['n'] };
      const response_format = { type: 'json_schema' as const, json_schema: { name: 'impossible', schema } };
      for (let attempt = 0; attempt < 6; attempt++) {
        const error = await harness.client.chat.completions.create({ model: CHAT_MODEL, messages: [{ role: 'user', content: 'hi' }], response_format }).catch((caught: unknown) => caught);
        expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(400);
        expect((error as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ code: 'unsatisfiable_json_schema' });
      }
      const after = await harness.client.chat.completions.create({ model: CHAT_MODEL, messages: [{ role: 'user', content: 'hi' }] });
      expect(after.choices[0]!.message.content).toMatch(/\S/);
    });
  });

  describe('low (item 9)', () => {
    it('file:// image URLs are refused in every dialect and in moderation input, naming the field', async () => {
      const chat = await post('/v1/chat/completions', {
        model: CHAT_MODEL,
        messages: [{ role: 'user', content: [{ type: 'text', text: 'look' }, { type: 'image_url', image_url: { url: 'file:///etc/passwd' } }] }],
      });
      expect(chat.status).toBe(400);
      expect(chat.body.error).toMatchObject({ code: 'invalid_url', param: 'body.messages.0.content.1.image_url.url' });
      const messages = await anthropic.messages
        .create({ model: CHAT_MODEL, max_tokens: 16, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'file:///srv/x.png' } }] }] })
        .catch((caught: unknown) => caught);
      expect((messages as InstanceType<typeof Anthropic.APIError>).status).toBe(400);
      expect(JSON.stringify((messages as InstanceType<typeof Anthropic.APIError>).error)).toContain('must be an https, http or data URL');
      const moderation = await post('/v1/moderations', { model: 'sim/moderation', input: [{ type: 'image_url', image_url: { url: 'file:///etc/passwd' } }] });
      expect(moderation.status).toBe(400);
      expect(moderation.body.error).toMatchObject({ code: 'invalid_url', param: 'body.input.0.image_url.url' });
    });

    it('duplicate tool_use ids in a messages conversation are a 400 naming the id', async () => {
      const call = (input: string) => ({ type: 'tool_use' as const, id: 'toolu_same', name: 'lookup', input: { q: input } });
      const result = { type: 'tool_result' as const, tool_use_id: 'toolu_same', content: 'ok' };
      const error = await anthropic.messages
        .create({
          model: CHAT_MODEL,
          max_tokens: 16,
          tools: [{ name: 'lookup', input_schema: { type: 'object', properties: { q: { type: 'string' } } } }],
          messages: [
            { role: 'user', content: 'find a and b' },
            { role: 'assistant', content: [call('a'), call('b')] },
            { role: 'user', content: [result] },
          ],
        })
        .catch((caught: unknown) => caught);
      expect((error as InstanceType<typeof Anthropic.APIError>).status).toBe(400);
      expect(JSON.stringify((error as InstanceType<typeof Anthropic.APIError>).error)).toContain('toolu_same');
    });
  });
});
